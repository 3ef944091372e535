#include "installer/wheel/ranged_read.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "installer/wheel/deflate_window.hpp"
#include "installer/wheel/member_ranges.hpp"
#include "installer/wheel/segment_find.hpp"
#include "installer/wheel/segment_place.hpp"
#include "installer/wheel/strings_window.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/elf/elf_pieces.hpp"

namespace cudafix::installer {
namespace r = cudafix::resolver;

namespace {

using member_ranges::MemberRanges;
using segment_find::Anchor;
using segment_find::bytes_of;
using segment_find::consistent_with;
using segment_find::dynamic_in_window;
using segment_find::end_bytes_at;
using segment_find::inflates_past_size;
using segment_find::over_budget;
using segment_find::Pieces;
using segment_find::strings_needed;
using segment_find::symbol_table_at;
using segment_find::u32;
using segment_find::u64;
using segment_find::WindowFind;
using segment_place::Ask;
using segment_place::Deep;
using segment_place::end_decodes;
using segment_place::strings_at_end;
using segment_place::window_for;

constexpr std::size_t k_local_slack = 1024;       // a local header's extra field beyond the central one's
constexpr std::uint64_t k_max_dynamic = 1 << 20;  // a larger PT_DYNAMIC is read from the object's start

// Where a member's data starts, from the fetched bytes that begin at its local header (which
// must agree with the central directory).
std::uint64_t data_start(const zip::Entry& m, const std::string& from_header, const std::string& label) {
  return zip::parse_local_header(bytes_of(from_header), from_header.size(), m, label);
}

// What reading one member may cost: inflating it from its start, a few times over (a map of its
// stream, its windows, from the start where they fail), and the time that takes at a slow
// 64 MiB/s, plus a floor for small members; a wheel's members together have ten minutes.
std::unique_ptr<InflateBudget> member_budget(std::uint64_t size, InflateBudget* wheel) {
  const std::uint64_t seconds = 60 + size / (std::uint64_t{64} << 20);
  return std::make_unique<InflateBudget>(4 * size + (std::uint64_t{512} << 20), std::chrono::seconds(seconds), wheel);
}

// Why resolver/elf refused a member, named by the wheel's URL and the member's name.
r::Error not_valid_elf(const std::string& label, const std::string& member, const r::Diagnostic& d) {
  const std::string at = d.offset ? fmt::format(" (at offset {:#x})", *d.offset) : "";
  return r::Error(fmt::format("{}: {} is not a valid ELF object{}: {}", label, member, at, d.message));
}

// What an object's first bytes say of where its dynamic segment lies, read by resolver/elf's
// checked reader: every offset and size in them bounded by the member's size.
struct Layout {
  enum class Kind { not_elf, by_window, from_start } kind = Kind::not_elf;
  r::ElfLayout elf;  // by_window: PT_DYNAMIC lies inside the member and is at most k_max_dynamic
};

// `head`: the member's first bytes, of `size` in all. An object whose headers lie past them, or
// that is not a little-endian ELF64 (the windows read 16-byte entries), is read from its start;
// one whose headers are wrong is an Error naming the wheel and the member.
Layout layout_of(const std::string& head, std::uint64_t size, const std::string& label, const std::string& member,
                 InvalidElf invalid) {
  const auto read = r::read_elf_layout({size, {{0, head}}}, label + ":" + member);
  if (read.status == r::ElfReadStatus::not_elf) return {};
  if (read.status == r::ElfReadStatus::invalid) {
    if (read.incomplete) return {Layout::Kind::from_start, {}};
    if (invalid == InvalidElf::leave_out) return {};
    throw not_valid_elf(label, member, read.diagnostic);
  }
  const r::ElfLayout& l = read.layout;
  if (l.elf_class != 2 || l.encoding != 1 || l.dynamic_size == 0 || l.dynamic_size > k_max_dynamic)
    return {Layout::Kind::from_start, {}};
  return {Layout::Kind::by_window, l};
}

// An object's dynamic section as resolver/elf read it: kept, or as `invalid` says.
void keep_elf(RangedMembers& out, const std::string& member, const r::ElfRead& elf, const std::string& label,
              InvalidElf invalid) {
  if (elf.status == r::ElfReadStatus::ok) out.elf.emplace(member, elf.info);
  if (elf.status == r::ElfReadStatus::invalid && invalid == InvalidElf::refuse)
    throw not_valid_elf(label, member, elf.diagnostic);
}

using Ranges = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

// read_members_by_ranges, in rounds of ranges fetched at once: the members' heads (and the ends
// of the large ones), then windows where the segments should lie, wider ones where they were not,
// then each object's segment and strings from what is at hand, a map of its stream or its start.
class RangeReader {
 public:
  RangeReader(const ReadRanges& read, std::uint64_t file_size, const std::string& dist_info, const std::string& label,
              const RangeLimits& limits, InvalidElf invalid, std::string_view whole)
      : read_(read),
        file_size_(file_size),
        dist_info_(dist_info),
        label_(label),
        limits_(limits),
        invalid_(invalid),
        whole_(whole) {}

