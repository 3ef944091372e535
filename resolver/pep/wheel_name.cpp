#include "resolver/pep/wheel_name.hpp"

#include <elf.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline pep {

std::optional<WheelName> parse_wheel_name(std::string_view file_name) {
  if (!file_name.ends_with(".whl")) return std::nullopt;
  const auto parts = split(file_name.substr(0, file_name.size() - 4), '-');
  if (parts.size() != 5 && parts.size() != 6) return std::nullopt;
  for (auto p : parts)
    if (p.empty()) return std::nullopt;
  WheelName w;
  w.name = std::string(parts[0]);
  w.normalized = normalize_name(parts[0]);
  w.version = std::string(parts[1]);
  if (parts.size() == 6) w.build = std::string(parts[2]);
  const std::size_t t = parts.size() - 3;
  for (auto py : split(parts[t], '.'))
    for (auto abi : split(parts[t + 1], '.'))
      for (auto plat : split(parts[t + 2], '.')) w.tags.push_back(fmt::format("{}-{}-{}", py, abi, plat));
  return w;
}

namespace {

// packaging's _linux_platforms: manylinux (glibc) or musllinux (musl), then linux_<arch>.
std::vector<std::string> platforms_of(const TagTarget& t) {
  std::vector<std::string> plats;
  const std::string& arch = t.arch;
  if (t.musl) {
    for (int m = t.libc_minor; m >= 0; --m) plats.push_back(fmt::format("musllinux_{}_{}_{}", t.libc_major, m, arch));
  } else if (t.libc_major == 2) {
    // manylinux.platform_tags: glibc 2.5 is the oldest for x86; every other arch began at 2.17.
    const int oldest = arch == "x86_64" || arch == "i686" ? 5 : 17;
    for (int m = t.libc_minor; m >= oldest; --m) {
      plats.push_back(fmt::format("manylinux_2_{}_{}", m, arch));
      if (m == 17) plats.push_back("manylinux2014_" + arch);
      if (m == 12) plats.push_back("manylinux2010_" + arch);
      if (m == 5) plats.push_back("manylinux1_" + arch);
    }
  }
  plats.push_back("linux_" + arch);
  return plats;
}

}  // namespace

std::vector<std::string> supported_tags(const TagTarget& t) {
  const std::vector<std::string> plats = platforms_of(t);
  const std::string cp = fmt::format("cp{}{}", t.major, t.minor);
  // _cpython_abis: the interpreter's own ABI; a debug build also takes its release ABI.
  std::vector<std::string> abis{cp + t.abi_flags};
  if (t.abi_flags.ends_with('d')) abis.push_back(cp + t.abi_flags.substr(0, t.abi_flags.size() - 1));
  // _abi3_applies: CPython 3.2 and later, never a free-threaded build.
  const bool abi3 = (t.major > 3 || (t.major == 3 && t.minor >= 2)) && t.abi_flags.find('t') == std::string::npos;
  if (abi3) abis.emplace_back("abi3");
  abis.emplace_back("none");
  std::vector<std::string> out;
  for (const auto& abi : abis)
    for (const auto& p : plats) out.push_back(fmt::format("{}-{}-{}", cp, abi, p));
  if (abi3)
    for (int k = t.minor - 1; k >= 2; --k)
      for (const auto& p : plats) out.push_back(fmt::format("cp{}{}-abi3-{}", t.major, k, p));
  // compatible_tags over _py_interpreter_range: pyXY, pyX, then pyXW for every older minor.
  std::vector<std::string> pys{fmt::format("py{}{}", t.major, t.minor), fmt::format("py{}", t.major)};
  for (int k = t.minor - 1; k >= 0; --k) pys.push_back(fmt::format("py{}{}", t.major, k));
  for (const auto& py : pys)
    for (const auto& p : plats) out.push_back(fmt::format("{}-none-{}", py, p));
  out.push_back(cp + "-none-any");
  for (const auto& py : pys) out.push_back(py + "-none-any");
  return out;
}

