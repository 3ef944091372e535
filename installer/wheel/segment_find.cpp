// installer/wheel/segment_find.hpp: what range planning reads of one large object.
#include "installer/wheel/segment_find.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace cudafix::installer::segment_find {
namespace {

bool valid_dynamic_tag(std::uint64_t tag) {
  return tag <= 37 || (tag >= 0x6ffffd00 && tag <= 0x6fffffff) || (tag >= 0x70000000 && tag <= 0x7fffffff);
}

// A PT_DYNAMIC of `size` bytes at `p`: valid tags, DT_STRTAB and DT_STRSZ, DT_NULL after the
// last entry and only DT_NULL from there.
bool reads_as_dynamic(const unsigned char* p, std::size_t size) {
  bool strtab = false, strsz = false, ended = false;
  for (std::size_t at = 0; at + 16 <= size; at += 16) {
    const std::uint64_t tag = u64(p + at);
    if (ended) {
      if (tag != 0) return false;
      continue;
    }
    if (!valid_dynamic_tag(tag)) return false;
    if (tag == 0) ended = true;
    strtab |= tag == 5;
    strsz |= tag == 10;
  }
  return ended && strtab && strsz;
}

}  // namespace

SectionExtents::SectionExtents(std::string_view table, std::uint64_t table_at, std::uint64_t size) {
  // The table is no section's, and as much the object's bytes as theirs: counted a gap, the few
  // KB at the end a window measures the ratio by read as 14% denser than they are.
  if (table_at < size) extents_.emplace_back(table_at, std::min(size, table_at + table.size()));
  for (std::size_t k = 64; k + 64 <= table.size(); k += 64) {
    const auto* e = bytes_of(table) + k;
    const std::uint64_t offset = u64(e + 0x18), bytes = u64(e + 0x20);
    // SHT_NOBITS holds no bytes of the file; one past the object's end is not what it holds.
    if (u32(e + 4) == 8 || bytes == 0 || offset >= size || bytes > size - offset) continue;
    extents_.emplace_back(offset, offset + bytes);
  }
  std::sort(extents_.begin(), extents_.end());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> merged;
  for (const auto& e : extents_) {
    if (!merged.empty() && e.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, e.second);
    else
      merged.push_back(e);
  }
  extents_ = std::move(merged);
}

std::uint64_t SectionExtents::content(std::uint64_t first, std::uint64_t last) const {
  std::uint64_t in = 0;
  for (const auto& [a, b] : extents_)
    if (b > first && a < last) in += std::min(b, last) - std::max(a, first);
  return in;
}

std::uint64_t SectionExtents::measure(std::uint64_t raw) const {
  const std::uint64_t in = content(0, raw);
  return in + (raw - in) / 256;
}

// A member whose reading spent its budget (crafted block headers that each decode for long, a
// stream that never proves a boundary): named, never read on and on.
r::Error over_budget(const std::string& label, const zip::Entry& m, const InflateBudget& b) {
  if (b.out_of_time())
    return r::Error(fmt::format("{}: {}: reading its deflate stream took over {:.0f} s, its budget; not planned from",
                                label, m.name, b.seconds()));
  return r::Error(
      fmt::format("{}: {}: reading its deflate stream inflated over {} bytes, its budget for a member of {} "
                  "bytes; not planned from",
                  label, m.name, b.bytes(), m.size));
}

// A member whose deflate stream holds more than its entry says (a megabyte of it can inflate to a
// gigabyte): what it holds past that is not what will be installed.
r::Error inflates_past_size(const std::string& label, const zip::Entry& m) {
  return r::Error(fmt::format("{}: {} inflates to more than the {} bytes its entry says", label, m.name, m.size));
}

