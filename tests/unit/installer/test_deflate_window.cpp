// The map of a deflate stream (installer/wheel/deflate_window.hpp): where its pieces, decoded
// side by side, say each block boundary lies in the inflated bytes, and the bytes read from there.
#include <gtest/gtest.h>
#include <zlib.h>

#include <random>
#include <string>
#include <string_view>

#include "installer/wheel/deflate_window.hpp"

namespace cudafix::installer {
namespace {

// Raw deflate of `data` at zlib's default level, as wheels are written.
std::string deflate_raw(const std::string& data) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Code-like text (dynamic-Huffman blocks) with stretches of random bytes between (stored blocks),
// as a CUDA library's code and its compressed device code alternate.
std::string object_like(std::size_t size) {
  std::mt19937 rng(7);
  std::string out;
  const char* words[] = {"mov", "rax", "call", "ret", "push", "lea", "cmp", "jne", "libcudnn", "0x40"};
  while (out.size() < size) {
    for (int i = 0; i < 60000; ++i) out += std::string(words[rng() % 10]) + (rng() % 7 ? " " : "\n");
    for (int i = 0; i < 300000; ++i) out += static_cast<char>(rng() & 0xff);
  }
  out.resize(size);
  return out;
}

TEST(MapStream, EachBoundaryIsWhereTheInflatedBytesAreAndTheSpansReadFromThereAreTheData) {
  const std::string data = object_like(6 << 20);
  const std::string z = deflate_raw(data);
  std::uint64_t inflated = 0;
  bool too_long = false;
  const auto map = map_stream(z, {}, data.size(), data.size(), 64 << 10, 2, inflated, too_long);
  ASSERT_GT(map.size(), 20U) << "pieces of 64 KiB of a " << z.size() << "-byte stream";
  EXPECT_EQ(map.back().out, data.size()) << "mapped to the stream's end";
  for (std::size_t k = 1; k < map.size(); ++k) EXPECT_GT(map[k].out, map[k - 1].out);
  std::size_t read = 0, unknown = 0;
  for (std::size_t k = 0; k + 1 < map.size(); k += 3) {
    const std::uint64_t first = map[k].out + 100, len = 4096;
    if (first + len > data.size()) break;
    const auto got = decode_span(z, map[k], first, len, inflated);
    if (!got) {
      ++unknown;  // bytes copied from before the boundary: not known from there
      continue;
    }
    ++read;
    EXPECT_EQ(*got, data.substr(first, len)) << "at boundary " << k << " (bit " << map[k].bit << ")";
  }
  EXPECT_GT(read, unknown) << "most spans are known from the boundary before them";
}

// Each boundary of `map` is one a single decode of `z` from its start passes at a block's end,
// having inflated exactly the bytes the map says.
void expect_as_from_start(const std::string& z, const std::vector<Boundary>& map, const std::string& what) {
  const auto* p = reinterpret_cast<const unsigned char*>(z.data());
  for (std::size_t k = 1; k < map.size(); ++k) {
    Inflater from_start;
    const bool reached = from_start.blocks_until(p, z.size(), map[k].bit);
    EXPECT_TRUE(reached || (k + 1 == map.size() && from_start.ended)) << what << ", boundary " << k;
    EXPECT_EQ(from_start.produced, map[k].out) << what << ", boundary " << k;
  }
}

// Whatever the size of the pieces (shorter than a block, or many blocks long), each boundary the
// map proves is one a decode from the start reaches, and it maps the stream to its end.
TEST(MapStream, EveryBoundaryIsOneADecodeFromTheStartReachesWithTheSameCount) {
  const std::string data = object_like(1 << 20);
  const std::string z = deflate_raw(data);
  for (const std::uint64_t piece : {std::uint64_t{4} << 10, std::uint64_t{16} << 10, std::uint64_t{200} << 10}) {
    std::uint64_t inflated = 0;
    bool too_long = false;
    const auto map = map_stream(z, {}, data.size(), data.size(), piece, 3, inflated, too_long);
    EXPECT_EQ(map.back().out, data.size()) << piece;
    expect_as_from_start(z, map, "pieces of " + std::to_string(piece));
  }
}

// Damage inside compressed blocks: the map proves only what a decode from the start reads, and
// a stream whose decode fails is mapped no further than the failure.
TEST(MapStream, ADamagedStreamIsMappedAsADecodeFromItsStartReadsIt) {
  const std::string data = object_like(4 << 20);
  const std::string good = deflate_raw(data);
  for (const std::size_t at : {good.size() / 3, good.size() / 2, good.size() - 5000}) {
    std::string z = good;
    for (std::size_t i = at; i < at + 64; ++i) z[i] = static_cast<char>(~z[i]);
    Inflater whole;
    const bool decodes = whole.feed(reinterpret_cast<const unsigned char*>(z.data()), z.size(), data.size() * 2);
    std::uint64_t inflated = 0;
    bool too_long = false;
    const auto map = map_stream(z, {}, data.size(), data.size(), 64 << 10, 2, inflated, too_long);
    expect_as_from_start(z, map, "damaged at " + std::to_string(at));
    if (!decodes || !whole.ended) {
      EXPECT_LT(map.back().bit / 8, z.size()) << "a stream that fails is not mapped to its end";
    }
  }
}

}  // namespace
}  // namespace cudafix::installer
