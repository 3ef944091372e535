// One walk of a directory tree, in parallel, using d_type instead of a stat per entry.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "resolver/base/diagnostic.hpp"

namespace cudafix::resolver::inline env {

enum class EntryType : std::uint8_t { file, symlink, directory, other };

// 32 bytes: a venv's walk has 55,000 of them, in fresh memory.
struct WalkEntry {
  std::string_view path;  // absolute; points into WalkResult::arena
  std::uint64_t hash;     // path_hash of path, from its folder's hash computed once
  EntryType type;
  bool shared_object_name;  // looks_like_shared_object(name), for the same reason
};

// How the walk used its cache (walk_cache.hpp).
struct WalkCacheReport {
  std::string file;         // empty: the walk had no cache
  std::size_t folders = 0;  // folders walked
  std::size_t reused = 0;   // of those, listings taken from the cache
  bool written = false;     // the file was written again
  // Whether the file systems at and below the roots are ones the cache trusts
  // (stamps_show_every_change); on others (NFS, whose attributes a client caches; FUSE) no cache
  // is read or written.
  bool trusted = false;
  std::string problem;  // why the file was not read or not written, when so
};

struct WalkResult {
  std::vector<std::unique_ptr<char[]>> arena;  // the bytes of every path, in large blocks
  // Every entry below the roots (roots excluded), unordered, as each worker listed them: kept
  // apart so that what reads them can take a worker's share each, in parallel, with no copy.
  std::vector<std::vector<WalkEntry>> parts;
  std::vector<Diagnostic> diagnostics;  // unreadable folders
  WalkCacheReport cache;

  [[nodiscard]] std::size_t size() const {
    std::size_t n = 0;
    for (const auto& p : parts) n += p.size();
    return n;
  }
  template <class F>
  void for_each(F&& f) const {
    for (const auto& p : parts)
      for (const auto& e : p) f(e);
  }
};

// Whether every folder below `real_roots` (realpaths) changes its ctime with every change to its
// entries, given the mount table (/proc/self/mountinfo): true when the filesystem holding each
// root, and every one mounted below a root, is a local one (ext2/3/4, XFS, Btrfs, tmpfs,
// overlayfs). Only then does the walk use its cache.
[[nodiscard]] bool stamps_show_every_change(const std::vector<std::string>& real_roots, std::string_view mountinfo);

// Walks every root; symlinks are listed, never followed, so a symlinked folder cannot take the
// walk outside the environment or round a loop. Folders named in `prune` are listed but not
// entered. `threads` 0 means one per core. With a `cache_file`, folders unchanged since the
// listing kept there are not listed again, and the file is rewritten when anything was.
[[nodiscard]] WalkResult walk_tree(const std::vector<std::string>& roots, unsigned threads = 0,
                                   const std::vector<std::string>& prune = {}, const std::string& cache_file = {});

}  // namespace cudafix::resolver::inline env
