// Planning from a wheel on an index without downloading it: what the planner needs is the
// wheel's METADATA, its RECORD and the dynamic section of each shared object, a few hundred
// kilobytes of a 350 MB file. Read by HTTP range requests:
//   1. the last 64 KiB: the end of central directory record and the central directory;
//   2. each small member whole (METADATA, RECORD, objects under 1 MiB compressed), and the
//      first 64 KiB of each larger object: its ELF header and program headers, which say where
//      PT_DYNAMIC lies and which segments map the dynamic strings;
//   3. the dynamic segment itself, deep in the deflate stream (80% of the bytes of a CUDA
//      library precede it): a window of the compressed member around where the segment should
//      be, inflated from a deflate block boundary found in it (each bit position tried, a
//      dynamic-Huffman header required, then zlib must inflate on from there). The 32 KiB
//      before the window are unknown, so the window is inflated twice, against a dictionary
//      of zeros and one of 0xff: only bytes both agree on are known, and the dynamic segment is
//      taken only where it is known whole and reads as one (its size, valid tags, DT_STRTAB and
//      DT_STRSZ, DT_NULL last). Where no window holds it, the member is inflated from its start
//      up to the segment instead, and counted;
//   4. the start of the member up to the strings it names (SONAME, NEEDED, RPATH, RUNPATH), and
//      the objects read by resolver/elf as the loader reads them, from those pieces alone.
// A server that ignores Range sends the whole file to the first request: then the wheel is
// kept as a download and read from disk, and that is said.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "installer/source/http.hpp"
#include "installer/source/index.hpp"
#include "resolver/plan/wheel.hpp"

namespace cudafix::installer::source {

struct RemoteRead {
  std::optional<resolver::Wheel> wheel;  // read by range: file empty, url and sha256 set
  std::string downloaded;                // the whole file is here: the server ignored Range, or
  bool whole_because_small = false;      // the wheel is smaller than the first request
  std::uint64_t fetched = 0;             // body bytes received for it
  std::uint64_t size = 0;                // the wheel's size
  std::size_t objects_by_window = 0;     // dynamic segments found mid-stream
  std::size_t objects_from_start = 0;    // objects inflated from their start to the segment
  std::size_t members_whole = 0;         // members fetched whole (small ones)
};

// How much is asked for at a time. The defaults suit CUDA wheels; small ones (the fuzz target)
// take every path with a wheel of a few kilobytes.
struct RangeLimits {
  std::uint64_t tail = 64 * 1024;        // the first request: the end of the file
  std::uint64_t whole_member = 1 << 20;  // members up to this (compressed) are read whole
  std::uint64_t head = 64 * 1024;        // of a larger object: its headers
  std::uint64_t window = 1 << 20;        // a window of compressed bytes around PT_DYNAMIC
  std::uint64_t chunk = 1 << 20;         // inflating from the start: fetched this much at a time
};

// Throws resolver::Error naming the URL (redacted) and what is wrong with the wheel; a shared
// object whose ELF headers, dynamic segment or strings are malformed (read by resolver/elf's
// checked reader, every offset and size bounded by the member) is named with its member.
[[nodiscard]] RemoteRead read_remote_wheel(HttpClient& http, const Picked& picked,
                                           const std::vector<std::string>& supported_tags,
                                           const std::string& temporary_file, const RangeLimits& limits = {});

}  // namespace cudafix::installer::source
