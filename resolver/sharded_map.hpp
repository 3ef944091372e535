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
#include <unordered_map>

namespace cudafix::resolver {

template <class V>
class ShardedMap {
 public:
  // The value for `key`, made by make() outside any lock on a miss (two threads may both make
  // it; the first inserted wins).
  template <class Make>
  const V& get(const std::string& key, Make&& make) {
    Shard& s = shard(key);
    {
      std::shared_lock lock(s.mutex);
      if (auto it = s.map.find(key); it != s.map.end()) return it->second;
    }
    V value = make();
    std::unique_lock lock(s.mutex);
    return s.map.emplace(key, std::move(value)).first->second;
  }

  [[nodiscard]] const V* find(const std::string& key) const {
    const Shard& s = shard(key);
    std::shared_lock lock(s.mutex);
    auto it = s.map.find(key);
    return it == s.map.end() ? nullptr : &it->second;
  }

  void put(const std::string& key, V value) {
    Shard& s = shard(key);
    std::unique_lock lock(s.mutex);
    s.map.insert_or_assign(key, std::move(value));
  }

 private:
  struct Shard {
    mutable std::shared_mutex mutex;
    std::unordered_map<std::string, V> map;
  };
  Shard& shard(const std::string& key) { return shards_[std::hash<std::string>{}(key) % shards_.size()]; }
  const Shard& shard(const std::string& key) const { return shards_[std::hash<std::string>{}(key) % shards_.size()]; }
  std::array<Shard, 64> shards_;
};

}  // namespace cudafix::resolver
