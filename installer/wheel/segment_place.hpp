// Where range planning looks for a large object's dynamic segment (installer/wheel/ranged_read.cpp,
// the one user): what is known of the object as the rounds of reading add to it (Deep), where
// its byte should lie deflated by the places proved so far, the deflate ratio between them and
// the bytes its sections hold, and the window of compressed bytes each pass asks for next.
// Internal to installer/wheel.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "installer/wheel/deflate_window.hpp"
#include "installer/wheel/ranged_read.hpp"
#include "installer/wheel/segment_find.hpp"
#include "installer/wheel/strings_window.hpp"
#include "installer/wheel/zip_reader.hpp"
#include "resolver/elf/elf_pieces.hpp"

namespace cudafix::installer::segment_place {
namespace r = cudafix::resolver;
using segment_find::Anchor;
using segment_find::SectionExtents;

// A large object read by ranges: what is known of it, as the rounds of reading add to it.
struct Deep {
  zip::Entry* member = nullptr;
  r::ElfLayout layout;          // dynamic_size 0: read from its start, whole
  std::string head;             // its first bytes, inflated
  std::string head_compressed;  // the compressed bytes they came from
  Anchor head_end;              // where the head's inflate stopped
  std::unique_ptr<InflateBudget> budget;
  std::uint64_t end_first = 0;  // the member's compressed bytes from here to its end are at hand
  std::string end_bytes;        //   (a window that ends with it, grown backwards)
  std::uint64_t mid_first = 0;  // and from here on, a window around where the segment should lie
  std::string mid_bytes;
  std::optional<Anchor> end_start;                            // the first proved boundary in them
  std::optional<std::pair<std::uint64_t, std::string>> tail;  // the object's end, known exactly
  std::optional<std::string> dyn;                             // its dynamic segment, found by a window
  // The names its segment gives, found by a window in its .dynstr (installer/wheel/strings_window):
  // each with the NUL before and after it, at the file offset of that NUL before.
  std::vector<std::pair<std::uint64_t, std::string>> names;
  bool overrun = false;          // a decode that ended with the member inflated more than it declares
  bool end_unconfirmed = false;  // the window at the end placed a segment no section table confirms
  // Where its sections hold its bytes, from the section header table the window at the end
  // inflated where it agrees with its headers (ranged_read's RangeReader::section_table).
  std::optional<SectionExtents> sections;
  std::uint64_t inflated = 0;  // by its window decodes
  // The windows asked for its segment so far (window_for), one bit each.
  enum Tried : unsigned {
    span = 1,
    end_grown = 2,
    around_end_estimate = 4,
    wide = 8,
    end_sized = 16,
    refined = 32,
    beside = 64,
    probed = 128
  };
  // The deflate ratio measured where a window around an estimate decoded without finding the
  // segment: its compressed bytes [first, first + compressed) of the member and what they inflated to.
  struct Probe {
    std::uint64_t first = 0, compressed = 0, raw = 0;
  };
  std::vector<Probe> probes;
  // Pass 1's window around the estimate, [first, last + 1) (its bytes may be dropped since).
  std::pair<std::uint64_t, std::uint64_t> first_window;
  unsigned tried = 0;
  [[nodiscard]] bool segment_in_head() const { return head.size() >= layout.dynamic_offset + layout.dynamic_size; }
  // Its dynamic segment, where a window found it or its head holds it.
  [[nodiscard]] std::string segment() const {
    return dyn ? *dyn : head.substr(layout.dynamic_offset, layout.dynamic_size);
  }
  // The bytes before `raw` as the deflate ratio is measured: gaps between sections count little.
  [[nodiscard]] std::uint64_t measure(std::uint64_t raw) const { return sections ? sections->measure(raw) : raw; }
  [[nodiscard]] HeadPlace head_place() const { return {head_end.compressed, head_end.raw, member->compressed}; }
  [[nodiscard]] std::uint64_t end() const { return member->data_offset + member->compressed; }
};

// One round's window of a member: one that ends with it (the bytes at hand grown back to
// `first`), or one around where its segment should lie.
struct Ask {
  std::size_t deep = 0;  // the object's index among those read
  bool at_end = false;
  std::uint64_t first = 0, last = 0;
  unsigned kind = 0;  // a Deep::tried bit: which of the windows for its segment this is
};

// Whether the window at hand at the object's end decodes from before its byte `raw` on (a
// proved block boundary there): what lies past it is inflated from those bytes, never fetched.
[[nodiscard]] inline bool end_decodes(const Deep& d, std::uint64_t raw) {
  return d.end_start && d.end_start->raw <= raw;
}
// Whether the strings [first, second) are read from a window at the end (NVIDIA's libraries
// keep .dynstr last) rather than from the start (gcc puts it near the start): where reaching
// back there costs less (`window`: RangeLimits::window).
[[nodiscard]] bool strings_at_end(const Deep& d, const std::pair<std::uint64_t, std::uint64_t>& strings,
                                  std::uint64_t window);
// Where in the wheel the object's byte `raw` should lie deflated: between the two proved places
// around it (the end of the head, the first boundary of the window at its end; else the
// member's start and end), at the deflate ratio measured between them, the bytes weighed by
// the sections where the section header table is known (Deep::measure).
[[nodiscard]] std::uint64_t estimate(const Deep& d, std::uint64_t raw);
// Where the object's byte `raw` should lie were the bytes from it to the end deflated as those
// the window at the end inflated; nullopt where that window starts before it.
[[nodiscard]] std::optional<std::uint64_t> estimate_from_end(const Deep& d, std::uint64_t raw);
// What the bytes from the object's segment to its end should deflate to at most, from where its
// sections hold its bytes; nullopt where no section header table is known.
[[nodiscard]] std::optional<std::uint64_t> bound_after_segment(const Deep& d);
// This pass's window (1 to 5) for the object's segment, or none: the segment is known, or lies
// in the head, or no window is left for it. `whole_at_hand`: the wheel is a mapped file.
[[nodiscard]] std::optional<Ask> window_for(const Deep& d, int pass, const RangeLimits& limits, bool whole_at_hand);

}  // namespace cudafix::installer::segment_place