namespace {

// The segment found mid-stream by what it reads as, over a decode's pieces as they stream. The
// segment read 16 bytes late still reads as one when zeros follow it (an unrelocated GOT): of
// the matches, the one with the most entries before DT_NULL is the segment. Bytes the two
// decodes disagree on came from before the window; they are taken as the zeros they almost
// always are (runs of zeros copied from runs of zeros) and the segment is checked against the
// object's known first bytes afterwards (consistent_with).
class SegmentScan {
 public:
  explicit SegmentScan(std::size_t dyn_size) : dyn_size_(dyn_size) {}
  void operator()(std::string_view a, std::string_view b) {
    if (a.empty()) *this = SegmentScan(dyn_size_);  // a new decode
    // Fewer than four entries (DT_NEEDED or DT_SONAME, DT_STRTAB, DT_STRSZ, DT_NULL) read as no
    // segment; a PT_DYNAMIC under 8 bytes would have the first tag read past the piece.
    if (dyn_size_ < 64) return;
    for (std::size_t at = 0; at + dyn_size_ <= a.size(); ++at) {
      if (u64(bytes_of(a) + at) != 1 && u64(bytes_of(a) + at) != 14) continue;  // DT_NEEDED or DT_SONAME first
      if (!reads_as_dynamic(bytes_of(a) + at, dyn_size_)) continue;
      std::size_t unknown = 0;
      for (std::size_t k = 0; k < dyn_size_; ++k) unknown += a[at + k] != b[at + k] ? 1 : 0;
      std::size_t entries = 0;
      while (entries * 16 < dyn_size_ && u64(bytes_of(a) + at + entries * 16) != 0) ++entries;
      const std::string_view candidate = a.substr(at, dyn_size_);
      const bool better = !found_ || entries > entries_ || (entries == entries_ && unknown < unknown_);
      if (found_ && entries == entries_ && unknown == unknown_ && *found_ != candidate) ambiguous_ = true;
      if (better) {
        found_ = std::string(candidate);
        entries_ = entries;
        unknown_ = unknown;
        ambiguous_ = false;
      }
    }
  }
  // The one segment the decode read as, if one is better than any other.
  [[nodiscard]] std::optional<std::string> segment() const { return ambiguous_ ? std::nullopt : found_; }

 private:
  std::size_t dyn_size_;
  std::optional<std::string> found_;
  std::size_t entries_ = 0, unknown_ = 0;
  bool ambiguous_ = false;
};

// The segment `at` bytes into a decode of the window at the member's end (`zeros` and `ones`,
// against either dictionary), where it reads as one, else nullopt. Known only where both decodes
// agree: bytes copied from before the window differ. By HTTP (mid_stream) they are taken as the
// zeros they almost always are: runs of zeros in .dynamic copied from runs of zeros before the
// window (a 32 KiB window at a Debian library's end knows a fifth of its 600 bytes), and the
// segment checked against what is known of the object exactly (consistent_with).
std::optional<std::string> segment_from(const std::string& zeros, const std::string& ones, std::size_t at,
                                        std::size_t dyn_size, bool mid_stream) {
  if (at > zeros.size() || dyn_size > zeros.size() - at) return std::nullopt;
  if (!mid_stream && zeros.compare(at, dyn_size, ones, at, dyn_size) != 0) return std::nullopt;
  std::string dyn = zeros.substr(at, dyn_size);
  if (!reads_as_dynamic(bytes_of(dyn), dyn_size)) return std::nullopt;
  return dyn;
}

// What a decode of the window at a member's end keeps: its bytes from the section header table or
// the segment on, whichever comes first, up to this many (past them, the zeros and code a window
// at an NVIDIA object's end inflates to are not held; a segment further back is decoded again).
constexpr std::uint64_t k_kept_at_end = std::uint64_t{256} << 10;

}  // namespace

std::optional<std::uint64_t> symbol_table_at(const std::string& dyn, const r::ElfLayout& l) {
  std::optional<std::uint64_t> symtab;  // the last entry, as the loader takes it
  for (std::size_t at = 0; at + 16 <= dyn.size(); at += 16)
    if (u64(bytes_of(dyn) + at) == 6) symtab = u64(bytes_of(dyn) + at + 8);
  return symtab ? l.file_offset(*symtab) : std::nullopt;
}

std::optional<std::pair<std::string, std::string>> end_bytes_at(const std::string& window, std::uint64_t bit,
                                                                std::uint64_t base, std::uint64_t kept_at,
                                                                const std::string& zeros, const std::string& ones,
                                                                std::uint64_t first, std::uint64_t len,
                                                                std::uint64_t& inflated, InflateBudget* budget) {
  if (first < base) return std::nullopt;
  if (first < kept_at) return decode_both(window, bit, first - base, len, inflated, budget);
  const std::uint64_t at = first - kept_at;
  if (at > zeros.size() || len > zeros.size() - at || zeros.size() != ones.size()) return std::nullopt;
  return std::pair{zeros.substr(at, len), ones.substr(at, len)};
}