  RangedMembers run(std::vector<zip::Entry> members) {
    wanted_ = std::move(members);
    first_round();
    for (const int pass : {1, 2, 3, 4, 5, 6}) window_pass(pass);
    for (const Deep& d : deep_)
      if (d.overrun) throw inflates_past_size(label_, *d.member);
    names_pass();
    prefetch_strings();
    for (Deep& d : deep_) finish(d);
    return std::move(out_);
  }

  // Bytes [first, last] of the wheel for each range, each checked first and counted.
  std::vector<std::string> fetch(const Ranges& ranges) {
    for (const auto& [first, last] : ranges)
      // A range computed from the wheel's own offsets that ends before it starts: they lie.
      if (first > last)
        throw r::Error(fmt::format("{}: its zip structures name bytes {}-{}, past its end", label_, first, last));
    auto got = read_(ranges);
    for (const auto& bytes : got) out_.read += bytes.size();
    return got;
  }

 private:
  // Read whole: METADATA, RECORD (up to zip::k_max_metadata), and objects small both ways: a
  // megabyte of deflate data can declare a gigabyte, which is read as a large object is. By
  // HTTP an object over `whole_object` is read by its head and windows: a library of 300 KB
  // deflated needs a few tens of kilobytes of it (where the file is at hand, inflating it whole
  // also tells a stream that holds more than it declares).
  [[nodiscard]] bool whole_one(const zip::Entry& m) const {
    const bool dist = m.name == dist_info_ + "/METADATA" || m.name == dist_info_ + "/RECORD";
    const std::uint64_t most =
        dist || !limits_.mid_stream ? limits_.whole_member : std::min(limits_.whole_member, limits_.whole_object);
    return m.compressed <= most && m.size <= (dist ? zip::k_max_metadata : limits_.whole_member * 16);
  }
  // Where a member's data should end, from the central directory alone (its local header's extra
  // field is not known yet: a few bytes, allowed for by k_local_slack).
  [[nodiscard]] static std::uint64_t data_end_guess(const zip::Entry& m) {
    return m.local_offset + 30 + m.raw_name.size() + m.compressed;
  }
  // The first window at a large object's end: a short one by HTTP, where each byte costs; where
  // the whole file is at hand, a quarter window, which also finds a stream that inflates past
  // the member's declared size by inflating more than that from there.
  [[nodiscard]] std::uint64_t first_end_window() const {
    return limits_.mid_stream ? limits_.window / 64 : limits_.window / 4;
  }

  void first_round();
  void take_head(zip::Entry& m, std::string& head);
  void take_end(Deep& d, std::uint64_t first, std::string bytes);
  void decode_end(Deep& d);
  void keep_needed_tail(Deep& d) const;
  [[nodiscard]] std::optional<std::string> section_table(Deep& d, const WindowFind& end) const;
  void window_pass(int pass);
  void names_pass();
  void prefetch_strings();
  void finish(Deep& d);

