// Which wheels an environment's interpreter accepts, as pip and uv judge it: packaging's
// sys_tags() (resolver/pep/wheel_name.hpp) from the interpreter's version, ABI, machine and C
// library. Told without running the interpreter where the environment says enough, as the rest
// of the scan is (a venv's interpreter may be broken or slow to start): the Python version from
// pyvenv.cfg or lib/pythonX.Y; the machine, ELF class and C library (NEEDED libc.so.6 or
// libc.musl-*) from the interpreter's own ELF header and dynamic section (bin/pythonX.Y, then
// bin/python3, bin/python, then pyvenv.cfg's home); the glibc version from this process's,
// which the interpreter shares when it runs here. Where that is not enough (no interpreter that
// is an ELF object, a musl one whose version only its loader tells, an object of a machine no
// wheel is built for), the interpreter is asked, with a deadline: its version, sys.abiflags,
// free-threading, os.confstr's glibc, platform.machine() and the width of a pointer; musl's
// version through packaging (or pip's copy of it) as packaging itself finds it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "resolver/env/venv.hpp"
#include "resolver/pep/wheel_name.hpp"

namespace cudafix::resolver::inline env {

struct InterpreterTags {
  TagTarget target;
  std::vector<std::string> tags;  // supported_tags(target), best first
  std::string interpreter;        // the object read or asked; empty when none was found
  std::uint16_t machine = 0;      // its ELF e_machine and class (0 when not read)
  std::uint8_t elf_class = 0;
  std::string how;  // in words: "read from /usr/bin/python3.11", "asked /v/bin/python"
};

struct HostFacts {
  std::string glibc_version;  // this process's ("2.36")
  std::uint16_t machine = 0;  // this process's e_machine and class: a bare site folder's guess
  std::uint8_t elf_class = 0;
};

// Throws Error when the tags cannot be told (no interpreter answers, and none can be read).
[[nodiscard]] InterpreterTags interpreter_tags(const EnvLayout& layout, const HostFacts& host);
// The tags of another target (--python-platform, --python-version): `how` says so.
[[nodiscard]] InterpreterTags overridden_tags(InterpreterTags tags, const std::optional<std::string>& platform,
                                              const std::optional<std::string>& python_version);

}  // namespace cudafix::resolver::inline env
