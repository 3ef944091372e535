#include "installer/wheel/strings_window.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>

namespace cudafix::installer {

namespace {

std::uint64_t u64(const char* p) {
  std::uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(p[k]);
  return v;
}

bool names_a_library(std::uint64_t tag) { return tag == 1 || tag == 14; }  // DT_NEEDED, DT_SONAME

// What starts at each place of a decode (`a` and `b`: against either dictionary, known where
// they agree): 2 a name that could be a library's (a NUL before it, known, printable, ".so" in
// it, its own NUL after), 1 any other such name, 0 none. One pass: each place is looked at once.
std::vector<std::uint8_t> name_starts(std::string_view a, std::string_view b) {
  std::vector<std::uint8_t> out(a.size(), 0);
  std::size_t start = 0;  // where the run of printable, known bytes since the last known NUL began
  bool valid = false;     // the run follows a known NUL and holds only printable, known bytes
  for (std::size_t k = 0; k < a.size(); ++k) {
    const bool known = a[k] == b[k];
    if (known && a[k] == '\0') {
      if (valid && k > start) out[start] = a.substr(start, k - start).find(".so") != std::string_view::npos ? 2 : 1;
      start = k + 1;
      valid = true;
      continue;
    }
    if (!known || a[k] < 0x20 || a[k] == 0x7f) valid = false;
  }
  return out;
}

// Whether every name of `refs` fits with the first one's first byte at `at`.
bool all_fit(const std::vector<std::uint8_t>& starts, std::size_t at, const std::vector<NameRef>& refs) {
  return std::all_of(refs.begin(), refs.end(), [&](const NameRef& r) {
    const std::uint64_t off = r.offset - refs.front().offset;
    return off < starts.size() - at && starts[at + off] >= (names_a_library(r.tag) ? 2 : 1);
  });
}

// The deflate ratios, lowest and highest, of the sections before the names as GNU ld orders them:
// what precedes .dynsym (.gnu.hash: hashes and bloom words, 0.70-1.08), .dynsym (24-byte symbols,
// 0.27-0.37) and .dynstr, whose ratio follows the length of its names (C++'s long mangled ones,
// 49 bytes on average in libstdc++, deflate to 0.11; C's, 16-23 bytes, to 0.16-0.33): about 5.5
// over their mean length, within the band below. Measured on 34 of Debian's libraries whose
// names lie over 40 KB past the head deflated at zipfile's level (libstdc++, libcrypto, libxml2,
// libpython3.11, libprotobuf, libicu, libgio, libX11, ...); the band misses one, libgrpc_unsecure,
// whose 78-byte names deflate to twice the estimate (it is then read from its start).
struct Ratios {
  double low, high;
};
constexpr Ratios k_before_symtab{0.7, 1.08}, k_symtab{0.27, 0.38}, k_unknown{0.10, 1.0};
constexpr double k_strtab_scale = 5.5, k_strtab_low = 0.75, k_strtab_high = 1.4;

// .dynstr's ratios from the mean length of its names (.dynsym's 24-byte entries count them).
Ratios strtab_ratios(const NamesLayout& l) {
  const std::uint64_t symbols = (l.strtab - l.symtab) / 24;
  if (symbols == 0 || l.strsz == 0) return k_unknown;
  const double mean = static_cast<double>(l.strsz) / static_cast<double>(symbols);
  const double ratio = std::clamp(k_strtab_scale / mean, 0.08, 0.5);
  return {ratio * k_strtab_low, ratio * k_strtab_high};
}

// A block boundary must come before the names (blocks of symbols and their names deflate to
// 15-30 KB), and enough of the table before them that they copy nothing unknown: bytes copied
// from before the decode's start stay unknown along chains of copies (decoded from the block
// just before libstdc++'s names, 40% of 424 KB are unknown, the names among them; from the block
// before that, they are known). The window starts this share of RangeLimits::window (48 KiB of
// 1 MiB) before the lowest estimate (of 34 Debian libraries whose names lie deep, 32 KiB found
// them in 4 of the 9 windows tried, 48 KiB in 5 of 6), ends this share (8 KiB) after the highest
// (the names may end a block: the next one's start is read), and is at most a quarter of it.
constexpr std::uint64_t k_lead_per_window = 48, k_trail_per_window = 8;  // of 1024
constexpr std::uint64_t k_spread = 64 * 1024;  // names further apart than this are not looked for by a window
// Bounds on the search for the names' place, which checks each name at each place a name starts:
// Debian's libraries give 2 to 15 names, the decode of a window of .dynstr a few MB.
constexpr std::size_t k_most_names = 64, k_most_scanned = std::size_t{8} << 20;
constexpr int k_starts = 4;  // plausible block starts tried in a window

}  // namespace

std::vector<NameRef> referenced_names(const std::string& dyn) {
  std::vector<NameRef> out;
  for (std::size_t at = 0; at + 16 <= dyn.size(); at += 16) {
    const std::uint64_t tag = u64(dyn.data() + at), val = u64(dyn.data() + at + 8);
    if (tag == 0) break;
    if (tag == 1 || tag == 14 || tag == 15 || tag == 29) out.push_back({tag, val});
  }
  std::sort(out.begin(), out.end(), [](const NameRef& a, const NameRef& b) {
    return a.offset < b.offset || (a.offset == b.offset && names_a_library(a.tag) && !names_a_library(b.tag));
  });
  // One per offset, the one that names a library kept (it is checked for ".so").
  out.erase(
      std::unique(out.begin(), out.end(), [](const NameRef& a, const NameRef& b) { return a.offset == b.offset; }),
      out.end());
  return out;
}

std::optional<std::size_t> fit_names(const std::string& zeros, const std::string& ones,
                                     const std::vector<NameRef>& refs) {
  if (refs.empty() || refs.size() > k_most_names) return std::nullopt;
  const std::size_t len = std::min({zeros.size(), ones.size(), k_most_scanned});
  const auto starts = name_starts(std::string_view(zeros).substr(0, len), std::string_view(ones).substr(0, len));
  std::optional<std::size_t> found;
  for (std::size_t at = 0; at < len; ++at) {
    if (starts[at] == 0 || !all_fit(starts, at, refs)) continue;
    if (found) return std::nullopt;  // two places fit: neither is taken
    found = at;
  }
  return found;
}

std::uint64_t deflated_place(const NamesLayout& l, std::uint64_t raw, bool high) {
  // The head may end inside .dynsym or .dynstr (8 KB deflated holds 19 KB of libz3's .gnu.hash
  // and .dynsym): the regions it holds count nothing, the rest at their own ratios.
  const bool ordered = l.symtab > 0 && l.symtab < l.strtab && l.strtab <= raw;
  const Ratios str = ordered ? strtab_ratios(l) : k_unknown;
  // The raw bytes from the head's end to `raw`, each region at its own ratios.
  const std::array<std::pair<std::uint64_t, Ratios>, 3> regions{
      {{ordered ? l.symtab : raw, ordered ? k_before_symtab : k_unknown},
       {ordered ? l.strtab : raw, k_symtab},
       {raw, str}}};
  double at = static_cast<double>(l.head_compressed);
  std::uint64_t from = l.head_raw;
  for (const auto& [end, ratio] : regions) {
    const std::uint64_t upto = std::clamp(end, from, std::max(from, raw));
    at += static_cast<double>(upto - from) * (high ? ratio.high : ratio.low);
    from = upto;
  }
  return static_cast<std::uint64_t>(std::min(static_cast<double>(l.compressed), at));
}

std::optional<NamesWindowPlace> names_window_place(const NamesLayout& l, std::uint64_t window) {
  const std::uint64_t lead = window / 1024 * k_lead_per_window, trail = window / 1024 * k_trail_per_window;
  const std::uint64_t low = deflated_place(l, l.first, false), high = deflated_place(l, l.last, true);
  const NamesWindowPlace w{low > lead ? low - lead : 0, std::min(l.compressed, high + trail)};
  // From the head's end, inflating reads up to the names exactly: worth a window only where that
  // reads a quarter more than the window does.
  if (w.last <= w.first || w.last - w.first > window / 4 ||
      4 * (w.first - std::min(w.first, l.head_compressed)) < w.last - w.first)
    return std::nullopt;
  return w;
}

std::optional<NamesLayout> tables_layout(const std::string& dyn, const resolver::ElfLayout& l, std::uint64_t size,
                                         const HeadPlace& head) {
  NamesLayout out;
  out.head_compressed = head.compressed;
  out.head_raw = head.raw;
  out.compressed = head.member_compressed;
  std::uint64_t strtab = 0, symtab = 0;
  for (std::size_t at = 0; at + 16 <= dyn.size(); at += 16) {
    const std::uint64_t tag = u64(dyn.data() + at), val = u64(dyn.data() + at + 8);
    if (tag == 0) break;
    if (tag == 5) strtab = val;
    if (tag == 6) symtab = val;
    if (tag == 10) out.strsz = val;
  }
  const auto str = l.file_offset(strtab);
  if (!str || out.strsz > size || *str > size - out.strsz) return std::nullopt;
  out.strtab = *str;
  out.symtab = l.file_offset(symtab).value_or(0);
  return out;
}

std::optional<NamesAsk> names_ask(const std::string& dyn, const resolver::ElfLayout& l, std::uint64_t size,
                                  const HeadPlace& head) {
  auto refs = referenced_names(dyn);
  if (refs.size() < 2 || refs.size() > k_most_names || refs.front().offset == 0 ||
      refs.back().offset - refs.front().offset > k_spread)
    return std::nullopt;
  auto layout = tables_layout(dyn, l, size, head);
  if (!layout || refs.back().offset >= layout->strsz) return std::nullopt;
  layout->first = layout->strtab + refs.front().offset - 1;
  // The last name's end is not known before it is read: a few hundred bytes allowed for.
  layout->last = std::min(layout->strtab + layout->strsz, layout->strtab + refs.back().offset + 256);
  return NamesAsk{std::move(refs), *layout};
}

NamesFound names_in_window(const std::string& window, const std::vector<NameRef>& refs, std::uint64_t strtab,
                           InflateBudget* parent) {
  NamesFound out;
  if (refs.empty() || refs.front().offset == 0) return out;
  // A start is proved by one whole block (three would take a window of four blocks, 100 KB of
  // .dynstr): a false start decodes noise, in which no place fits every name, or falls in step
  // with the stream at a block's end, as it may after three blocks too. So each plausible start
  // is tried in turn, a few at most, until one's decode has a single place where all fit.
  const auto take = [&](WindowDecode& w) {
    if (w.ended_early) return false;  // a stream that ends inside the window is not the member's
    const auto at = fit_names(w.zeros, w.ones, refs);
    if (!at) return false;
    for (const NameRef& r : refs) {
      const std::size_t name = *at + (r.offset - refs.front().offset);
      const std::size_t end = w.zeros.find('\0', name);
      out.pieces.emplace_back(strtab + r.offset - 1, w.zeros.substr(name - 1, end - name + 2));
    }
    out.found = true;
    return true;
  };
  WindowKeep keep;
  keep.prefix = k_most_scanned;
  out.inflated = decode_from_boundaries(window, k_starts, take, parent, false, 1, keep);
  return out;
}

}  // namespace cudafix::installer
