// A set of paths with a dense index each, for the 70,000 entries one walk of a venv finds:
// open addressing over views into the walk's arena, no allocation per entry.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace cudafix::resolver::inline base {

// The hash of the index's keys, fed in pieces: a path hashed as folder and then name, or as a
// site dir and then a RECORD row, hashes as it would whole. So the walk hashes each folder once
// for all its entries, and the ownership pass hashes a dist's site dir once for all its rows
// instead of joining 70,000 paths to hash them. Words of 8 bytes mixed as in MurmurHash64A, with
// MurmurHash3's finaliser so that the low bits the table uses depend on every byte.
class PathHash {
 public:
  PathHash& add(std::string_view s) {
    const char* p = s.data();
    std::size_t n = s.size();
    length_ += n;
    if (filled_ > 0) {
      const std::size_t take = std::min<std::size_t>(8 - filled_, n);
      tail_ |= load_partial(p, take) << (8 * filled_);
      filled_ += take;
      p += take;
      n -= take;
      if (filled_ < 8) return *this;
      mix(tail_);
      tail_ = 0;
      filled_ = 0;
    }
    for (; n >= 8; p += 8, n -= 8) {
      std::uint64_t w = 0;
      std::memcpy(&w, p, 8);
      if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap64(w);
      mix(w);
    }
    if (n > 0) {
      tail_ = load_partial(p, n);
      filled_ = n;
    }
    return *this;
  }
  [[nodiscard]] std::uint64_t value() const {
    std::uint64_t h = h_;
    if (filled_ > 0) h = (h ^ tail_) * k_m;
    h ^= length_;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
  }

 private:
  static constexpr std::uint64_t k_m = 0xc6a4a7935bd1e995ULL;
  // The n < 8 bytes at p as the low bytes of a word (first byte lowest, as words are read), from
  // loads into registers: copying them into the word in memory and reading it back whole stalled
  // store forwarding, a third of the walk's own time.
  static std::uint64_t load_partial(const char* p, std::size_t n) {
    const auto byte = [p](std::size_t i) { return static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])); };
    if constexpr (std::endian::native == std::endian::big) {
      std::uint64_t v = 0;
      for (std::size_t i = 0; i < n; ++i) v |= byte(i) << (8 * i);
      return v;
    }
    if (n >= 4) {
      std::uint32_t lo = 0, hi = 0;
      std::memcpy(&lo, p, 4);
      std::memcpy(&hi, p + n - 4, 4);
      return static_cast<std::uint64_t>(lo) | (static_cast<std::uint64_t>(hi) << (8 * (n - 4)));
    }
    if (n == 0) return 0;
    return byte(0) | (byte(n / 2) << (8 * (n / 2))) | (byte(n - 1) << (8 * (n - 1)));
  }
  void mix(std::uint64_t w) {
    w *= k_m;
    w ^= w >> 47;
    w *= k_m;
    h_ = (h_ ^ w) * k_m;
  }
  std::uint64_t h_ = 0x9e3779b97f4a7c15ULL;
  std::uint64_t tail_ = 0;  // the last bytes fed, short of a word
  std::size_t filled_ = 0;
  std::size_t length_ = 0;
};

[[nodiscard]] inline std::uint64_t path_hash(std::string_view path) { return PathHash().add(path).value(); }

class PathIndex {
 public:
  // Replaces the contents with `keys`, which must be distinct (one walk's paths are), each
  // indexed by its place there; `hashes` are their path_hash. The table is filled from
  // `threads` threads at once (0: one per core): 70,000 inserts one after another cost 6 ms.
  void assign_distinct(std::vector<std::string_view> keys, const std::vector<std::uint64_t>& hashes, unsigned threads);
  [[nodiscard]] std::optional<std::uint32_t> find(std::string_view path) const;
  // The same, for a path whose path_hash the caller has.
  [[nodiscard]] std::optional<std::uint32_t> find(std::string_view path, std::uint64_t hash) const {
    return find(path, {}, hash);
  }
  // The path `head` + `tail`, without joining them.
  [[nodiscard]] std::optional<std::uint32_t> find(std::string_view head, std::string_view tail,
                                                  std::uint64_t hash) const;
  // Starts loading the slot a find of this hash reads first. A lookup is one cache miss into a
  // 2 MB table: hashing a batch of paths and prefetching their slots lets the misses overlap.
  void prefetch(std::uint64_t hash) const {
    if (capacity_ > 0) __builtin_prefetch(&slots_[hash & (capacity_ - 1)]);
  }
  [[nodiscard]] bool contains(std::string_view path) const { return find(path).has_value(); }
  [[nodiscard]] std::size_t size() const { return keys_.size(); }
  // Paths by index.
  [[nodiscard]] const std::vector<std::string_view>& keys() const { return keys_; }

 private:
  // All zero when empty, so that a fresh table needs no pass to fill it: calloc's pages come
  // zeroed from the kernel, on first touch, in whichever thread inserts there. (Filling 2 MB of
  // slots with an "empty" mark took a millisecond on one core while the others waited.)
  struct Slot {
    std::uint32_t tag;         // the hash's top half; the bottom half picks the slot
    std::uint32_t index_next;  // index + 1; 0: empty
  };
  struct Free {
    void operator()(Slot* p) const { std::free(p); }
  };
  static std::uint32_t tag_of(std::uint64_t hash) { return static_cast<std::uint32_t>(hash >> 32); }
  std::unique_ptr<Slot[], Free> slots_;
  std::size_t capacity_ = 0;  // a power of two, or 0
  std::vector<std::string_view> keys_;
};

}  // namespace cudafix::resolver::inline base
