#include "resolver/env/interpreter_tags.hpp"

#include <elf.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/elf/elf_reader.hpp"
#include "resolver/env/interpreter.hpp"

namespace cudafix::resolver::inline env {
namespace {

// The interpreter objects of an environment, the most specific name first.
std::vector<std::string> interpreter_candidates(const EnvLayout& layout) {
  const std::string v = layout.python_version.value_or("3");
  std::vector<std::string> out;
  if (layout.kind != EnvKind::site_dir)
    for (const auto& name : {"python" + v, std::string("python3"), std::string("python")})
      out.push_back(layout.root + "/bin/" + name);
  if (layout.home)
    for (const auto& name : {"python" + v, std::string("python3")}) out.push_back(*layout.home + "/" + name);
  return out;
}

bool is_musl(const ElfInfo& info) {
  return std::any_of(info.needed.begin(), info.needed.end(),
                     [](const std::string& n) { return n.starts_with("libc.musl-"); });
}

std::optional<TagTarget> version_of(const EnvLayout& layout) {
  std::string why;
  if (!layout.python_version) return std::nullopt;
  return with_python_version(TagTarget{}, *layout.python_version, why);
}

void set_glibc(TagTarget& t, std::string_view glibc) {
  const auto parts = split(glibc, '.');
  t.musl = false;
  t.libc_major = parts.size() >= 2 ? to_number<int>(parts[0]).value_or(2) : 2;
  t.libc_minor = parts.size() >= 2 ? to_number<int>(parts[1]).value_or(17) : 17;
}

// What the interpreter says of itself: one line of words (see the header).
constexpr const char* k_ask =
    "import os, platform, sys, sysconfig\n"
    "libc = ''\n"
    "try:\n"
    "    libc = os.confstr('CS_GNU_LIBC_VERSION').split()[1]\n"
    "except Exception:\n"
    "    for m in ('packaging._musllinux', 'pip._vendor.packaging._musllinux'):\n"
    "        try:\n"
    "            v = __import__(m, fromlist=['x'])._get_musl_version(sys.executable)\n"
    "            libc = 'musl-%d.%d' % (v.major, v.minor) if v else ''\n"
    "            break\n"
    "        except Exception:\n"
    "            pass\n"
    "print(sys.implementation.name, '%d.%d' % sys.version_info[:2], sys.abiflags or '-',\n"
    "      sysconfig.get_config_var('Py_GIL_DISABLED') or 0, libc or '-', platform.machine(),\n"
    "      64 if sys.maxsize > 2**32 else 32)\n";

std::optional<TagTarget> asked(const std::string& exe, std::string& why) {
  const auto text = ask_python(exe, k_ask, std::chrono::milliseconds(10000));
  if (!text) {
    why = fmt::format("{} did not answer", exe);
    return std::nullopt;
  }
  const auto words = split(trim(*text), ' ');
  if (words.size() != 7 || words[0] != "cpython") {
    why = fmt::format("{} is no CPython ({})", exe, trim(text->substr(0, 200)));
    return std::nullopt;
  }
  std::string flags = words[2] == "-" ? "" : std::string(words[2]);
  if (words[3] == "1" && flags.find('t') == std::string::npos) flags = "t" + flags;
  auto t = with_python_version(TagTarget{}, words[1], why);
  if (!t) return std::nullopt;
  t->abi_flags = flags;
  const std::string_view libc = words[4];
  if (libc.starts_with("musl-")) {
    const auto v = split(libc.substr(5), '.');
    t->musl = true;
    t->libc_major = v.size() == 2 ? to_number<int>(v[0]).value_or(1) : 1;
    t->libc_minor = v.size() == 2 ? to_number<int>(v[1]).value_or(0) : 0;
  } else if (libc != "-") {
    set_glibc(*t, libc);
  } else {
    why = fmt::format("{} names neither its glibc nor its musl", exe);
    return std::nullopt;
  }
  // packaging's _linux_platforms: a 32-bit interpreter on a 64-bit x86 or ARM kernel.
  std::string arch(words[5]);
  if (words[6] == "32" && arch == "x86_64") arch = "i686";
  if (words[6] == "32" && arch == "aarch64") arch = "armv7l";
  t->arch = arch;
  return t;
}

}  // namespace

InterpreterTags interpreter_tags(const EnvLayout& layout, const HostFacts& host) {
  InterpreterTags out;
  const auto version = version_of(layout);
  std::string problem;
  for (const auto& exe : interpreter_candidates(layout)) {
    const ElfRead read = read_elf_file(exe);
    if (read.status != ElfReadStatus::ok) continue;
    out.interpreter = exe;
    out.machine = read.info.machine;
    out.elf_class = read.info.elf_class;
    const std::string arch = tag_arch(read.info.machine, read.info.elf_class, true);
    if (version && !arch.empty() && !is_musl(read.info)) {
      out.target = *version;
      out.target.arch = arch;
      set_glibc(out.target, host.glibc_version);
      out.how = fmt::format("read from {}", exe);
    } else if (auto t = asked(exe, problem)) {
      out.target = *t;
      out.how = fmt::format("asked {}", exe);
    } else {
      throw Error(
          fmt::format("{}: cannot tell which wheels its interpreter accepts: {} (name the target with "
                      "--python-platform and --python-version)",
                      layout.root, problem));
    }
    out.tags = supported_tags(out.target);
    return out;
  }
  // No interpreter to read (a bare site-packages folder, a venv whose interpreter is gone): this
  // process's machine and glibc, which such an interpreter would have to share to run here.
  if (!version)
    throw Error(
        fmt::format("{}: cannot tell which wheels it accepts: no interpreter and no Python version "
                    "(name them with --python-platform and --python-version)",
                    layout.root));
  out.target = *version;
  out.target.arch = tag_arch(host.machine, host.elf_class, true);
  set_glibc(out.target, host.glibc_version);
  out.machine = host.machine;
  out.elf_class = host.elf_class;
  out.how = "no interpreter found: this machine's";
  out.tags = supported_tags(out.target);
  return out;
}

InterpreterTags overridden_tags(InterpreterTags tags, const std::optional<std::string>& platform,
                                const std::optional<std::string>& python_version) {
  if (!platform && !python_version) return tags;
  std::string why;
  if (python_version) {
    const auto t = with_python_version(tags.target, *python_version, why);
    if (!t) throw Error(fmt::format("--python-version: {}", why));
    tags.target = *t;
  }
  if (platform) {
    const auto t = with_python_platform(tags.target, *platform, why);
    if (!t) throw Error(fmt::format("--python-platform: {}", why));
    tags.target = *t;
  }
  tags.how = "as --python-platform / --python-version say";
  tags.tags = supported_tags(tags.target);
  return tags;
}

}  // namespace cudafix::resolver::inline env