// The dynamic segment in a window of compressed bytes: inflated from each plausible block
// boundary in turn. A window that ends with the member places what it inflates exactly (from
// the end back), the segment included; elsewhere the segment is found by what it reads as.
WindowFind dynamic_in_window(const std::string& window, std::size_t dyn_size, bool ends_member,
                             std::uint64_t member_size, std::uint64_t dyn_offset, bool mid_stream,
                             InflateBudget* budget, std::uint64_t keep_from) {
  WindowFind out;
  SegmentScan scan(dyn_size);
  WindowKeep keep;
  if (ends_member) {
    keep.suffix = std::min(member_size - std::min({dyn_offset, keep_from, member_size - 1}), k_kept_at_end);
  } else {
    keep.prefix = 0;
    keep.overlap = dyn_size > 0 ? dyn_size - 1 : 0;
    if (mid_stream) keep.scan = [&](std::uint64_t, std::string_view a, std::string_view b) { scan(a, b); };
  }
  const auto take = [&](WindowDecode& w) {
    // A decode from a true block boundary: it inflated the rest of the window without an error
    // (a false start ends early or fails). A later boundary decodes a suffix of the same stream
    // and knows less of it, so where this one does not place the segment, none will.
    const bool genuine = w.size >= window.size() / 2;
    // A stream that ends inside the window is not the member's; in a window that ends with the
    // member, the member's stream ends exactly there. Either is a start in planted bytes.
    if (w.ended_early || (ends_member && !w.ended)) return false;
    if (!ends_member) {
      if (!mid_stream) return genuine;  // a place told by what the bytes read as is not exact
      out.dyn = scan.segment();
      if (!out.dyn && genuine) {
        out.probe_at = w.bit / 8;
        out.probe_compressed = window.size() - out.probe_at;
        out.probe_raw = w.size;
      }
      return out.dyn || genuine;
    }
    // The member's stream holds more than it declares: counted back from its end, every place
    // would be off by what it holds past its size (install refuses the member).
    if (w.size > member_size) {
      out.overrun = true;
      return true;
    }
    const std::uint64_t base = member_size - w.size, kept_at = base + w.first;
    std::optional<std::string> dyn;
    if (auto both =
            end_bytes_at(window, w.bit, base, kept_at, w.zeros, w.ones, dyn_offset, dyn_size, out.inflated, budget))
      dyn = segment_from(both->first, both->second, 0, dyn_size, mid_stream);
    // The kept bytes known exactly (past the last byte the two decodes disagree on), for the
    // strings at the object's end, and an anchor of the deflate ratio.
    if (dyn || (genuine && !out.start)) {
      out.end_agreed = w.zeros.size();
      while (out.end_agreed > 0 && w.zeros[out.end_agreed - 1] == w.ones[out.end_agreed - 1]) --out.end_agreed;
      out.start = Anchor{w.bit / 8, base};
      out.start_bit = w.bit;
      out.end_zeros = std::move(w.zeros);
      out.end_ones = std::move(w.ones);
      out.end_base = kept_at;
    }
    if (!dyn) return genuine;
    out.dyn = std::move(dyn);
    return true;
  };
  // Mid-stream, a start is proved by two whole blocks: the segment it decodes is proved by what
  // it reads as and, later, by consistent_with (three would take a window three blocks past the
  // segment's: 80 KB past Python 3.11's estimate). Two read the same bytes as one on every bench
  // layout and make a chance start in honest bytes rarer. Against crafted bytes no count proves a
  // start (a planted block and an empty one pass two, as a planted segment passes the checks):
  // apply reads the downloaded wheel whole and refuses a plan whose objects it contradicts.
  const int enough = !ends_member && mid_stream ? 2 : 3;
  out.inflated += decode_from_boundaries(window, 12, take, budget, ends_member, enough, keep);
  return out;
}

// The strings the dynamic segment names, as file offsets: [begin, end) of DT_STRTAB to read;
// nullopt where no PT_LOAD maps DT_STRTAB or the table runs out of the object (`size` bytes).
std::optional<std::pair<std::uint64_t, std::uint64_t>> strings_needed(const std::string& dyn, const r::ElfLayout& l,
                                                                      std::uint64_t size) {
  std::uint64_t strtab = 0, strsz = 0, last = 0;
  bool any = false;
  for (std::size_t at = 0; at + 16 <= dyn.size(); at += 16) {
    const std::uint64_t tag = u64(bytes_of(dyn) + at), val = u64(bytes_of(dyn) + at + 8);
    if (tag == 5) strtab = val;
    if (tag == 10) strsz = val;
    if (tag == 1 || tag == 14 || tag == 15 || tag == 29) {
      last = std::max(last, val);
      any = true;
    }
  }
  const auto begin = l.file_offset(strtab);
  if (!begin || *begin > size) return std::nullopt;
  const std::uint64_t reach = last < UINT64_MAX - 4096 ? last + 4096 : UINT64_MAX;
  const std::uint64_t length = strsz <= 64 * 1024 || !any ? strsz : std::min(strsz, reach);
  if (length > size - *begin) return std::nullopt;
  return std::pair{*begin, *begin + length};
}

