// What the host's glibc searches: its default folders, the glibc-hwcaps subfolders it supports
// in priority order, $PLATFORM and $LIB. Taken from the host's own ld.so (`ld.so --help`) and
// the auxiliary vector, never hard-coded, so the model is right on Debian, Ubuntu, Fedora and
// aarch64 alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cudafix::resolver {

struct HostInfo {
  std::string ld_so;                        // the dynamic loader's path
  std::vector<std::string> default_dirs;    // "system search path", in order
  std::vector<std::string> hwcaps_subdirs;  // supported glibc-hwcaps subfolders, best first
  std::string platform;                     // $PLATFORM (AT_PLATFORM)
  std::string lib;                          // $LIB ("lib/x86_64-linux-gnu", "lib64")
  std::string ld_so_cache = "/etc/ld.so.cache";
  std::uint16_t machine = 0;  // of this process: objects of another are skipped
  std::uint8_t elf_class = 0;
  std::string glibc_version;
};

// Parses `ld.so --help` output into `host` (default dirs and glibc-hwcaps subfolders).
void parse_ld_so_help(const std::string& text, HostInfo& host);
// Asks the running process's own loader. Throws Error when it cannot be asked.
[[nodiscard]] HostInfo detect_host();

}  // namespace cudafix::resolver