std::optional<std::size_t> tag_rank(const WheelName& wheel, const std::vector<std::string>& supported) {
  std::optional<std::size_t> best;
  for (const auto& tag : wheel.tags)
    if (const auto it = std::find(supported.begin(), supported.end(), tag); it != supported.end()) {
      const auto rank = static_cast<std::size_t>(it - supported.begin());
      if (!best || rank < *best) best = rank;
    }
  return best;
}

std::string unsupported_tags_text(const WheelName& wheel, const std::vector<std::string>& supported) {
  return fmt::format("its tag{} ({}) {} none this environment accepts (its best: {})",
                     wheel.tags.size() == 1 ? "" : "s", fmt::join(wheel.tags, ", "),
                     wheel.tags.size() == 1 ? "is" : "are",
                     supported.empty() ? std::string("none") : supported.front());
}

namespace {

constexpr std::array k_arches{"x86_64", "aarch64", "i686", "armv7l", "ppc64le", "ppc64", "s390x", "riscv64"};

// "manylinux_2_28" or "musllinux_1_2": the libc and its version.
bool read_libc(std::string_view s, TagTarget& t) {
  const bool musl = s.starts_with("musllinux_");
  if (!musl && !s.starts_with("manylinux_")) return false;
  const auto nums = split(s.substr(10), '_');
  if (nums.size() != 2) return false;
  const auto major = to_number<int>(nums[0]), minor = to_number<int>(nums[1]);
  if (!major || !minor || *major != (musl ? 1 : 2) || *minor < 0 || *minor > 999) return false;
  t.musl = musl;
  t.libc_major = *major;
  t.libc_minor = *minor;
  return true;
}

}  // namespace

std::optional<TagTarget> with_python_platform(TagTarget t, std::string_view spec, std::string& why) {
  const auto dash = spec.find('-');
  const std::string arch(spec.substr(0, dash));
  const std::string_view rest = dash == std::string_view::npos ? "" : spec.substr(dash + 1);
  if (std::find(k_arches.begin(), k_arches.end(), arch) == k_arches.end()) {
    why = fmt::format("'{}' names no architecture a Linux wheel is built for ({})", arch, fmt::join(k_arches, ", "));
    return std::nullopt;
  }
  t.arch = arch;
  if (rest == "unknown-linux-gnu" || rest == "unknown-linux-gnueabihf") {
    t.musl = false;
    t.libc_major = 2;
    t.libc_minor = 17;
  } else if (rest == "unknown-linux-musl" || rest == "unknown-linux-musleabihf") {
    t.musl = true;
    t.libc_major = 1;
    t.libc_minor = 2;
  } else if (!read_libc(rest, t)) {
    why = fmt::format(
        "'{}' is no ARCH-manylinux_2_N, ARCH-musllinux_1_N, ARCH-unknown-linux-gnu or ARCH-unknown-linux-musl", spec);
    return std::nullopt;
  }
  return t;
}

std::optional<TagTarget> with_python_version(TagTarget t, std::string_view version, std::string& why) {
  std::string_view v = version;
  std::string flags;
  if (v.ends_with('t')) {
    flags = "t";
    v.remove_suffix(1);
  }
  const auto parts = split(v, '.');
  const auto major = parts.size() == 2 ? to_number<int>(parts[0]) : std::nullopt;
  const auto minor = parts.size() == 2 ? to_number<int>(parts[1]) : std::nullopt;
  if (!major || !minor || *major != 3 || *minor > 99) {
    why = fmt::format("'{}' is no Python version as 3.12 or 3.13t", version);
    return std::nullopt;
  }
  t.major = *major;
  t.minor = *minor;
  t.abi_flags = flags;
  return t;
}

std::string tag_arch(std::uint16_t machine, std::uint8_t elf_class, bool little_endian) {
  const bool is64 = elf_class == ELFCLASS64;
  switch (machine) {
    case EM_X86_64:
      return is64 ? "x86_64" : "";
    case EM_386:
      return "i686";
    case EM_AARCH64:
      return is64 ? "aarch64" : "";
    case EM_ARM:
      return "armv7l";
    case EM_PPC64:
      return little_endian ? "ppc64le" : "ppc64";
    case EM_S390:
      return is64 ? "s390x" : "";
    case EM_RISCV:
      return is64 ? "riscv64" : "";
    default:
      return "";
  }
}

}  // namespace cudafix::resolver::inline pep