// A window that ends with the member, inflated from its first block boundary to the end: of
// `ranges` ([first, last) of the object), each that the decode reaches and both dictionaries
// agree on, at its place in the file.
std::vector<std::pair<std::uint64_t, std::string>> inflate_to_end(
    const std::string& window, std::uint64_t member_size,
    const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges, std::uint64_t& inflated, InflateBudget* budget,
    bool& overrun) {
  std::vector<std::pair<std::uint64_t, std::string>> out;
  WindowKeep keep;
  keep.prefix = 0;  // the ranges decoded again once the decode's length places them
  const auto take = [&](WindowDecode& w) {
    if (w.ended_early) return false;                      // a stream planted in the window: not the member's
    if (w.ended && w.size > member_size) overrun = true;  // more than it declares
    // A true boundary's decode that does not reach the stream's end: no later one will.
    if (!w.ended || w.size > member_size) return w.size >= window.size() / 2;
    // A range the window starts too late for, or whose bytes depend on those before it: not read.
    const std::uint64_t base = member_size - w.size;
    for (const auto& [from, to] : ranges) {
      if (from < base || from >= to || to > member_size) continue;
      auto both = decode_both(window, w.bit, from - base, to - from, inflated, budget);
      if (both && both->first == both->second) out.emplace_back(from, std::move(both->first));
    }
    return true;
  };
  inflated += decode_from_boundaries(window, 12, take, budget, true, 3, keep);
  return out;
}

// An object whose first bytes do not say where its segment lies (its headers lie deep, it is no
// little-endian ELF64, its PT_DYNAMIC is large), read by resolver/elf from pieces: each range it
// finds missing is inflated from the start and the object read again, the strings one range a
// round at most.
r::ElfRead read_from_start(const std::string& head, FromStart& stream, std::uint64_t size, const std::string& name) {
  Pieces known{size, {{0, head}}};
  for (int round = 0; round < 256; ++round) {
    const auto missing = r::missing_piece(known.view(), name);
    if (!missing) break;
    auto got = stream.bytes(missing->first, missing->second);
    if (!got) break;  // the data end before it: invalid, as the reader says
    known.v.emplace_back(missing->first, std::move(*got));
  }
  return r::read_elf_pieces(known.view(), name);
}

// Whether a dynamic segment found mid-stream agrees with what is known of the object exactly
// (its first bytes, a window inflated to its end): the string table starts with NUL where DT_STRTAB says, every name it
// gives starts a string there, SONAME and NEEDED name shared objects, and DT_SYMTAB's first symbol is the null one. A
// misread byte of an address or an offset fails one of these. `by_fingerprint`: the names were
// found by a window in .dynstr (installer/wheel/strings_window), without the table's first byte,
// which is then checked where known: the fingerprint checked the same of the names (a NUL
// before each, known, printable, NUL-terminated, ".so" in NEEDED and SONAME) at every offset the
// segment gives, their differences exact, at the one place in the window where all of them fit.
bool consistent_with(const std::string& dyn, const r::ElfLayout& l, const r::ElfPieces& known, bool by_fingerprint) {
  std::uint64_t strtab = 0, strsz = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> names;  // tag, offset
  for (std::size_t at = 0; at + 16 <= dyn.size(); at += 16) {
    const std::uint64_t tag = u64(bytes_of(dyn) + at), val = u64(bytes_of(dyn) + at + 8);
    if (tag == 5) strtab = val;
    if (tag == 10) strsz = val;
    if (tag == 1 || tag == 14 || tag == 15 || tag == 29) names.emplace_back(tag, val);
  }
  const auto str = l.file_offset(strtab);
  if (!str || strsz == 0 || strsz > known.size || *str > known.size - strsz) return false;
  const char* first = known.bytes(*str, 1);
  if (first ? *first != '\0' : !by_fingerprint) return false;
  for (const auto& [tag, off] : names) {
    if (off == 0 || off >= strsz) return false;
    const char* before = known.bytes(*str + off - 1, 1);
    if (!before || *before != '\0') return false;  // not the start of a string
    std::string name;
    for (std::uint64_t k = off; k < strsz; ++k) {
      const char* c = known.bytes(*str + k, 1);
      if (!c) return false;
      if (*c == '\0') break;
      name += *c;
    }
    if (name.empty() || std::any_of(name.begin(), name.end(), [](char c) { return c < 0x20 || c == 0x7f; }))
      return false;
    if ((tag == 1 || tag == 14) && name.find(".so") == std::string::npos) return false;
  }
  if (const auto sym = symbol_table_at(dyn, l))
    if (const char* null_symbol = known.bytes(*sym, 24))
      return std::all_of(null_symbol, null_symbol + 24, [](char c) { return c == '\0'; });
  return true;
}

}  // namespace cudafix::installer::segment_find
