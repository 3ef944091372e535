// The names a dynamic segment gives (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH) read from a window
// of a member's deflate stream, for the plans by range (installer/wheel/ranged_read.hpp): GNU ld puts
// .dynstr near an object's start after .gnu.hash and .dynsym, and these names at its end
// (libstdc++.so.6: 300 KB of symbol names before them), so inflating from the start up to them
// reads most of the table. Once the segment is known, where each name lies in the table is known
// exactly; their place in the compressed stream is estimated from the sections before them, a
// window there is inflated from a block boundary (installer/wheel/deflate_window.hpp), and the
// names are found in what it decodes by their fingerprint: the offsets' differences, each name
// NUL before and after, printable, ".so" in NEEDED and SONAME. Bytes copied from before the
// window are unknown and never guessed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "installer/wheel/deflate_window.hpp"
#include "resolver/elf/elf_reader.hpp"

namespace cudafix::installer {

// A name the dynamic segment gives: its tag and its offset in DT_STRTAB.
struct NameRef {
  std::uint64_t tag = 0, offset = 0;
};

// The names `dyn` (a dynamic segment, 16-byte entries) gives, one per distinct offset, by offset.
[[nodiscard]] std::vector<NameRef> referenced_names(const std::string& dyn);

// The one place in a decode (`zeros` and `ones`: the same bytes inflated against either
// dictionary, known where they agree) where every name of `refs` (by offset, from
// referenced_names) fits: the index of the first one's first byte. nullopt where none or more
// than one fits.
[[nodiscard]] std::optional<std::size_t> fit_names(const std::string& zeros, const std::string& ones,
                                                   const std::vector<NameRef>& refs);

// Where in a member's compressed data (offsets from its first byte) to look for names that lie
// at raw [first, last): from the lowest estimate of their place less a lead (a block boundary
// must come before them) to the highest one and a little more, each estimate made from the place
// proved at the end of the head's inflate and the sections between, each at its own range of
// deflate ratios. `symtab`, `strtab`, `strsz`: where .dynsym and .dynstr lie (the segment's
// DT_SYMTAB, DT_STRTAB and DT_STRSZ as file offsets, 0 where unknown).
struct NamesLayout {
  std::uint64_t head_compressed = 0, head_raw = 0;
  std::uint64_t symtab = 0, strtab = 0, strsz = 0;
  std::uint64_t first = 0, last = 0;
  std::uint64_t compressed = 0;  // the member's compressed size
};
struct NamesWindowPlace {
  std::uint64_t first = 0, last = 0;
};
// nullopt where the window would cost about what inflating from the head's end to the names does
// (they lie a few blocks in: what from the start reads, exactly) or more than a quarter of
// `window` (RangeLimits::window, of which its lead and trail are shares: the fuzz target's small
// limits take this path too).
[[nodiscard]] std::optional<NamesWindowPlace> names_window_place(const NamesLayout& l, std::uint64_t window);

// Where the object's byte `raw` should lie in the member's compressed data (from its first byte),
// at the lowest or the highest of the ratios of the sections from the head's end to it (those of
// NamesLayout that `raw` follows; elsewhere any ratio from 0.1 to 1).
[[nodiscard]] std::uint64_t deflated_place(const NamesLayout& l, std::uint64_t raw, bool high);

// The place proved at the end of a member's head's inflate, and its compressed size in all.
struct HeadPlace {
  std::uint64_t compressed = 0, raw = 0, member_compressed = 0;
};

// Where the dynamic segment `dyn` of an object of `size` bytes laid out as `l` says puts .dynsym
// and .dynstr (NamesLayout's symtab, strtab and strsz; `head` gives the rest but the names');
// nullopt where DT_STRTAB lies in no segment or the table runs past the object's end.
[[nodiscard]] std::optional<NamesLayout> tables_layout(const std::string& dyn, const resolver::ElfLayout& l,
                                                       std::uint64_t size, const HeadPlace& head);

// The names of the dynamic segment `dyn` of an object of `size` bytes laid out as `l` says, and
// where they and the tables before them lie (NamesLayout, less the head's place and the member's
// compressed size); nullopt where they are not looked for by a window: fewer than two names (one
// name's fingerprint is too weak), names over 64 KiB apart, DT_STRTAB in no segment, a table past
// the object's end.
struct NamesAsk {
  std::vector<NameRef> refs;
  NamesLayout layout;
};
[[nodiscard]] std::optional<NamesAsk> names_ask(const std::string& dyn, const resolver::ElfLayout& l,
                                                std::uint64_t size, const HeadPlace& head);

// The names found in a window: each one's bytes with the NUL before and after it, at the file
// offset of that NUL before (the table's `strtab` + its offset - 1).
struct NamesFound {
  std::vector<std::pair<std::uint64_t, std::string>> pieces;
  std::uint64_t inflated = 0;
  bool found = false;
};

// Inflates `window` (compressed bytes from mid-stream) from its plausible block boundaries, a few
// at most, under a window's budget that `parent` pays for too, and finds `refs` in the first
// decode that reads the rest of the window (a true boundary: a later one knows less).
[[nodiscard]] NamesFound names_in_window(const std::string& window, const std::vector<NameRef>& refs,
                                         std::uint64_t strtab, InflateBudget* parent);

}  // namespace cudafix::installer
