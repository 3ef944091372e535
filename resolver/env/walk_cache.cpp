#include "resolver/env/walk_cache.hpp"

#include "resolver/base/parallel.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

namespace cudafix::resolver::inline env {
namespace {

constexpr std::string_view k_magic = "cfxwalk4";
constexpr std::size_t k_counts = 24;
constexpr std::size_t k_folder = 72;
constexpr std::size_t k_entry = 8;

template <class T>
T read_as(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// An entry's name, once the names were checked for '/' and NUL all at once.
bool is_plain_name(std::string_view n) { return !n.empty() && n != "." && n != ".."; }

std::string_view tail_of(std::string_view dir) { return dir.ends_with('/') ? "" : "/"; }

// An entry's name: its path less its folder's and the slash.
std::string_view name_of(const WalkEntry& e, std::string_view dir) {
  return e.path.substr(dir.size() + tail_of(dir).size());
}

}  // namespace

std::string walk_cache_file(std::string_view cache_dir, const std::vector<std::string>& roots) {
  return cache_file_name(cache_dir, "walk", roots);
}

WalkCache WalkCache::load(const std::string& file, unsigned threads) {
  WalkCache c;
  auto mapped = map_cache_file(file, k_magic, Checksum::later);
  auto reject = [&](const std::string& why) {
    WalkCache bad;
    bad.problem_ = fmt::format("{}: {}", file, why);
    return bad;
  };
  if (!mapped.problem.empty()) {
    c.problem_ = std::move(mapped.problem);
    return c;
  }
  if (!mapped.mapping) return c;  // none yet
  const std::string_view body = mapped.payload;
  // A file torn or altered says so by its hash first, whichever check would catch it.
  const auto bad_counts = [&] {
    return reject(checksum_holds(mapped) ? "its size does not match its counts" : "its checksum does not match");
  };
  if (body.size() < k_counts) return bad_counts();
  const auto folder_count = read_as<std::uint32_t>(body.data());
  const auto path_bytes = read_as<std::uint32_t>(body.data() + 4);
  const auto entry_count = read_as<std::uint64_t>(body.data() + 8);
  const auto name_bytes = read_as<std::uint64_t>(body.data() + 16);
  // Each count is checked against the size before they are multiplied and added.
  const std::size_t records = body.size() - k_counts;
  if (entry_count > records / k_entry || name_bytes > records ||
      k_folder * folder_count + k_entry * entry_count + name_bytes != records || path_bytes > name_bytes)
    return bad_counts();

  const char* folders = body.data() + k_counts;
  const char* entries = folders + k_folder * folder_count;
  const std::string_view names(entries + k_entry * entry_count, name_bytes);
  std::vector<std::string_view> keys;
  std::vector<std::uint64_t> hashes;
  // Every record's bounds, checked on one core while the payload's hash is computed on another
  // (each took half of the 1.3 ms a load took on 2 cores).
  auto check_records = [&]() -> std::string {
    // The folders' paths, then the entries' names, in which no '/' or NUL may be: checked here
    // in two passes of memchr, where a loop over each name's bytes cost a millisecond.
    const std::string_view paths = names.substr(0, path_bytes);
    const std::string_view entry_names = names.substr(path_bytes);
    if (std::memchr(entry_names.data(), '/', entry_names.size()) != nullptr ||
        std::memchr(entry_names.data(), '\0', entry_names.size()) != nullptr)
      return "an entry's name holds '/' or NUL";
    keys.reserve(folder_count);
    hashes.reserve(folder_count);
    c.folders_.reserve(folder_count);
    for (std::uint32_t i = 0; i < folder_count; ++i) {
      CacheReader r(std::string_view(folders + k_folder * i, k_folder));
      Folder folder{};
      std::uint64_t hash = 0;
      std::uint32_t path_offset = 0, path_length = 0;
      r.get(folder.stamp);
      r.get(hash);
      r.get(path_offset);
      r.get(path_length);
      r.get(folder.first_entry);
      r.get(folder.entry_count);
      if (path_offset > paths.size() || path_length > paths.size() - path_offset)
        return fmt::format("folder {} names bytes outside the file", i);
      if (folder.first_entry > entry_count || folder.entry_count > entry_count - folder.first_entry)
        return fmt::format("folder {} names entries outside the file", i);
      const std::string_view path = paths.substr(path_offset, path_length);
      if (!path.starts_with('/') || !path.ends_with('/')) return fmt::format("folder {} has no absolute path", i);
      keys.push_back(path);
      hashes.push_back(hash);
      c.folders_.push_back(folder);
    }
    for (std::uint64_t i = 0; i < entry_count; ++i) {
      const char* e = entries + k_entry * i;
      const auto offset = read_as<std::uint32_t>(e);
      const auto length = read_as<std::uint16_t>(e + 4);
      if (offset < path_bytes || offset > names.size() || length > names.size() - offset ||
          !is_plain_name(names.substr(offset, length)) ||
          static_cast<unsigned char>(e[6]) > static_cast<unsigned char>(EntryType::other))
        return fmt::format("entry {} is not a name in the file", i);
    }
    return {};
  };
  bool hash_holds = false;
  std::string problem;
  parallel_for(2, threads, [&](std::size_t task) {
    if (task == 0)
      hash_holds = checksum_holds(mapped);
    else
      problem = check_records();
  });
  if (!hash_holds) return reject("its checksum does not match");
  if (!problem.empty()) return reject(problem);
  c.mapping_ = std::move(mapped.mapping);
  c.entries_ = entries;
  c.names_ = names.data();
  c.index_.assign_distinct(std::move(keys), hashes, threads);
  return c;
}

const WalkCache::Folder* WalkCache::find(std::string_view dir, std::string_view tail, std::uint64_t hash) const {
  const auto i = index_.find(dir, tail, hash);
  return i ? &folders_[*i] : nullptr;
}

WalkCache::Entry WalkCache::entry(std::uint32_t i) const {
  const char* e = entries_ + k_entry * i;
  return {{names_ + read_as<std::uint32_t>(e), read_as<std::uint16_t>(e + 4)}, static_cast<EntryType>(e[6]), e[7] != 0};
}

std::string store_walk_cache(const std::string& file, const std::vector<ListedFolder>& folders,
                             const std::vector<std::vector<WalkEntry>>& parts) {
  // The folders' paths come first among the names, then the entries' names.
  std::uint64_t entry_count = 0;
  std::uint64_t path_bytes = 0;
  std::uint64_t name_bytes = 0;
  for (const auto& f : folders) {
    entry_count += f.count;
    path_bytes += f.dir.size() + tail_of(f.dir).size();
    for (std::uint32_t k = f.first; k < f.first + f.count; ++k) name_bytes += name_of(parts[f.part][k], f.dir).size();
  }
  // Offsets are 32 bits: a tree with 4 GB of names is listed every time rather than kept wrong.
  if (path_bytes + name_bytes > UINT32_MAX || entry_count > UINT32_MAX || folders.size() > UINT32_MAX)
    return "too large to keep";
  return store_cache_file(file, k_magic, [&](CacheWriter& w) {
    w.put(static_cast<std::uint32_t>(folders.size())).put(static_cast<std::uint32_t>(path_bytes));
    w.put(entry_count).put(path_bytes + name_bytes);
    std::uint32_t path_at = 0;
    std::uint32_t first = 0;
    for (const auto& f : folders) {
      const auto length = static_cast<std::uint32_t>(f.dir.size() + tail_of(f.dir).size());
      w.put(f.stamp).put(f.hash).put(path_at).put(length).put(first).put(f.count);
      path_at += length;
      first += f.count;
    }
    auto name_at = static_cast<std::uint32_t>(path_bytes);
    for (const auto& f : folders)
      for (std::uint32_t k = f.first; k < f.first + f.count; ++k) {
        const WalkEntry& e = parts[f.part][k];
        const std::string_view name = name_of(e, f.dir);
        w.put(name_at).put(static_cast<std::uint16_t>(name.size()));
        w.put(static_cast<std::uint8_t>(e.type)).put(static_cast<std::uint8_t>(e.shared_object_name ? 1 : 0));
        name_at += static_cast<std::uint32_t>(name.size());
      }
    for (const auto& f : folders) w.append(f.dir).append(tail_of(f.dir));
    for (const auto& f : folders)
      for (std::uint32_t k = f.first; k < f.first + f.count; ++k) w.append(name_of(parts[f.part][k], f.dir));
  });
}

}  // namespace cudafix::resolver::inline env
