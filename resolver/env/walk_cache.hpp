// What the walk saw in each folder, kept between runs, so that a folder unchanged since is not
// listed again: its stamp is read (one statx) instead of opening, reading and closing it. git's
// untracked cache does the same. On a 2-core VM, listing a venv's 5,300 folders cost 35 ms, and
// a statx of each 6 ms (2 threads).
//
// A folder's listing is reused when its stamp (cache_file.hpp: device, inode, size, ctime, mtime)
// is the one it had when it was listed, and kept only when the folder had been still for
// settle_time() when the walk started.
//
// The payload of the cache file (cache_file.hpp; magic "cfxwalk4"), one per set of walked roots:
//   u32 folder count F; u32 path bytes P; u64 entry count E; u64 name bytes S;
//   F folder records of 72 bytes: the stamp (48 bytes), u64 PathHash of its path and a slash,
//     u32 path offset, u32 path length (into the names), u32 first entry, u32 entry count;
//   E entry records of 8 bytes: u32 name offset, u16 name length, u8 EntryType, u8 1 when the
//     name looks like a shared object;
//   S bytes of names: the folders' paths (the first P), then the entries' names.
// A file that fails any check (its hash, a count, a range, a name holding '/' or NUL or being
// "." or "..", a folder path not absolute) is not used at all: the walk lists every folder and
// writes the file again.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "resolver/base/cache_file.hpp"
#include "resolver/base/path_index.hpp"
#include "resolver/env/fs_walk.hpp"

namespace cudafix::resolver::inline env {

// The cache file for a walk of `roots`, in `cache_dir`.
[[nodiscard]] std::string walk_cache_file(std::string_view cache_dir, const std::vector<std::string>& roots);

class WalkCache {
 public:
  struct Folder {
    Stamp stamp;
    std::uint32_t first_entry;
    std::uint32_t entry_count;
  };
  struct Entry {
    std::string_view name;
    EntryType type;
    bool shared_object_name;
  };

  // The cache in `file`: empty when there is none, or when it fails a check (problem() says
  // which). The folder index is built on `threads` threads.
  [[nodiscard]] static WalkCache load(const std::string& file, unsigned threads);

  // The folder `dir` + `tail` (tail: "/", or "" when dir ends in one), whose PathHash is `hash`.
  [[nodiscard]] const Folder* find(std::string_view dir, std::string_view tail, std::uint64_t hash) const;
  [[nodiscard]] Entry entry(std::uint32_t i) const;
  [[nodiscard]] std::size_t folders() const { return folders_.size(); }
  [[nodiscard]] const std::string& problem() const { return problem_; }

 private:
  std::shared_ptr<const char> mapping_;  // the file
  std::vector<Folder> folders_;
  const char* entries_ = nullptr;  // the entry records, in the mapping
  const char* names_ = nullptr;
  PathIndex index_;  // folder paths, with their slash
  std::string problem_;
};

// One folder this walk listed or took from the cache, for the next cache.
struct ListedFolder {
  std::string_view dir;  // as walked
  std::uint64_t hash;    // PathHash of dir and its slash
  Stamp stamp;
  std::uint32_t part;  // its entries: WalkResult::parts[part][first, first + count)
  std::uint32_t first;
  std::uint32_t count;
};

// Replaces `file` with the cache of `folders`, whose entries are in `parts` (store_cache_file).
// Returns what went wrong, or "" when it was written.
[[nodiscard]] std::string store_walk_cache(const std::string& file, const std::vector<ListedFolder>& folders,
                                           const std::vector<std::vector<WalkEntry>>& parts);

}  // namespace cudafix::resolver::inline env
