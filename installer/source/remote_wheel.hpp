// Planning from a wheel on an index without downloading it: what the planner needs is the
// wheel's METADATA, its RECORD and the dynamic section of each shared object, a few hundred
// kilobytes of a 350 MB file. Read by HTTP range requests: first the last 64 KiB (the end of
// central directory record and the central directory, more where it is larger), then the
// members by installer/wheel/ranged_read, each batch of its ranges one round of requests at
// once. A server that ignores Range sends the whole file to the first request: then the wheel
// is kept as a download and read from disk, and that is said.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "installer/source/http.hpp"
#include "installer/source/index.hpp"
#include "installer/wheel/ranged_read.hpp"
#include "resolver/plan/wheel.hpp"

namespace cudafix::installer::source {

struct RemoteRead {
  std::optional<resolver::Wheel> wheel;  // read by range: file empty, url and sha256 set
  std::string downloaded;                // the whole file is here: the server ignored Range, or
  bool whole_because_small = false;      // the wheel is smaller than the first request, or
  bool whole_because_ranges = false;     // reading it by range would read over half of it
  std::uint64_t fetched = 0;             // body bytes received for it
  std::uint64_t size = 0;                // the wheel's size
  std::size_t objects_by_window = 0;     // dynamic segments found mid-stream
  std::size_t objects_from_start = 0;    // objects inflated from their start to the segment
  std::size_t members_whole = 0;         // members fetched whole (small ones)
};

using installer::RangeLimits;

// Throws resolver::Error naming the URL (redacted) and what is wrong with the wheel; a shared
// object whose ELF headers, dynamic segment or strings are malformed (read by resolver/elf's
// checked reader, every offset and size bounded by the member) is named with its member.
[[nodiscard]] RemoteRead read_remote_wheel(HttpClient& http, const Picked& picked,
                                           const std::vector<std::string>& supported_tags,
                                           const std::string& temporary_file, const RangeLimits& limits = {});

}  // namespace cudafix::installer::source
