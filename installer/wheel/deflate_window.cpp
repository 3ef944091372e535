#include "installer/wheel/deflate_window.hpp"

#include <algorithm>
#include <array>

#include "resolver/base/diagnostic.hpp"

namespace cudafix::installer {
namespace r = cudafix::resolver;

Inflater::Inflater(int fill) {
  if (inflateInit2(&z_, -15) != Z_OK) throw r::Error("inflateInit2 failed");
  if (fill >= 0) {
    std::array<unsigned char, 32768> dict{};
    dict.fill(static_cast<unsigned char>(fill));
    inflateSetDictionary(&z_, dict.data(), dict.size());
  }
}

Inflater::~Inflater() { inflateEnd(&z_); }

void Inflater::prime(unsigned char byte, int skip) {
  if (skip) inflatePrime(&z_, 8 - skip, byte >> skip);
}

bool Inflater::feed(const unsigned char* in, std::size_t n, std::size_t limit) {
  z_.next_in = const_cast<unsigned char*>(in);
  z_.avail_in = static_cast<uInt>(n);
  while (z_.avail_in > 0 && !ended && out.size() < limit) {
    const std::size_t before = out.size();
    out.resize(std::min(limit, before + (std::size_t{1} << 18)));
    z_.next_out = reinterpret_cast<unsigned char*>(out.data()) + before;
    z_.avail_out = static_cast<uInt>(out.size() - before);
    const int rc = inflate(&z_, Z_NO_FLUSH);
    out.resize(out.size() - z_.avail_out);
    produced += out.size() - before;
    if (rc == Z_STREAM_END) ended = true;
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_MEM_ERROR) return false;
    if (rc == Z_BUF_ERROR && out.size() == before) break;
  }
  return true;
}

int Inflater::blocks(const unsigned char* in, std::size_t n, int enough) {
  z_.next_in = const_cast<unsigned char*>(in);
  z_.avail_in = static_cast<uInt>(n);
  std::array<unsigned char, 1 << 16> sink{};
  int done = 0;
  while (z_.avail_in > 0 && done < enough) {
    z_.next_out = sink.data();
    z_.avail_out = sink.size();
    const int rc = inflate(&z_, Z_BLOCK);
    produced += sink.size() - z_.avail_out;
    if (rc == Z_STREAM_END) return done + 1;
    if (rc != Z_OK && rc != Z_BUF_ERROR) return -1;
    if ((z_.data_type & 128) && z_.avail_out > 0) ++done;  // stopped at a block's end
  }
  return done;
}

namespace {

// The bit at `bit` of `p`, LSB first as deflate reads them, `k` of them.
unsigned bits(const unsigned char* p, std::size_t bit, int k) {
  unsigned v = 0;
  for (int i = 0; i < k; ++i) v |= ((p[(bit + i) / 8] >> ((bit + i) % 8)) & 1U) << i;
  return v;
}

// Whether a dynamic-Huffman block could start at `bit`: its counts in range and its code length
// code complete (zlib refuses any other).
bool could_start_block(const unsigned char* p, std::size_t n, std::size_t bit) {
  if ((bit + 17 + 19 * 3) / 8 + 1 >= n) return false;
  if (bits(p, bit + 1, 2) != 2) return false;
  if (bits(p, bit + 3, 5) > 29 || bits(p, bit + 8, 5) > 29) return false;
  // Which lengths the HCLEN entries give does not matter here, only how many of each.
  const unsigned hclen = bits(p, bit + 13, 4) + 4;
  int count[8] = {0};
  for (unsigned i = 0; i < hclen; ++i) ++count[bits(p, bit + 17 + 3 * i, 3)];
  int left = 1;
  for (int len = 1; len <= 7; ++len) {
    left <<= 1;
    left -= count[len];
    if (left < 0) return false;
  }
  return left == 0;
}

}  // namespace

std::uint64_t decode_from_boundaries(const std::string& window, int limit,
                                     const std::function<bool(const WindowDecode&)>& take) {
  const auto* p = reinterpret_cast<const unsigned char*>(window.data());
  const std::size_t n = window.size();
  int tried = 0;
  std::uint64_t produced = 0;
  for (std::size_t bit = 0; bit + 64 < n * 8 && tried < limit; ++bit) {
    if (!could_start_block(p, n, bit)) continue;
    const std::size_t start = bit / 8 + (bit % 8 ? 1 : 0);
    Inflater probe(0);
    probe.prime(p[bit / 8], static_cast<int>(bit % 8));
    const int whole_blocks = probe.blocks(p + start, n - start, 3);
    produced += probe.produced;
    if (whole_blocks < 3) continue;
    ++tried;
    Inflater zeros(0), ones(0xff);
    zeros.prime(p[bit / 8], static_cast<int>(bit % 8));
    ones.prime(p[bit / 8], static_cast<int>(bit % 8));
    const bool fed = zeros.feed(p + start, n - start, 64 << 20) && ones.feed(p + start, n - start, 64 << 20);
    produced += zeros.produced + ones.produced;
    if (!fed) continue;
    const WindowDecode w{std::move(zeros.out), std::move(ones.out), zeros.ended};
    if (take(w)) return produced;
  }
  return produced;
}

}  // namespace cudafix::installer
