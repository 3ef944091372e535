// What range planning reads of one large object (installer/wheel/ranged_read.cpp, the one
// user): the pieces known of it, where its deflate stream is proved to give a place (Anchor), its
// dynamic segment and strings found in a window of compressed bytes, the member inflated from its
// start keeping only its last bytes (FromStart), and the checks a segment found mid-stream must
// pass against what is known exactly. Internal to installer/wheel.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "installer/wheel/deflate_window.hpp"
#include "installer/wheel/zip_reader.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/elf/elf_pieces.hpp"

namespace cudafix::installer::segment_find {
namespace r = cudafix::resolver;

inline std::uint32_t u32(const unsigned char* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (std::uint32_t{p[3]} << 24);
}
inline std::uint64_t u64(const unsigned char* p) { return u32(p) | (std::uint64_t{u32(p + 4)} << 32); }
inline const unsigned char* bytes_of(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }

// A member whose reading spent its budget (crafted block headers that each decode for long, a
// stream that never proves a boundary): named, never read on and on.
r::Error over_budget(const std::string& label, const zip::Entry& m, const InflateBudget& b);
// A member whose deflate stream holds more than its entry says (a megabyte of it can inflate to a
// gigabyte): what it holds past that is not what will be installed.
r::Error inflates_past_size(const std::string& label, const zip::Entry& m);

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

// Where a member's deflate stream is known to give a place of the object: a proved block
// boundary (`compressed` bytes into the member's data) before which `raw` bytes inflate. Two of
// them give the deflate ratio of the bytes between (installer/wheel/ranged_read.hpp, step 2).
struct Anchor {
  std::uint64_t compressed = 0, raw = 0;
};

// Where an object's sections hold its bytes, from its section header table: the measure the
// deflate ratio is taken by between two places. The gaps between sections (zeros that pad to a
// page or a 2 MiB boundary: 2 MB of the 2.3 MB after cuDNN 9.19's precompiled engines' segment)
// deflate to about nothing, so a gap counts 1/256 of its bytes; a section its own. The table is
// what the stream says and may lie: it only places windows, never the bytes taken from them.
class SectionExtents {
 public:
  // From `table` (64-byte ELF64 section headers, the null one first, at `table_at` in an object
  // of `size` bytes): the sections that hold bytes of the file and lie inside it, and the table
  // itself, merged.
  SectionExtents(std::string_view table, std::uint64_t table_at, std::uint64_t size);
  // The bytes before `raw`, gaps counted 1/256.
  [[nodiscard]] std::uint64_t measure(std::uint64_t raw) const;
  // The bytes of [first, last) that sections hold.
  [[nodiscard]] std::uint64_t content(std::uint64_t first, std::uint64_t last) const;

