// A set of paths with a dense index each, for the 70,000 entries one walk of a venv finds:
// open addressing over views into the walk's arena, no allocation per entry.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace cudafix::resolver {

class PathIndex {
 public:
  // Replaces the contents with `keys`, which must be distinct (one walk's paths are), each
  // indexed by its place there; `hashes` are their std::hash. The table is filled from
  // `threads` threads at once (0: one per core): 70,000 inserts one after another cost 6 ms.
  void assign_distinct(std::vector<std::string_view> keys, const std::vector<std::uint64_t>& hashes, unsigned threads);
  [[nodiscard]] std::optional<std::uint32_t> find(std::string_view path) const;
  // The same, for a path whose std::hash the caller has.
  [[nodiscard]] std::optional<std::uint32_t> find(std::string_view path, std::uint64_t hash) const;
  // Starts loading the slot a find of this hash reads first. A lookup is one cache miss into a
  // 2 MB table: hashing a batch of paths and prefetching their slots lets the misses overlap.
  void prefetch(std::uint64_t hash) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[hash & (slots_.size() - 1)]);
  }
  [[nodiscard]] bool contains(std::string_view path) const { return find(path).has_value(); }
  [[nodiscard]] std::size_t size() const { return keys_.size(); }
  // Paths by index.
  [[nodiscard]] const std::vector<std::string_view>& keys() const { return keys_; }

 private:
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t index = UINT32_MAX;  // UINT32_MAX: empty
  };
  std::vector<Slot> slots_;
  std::vector<std::string_view> keys_;
};

}  // namespace cudafix::resolver
