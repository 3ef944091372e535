// A string-keyed cache that many threads read at once: 64 shards, each with its own
// shared_mutex, so readers of different keys do not bounce one lock's cache line between cores
// (one shared_mutex cost the process model half its time on 16 cores). Values never move once
// inserted, so references stay valid.
#pragma once

#include <array>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline base {

template <class V>
class ShardedMap {
 public:
  // The value for `key`, made by make() outside any lock on a miss (two threads may both make
  // it; the first inserted wins).
  template <class Make>
  const V& get(std::string_view key, Make&& make) {
    const Hashed k = hashed(key);
    Shard& s = shards_[k.hash % shards_.size()];
    {
      std::shared_lock lock(s.mutex);
      if (auto it = s.map.find(k); it != s.map.end()) return it->second;
    }
    V value = make();
    std::unique_lock lock(s.mutex);
    return s.map.emplace(std::string(key), std::move(value)).first->second;
  }

  [[nodiscard]] const V* find(const std::string& key) const {
    const Hashed k = hashed(key);
    const Shard& s = shards_[k.hash % shards_.size()];
    std::shared_lock lock(s.mutex);
    auto it = s.map.find(k);
    return it == s.map.end() ? nullptr : &it->second;
  }

  void put(const std::string& key, V value) {
    Shard& s = shards_[hashed(key).hash % shards_.size()];
    std::unique_lock lock(s.mutex);
    s.map.insert_or_assign(key, std::move(value));
  }

 private:
  // A key with its hash, computed once for both the shard and the shard's table (lookups are
  // most of the process model's work, and hashing a 100-byte path twice was a tenth of it).
  struct Hashed {
    std::string_view key;
    std::size_t hash;
  };
  struct Hash : StringHash {
    using StringHash::operator();
    std::size_t operator()(const Hashed& h) const { return h.hash; }
  };
  static Hashed hashed(std::string_view key) { return {key, StringHash{}(key)}; }
  struct Equal {
    using is_transparent = void;
    bool operator()(const std::string& a, const std::string& b) const { return a == b; }
    bool operator()(const Hashed& a, const std::string& b) const { return a.key == b; }
    bool operator()(const std::string& a, const Hashed& b) const { return a == b.key; }
  };
  struct Shard {
    mutable std::shared_mutex mutex;
    std::unordered_map<std::string, V, Hash, Equal> map;
  };
  std::array<Shard, 64> shards_;
};

}  // namespace cudafix::resolver::inline base
