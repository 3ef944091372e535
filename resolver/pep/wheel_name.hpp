// Wheel file names (PEP 427) and the tags an interpreter accepts (PEP 425), in the order
// packaging.tags' sys_tags() gives them for CPython on Linux (glibc or musl): what pip and uv
// judge a wheel by, most specific first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cudafix::resolver::inline pep {

// {distribution}-{version}(-{build tag})?-{python tag}-{abi tag}-{platform tag}.whl
struct WheelName {
  std::string name;        // as in the file name (underscores)
  std::string normalized;  // PEP 503
  std::string version;
  std::string build;
  std::vector<std::string> tags;  // every python-abi-platform triple the compressed tag set expands to
};
// nullopt when the file name is no wheel name.
[[nodiscard]] std::optional<WheelName> parse_wheel_name(std::string_view file_name);

// What decides the tags: a CPython interpreter's version and ABI, and the platform it runs on.
struct TagTarget {
  int major = 3, minor = 0;
  // sys.abiflags as the ABI tag carries it: "" , "t" (free-threaded, 3.13+), "d" (debug), "td".
  std::string abi_flags;
  // packaging's machine name: x86_64, i686, aarch64, armv7l, ppc64le, s390x, riscv64, ...
  std::string arch;
  bool musl = false;  // linked against musl: musllinux tags, no manylinux
  // glibc 2.N (manylinux_2_N) or musl 1.N (musllinux_1_N).
  int libc_major = 2, libc_minor = 17;
};

// The tags `target` accepts, best first, as packaging.tags.sys_tags() lists them: cpython_tags
// (cpXY-cpXY{flags}, cpXY-abi3, cpXY-none, older cpXW-abi3) over the platforms, then
// compatible_tags (pyXY, py3, older pyXW with none) over them, then the -any tags. Platforms:
// manylinux_2_N from the glibc down to 2_5 (x86_64, i686) or 2_17 (the others, none older was
// ever defined for them), each legacy alias (2014, 2010, 1) right after its version, or
// musllinux_1_N down to 1_0; then linux_<arch>.
[[nodiscard]] std::vector<std::string> supported_tags(const TagTarget& target);
// Where the best of `wheel`'s tags stands in `supported` (0: the most specific); nullopt when
// none is supported.
[[nodiscard]] std::optional<std::size_t> tag_rank(const WheelName& wheel, const std::vector<std::string>& supported);
// Why a wheel of no supported tag is unusable, naming its tags and the environment's best:
// "its tags (cp312-cp312-manylinux_2_17_aarch64) are none this environment accepts (its best:
// cp311-cp311-manylinux_2_36_x86_64)".
[[nodiscard]] std::string unsupported_tags_text(const WheelName& wheel, const std::vector<std::string>& supported);

// uv's --python-platform, applied to `base` (whose Python version and ABI stay): ARCH-manylinux_2_N,
// ARCH-musllinux_1_N, ARCH-unknown-linux-gnu (manylinux_2_17, as uv took it first),
// ARCH-unknown-linux-musl (musllinux_1_2); ARCH: x86_64, aarch64, i686, armv7l, ppc64le, s390x, riscv64. nullopt, and
// `why` set, when `spec` is none of these.
[[nodiscard]] std::optional<TagTarget> with_python_platform(TagTarget base, std::string_view spec, std::string& why);
// "3.12" (or "3.13t") for `base`: nullopt, and `why` set, when `version` is no X.Y.
[[nodiscard]] std::optional<TagTarget> with_python_version(TagTarget base, std::string_view version, std::string& why);
// packaging's machine name for an ELF e_machine and class (EM_X86_64 and ELFCLASS32 is x32, which
// no wheel targets): empty when no Linux wheel is built for it.
[[nodiscard]] std::string tag_arch(std::uint16_t e_machine, std::uint8_t elf_class, bool little_endian);

}  // namespace cudafix::resolver::inline pep
