// Inflating a window cut from the middle of a deflate stream, as the plans by range need
// (installer/wheel/ranged_read.hpp): an Inflater fed in pieces, and each plausible block
// boundary in a window tried in turn. A boundary counts where a dynamic-Huffman header with a
// complete code-length code, or a stored block's header whose LEN and NLEN agree, starts and zlib
// then reads three whole blocks. The 32 KiB before the
// window are unknown: each decode is made twice, against a dictionary of 0x00 and one of 0xff,
// and only the bytes both agree on are known.
#pragma once

#include <zlib.h>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cudafix::installer {

// A raw inflate fed in pieces; `out` grows as far as wanted.
class Inflater {
 public:
  // `fill` >= 0: a 32 KiB dictionary of that byte stands in for the unknown history.
  explicit Inflater(int fill = -1);
  ~Inflater();
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  // The bits of `byte` above bit `skip` go in first (a start in the middle of a byte).
  void prime(unsigned char byte, int skip);
  // Feeds `in`, keeping at most `limit` bytes of output in all. False on damaged data.
  bool feed(const unsigned char* in, std::size_t n, std::size_t limit);
  // Inflates `in` block by block, discarding the output: how many whole blocks it reads before
  // damaged data or the end of `in` (-1: damaged at once).
  int blocks(const unsigned char* in, std::size_t n, int enough);
  // Inflates `in` block by block, discarding the output, until a block ends exactly `stop` bits
  // into `in` (true) or the stream ends there (true, `ended`); false where a block ends past it,
  // the data are damaged, `in` runs out first or more than `most` bytes inflate. `in` follows
  // the bits `prime` gave, if any.
  bool blocks_until(const unsigned char* in, std::size_t n, std::uint64_t stop, std::uint64_t most = UINT64_MAX);
  std::string out;
  bool ended = false;
  std::uint64_t produced = 0;  // bytes inflated in all, those `blocks` discarded included

 private:
  z_stream z_{};
};

struct WindowDecode {
  std::string zeros, ones;  // the window inflated against either dictionary
  bool ended = false;       // it reached the stream's end
};

// A block boundary of a deflate stream, proved: the stream's start, or where the decode from the
// proved boundary before it ended a block exactly. `bit`: from the stream's first bit; `out`: the
// bytes inflated before it.
struct Boundary {
  std::uint64_t bit = 0, out = 0;
};

// The stream `s` (all of it or its first bytes) mapped from `from` (proved) on: cut into pieces
// of about `piece` compressed bytes at plausible block boundaries, the pieces decoded side by side
// (`threads` of them at a time, 0: one per core), each boundary proved by the piece before it
// ending a block exactly there. How much a piece inflates does not depend on the 32 KiB before
// it, which a dictionary stands in for, so each boundary's `out` is exact. Goes on until a
// boundary past `want_out` inflated bytes, the stream's end (its last boundary) or the end of
// `s`. A piece that does not end where the next one starts (a false start there) runs on to the
// one after; the map stops at damaged data, and sets `too_long` where a piece from a proved
// boundary inflates past `most_out` bytes in all (what the stream says it holds). Returns the
// boundaries proved, `from` first; `inflated` counts what it inflated.
std::vector<Boundary> map_stream(std::string_view s, Boundary from, std::uint64_t want_out, std::uint64_t most_out,
                                 std::uint64_t piece, unsigned threads, std::uint64_t& inflated, bool& too_long);

// The `len` inflated bytes from `first` on, decoded from the proved boundary `at`: from the
// stream's start exactly, elsewhere against both dictionaries and known only where they agree.
// nullopt where any of them depends on the bytes before `at`, or the data are damaged.
std::optional<std::string> decode_span(std::string_view s, Boundary at, std::uint64_t first, std::uint64_t len,
                                       std::uint64_t& inflated);

// Calls `take` with the window inflated from each plausible block boundary in turn, at most
// `limit` of them, until `take` returns true. Returns how many bytes it inflated in all.
std::uint64_t decode_from_boundaries(const std::string& window, int limit,
                                     const std::function<bool(const WindowDecode&)>& take);

}  // namespace cudafix::installer
