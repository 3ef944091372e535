#include "resolver/base/path_index.hpp"

#include <algorithm>
#include <atomic>
#include <new>

#include "resolver/base/parallel.hpp"

namespace cudafix::resolver::inline base {

void PathIndex::assign_distinct(std::vector<std::string_view> keys, const std::vector<std::uint64_t>& hashes,
                                unsigned threads) {
  std::size_t cap = 16;
  while (cap < keys.size() * 2) cap <<= 1;
  slots_.reset(static_cast<Slot*>(std::calloc(cap, sizeof(Slot))));
  if (!slots_) throw std::bad_alloc();
  capacity_ = cap;
  keys_ = std::move(keys);
  const std::size_t mask = cap - 1;
  constexpr std::size_t k_chunk = 8192;
  const std::size_t chunks = (keys_.size() + k_chunk - 1) / k_chunk;
  parallel_for(chunks, threads, [&](std::size_t c) {
    const std::size_t end = std::min(keys_.size(), (c + 1) * k_chunk);
    for (std::size_t k = c * k_chunk; k < end; ++k) {
      for (std::size_t i = hashes[k] & mask;; i = (i + 1) & mask) {
        // The keys are distinct, so a slot another thread took is simply passed over.
        std::uint32_t empty = 0;
        if (std::atomic_ref<std::uint32_t>(slots_[i].index_next)
                .compare_exchange_strong(empty, static_cast<std::uint32_t>(k + 1), std::memory_order_relaxed)) {
          slots_[i].tag = tag_of(hashes[k]);
          break;
        }
      }
    }
  });
}

std::optional<std::uint32_t> PathIndex::find(std::string_view path) const { return find(path, path_hash(path)); }

std::optional<std::uint32_t> PathIndex::find(std::string_view head, std::string_view tail, std::uint64_t h) const {
  if (capacity_ == 0) return std::nullopt;
  const std::size_t mask = capacity_ - 1;
  const std::uint32_t tag = tag_of(h);
  for (std::size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.index_next == 0) return std::nullopt;
    if (s.tag != tag) continue;
    const std::string_view key = keys_[s.index_next - 1];
    if (key.size() == head.size() + tail.size() && key.starts_with(head) && key.ends_with(tail))
      return s.index_next - 1;
  }
}

}  // namespace cudafix::resolver::inline base
