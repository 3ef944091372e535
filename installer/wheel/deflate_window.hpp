// Inflating a window cut from the middle of a deflate stream, as the plans by range need
// (installer/wheel/ranged_read.hpp): an Inflater fed in pieces, and each plausible block
// boundary in a window tried in turn. A boundary counts where a dynamic-Huffman header with a
// complete code-length code starts and zlib then reads three whole blocks. The 32 KiB before the
// window are unknown: each decode is made twice, against a dictionary of 0x00 and one of 0xff,
// and only the bytes both agree on are known.
#pragma once

#include <zlib.h>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

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

// Calls `take` with the window inflated from each plausible block boundary in turn, at most
// `limit` of them, until `take` returns true. Returns how many bytes it inflated in all.
std::uint64_t decode_from_boundaries(const std::string& window, int limit,
                                     const std::function<bool(const WindowDecode&)>& take);

}  // namespace cudafix::installer
