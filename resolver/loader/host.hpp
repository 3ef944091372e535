// What the host's glibc searches: its default folders, the glibc-hwcaps subfolders it supports
// in priority order, $PLATFORM and $LIB. Taken from the host's own ld.so (`ld.so --help`) and
// the auxiliary vector, never hard-coded, so the model is right on Debian, Ubuntu, Fedora and
// aarch64 alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cudafix::resolver::inline loader {

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

// The running process's own loader, asked in the background: `ld.so --help` starts when this is
// made and its answer is read by get(), so that the 0.7 ms it runs overlaps the walk rather than
// keeping the scan waiting. Not copyable: it owns the child until get() or the destructor reaps it.
class HostDetection {
 public:
  HostDetection();
  ~HostDetection();
  HostDetection(const HostDetection&) = delete;
  HostDetection& operator=(const HostDetection&) = delete;
  // The host's facts; throws Error when its loader could not be asked. Once only.
  [[nodiscard]] HostInfo get();

 private:
  void reap();
  std::string ld_so_;
  std::string problem_;  // why ld.so could not be started, when it could not
  int pid_ = -1;
  int output_ = -1;  // the read end of its standard output
};

// Asks the running process's own loader and waits for it. Throws Error when it cannot be asked.
[[nodiscard]] HostInfo detect_host();

}  // namespace cudafix::resolver::inline loader