 private:
  std::vector<std::pair<std::uint64_t, std::uint64_t>> extents_;  // [first, last), in order, apart
};

struct WindowFind {
  std::optional<std::string> dyn;
  std::uint64_t inflated = 0;
  // A window inflated to the member's end: where in the window (bytes) the decode started,
  // `raw` the place in the object there, and from which of its kept bytes (end_zeros) on the
  // object is known exactly (past the last byte the two decodes disagree on).
  std::optional<Anchor> start;
  std::uint64_t start_bit = 0;  // that start, in bits into the window
  std::size_t end_agreed = 0;
  // What that decode kept (from the section header table or the segment, whichever comes first,
  // to the end, at most the last 256 KiB), against either dictionary, its first byte at `end_base`
  // in the object.
  std::string end_zeros, end_ones;
  std::uint64_t end_base = 0;
  // A decode that ended exactly with the member inflated more than the member declares.
  bool overrun = false;
  // Mid-stream, a decode from a proved boundary that found no segment: where in the window it
  // started, and the compressed bytes it read to the window's end against the bytes they
  // inflated to, the deflate ratio there (segment_place's probed window).
  std::uint64_t probe_at = 0, probe_compressed = 0, probe_raw = 0;
};

// The dynamic segment in a window of compressed bytes: inflated from each plausible block
// boundary in turn. A window that ends with the member places what it inflates exactly (from
// the end back), the segment included, and keeps its bytes from `keep_from` (the section header
// table) or the segment on, at most its last 256 KiB; elsewhere the segment is found by what it
// reads as, as the decode streams, from a start two whole blocks prove (a window at the end, and
// one whose place must be exact, take three).
WindowFind dynamic_in_window(const std::string& window, std::size_t dyn_size, bool ends_member,
                             std::uint64_t member_size, std::uint64_t dyn_offset, bool mid_stream,
                             InflateBudget* budget, std::uint64_t keep_from = UINT64_MAX);

// Where the segment's DT_SYMTAB (its last, as the loader takes it) lies in the file, if a PT_LOAD
// maps it.
std::optional<std::uint64_t> symbol_table_at(const std::string& dyn, const r::ElfLayout& l);

// The `len` bytes at `first` of the object from a decode of the window at its end that started
// at `bit` of `window`, where byte `base` of the object lies, and kept its bytes from `kept_at`
// on (`zeros`, `ones`, against either dictionary): taken from those where they hold them, else
// decoded again from `bit`; nullopt where the decode does not reach them.
std::optional<std::pair<std::string, std::string>> end_bytes_at(const std::string& window, std::uint64_t bit,
                                                                std::uint64_t base, std::uint64_t kept_at,
                                                                const std::string& zeros, const std::string& ones,
                                                                std::uint64_t first, std::uint64_t len,
                                                                std::uint64_t& inflated, InflateBudget* budget);

// The strings the dynamic segment names, as file offsets: [begin, end) of DT_STRTAB to read;
// nullopt where no PT_LOAD maps DT_STRTAB or the table runs out of the object (`size` bytes).
std::optional<std::pair<std::uint64_t, std::uint64_t>> strings_needed(const std::string& dyn, const r::ElfLayout& l,
                                                                      std::uint64_t size);

// A window that ends with the member, inflated from its first block boundary to the end: of
// `ranges` ([first, last) of the object), each that the decode reaches and both dictionaries
// agree on, at its place in the file. `overrun`: the decode inflated more than the member holds.
std::vector<std::pair<std::uint64_t, std::string>> inflate_to_end(
    const std::string& window, std::uint64_t member_size,
    const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges, std::uint64_t& inflated, InflateBudget* budget,
    bool& overrun);

// Bytes [first, last] of the wheel for each range (ReadRanges, each range checked first).
using Fetch = std::function<std::vector<std::string>(const std::vector<std::pair<std::uint64_t, std::uint64_t>>&)>;

constexpr std::uint64_t k_keep = std::uint64_t{4} << 20;       // inflating from the start keeps the last this many
constexpr std::uint64_t k_max_kept = std::uint64_t{64} << 20;  // the most read of one member from its start

// A member inflated from its start for the ranges planning reads of it (its dynamic segment, the
// strings it names, headers that lie deep): only the last k_keep bytes stay in memory as the
// stream passes (3 MB of deflate data may declare 3 GB, and keeping all it inflated held 4.5 GB),
// a range that fell out of them is inflated again from the start under the member's budget, and
// what is asked of it in all is at most k_max_kept. The compressed bytes are fetched a chunk at a
// time.
class FromStart {
 public:
  // `seed`: the member's first compressed bytes, fetched already (with its headers).
  FromStart(const zip::Entry& m, const Fetch& fetch, std::uint64_t chunk, InflateBudget* budget,
            const std::string& label, std::string seed = {})
      : m_(m), fetch_(fetch), chunk_(chunk), budget_(budget), label_(label), seed_(std::move(seed)) {}
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
    // Held once: grown by the inflater's doubling, what it kept (trimmed at twice k_keep) was
    // copied at each step past it, old and new side by side (cuDNN 9.19's heuristic library, read
    // 60 MB from its start with 16 MiB kept, peaked at 100 MB of heap). No more than the member
    // declares: most are read a few kilobytes past their head.
    z_->out.reserve(std::min<std::uint64_t>(2 * k_keep + k_feed, m_.size));
    drained_ = false;
    in_ = seed_.substr(0, std::min<std::uint64_t>(seed_.size(), m_.compressed));
    in_at_ = 0;
    fetched_ = in_.size();
    base_ = 0;
  }
  // How much to fetch next to inflate up to `to`: what the ratio so far says it takes, and a
  // quarter more, between 16 KiB and a chunk (a string table 200 KB in is not fetched by the MiB).
  [[nodiscard]] std::uint64_t next_take(std::uint64_t to) const {
    const std::uint64_t have = base_ + z_->out.size();
    std::uint64_t want = chunk_;
    if (have > 0 && to > have && fetched_ > 0)
      want = static_cast<std::uint64_t>(static_cast<double>(to - have) * static_cast<double>(fetched_) /
                                        static_cast<double>(have) * 1.25) +
             4096;
    return std::min(
        {std::max<std::uint64_t>(want, std::min<std::uint64_t>(chunk_, 16 * 1024)), chunk_, m_.compressed - fetched_});
  }
  // Inflates until the bytes before `to` are at hand or the data end, keeping those from `keep`.
  void advance(std::uint64_t to, std::uint64_t keep) {
    while (base_ + z_->out.size() < to && !z_->ended) {
      // Its data all fed: once more with no input, for what zlib held of the last feed (one that
      // stopped at its limit with its input used up), then no more.
      if (in_at_ == in_.size() && fetched_ >= m_.compressed && drained_) return;
      drained_ = in_at_ == in_.size() && fetched_ >= m_.compressed;
      if (in_at_ == in_.size() && !drained_) {
        const std::uint64_t take = next_take(to);
        in_ = fetch_({{m_.data_offset + fetched_, m_.data_offset + fetched_ + take - 1}}).front();
        fetched_ += take;
        in_at_ = 0;
      }
      const std::uint64_t before = z_->produced;
      const auto* in = reinterpret_cast<const unsigned char*>(in_.data()) + in_at_;
      const bool fed = z_->feed(in, in_.size() - in_at_, z_->out.size() + k_feed);
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
  static constexpr std::size_t k_feed = std::size_t{1} << 20;  // inflated at most per feed
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
  bool drained_ = false;  // fed with no input once its data were all fed
  std::string seed_;
};

// An object whose first bytes do not say where its segment lies (its headers lie deep, it is no
// little-endian ELF64, its PT_DYNAMIC is large), read by resolver/elf from pieces: each range it
// finds missing is inflated from the start and the object read again, the strings one range a
// round at most.
r::ElfRead read_from_start(const std::string& head, FromStart& stream, std::uint64_t size, const std::string& name);

// Whether a dynamic segment found mid-stream agrees with what is known of the object exactly
// (its first bytes, a window inflated to its end): the string table starts with NUL where DT_STRTAB says, every name it
// gives starts a string there, SONAME and NEEDED name shared objects, and DT_SYMTAB's first symbol is the null one. A
// misread byte of an address or an offset fails one of these. `by_fingerprint`: the names were
// found by a window in .dynstr (installer/wheel/strings_window), without the table's first byte,
// which is then checked where known: the fingerprint checked the same of the names (a NUL
// before each, known, printable, NUL-terminated, ".so" in NEEDED and SONAME) at every offset the
// segment gives, their differences exact, at the one place in the window where all of them fit.
bool consistent_with(const std::string& dyn, const r::ElfLayout& l, const r::ElfPieces& known,
                     bool by_fingerprint = false);

}  // namespace cudafix::installer::segment_find
