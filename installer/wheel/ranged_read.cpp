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
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/elf/elf_pieces.hpp"

namespace cudafix::installer {
namespace r = cudafix::resolver;

namespace {

constexpr std::size_t k_local_slack = 1024;       // a local header's extra field beyond the central one's
constexpr std::uint64_t k_max_dynamic = 1 << 20;  // a larger PT_DYNAMIC is read from the object's start
constexpr std::uint64_t k_piece = 2 << 20;        // a map of a stream decodes pieces of this many bytes at once

std::uint32_t u32(const unsigned char* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (std::uint32_t{p[3]} << 24); }
std::uint64_t u64(const unsigned char* p) { return u32(p) | (std::uint64_t{u32(p + 4)} << 32); }
const unsigned char* bytes_of(const std::string& s) { return reinterpret_cast<const unsigned char*>(s.data()); }

// Where a member's data starts, from the fetched bytes that begin at its local header (which
// must agree with the central directory).
std::uint64_t data_start(const zip::Entry& m, const std::string& from_header, const std::string& label) {
  return zip::parse_local_header(bytes_of(from_header), from_header.size(), m, label);
}

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

// What reading one member may cost: inflating it from its start, a few times over (a map of its
// stream, its windows, from the start where they fail), and the time that takes at a slow
// 64 MiB/s, plus a floor for small members; a wheel's members together have ten minutes.
std::unique_ptr<InflateBudget> member_budget(std::uint64_t size, InflateBudget* wheel) {
  const std::uint64_t seconds = 60 + size / (std::uint64_t{64} << 20);
  return std::make_unique<InflateBudget>(4 * size + (std::uint64_t{512} << 20), std::chrono::seconds(seconds), wheel);
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

// Why resolver/elf refused a member, named by the wheel's URL and the member's name.
r::Error not_valid_elf(const std::string& label, const std::string& member, const r::Diagnostic& d) {
  const std::string at = d.offset ? fmt::format(" (at offset {:#x})", *d.offset) : "";
  return r::Error(fmt::format("{}: {} is not a valid ELF object{}: {}", label, member, at, d.message));
}

// A member whose deflate stream holds more than its entry says (a megabyte of it can inflate to a
// gigabyte): what it holds past that is not what will be installed.
r::Error inflates_past_size(const std::string& label, const zip::Entry& m) {
  return r::Error(fmt::format("{}: {} inflates to more than the {} bytes its entry says", label, m.name, m.size));
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

// The dynamic segment in a window of compressed bytes, inflated from each plausible block
// boundary in turn: nullopt where no start gives it, known whole and unambiguous.
// Pieces of an object, each where it lies in the file: what is known of it so far.
struct Pieces {
  std::uint64_t size = 0;  // the object's
  std::vector<std::pair<std::uint64_t, std::string>> v;
  // Views of them for resolver/elf, valid until `v` changes.
  [[nodiscard]] r::ElfPieces view() const {
    r::ElfPieces out{size, {}};
    for (const auto& [at, bytes] : v) out.pieces.emplace_back(at, bytes);
    return out;
  }
  // The `len` bytes at `off`, or nullptr where no one piece holds them all.
  [[nodiscard]] const char* span(std::uint64_t off, std::uint64_t len) const { return view().bytes(off, len); }
};

struct WindowFind {
  std::optional<std::string> dyn;
  std::uint64_t inflated = 0;
  // A window inflated to the member's end: its bytes, at their place in the file.
  std::optional<std::pair<std::uint64_t, std::string>> tail;
  // A decode that ended exactly with the member inflated more than the member declares.
  bool overrun = false;
};

// The dynamic segment in a window of compressed bytes: inflated from each plausible block
// boundary in turn. A window that ends with the member places what it inflates exactly (from
// the end back), the segment included; elsewhere the segment is found by what it reads as.
WindowFind dynamic_in_window(const std::string& window, std::size_t dyn_size, bool ends_member,
                             std::uint64_t member_size, std::uint64_t dyn_offset, bool mid_stream,
                             InflateBudget* budget) {
  WindowFind out;
  const auto take = [&](const WindowDecode& w) {
    const std::string& a = w.zeros;
    const std::string& b = w.ones;
    const std::size_t len = std::min(a.size(), b.size());
    // A decode from a true block boundary: it inflated the rest of the window without an error
    // (a false start ends early or fails). A later boundary decodes a suffix of the same stream
    // and knows less of it, so where this one does not place the segment, none will.
    const bool genuine = a.size() >= window.size() / 2;
    // A stream that ends inside the window is not the member's; in a window that ends with the
    // member, the member's stream ends exactly there. Either is a start in planted bytes.
    if (w.ended_early || (ends_member && !w.ended)) return false;
    // The member's stream holds more than it declares: counted back from its end, every place
    // would be off by what it holds past its size (install refuses the member).
    if (ends_member && w.ended && a.size() > member_size) {
      out.overrun = true;
      return true;
    }
    if (ends_member && w.ended && a.size() == b.size()) {
      const std::uint64_t base = member_size - a.size();
      if (dyn_offset < base || dyn_offset + dyn_size > member_size) return genuine;
      // Known only where both decodes agree: bytes copied from before the window differ.
      if (a.compare(dyn_offset - base, dyn_size, b, dyn_offset - base, dyn_size) != 0) return genuine;
      std::string dyn = a.substr(dyn_offset - base, dyn_size);
      if (!reads_as_dynamic(bytes_of(dyn), dyn_size)) return genuine;
      out.dyn = std::move(dyn);
      // The tail known exactly: from past the last byte the two decodes disagree on.
      std::size_t agreed = a.size();
      while (agreed > 0 && a[agreed - 1] == b[agreed - 1]) --agreed;
      out.tail = std::pair{base + agreed, a.substr(agreed)};
      return true;
    }
    if (!mid_stream) return genuine;  // a place told by what the bytes read as is not exact
    // The segment read 16 bytes late still reads as one when zeros follow it (an unrelocated
    // GOT): of the matches, the one with the most entries before DT_NULL is the segment. Bytes
    // the two decodes disagree on came from before the window; they are taken as the zeros
    // they almost always are (runs of zeros copied from runs of zeros) and the segment is
    // checked against the object's known first bytes afterwards (consistent_with_head).
    std::optional<std::string> found;
    std::size_t found_entries = 0, found_unknown = 0;
    bool ambiguous = false;
    for (std::size_t at = 0; at + dyn_size <= len; ++at) {
      if (u64(bytes_of(a) + at) != 1 && u64(bytes_of(a) + at) != 14) continue;  // DT_NEEDED or DT_SONAME first
      if (!reads_as_dynamic(bytes_of(a) + at, dyn_size)) continue;
      std::size_t unknown = 0;
      for (std::size_t k = 0; k < dyn_size; ++k) unknown += a[at + k] != b[at + k] ? 1 : 0;
      std::size_t entries = 0;
      while (entries * 16 < dyn_size && u64(bytes_of(a) + at + entries * 16) != 0) ++entries;
      std::string candidate = a.substr(at, dyn_size);
      const bool better = !found || entries > found_entries || (entries == found_entries && unknown < found_unknown);
      if (found && entries == found_entries && unknown == found_unknown && *found != candidate) ambiguous = true;
      if (better) {
        found = std::move(candidate);
        found_entries = entries;
        found_unknown = unknown;
        ambiguous = false;
      }
    }
    if (!found || ambiguous) return genuine;
    out.dyn = std::move(found);
    return true;
  };
  out.inflated = decode_from_boundaries(window, 12, take, budget);
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

// A window that ends with the member, inflated from its first block boundary to the end: its
// bytes at their place in the file, those only the two decodes agree on, or nullopt.
std::optional<std::pair<std::uint64_t, std::string>> inflate_to_end(const std::string& window,
                                                                    std::uint64_t member_size, std::uint64_t from,
                                                                    std::uint64_t to, std::uint64_t& inflated,
                                                                    InflateBudget* budget, bool& overrun) {
  std::optional<std::pair<std::uint64_t, std::string>> out;
  const auto take = [&](const WindowDecode& w) {
    if (w.ended_early) return false;                              // a stream planted in the window: not the member's
    if (w.ended && w.zeros.size() > member_size) overrun = true;  // more than it declares
    // A true boundary's decode that does not reach the stream's end: no later one will.
    if (!w.ended || w.zeros.size() > member_size) return w.zeros.size() >= window.size() / 2;
    const std::uint64_t base = member_size - w.zeros.size();
    // The window starts too late, or the strings depend on bytes before it: no reading.
    if (from >= base && to <= member_size &&
        w.zeros.compare(from - base, to - from, w.ones, from - base, to - from) == 0)
      out = std::pair{base, w.zeros};
    return true;
  };
  inflated += decode_from_boundaries(window, 12, take, budget);
  return out;
}

// Bytes [first, last] of the wheel for each range (ReadRanges, each range checked first).
using Fetch = std::function<std::vector<std::string>(const std::vector<std::pair<std::uint64_t, std::uint64_t>>&)>;

constexpr std::uint64_t k_keep = std::uint64_t{16} << 20;      // inflating from the start keeps the last this many
constexpr std::uint64_t k_max_kept = std::uint64_t{64} << 20;  // the most read of one member from its start

// A member inflated from its start for the ranges planning reads of it (its dynamic segment, the
// strings it names, headers that lie deep): only the last k_keep bytes stay in memory as the
// stream passes (3 MB of deflate data may declare 3 GB, and keeping all it inflated held 4.5 GB),
// a range that fell out of them is inflated again from the start under the member's budget, and
// what is asked of it in all is at most k_max_kept. The compressed bytes are fetched a chunk at a
// time.
class FromStart {
 public:
  FromStart(const zip::Entry& m, const Fetch& fetch, std::uint64_t chunk, InflateBudget* budget,
            const std::string& label)
      : m_(m), fetch_(fetch), chunk_(chunk), budget_(budget), label_(label) {}
  // The `len` bytes at `off` of the member; nullopt where its data end before them. Throws
  // where it inflates past its declared size, its data are damaged, its budget is spent or more
  // than k_max_kept is asked of it.
  std::optional<std::string> bytes(std::uint64_t off, std::uint64_t len) {
    if (off > m_.size || len > m_.size - off) return std::nullopt;
    asked_ += len;
    if (asked_ > k_max_kept)
      throw r::Error(fmt::format("{}: {}: planning would read over {} bytes of it from its start; not planned from",
                                 label_, m_.name, k_max_kept));
    if (len == 0) return std::string();
    if (m_.method == 0) return fetch_({{m_.data_offset + off, m_.data_offset + off + len - 1}}).front();
    if (!z_ || off < base_) restart();
    advance(off + len, off);
    if (base_ + z_->out.size() < off + len) return std::nullopt;
    return z_->out.substr(off - base_, len);
  }
  std::uint64_t inflated = 0;  // in all, restarts included

 private:
  void restart() {
    z_ = std::make_unique<Inflater>(-1, budget_);
    in_.clear();
    in_at_ = 0;
    fetched_ = 0;
    base_ = 0;
  }
  // Inflates until the bytes before `to` are at hand or the data end, keeping those from `keep`.
  void advance(std::uint64_t to, std::uint64_t keep) {
    while (base_ + z_->out.size() < to && !z_->ended) {
      if (in_at_ == in_.size()) {
        if (fetched_ >= m_.compressed) return;
        const std::uint64_t take = std::min(chunk_, m_.compressed - fetched_);
        in_ = fetch_({{m_.data_offset + fetched_, m_.data_offset + fetched_ + take - 1}}).front();
        fetched_ += take;
        in_at_ = 0;
      }
      const std::uint64_t before = z_->produced;
      const auto* in = reinterpret_cast<const unsigned char*>(in_.data()) + in_at_;
      const bool fed = z_->feed(in, in_.size() - in_at_, z_->out.size() + (std::size_t{1} << 20));
      in_at_ = in_.size() - z_->unread();
      inflated += z_->produced - before;
      if (z_->over_budget) throw over_budget(label_, m_, *budget_);
      if (!fed) throw r::Error(fmt::format("{}: {}'s deflate data is damaged", label_, m_.name));
      if (base_ + z_->out.size() > m_.size) throw inflates_past_size(label_, m_);
      // Dropped a window's worth at a time: each byte is moved once at most.
      if (z_->out.size() > 2 * k_keep) {
        const std::uint64_t drop = std::min<std::uint64_t>(z_->out.size() - k_keep, keep > base_ ? keep - base_ : 0);
        z_->out.erase(0, drop);
        base_ += drop;
      }
    }
  }
  const zip::Entry& m_;
  const Fetch& fetch_;
  std::uint64_t chunk_;
  InflateBudget* budget_;
  const std::string& label_;
  std::unique_ptr<Inflater> z_;
  std::string in_;             // the compressed chunk being inflated
  std::size_t in_at_ = 0;      // its bytes inflated so far
  std::uint64_t fetched_ = 0;  // compressed bytes fetched
  std::uint64_t base_ = 0;     // where z_->out starts in the member
  std::uint64_t asked_ = 0;
};

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
// misread byte of an address or an offset fails one of these.
bool consistent_with(const std::string& dyn, const r::ElfLayout& l, const r::ElfPieces& known) {
  std::uint64_t strtab = 0, strsz = 0, symtab = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> names;  // tag, offset
  for (std::size_t at = 0; at + 16 <= dyn.size(); at += 16) {
    const std::uint64_t tag = u64(bytes_of(dyn) + at), val = u64(bytes_of(dyn) + at + 8);
    if (tag == 5) strtab = val;
    if (tag == 10) strsz = val;
    if (tag == 6) symtab = val;
    if (tag == 1 || tag == 14 || tag == 15 || tag == 29) names.emplace_back(tag, val);
  }
  const auto str = l.file_offset(strtab);
  if (!str || strsz == 0 || strsz > known.size || *str > known.size - strsz) return false;
  const char* first = known.bytes(*str, 1);
  if (!first || *first != '\0') return false;
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
  if (const auto sym = l.file_offset(symtab))
    if (const char* null_symbol = known.bytes(*sym, 24))
      return std::all_of(null_symbol, null_symbol + 24, [](char c) { return c == '\0'; });
  return true;
}

}  // namespace

RangedMembers read_members_by_ranges(const ReadRanges& read, std::uint64_t file_size, std::vector<zip::Entry> members,
                                     const std::string& dist_info, const std::string& label, const RangeLimits& limits,
                                     InvalidElf invalid, std::string_view whole) {
  const std::uint64_t k_whole_member = limits.whole_member, k_head = limits.head, k_window = limits.window,
                      k_chunk = limits.chunk;
  RangedMembers out;
  const Fetch fetch = [&](const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges) {
    for (const auto& [first, last] : ranges)
      // A range computed from the wheel's own offsets that ends before it starts: they lie.
      if (first > last)
        throw r::Error(fmt::format("{}: its zip structures name bytes {}-{}, past its end", label, first, last));
    auto got = read(ranges);
    for (const auto& bytes : got) out.read += bytes.size();
    return got;
  };
  // Each one's data_offset is set once its local header is read.
  std::vector<zip::Entry> wanted = std::move(members);
  // Read whole: METADATA, RECORD (up to zip::k_max_metadata), and objects small both ways: a
  // megabyte of deflate data can declare a gigabyte, which is read as a large object is.
  const auto whole_one = [&](const zip::Entry& m) {
    const bool dist = m.name == dist_info + "/METADATA" || m.name == dist_info + "/RECORD";
    return m.compressed <= k_whole_member && m.size <= (dist ? zip::k_max_metadata : k_whole_member * 16);
  };
  // Each wanted member's local header with its data (small ones) or its first bytes (objects).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const zip::Entry& m : wanted) {
    const std::uint64_t length = whole_one(m) ? m.compressed : k_head;
    ranges.emplace_back(m.local_offset,
                        std::min(file_size - 1, m.local_offset + 30 + m.raw_name.size() + k_local_slack + length));
  }
  auto heads = fetch(ranges);
  struct Deep {
    zip::Entry* member;
    r::ElfLayout layout;  // dynamic_size 0: read from its start, whole
    std::string head;     // its first bytes, inflated
    std::unique_ptr<InflateBudget> budget;
  };
  InflateBudget wheel_budget(UINT64_MAX, std::chrono::minutes(10));
  std::vector<Deep> deep;
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    zip::Entry& m = wanted[i];
    // A local header whose name and extra field are longer than the slack allowed for (the
    // extra field is the local header's own, up to 64 KiB): the rest fetched.
    if (heads[i].size() >= 30) {
      const auto* h = bytes_of(heads[i]);
      const std::uint64_t data_at = m.local_offset + 30 + (h[26] | (h[27] << 8)) + (h[28] | (h[29] << 8));
      const std::uint64_t wanted_end =
          std::min(file_size, data_at + (whole_one(m) ? m.compressed : std::min(m.compressed, k_head)));
      if (m.local_offset + heads[i].size() < wanted_end)
        heads[i] += fetch({{m.local_offset + heads[i].size(), wanted_end - 1}}).front();
    }
    m.data_offset = data_start(m, heads[i], label);
    const std::string compressed =
        heads[i].substr(std::min<std::size_t>(heads[i].size(), m.data_offset - m.local_offset));
    std::string inflated;
    if (m.method == 0) {
      inflated = compressed.substr(0, std::min<std::uint64_t>(m.size, compressed.size()));
    } else {
      Inflater z;
      // A whole one up to a byte past its size: one that holds more is not what install takes.
      const bool fed = z.feed(bytes_of(compressed), compressed.size(), whole_one(m) ? m.size + 1 : k_head * 4);
      out.inflated += z.produced;
      if (!fed) throw r::Error(fmt::format("{}: {}'s deflate data is damaged", label, m.name));
      if (z.out.size() > m.size) throw inflates_past_size(label, m);
      inflated = std::move(z.out);
    }
    if (whole_one(m)) {
      ++out.members_whole;
      if (m.name == dist_info + "/METADATA") {
        out.metadata = std::move(inflated);
      } else if (m.name == dist_info + "/RECORD") {
        out.record = std::move(inflated);
      } else {
        keep_elf(out, m.name, r::read_elf_memory(inflated.data(), inflated.size(), label + ":" + m.name), label,
                 invalid);
      }
      continue;
    }
    const Layout layout = layout_of(inflated, m.size, label, m.name, invalid);
    if (layout.kind != Layout::Kind::not_elf)
      deep.push_back({&m, layout.elf, std::move(inflated), member_budget(m.size, &wheel_budget)});
  }

  // The dynamic segments: a window of each where the segment should lie, all fetched at once;
  // a wider one where the first did not hold it.
  std::vector<WindowFind> dynamic(deep.size());
  for (const int pass : {1, 2}) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> windows;
    std::vector<std::size_t> window_of;
    for (std::size_t i = 0; i < deep.size(); ++i) {
      const Deep& d = deep[i];
      const zip::Entry& m = *d.member;
      if (m.method != 8 || d.layout.dynamic_size == 0 || dynamic[i].dyn) continue;
      // The headers' bytes reach the segment already (a small object, or one whose data follow it).
      if (d.head.size() >= d.layout.dynamic_offset + d.layout.dynamic_size) continue;
      const std::uint64_t end = m.data_offset + m.compressed;
      const std::uint64_t after = m.size - d.layout.dynamic_offset;  // bytes from the segment to the end
      std::uint64_t first = 0, last = end - 1;
      if (after <= 4 * k_window) {
        // Near the end (CUDA libraries: .data is small): what follows the segment deflates to
        // at most about its own size, so a window that ends with the member and reaches that
        // far back holds it; first a short one, as .data, .got and the tables after them deflate
        // well (cuDNN 9.19's engines_precompiled: 2.2 MB after its segment, 115 KB deflated).
        const std::uint64_t reach = pass == 1 ? k_window / 4 : after + after / 1000 + k_window / 4;
        first = end > reach ? std::max(m.data_offset, end - reach) : m.data_offset;
      } else if (!limits.mid_stream) {
        // Only exact places: a window that ends with the member, where the segment lies in its
        // second half and inflating from there to the end, twice, costs less than from the start
        // (by a map of the stream, on every core, where the whole file is at hand).
        const std::uint64_t from_start =
            whole.empty() ? d.layout.dynamic_offset : d.layout.dynamic_offset / r::thread_count(0);
        if (pass == 1 || 2 * after >= from_start) continue;
        const std::uint64_t reach = after + after / 1000 + k_window / 4;
        first = end > reach ? std::max(m.data_offset, end - reach) : m.data_offset;
      } else {
        // Elsewhere: where the segment would fall were the member evenly packed; first a window
        // around that place (the estimate misses both ways: cuDNN 9.19's heuristic library by
        // 104 KB late), then a wider one mostly before it (a block boundary must come first),
        // wider with the member (its runtime_compiled library, 16 MB deflated: 2.3 MB early,
        // where .lrodata after the segment deflates to 0.88 and the code before it to 0.42).
        const std::uint64_t window =
            pass == 1 ? k_window / 2 : std::clamp<std::uint64_t>(m.compressed / 4, 2 * k_window, 8 * k_window);
        const double at = static_cast<double>(d.layout.dynamic_offset) / static_cast<double>(m.size);
        const auto estimate = m.data_offset + static_cast<std::uint64_t>(at * static_cast<double>(m.compressed));
        const std::uint64_t lead = pass == 1 ? window / 2 : 3 * window / 4;
        first = std::max(m.data_offset, estimate > lead ? estimate - lead : 0);
        last = std::min(end - 1, first + window - 1);
      }
      windows.emplace_back(first, last);
      window_of.push_back(i);
    }
    if (windows.empty()) break;
    const auto window_bytes = fetch(windows);
    r::parallel_for(window_of.size(), 0, [&](std::size_t k) {
      const Deep& d = deep[window_of[k]];
      const bool ends_member = windows[k].second + 1 == d.member->data_offset + d.member->compressed;
      dynamic[window_of[k]] = dynamic_in_window(window_bytes[k], d.layout.dynamic_size, ends_member, d.member->size,
                                                d.layout.dynamic_offset, limits.mid_stream, d.budget.get());
    });
  }
  for (std::size_t i = 0; i < deep.size(); ++i) {
    out.inflated += dynamic[i].inflated;
    if (dynamic[i].overrun) throw inflates_past_size(label, *deep[i].member);
  }
  for (std::size_t i = 0; i < deep.size(); ++i) {
    Deep& d = deep[i];
    zip::Entry& m = *d.member;
    if (d.budget->spent()) throw over_budget(label, m, *d.budget);
    // A map of the stream has a share of the member's budget: where it runs out (no boundary
    // proved in crafted bytes), the member is inflated from its start with what is left.
    InflateBudget map_budget(2 * m.size + (std::uint64_t{128} << 20), std::chrono::hours(24), d.budget.get());
    // Where the whole file is at hand: `len` bytes from `first` on, decoded from the last proved
    // block boundary before them (or one of the few before that, where the bytes depend on what
    // precedes it); nullopt: inflated from the start instead.
    std::vector<Boundary> map{{0, 0}};
    std::uint64_t mapped_to = 0;  // compressed bytes the map covers
    const auto exactly = [&](std::uint64_t first, std::uint64_t len) -> std::optional<std::string> {
      if (whole.empty() || m.method != 8 || first + len <= d.head.size() || m.data_offset + m.compressed > whole.size())
        return std::nullopt;
      const std::string_view stream = whole.substr(m.data_offset, m.compressed);
      while (map.back().out < first + len && map.back().bit < stream.size() * 8) {
        bool too_long = false;
        const auto more =
            map_stream(stream, map.back(), first + len, m.size, k_piece, 0, out.inflated, too_long, &map_budget);
        if (too_long) throw inflates_past_size(label, m);
        if (more.size() == 1) break;
        map.insert(map.end(), more.begin() + 1, more.end());
      }
      const std::uint64_t covered = std::min<std::uint64_t>(stream.size(), map.back().bit / 8 + k_piece);
      out.read += covered > mapped_to ? covered - mapped_to : 0;
      mapped_to = std::max(mapped_to, covered);
      auto at =
          std::upper_bound(map.begin(), map.end(), first, [](std::uint64_t v, const Boundary& b) { return v < b.out; });
      for (int tries = 0; tries < 4 && at != map.begin(); ++tries)
        if (auto got = decode_span(stream, *--at, first, len, out.inflated, &map_budget)) return got;
      return std::nullopt;
    };
    // The member from its start, where neither a window nor a map of its stream gives a range.
    FromStart stream(m, fetch, k_chunk, d.budget.get(), label);
    const auto inflated_by_stream = [&] { out.inflated += std::exchange(stream.inflated, 0); };
    const auto from_start = [&](std::uint64_t first, std::uint64_t len) {
      auto got = first + len <= d.head.size() ? std::optional(d.head.substr(first, len)) : stream.bytes(first, len);
      inflated_by_stream();
      return got;
    };
    if (d.layout.dynamic_size == 0) {
      ++out.objects_from_start;
      const auto elf = read_from_start(d.head, stream, m.size, label + ":" + m.name);
      inflated_by_stream();
      keep_elf(out, m.name, elf, label, invalid);
      continue;
    }
    const auto segment_from_start = [&] {
      auto got = from_start(d.layout.dynamic_offset, d.layout.dynamic_size);
      if (!got) throw r::Error(fmt::format("{}: {} ends before its dynamic segment", label, m.name));
      return std::move(*got);
    };
    std::string dyn;
    if (dynamic[i].dyn) {
      dyn = *dynamic[i].dyn;
      ++out.objects_by_window;
    } else if (m.method == 0) {
      dyn = fetch({{m.data_offset + d.layout.dynamic_offset,
                    m.data_offset + d.layout.dynamic_offset + d.layout.dynamic_size - 1}})
                .front();
      ++out.objects_by_window;  // a stored member: the segment read where it lies
    } else if (auto mapped = exactly(d.layout.dynamic_offset, d.layout.dynamic_size)) {
      dyn = std::move(*mapped);
      ++out.objects_by_map;
    } else {
      dyn = segment_from_start();
      ++out.objects_from_start;
    }
    auto strings = strings_needed(dyn, d.layout, m.size);
    // What is known of the object exactly: its first bytes, and the window that reached its end.
    Pieces known{m.size, {}};
    known.v.emplace_back(0, d.head);
    if (dynamic[i].tail) known.v.push_back(*dynamic[i].tail);
    const auto have_strings = [&] { return strings && known.span(strings->first, strings->second - strings->first); };
    // The strings near the end (NVIDIA's libraries keep .dynstr last): a window to the end.
    const auto strings_from_end = [&] {
      if (!strings || have_strings() || m.method != 8 || m.size - strings->first > 8 * k_window) return;
      const std::uint64_t end = m.data_offset + m.compressed;
      const std::uint64_t reach = (m.size - strings->first) + (m.size - strings->first) / 1000 + k_window / 4;
      const std::uint64_t first = end > reach ? std::max(m.data_offset, end - reach) : m.data_offset;
      bool overrun = false;
      auto t = inflate_to_end(fetch({{first, end - 1}}).front(), m.size, strings->first, strings->second, out.inflated,
                              d.budget.get(), overrun);
      if (overrun) throw inflates_past_size(label, m);
      if (t) known.v.push_back(std::move(*t));
    };
    if (dynamic[i].dyn && m.method == 8) {
      strings_from_end();
      if (strings && !have_strings())
        if (auto got = from_start(strings->first, strings->second - strings->first))
          known.v.emplace_back(strings->first, std::move(*got));
      if (!strings || !consistent_with(dyn, d.layout, known.view())) {
        // The window's reading does not hold: the segment from the start instead.
        --out.objects_by_window;
        ++out.objects_from_start;
        dyn = segment_from_start();
        strings = strings_needed(dyn, d.layout, m.size);
        known.v = {{0, d.head}};
      }
    }
    // The pieces the loader reads, where they lie in the object, read by resolver/elf from
    // those alone. Without the strings (DT_STRTAB in no segment, or past the member's end) the
    // reader says what is wrong, as the loader would refuse it.
    Pieces pieces{m.size, {{0, d.head}, {d.layout.dynamic_offset, dyn}}};
    if (strings) {
      strings_from_end();
      if (const char* str = known.span(strings->first, strings->second - strings->first)) {
        pieces.v.emplace_back(strings->first, std::string(str, strings->second - strings->first));
      } else if (m.method == 0) {
        pieces.v.emplace_back(strings->first,
                              fetch({{m.data_offset + strings->first, m.data_offset + strings->second - 1}}).front());
      } else if (auto mapped = exactly(strings->first, strings->second - strings->first)) {
        pieces.v.emplace_back(strings->first, std::move(*mapped));
      } else if (auto got = from_start(strings->first, strings->second - strings->first)) {
        pieces.v.emplace_back(strings->first, std::move(*got));
      }
    }
    keep_elf(out, m.name, r::read_elf_pieces(pieces.view(), label + ":" + m.name), label, invalid);
  }
  return out;
}

}  // namespace cudafix::installer
