// Reading what the planner needs of a wheel by byte ranges rather than whole: METADATA, RECORD
// and the dynamic section of each shared object, a few hundred kilobytes of a 350 MB wheel. The
// ranges come from wherever the wheel is: a mapped file (installer/wheel/read.hpp) or HTTP range
// requests to an index (installer/source/remote_wheel.hpp). In rounds, each one's ranges
// fetched at once (by HTTP, those near each other as one request); for each member asked for:
//   1. its local header with its data (a small member: METADATA, RECORD, an object under
//      `whole_object` compressed) or with its first `head` bytes (a larger object: its ELF
//      header and program headers, which say where PT_DYNAMIC lies and which segments map the
//      dynamic strings), and the last window/64 of each larger object: inflated from a block
//      boundary to the member's end, its bytes are placed exactly, counted back from the end
//      (gcc puts .dynamic a few KB before the end, NVIDIA's libraries .dynstr last);
//   2. the dynamic segment itself, deep in the deflate stream (80% of the bytes of a CUDA
//      library precede it): a window of the compressed member where the segment should be,
//      inflated from a deflate block boundary found in it (installer/wheel/deflate_window).
//      Where it should be is told by the places proved so far (the head's end, the first
//      boundary of the window at the end) and the deflate ratio measured between them, and
//      by the ratio of the end's bytes where those after the segment deflate otherwise. Where
//      the window at the end holds the section header table, the bytes are weighed by it: the
//      gaps between sections (zeros) count 1/256, and what the sections after the segment
//      should deflate to at most sizes a first window at the end (the table may lie: it only
//      places windows). A window there, wider ones after it, or the window at the end grown
//      back to it where that costs no more (installer/wheel/segment_place). The 32 KiB before
//      a window are unknown, so it is inflated twice, against a dictionary of zeros and one of
//      0xff: only bytes both agree on are known, and the dynamic segment is taken where it reads as one (its size,
//      valid tags, DT_STRTAB and DT_STRSZ, DT_NULL last) and agrees with what is known of the object exactly (its first
//      bytes, a window inflated to its end). A window that ends with the member places it exactly; elsewhere its place
//      is told by what it reads as, which RangeLimits::mid_stream allows or not. Where no window holds it, the member
//      is inflated from its start up to the segment instead, and counted;
//   3. the strings the segment names (SONAME, NEEDED, RPATH, RUNPATH), from the bytes at hand,
//      the window at the end grown back to them, by HTTP a window of .dynstr where GNU ld puts
//      them near the start, the names found there by their fingerprint
//      (installer/wheel/strings_window), or inflated from the start (all objects' fetched at
//      once), and the object read by resolver/elf as the loader reads it, from those pieces
//      alone.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "installer/wheel/zip_reader.hpp"
#include "resolver/elf/elf_reader.hpp"

namespace cudafix::installer {

// How much is read at a time. The defaults suit CUDA wheels; small ones (the fuzz target)
// take every path with a wheel of a few kilobytes.
struct RangeLimits {
  std::uint64_t tail = 24 * 1024;          // by HTTP, the first request: the end of the file
  std::uint64_t whole_wheel = 64 * 1024;   // by HTTP, a wheel up to this is fetched whole
  std::uint64_t whole_member = 1 << 20;    // METADATA and RECORD up to this (compressed) are read whole
  std::uint64_t whole_object = 64 * 1024;  // and objects up to this (and whole_member)
  std::uint64_t head = 8 * 1024;           // of a larger object: its headers
  // Windows of compressed bytes: the first at an object's end is window / 64, the first around
  // where PT_DYNAMIC should lie window / 8, the wider ones after them 2 to 8 windows.
  std::uint64_t window = 1 << 20;
  std::uint64_t chunk = 1 << 20;  // inflating from the start: read at most this much at a time
  // By HTTP: ranges of one round this close to each other are fetched as one request (the bytes
  // between read too), so that one plan makes few requests.
  std::uint64_t gap = 64 * 1024;
  // A dynamic segment found mid-stream by what its bytes read as, checked against what is known
  // of the object, is taken (by HTTP, where each byte costs; a crafted object can plant a false
  // one there, and `apply`, reading the downloaded file whole, refuses the plan); false: only
  // segments whose place is known exactly (from the start, or counted back from the member's end).
  bool mid_stream = true;
  // By HTTP: a read by range that would fetch over half the wheel stops, and the wheel is
  // downloaded whole instead (apply needs it anyway); false: read by range to the end (the unit
  // tests' small limits on wheels of a few kilobytes).
  bool whole_past_half = true;
};

// Bytes [first, last] of the wheel for each range, in order, each exactly that long.
using ReadRanges = std::function<std::vector<std::string>(const std::vector<std::pair<std::uint64_t, std::uint64_t>>&)>;

struct RangedMembers {
  std::map<std::string, resolver::ElfInfo> elf;  // by member name: the objects resolver/elf read
  std::string metadata, record;                  // the dist-info's, where asked for
  std::size_t objects_by_window = 0;             // dynamic segments found mid-stream
  std::size_t objects_from_start = 0;            // objects inflated from their start to the segment
  std::size_t objects_by_map = 0;                // segments placed exactly by a map of the stream (`whole`)
  std::size_t members_whole = 0;                 // members read whole (small ones)
  std::uint64_t read = 0;                        // compressed bytes read
  std::uint64_t inflated = 0;                    // bytes inflated, those of discarded trials included
};

// Objects resolver/elf finds malformed: an Error naming the wheel and the member (an object the
// loader would refuse is not planned from), or left out of `elf`.
enum class InvalidElf { refuse, leave_out };

// Reads `members` (central directory entries of a wheel of `file_size` bytes) by ranges:
// `dist_info`/METADATA and `dist_info`/RECORD into `metadata` and `record` when among them and
// under `whole_member` compressed, and each one named like a shared object as above. Throws
// resolver::Error naming `label` and the member: a local header that disagrees with the central
// directory, damaged deflate data, an object that ends before its dynamic segment.
// `whole`: the file's bytes, where all of them are at hand (a mapped file): a segment or strings
// deep in a member are placed exactly by a map of its deflate stream, made by pieces decoded side
// by side (installer/wheel/deflate_window.hpp, map_stream), rather than by inflating from its
// start on one core.
[[nodiscard]] RangedMembers read_members_by_ranges(const ReadRanges& read, std::uint64_t file_size,
                                                   std::vector<zip::Entry> members, const std::string& dist_info,
                                                   const std::string& label, const RangeLimits& limits,
                                                   InvalidElf invalid, std::string_view whole = {});

}  // namespace cudafix::installer
