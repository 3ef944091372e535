#include "resolver/pep/wheel_name.hpp"

#include <fmt/format.h>

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

std::vector<std::string> supported_tags(const std::string& python_version, const std::string& glibc_version,
                                        const std::string& arch) {
  const auto pv = split(python_version, '.');
  const std::string major(pv.empty() ? "3" : pv[0]);
  const std::string minor(pv.size() > 1 ? pv[1] : "");
  const std::string cp = "cp" + major + minor;
  // Platforms, best first: manylinux_2_N for every glibc 2.N down to 2.5 (with the legacy
  // aliases), then linux_<arch>.
  std::vector<std::string> plats;
  const auto gv = split(glibc_version, '.');
  const int glibc_minor = gv.size() > 1 ? to_number<int>(gv[1]).value_or(17) : 17;
  for (int m = glibc_minor; m >= 5; --m) {
    plats.push_back(fmt::format("manylinux_2_{}_{}", m, arch));
    if (m == 17) plats.push_back("manylinux2014_" + arch);
    if (m == 12) plats.push_back("manylinux2010_" + arch);
    if (m == 5) plats.push_back("manylinux1_" + arch);
  }
  plats.push_back("linux_" + arch);
  std::vector<std::string> out;
  for (const auto& abi : {cp, std::string("abi3"), std::string("none")})
    for (const auto& p : plats) out.push_back(fmt::format("{}-{}-{}", cp, abi, p));
  // abi3 wheels of older CPython 3 releases.
  if (auto m = to_number<int>(minor))
    for (int k = *m - 1; k >= 2; --k)
      for (const auto& p : plats) out.push_back(fmt::format("cp{}{}-abi3-{}", major, k, p));
  for (const auto& py : {"py" + major + minor, "py" + major})
    for (const auto& p : plats) out.push_back(fmt::format("{}-none-{}", py, p));
  out.push_back(cp + "-none-any");
  out.push_back("py" + major + minor + "-none-any");
  out.push_back("py" + major + "-none-any");
  return out;
}

}  // namespace cudafix::resolver::inline pep
