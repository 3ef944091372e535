// What range planning reads of one object that no window gave (installer/wheel/ranged_read.cpp,
// the one user): its segment and strings placed exactly by a map of its deflate stream where the
// whole file is at hand, else inflated from its start, and strings that lie last from the window
// at its end, grown back where its decode leaves them unknown. Internal to installer/wheel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "installer/wheel/deflate_window.hpp"
#include "installer/wheel/ranged_read.hpp"
#include "installer/wheel/segment_find.hpp"
#include "installer/wheel/segment_place.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/elf/elf_pieces.hpp"

namespace cudafix::installer::member_ranges {
namespace r = cudafix::resolver;
using segment_find::Fetch;
using segment_find::FromStart;
using segment_find::inflate_to_end;
using segment_find::inflates_past_size;
using segment_find::Pieces;
using segment_find::read_from_start;
using segment_find::symbol_table_at;
using segment_place::Deep;
using segment_place::end_decodes;
using segment_place::strings_at_end;

constexpr std::uint64_t k_piece = 2 << 20;  // a map of a stream decodes pieces of this many bytes at once

// The ranges of one object that no window gave: placed exactly by a map of its deflate stream
// where the whole file is at hand, else inflated from its start (from the head's compressed
// bytes on), and the strings from a window at its end.
class MemberRanges {
 public:
  // `fetch`: bytes of the wheel, counted as the reader counts them.
  MemberRanges(Fetch fetch, Deep& d, RangedMembers& out, const RangeLimits& limits, std::string_view whole,
               const std::string& label)
      : d_(d),
        m_(*d.member),
        out_(out),
        limits_(limits),
        whole_(whole),
        label_(label),
        map_budget_(2 * m_.size + (std::uint64_t{128} << 20), std::chrono::hours(24), d.budget.get()),
        fetch_(std::move(fetch)),
        stream_(m_, fetch_, limits.chunk, d.budget.get(), label, d.head_compressed) {}

  // Where the whole file is at hand: `len` bytes from `first` on, decoded from the last proved
  // block boundary before them (or one of the few before that, where the bytes depend on what
  // precedes it); nullopt: inflated from the start instead. A map of the stream has a share of
  // the member's budget: where it runs out (no boundary proved in crafted bytes), the member is
  // inflated from its start with what is left.
  std::optional<std::string> exactly(std::uint64_t first, std::uint64_t len) {
    if (whole_.empty() || m_.method != 8 || first + len <= d_.head.size() ||
        m_.data_offset + m_.compressed > whole_.size())
      return std::nullopt;
    const std::string_view stream = whole_.substr(m_.data_offset, m_.compressed);
    while (map_.back().out < first + len && map_.back().bit < stream.size() * 8) {
      bool too_long = false;
      const auto more =
          map_stream(stream, map_.back(), first + len, m_.size, k_piece, 0, out_.inflated, too_long, &map_budget_);
      if (too_long) throw inflates_past_size(label_, m_);
      if (more.size() == 1) break;
      map_.insert(map_.end(), more.begin() + 1, more.end());
    }
    const std::uint64_t covered = std::min<std::uint64_t>(stream.size(), map_.back().bit / 8 + k_piece);
    out_.read += covered > mapped_to_ ? covered - mapped_to_ : 0;
    mapped_to_ = std::max(mapped_to_, covered);
    auto at =
        std::upper_bound(map_.begin(), map_.end(), first, [](std::uint64_t v, const Boundary& b) { return v < b.out; });
    for (int tries = 0; tries < 4 && at != map_.begin(); ++tries)
      if (auto got = decode_span(stream, *--at, first, len, out_.inflated, &map_budget_)) return got;
    return std::nullopt;
  }
  // The member from its start, where neither a window nor a map of its stream gives a range.
  std::optional<std::string> from_start(std::uint64_t first, std::uint64_t len) {
    auto got = first + len <= d_.head.size() ? std::optional(d_.head.substr(first, len)) : stream_.bytes(first, len);
    out_.inflated += std::exchange(stream_.inflated, 0);
    return got;
  }
  std::string segment_from_start() {
    auto got = from_start(d_.layout.dynamic_offset, d_.layout.dynamic_size);
    if (!got) throw r::Error(fmt::format("{}: {} ends before its dynamic segment", label_, m_.name));
    return std::move(*got);
  }
  // The object whose headers say nothing of its segment, read from its start.
  r::ElfRead read_whole() {
    auto elf = read_from_start(d_.head, stream_, m_.size, label_ + ":" + m_.name);
    out_.inflated += std::exchange(stream_.inflated, 0);
    return elf;
  }
  // The strings [first, second) near the end (NVIDIA's libraries keep .dynstr last): inflated
  // to the end from the window at the member's end where its decode starts before them (its
  // bytes are at hand; a decode keeps only its last 256 KiB), else from that window grown back
  // to them where reaching back there costs less than inflating up to them from the start (gcc
  // puts .dynstr near the start) or costs little (they lie in the last window of the object,
  // whatever the estimates say). Where the decode at hand leaves them unknown, the window grows
  // back too: cuDNN 9.19's heuristic library keeps its .dynstr after 1.59 MB of zeros, which a
  // decode starting among them knows nothing of (it read 21 MB from the start instead). The
  // segment's null symbol is read there too where the decode reaches it, for consistent_with.
  void strings_from_end(const std::pair<std::uint64_t, std::uint64_t>& strings, const std::string& dyn, Pieces& known) {
    if (known.span(strings.first, strings.second - strings.first) || m_.method != 8) return;
    const bool at_hand = end_decodes(d_, strings.first);
    const std::uint64_t end = d_.end(), after = m_.size - strings.first;
    std::uint64_t reach = after + after / 1000 + limits_.window / 4;  // deflate holds X bytes in X + X/1000 at most
    if (!at_hand && !strings_at_end(d_, strings, limits_.window) && 2 * reach > m_.compressed) return;
    if (at_hand) {
      strings_in_end_window(strings, dyn, known);
      if (known.span(strings.first, strings.second - strings.first)) return;
      reach = std::max(reach, 2 * (end - d_.end_first));
    }
    const std::uint64_t first = end > reach ? std::max(m_.data_offset, end - reach) : m_.data_offset;
    if (first >= d_.end_first) return;
    d_.end_bytes = fetch_({{first, d_.end_first - 1}}).front() + d_.end_bytes;
    d_.end_first = first;
    strings_in_end_window(strings, dyn, known);
  }

 private:
  // The strings, and the null symbol, from the window at the member's end as far as it reaches.
  void strings_in_end_window(const std::pair<std::uint64_t, std::uint64_t>& strings, const std::string& dyn,
                             Pieces& known) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> wanted{strings};
    if (const auto symtab = symbol_table_at(dyn, d_.layout); symtab && *symtab <= m_.size - 24)
      if (!known.span(*symtab, 24)) wanted.emplace_back(*symtab, *symtab + 24);
    bool overrun = false;
    auto got = inflate_to_end(d_.end_bytes, m_.size, wanted, out_.inflated, d_.budget.get(), overrun);
    if (overrun) throw inflates_past_size(label_, m_);
    for (auto& piece : got) known.v.push_back(std::move(piece));
  }

  Deep& d_;
  const zip::Entry& m_;
  RangedMembers& out_;
  const RangeLimits& limits_;
  std::string_view whole_;
  const std::string& label_;
  InflateBudget map_budget_;
  std::vector<Boundary> map_{{0, 0}};
  std::uint64_t mapped_to_ = 0;  // compressed bytes the map covers
  Fetch fetch_;
  FromStart stream_;
};

}  // namespace cudafix::installer::member_ranges