  const ReadRanges& read_;
  std::uint64_t file_size_;
  const std::string& dist_info_;
  const std::string& label_;
  const RangeLimits& limits_;
  InvalidElf invalid_;
  std::string_view whole_;
  RangedMembers out_;
  std::vector<zip::Entry> wanted_;  // each one's data_offset set once its local header is read
  std::vector<Deep> deep_;
  InflateBudget wheel_budget_{UINT64_MAX, std::chrono::minutes(10)};
};

// The first round: each wanted member's local header with its data (small ones) or its first
// bytes (objects), and the last bytes of each large object, all fetched at once.
void RangeReader::first_round() {
  Ranges ranges;
  for (const zip::Entry& m : wanted_) {
    const std::uint64_t length = whole_one(m) ? m.compressed : limits_.head;
    ranges.emplace_back(m.local_offset,
                        std::min(file_size_ - 1, m.local_offset + 30 + m.raw_name.size() + k_local_slack + length));
  }
  std::vector<std::size_t> end_of(wanted_.size(), SIZE_MAX);
  for (std::size_t i = 0; i < wanted_.size(); ++i) {
    const zip::Entry& m = wanted_[i];
    if (whole_one(m) || m.method != 8 || m.name == dist_info_ + "/METADATA" || m.name == dist_info_ + "/RECORD")
      continue;
    const std::uint64_t end = data_end_guess(m);
    const std::uint64_t first = end > first_end_window() ? std::max(m.local_offset, end - first_end_window()) : 0;
    end_of[i] = ranges.size();
    ranges.emplace_back(first, std::min(file_size_ - 1, end + k_local_slack - 1));
  }
  auto got = fetch(ranges);
  for (std::size_t i = 0; i < wanted_.size(); ++i) {
    const std::size_t deep_before = deep_.size();
    take_head(wanted_[i], got[i]);
    if (deep_.size() > deep_before && end_of[i] != SIZE_MAX)
      take_end(deep_.back(), ranges[end_of[i]].first, std::move(got[end_of[i]]));
  }
  r::parallel_for(deep_.size(), 0, [&](std::size_t i) { decode_end(deep_[i]); });
  for (Deep& d : deep_) out_.inflated += std::exchange(d.inflated, 0);
}

// A member's local header and first bytes (`head`, fetched from its local header on): a small
// member read whole, or an object's headers, which say where its dynamic segment lies.
void RangeReader::take_head(zip::Entry& m, std::string& head) {
  // A local header whose name and extra field are longer than the slack allowed for (the extra
  // field is the local header's own, up to 64 KiB): the rest fetched.
  if (head.size() >= 30) {
    const auto* h = bytes_of(head);
    const std::uint64_t data_at = m.local_offset + 30 + (h[26] | (h[27] << 8)) + (h[28] | (h[29] << 8));
    const std::uint64_t wanted_end =
        std::min(file_size_, data_at + (whole_one(m) ? m.compressed : std::min(m.compressed, limits_.head)));
    if (m.local_offset + head.size() < wanted_end)
      head += fetch({{m.local_offset + head.size(), wanted_end - 1}}).front();
  }
  m.data_offset = data_start(m, head, label_);
  std::string compressed = head.substr(std::min<std::size_t>(head.size(), m.data_offset - m.local_offset));
  if (!whole_one(m)) compressed.resize(std::min<std::uint64_t>(compressed.size(), m.compressed));
  std::string inflated;
  Anchor head_end;
  if (m.method == 0) {
    inflated = compressed.substr(0, std::min<std::uint64_t>(m.size, compressed.size()));
  } else {
    Inflater z;
    // A whole one up to a byte past its size: one that holds more is not what install takes.
    const bool fed = z.feed(bytes_of(compressed), compressed.size(), whole_one(m) ? m.size + 1 : limits_.head * 16);
    out_.inflated += z.produced;
    if (!fed) throw r::Error(fmt::format("{}: {}'s deflate data is damaged", label_, m.name));
    if (z.out.size() > m.size) throw inflates_past_size(label_, m);
    inflated = std::move(z.out);
    head_end = {compressed.size() - z.unread(), inflated.size()};
  }
  if (whole_one(m)) {
    ++out_.members_whole;
    if (m.name == dist_info_ + "/METADATA") {
      out_.metadata = std::move(inflated);
    } else if (m.name == dist_info_ + "/RECORD") {
      out_.record = std::move(inflated);
    } else {
      keep_elf(out_, m.name, r::read_elf_memory(inflated.data(), inflated.size(), label_ + ":" + m.name), label_,
               invalid_);
    }
    return;
  }
  const Layout layout = layout_of(inflated, m.size, label_, m.name, invalid_);
  if (layout.kind == Layout::Kind::not_elf) return;
  Deep d;
  d.member = &m;
  d.layout = layout.elf;
  d.head = std::move(inflated);
  d.head_compressed = std::move(compressed);
  d.head_end = head_end;
  d.budget = member_budget(m.size, &wheel_budget_);
  d.end_first = d.end();
  deep_.push_back(std::move(d));
}

// The last bytes of an object's member, fetched from `first` on with a slack past where its
// data should end: those of its data kept, the rest fetched where its header's extra field was
// longer than the slack.
void RangeReader::take_end(Deep& d, std::uint64_t first, std::string bytes) {
  const std::uint64_t begin = std::max(first, d.member->data_offset), end = d.end();
  if (begin >= end || begin - first > bytes.size()) return;
  if (first + bytes.size() < end) bytes += fetch({{first + bytes.size(), end - 1}}).front();
  d.end_bytes = bytes.substr(begin - first, end - begin);
  d.end_first = begin;
}

// The window at hand that ends with the member, decoded: its segment where it lies there, and
// what the object's end is exactly (its strings, where they lie last, and an anchor of the ratio).
void RangeReader::decode_end(Deep& d) {
  const zip::Entry& m = *d.member;
  if (d.end_bytes.empty() || m.method != 8 || d.layout.dynamic_size == 0 || d.dyn) return;
  // Of the decode, its bytes from the section header table on (where the ELF header puts it),
  // or from the segment on where that comes first.
  const std::uint64_t shoff = d.head.size() >= 64 ? u64(bytes_of(d.head) + 0x28) : UINT64_MAX;
  auto found = dynamic_in_window(d.end_bytes, d.layout.dynamic_size, true, m.size, d.layout.dynamic_offset,
                                 limits_.mid_stream, d.budget.get(), shoff == 0 ? UINT64_MAX : shoff);
  d.overrun |= found.overrun;
  if (found.start) d.end_start = Anchor{d.end_first - m.data_offset + found.start->compressed, found.start->raw};
  // Counted back from the end, a place is exact only where the stream ends at the member's
  // declared size: a stream that holds more (install refuses it) would put a segment planted
  // in what it holds past that where the real one lies. The section header table the object
  // ends with, found where its ELF header says and naming the segment's place, confirms it; a
  // quarter window confirms it as before (a stream holding more inflates more than the member
  // from there), or is fetched in pass 1.
  const auto table = section_table(d, found);
  // Each wider window at the end knows more of the table: the last one read is kept.
  if (table) d.sections.emplace(*table, u64(bytes_of(d.head) + 0x28), m.size);
  if (found.start) {
    std::string known = std::move(found.end_zeros);
    known.erase(0, found.end_agreed);
    d.tail = std::pair{found.end_base + found.end_agreed, std::move(known)};
  }
  d.end_unconfirmed = found.dyn && !table && d.end_bytes.size() < limits_.window / 4 && d.end_first > m.data_offset;
  if (!d.segment_in_head() && found.dyn && !d.end_unconfirmed) d.dyn = std::move(found.dyn);
  keep_needed_tail(d);
  d.inflated += found.inflated;  // added to out_ after the decodes, which run side by side
}

// Of the object's end known exactly, only what its segment, once known, says is read from there:
// its strings and symbol table (a window at an NVIDIA object's end holds MBs of zeros and code).
void RangeReader::keep_needed_tail(Deep& d) const {
  if (!d.tail || (!d.dyn && !d.segment_in_head())) return;
  const std::string dyn = d.segment();
  const auto strings = strings_needed(dyn, d.layout, d.member->size);
  std::uint64_t from = strings ? strings->first : UINT64_MAX;
  if (const auto symtab = symbol_table_at(dyn, d.layout)) from = std::min(from, *symtab);
  auto& [first, bytes] = *d.tail;
  if (from >= first + bytes.size()) {
    d.tail.reset();
  } else if (from > first) {
    bytes.erase(0, from - first);
    bytes.shrink_to_fit();
    first = from;
  }
}

// The object's section header table where the window at the end inflated it, found where its ELF
// header says (the last bytes gcc's and NVIDIA's objects hold) and agreeing with its headers: its
// first entry null, and an SHT_DYNAMIC entry at the place and of the size of PT_DYNAMIC. Where it
// lies before the bytes the decode kept (over 256 KiB from the end, as patchelf leaves it before
// the .dynamic and .dynstr it moves there), it is decoded again. Bytes the two decodes disagree
// on are taken as zeros by HTTP (mid_stream), as the segment's are; elsewhere they fail it.
std::optional<std::string> RangeReader::section_table(Deep& d, const WindowFind& end) const {
  if (d.head.size() < 64 || !end.start || end.end_zeros.size() != end.end_ones.size()) return std::nullopt;
  const auto* h = bytes_of(d.head);
  const std::uint64_t shoff = u64(h + 0x28), entsize = h[0x3a] | (h[0x3b] << 8), count = h[0x3c] | (h[0x3d] << 8);
  const std::uint64_t size = d.member->size, len = count * 64;
  if (entsize != 64 || count == 0 || shoff > size || len > size - shoff || shoff < end.start->raw) return std::nullopt;
  auto both = end_bytes_at(d.end_bytes, end.start_bit, end.start->raw, end.end_base, end.end_zeros, end.end_ones, shoff,
                           len, d.inflated, d.budget.get());
  if (!both) return std::nullopt;
  auto& [zeros, ones] = *both;
  if (!limits_.mid_stream && zeros != ones) return std::nullopt;
  if (std::any_of(zeros.begin(), zeros.begin() + 64, [](char c) { return c != 0; })) return std::nullopt;
  for (std::uint64_t k = 1; k < count; ++k) {
    const auto* e = bytes_of(zeros) + k * 64;
    if (u32(e + 4) == 6 && u64(e + 0x18) == d.layout.dynamic_offset && u64(e + 0x20) == d.layout.dynamic_size)
      return zeros;
  }
  return std::nullopt;
}

// One round of windows for the segments not found yet, fetched at once (only the bytes not at
// hand: a window at the end grows back, one around an estimate grows either way) and decoded
// side by side.
void RangeReader::window_pass(int pass) {
  std::vector<Ask> asks;
  for (std::size_t i = 0; i < deep_.size(); ++i)
    if (auto a = window_for(deep_[i], pass, limits_, !whole_.empty())) {
      a->deep = i;
      deep_[i].tried |= a->kind;
      if (pass == 1 && !a->at_end) deep_[i].first_window = {a->first, a->last + 1};
      asks.push_back(*a);
    }
  if (asks.empty()) return;
  Ranges ranges;
  // Of each ask, the ranges fetched before and after the window around the estimate at hand,
  // where it lies inside (SIZE_MAX: none).
  std::vector<std::pair<std::size_t, std::size_t>> pieces(asks.size(), {SIZE_MAX, SIZE_MAX});
  for (std::size_t k = 0; k < asks.size(); ++k) {
    const Ask& a = asks[k];
    Deep& d = deep_[a.deep];
    const std::uint64_t last = a.at_end ? d.end_first - 1 : a.last;
    if (d.mid_bytes.empty() || d.mid_first < a.first || d.mid_first + d.mid_bytes.size() > last + 1) {
      d.mid_bytes.clear();  // none inside: the window fetched whole
      d.mid_first = a.first;
    }
    if (a.first < d.mid_first) {
      pieces[k].first = ranges.size();
      ranges.emplace_back(a.first, d.mid_first - 1);
    }
    if (last + 1 > d.mid_first + d.mid_bytes.size()) {
      pieces[k].second = ranges.size();
      ranges.emplace_back(d.mid_first + d.mid_bytes.size(), last);
    }
  }
  auto bytes = fetch(ranges);
  for (std::size_t k = 0; k < asks.size(); ++k) {
    Deep& d = deep_[asks[k].deep];
    if (pieces[k].first != SIZE_MAX) d.mid_bytes = std::move(bytes[pieces[k].first]) + d.mid_bytes;
    if (pieces[k].second != SIZE_MAX) {
      if (d.mid_bytes.empty())
        d.mid_bytes = std::move(bytes[pieces[k].second]);  // a window fetched whole: held once
      else
        d.mid_bytes += bytes[pieces[k].second];
    }
    d.mid_first = asks[k].first;
    if (!asks[k].at_end) continue;
    d.end_bytes = std::exchange(d.mid_bytes, std::string()) + d.end_bytes;
    d.end_first = asks[k].first;
  }
  r::parallel_for(asks.size(), 0, [&](std::size_t k) {
    Deep& d = deep_[asks[k].deep];
    if (asks[k].at_end) return decode_end(d);
    auto found = dynamic_in_window(d.mid_bytes, d.layout.dynamic_size, false, d.member->size, d.layout.dynamic_offset,
                                   limits_.mid_stream, d.budget.get());
    d.inflated += found.inflated;
    if (!found.dyn && found.probe_raw > 0)
      d.probes.push_back(
          {d.mid_first - d.member->data_offset + found.probe_at, found.probe_compressed, found.probe_raw});
    if (!found.dyn) return;
    d.dyn = std::move(found.dyn);
    d.mid_bytes = std::string();  // no window is asked for a known segment
    keep_needed_tail(d);
  });
  for (Deep& d : deep_) out_.inflated += std::exchange(d.inflated, 0);
}

// The names each known segment gives, where they lie deep in a .dynstr that precedes most of the
// object (GNU ld's layout): a window around their estimated place for each (only by HTTP: a place
// found by what the bytes read as is not exact, RangeLimits::mid_stream), fetched at once and
// decoded side by side. Where a window finds them, they are not inflated from the start.
void RangeReader::names_pass() {
  if (!limits_.mid_stream) return;
  std::vector<std::pair<Deep*, NamesAsk>> asks;
  Ranges ranges;
  for (Deep& d : deep_) {
    const zip::Entry& m = *d.member;
    if (m.method != 8 || d.layout.dynamic_size == 0 || (!d.dyn && !d.segment_in_head()) || d.head_end.raw == 0)
      continue;
    const std::string dyn = d.segment();
    const auto strings = strings_needed(dyn, d.layout, m.size);
    if (!strings || strings->second <= d.head.size() || strings_at_end(d, *strings, limits_.window)) continue;
    auto ask = names_ask(dyn, d.layout, m.size, d.head_place());
    if (!ask) continue;
    const auto at = names_window_place(ask->layout, limits_.window);
    if (!at) continue;
    ranges.emplace_back(m.data_offset + at->first, m.data_offset + at->last);
    asks.emplace_back(&d, std::move(*ask));
  }
  if (ranges.empty()) return;
  auto bytes = fetch(ranges);
  r::parallel_for(asks.size(), 0, [&](std::size_t k) {
    auto& [d, ask] = asks[k];
    auto found = names_in_window(bytes[k], ask.refs, ask.layout.strtab, d->budget.get());
    d->inflated += found.inflated;
    if (found.found) d->names = std::move(found.pieces);
  });
  for (Deep& d : deep_) out_.inflated += std::exchange(d.inflated, 0);
}

// The strings of each object whose segment is known that lie past its head and are read from
// its start: the compressed bytes up to where they should end fetched for all at once, after
// the head's (what inflating from the start then reads first, as the head's bytes).
void RangeReader::prefetch_strings() {
  Ranges ranges;
  std::vector<Deep*> of;
  for (Deep& d : deep_) {
    const zip::Entry& m = *d.member;
    if (m.method != 8 || d.layout.dynamic_size == 0 || (!d.dyn && !d.segment_in_head())) continue;
    const std::string dyn = d.segment();
    const auto strings = strings_needed(dyn, d.layout, m.size);
    if (!strings || strings->second <= d.head.size() || strings_at_end(d, *strings, limits_.window) ||
        end_decodes(d, strings->first) || d.head_end.raw == 0 || !d.names.empty())
      continue;
    // At the highest ratios of the tables before them (installer/wheel/strings_window), else at
    // the head's deflate ratio and a quarter more; what falls short is fetched as it is inflated.
    const double ratio = static_cast<double>(d.head_end.compressed) / static_cast<double>(d.head_end.raw);
    auto reach = static_cast<std::uint64_t>(static_cast<double>(strings->second - d.head_end.raw) * ratio * 1.25);
    if (const auto tables = tables_layout(dyn, d.layout, m.size, d.head_place())) {
      const std::uint64_t highest = deflated_place(*tables, strings->second, true);
      reach = std::min(reach, highest - std::min(highest, d.head_end.compressed));
    }
    const std::uint64_t have = m.data_offset + d.head_compressed.size();
    const std::uint64_t want = std::min({d.end(), have + reach + 4096, have + limits_.chunk});
    if (want <= have) continue;
    ranges.emplace_back(have, want - 1);
    of.push_back(&d);
  }
  if (ranges.empty()) return;
  auto bytes = fetch(ranges);
  for (std::size_t k = 0; k < of.size(); ++k) of[k]->head_compressed += bytes[k];
}

// An object's segment and strings from what the windows gave, else as MemberRanges finds them,
// read by resolver/elf from those pieces alone.
void RangeReader::finish(Deep& d) {
  zip::Entry& m = *d.member;
  if (d.budget->spent()) throw over_budget(label_, m, *d.budget);
  MemberRanges ranges([this](const Ranges& r) { return fetch(r); }, d, out_, limits_, whole_, label_);
  if (d.layout.dynamic_size == 0) {
    ++out_.objects_from_start;
    keep_elf(out_, m.name, ranges.read_whole(), label_, invalid_);
    return;
  }
  std::string dyn;
  if (d.dyn) {
    dyn = *d.dyn;
    ++out_.objects_by_window;
  } else if (m.method == 0) {
    dyn = fetch({{m.data_offset + d.layout.dynamic_offset,
                  m.data_offset + d.layout.dynamic_offset + d.layout.dynamic_size - 1}})
              .front();
    ++out_.objects_by_window;  // a stored member: the segment read where it lies
  } else if (auto mapped = ranges.exactly(d.layout.dynamic_offset, d.layout.dynamic_size)) {
    dyn = std::move(*mapped);
    ++out_.objects_by_map;
  } else {
    dyn = ranges.segment_from_start();
    ++out_.objects_from_start;
  }
  auto strings = strings_needed(dyn, d.layout, m.size);
  // What is known of the object exactly: its first bytes, and the window that reached its end.
  Pieces known{m.size, {{0, d.head}}};
  if (d.tail) known.v.push_back(*d.tail);
  for (const auto& name : d.names) known.v.push_back(name);
  if (d.dyn && m.method == 8) {
    if (strings) ranges.strings_from_end(*strings, dyn, known);
    if (strings && !known.span(strings->first, strings->second - strings->first) && d.names.empty())
      if (auto got = ranges.from_start(strings->first, strings->second - strings->first))
        known.v.emplace_back(strings->first, std::move(*got));
    if (!strings || !consistent_with(dyn, d.layout, known.view(), !d.names.empty())) {
      // The window's reading does not hold: the segment from the start instead.
      --out_.objects_by_window;
      ++out_.objects_from_start;
      dyn = ranges.segment_from_start();
      strings = strings_needed(dyn, d.layout, m.size);
      known.v = {{0, d.head}};
      d.names.clear();
    }
  }
  // The pieces the loader reads, where they lie in the object. Without the strings (DT_STRTAB
  // in no segment, or past the member's end) the reader says what is wrong, as the loader would.
  Pieces pieces{m.size, {{0, d.head}, {d.layout.dynamic_offset, dyn}}};
  if (strings) {
    const std::uint64_t len = strings->second - strings->first;
    ranges.strings_from_end(*strings, dyn, known);
    if (const char* str = known.span(strings->first, len)) {
      pieces.v.emplace_back(strings->first, std::string(str, len));
    } else if (!d.names.empty()) {
      pieces.v.insert(pieces.v.end(), d.names.begin(), d.names.end());
    } else if (m.method == 0) {
      pieces.v.emplace_back(strings->first,
                            fetch({{m.data_offset + strings->first, m.data_offset + strings->second - 1}}).front());
    } else if (auto mapped = ranges.exactly(strings->first, len)) {
      pieces.v.emplace_back(strings->first, std::move(*mapped));
    } else if (auto got = ranges.from_start(strings->first, len)) {
      pieces.v.emplace_back(strings->first, std::move(*got));
    }
  }
  d.end_bytes = std::string();
  d.mid_bytes = std::string();
  keep_elf(out_, m.name, r::read_elf_pieces(pieces.view(), label_ + ":" + m.name), label_, invalid_);
}

}  // namespace

RangedMembers read_members_by_ranges(const ReadRanges& read, std::uint64_t file_size, std::vector<zip::Entry> members,
                                     const std::string& dist_info, const std::string& label, const RangeLimits& limits,
                                     InvalidElf invalid, std::string_view whole) {
  return RangeReader(read, file_size, dist_info, label, limits, invalid, whole).run(std::move(members));
}

}  // namespace cudafix::installer
