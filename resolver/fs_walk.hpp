// One walk of a directory tree, in parallel, using d_type instead of a stat per entry.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "resolver/diagnostic.hpp"

namespace cudafix::resolver {

enum class EntryType : std::uint8_t { file, symlink, directory, other };

struct WalkEntry {
  std::string_view path;  // absolute; points into WalkResult::arena
  EntryType type;
  std::uint64_t hash;       // path_hash of path, from its folder's hash computed once
  bool shared_object_name;  // looks_like_shared_object(name), for the same reason
};

struct WalkResult {
  std::vector<std::unique_ptr<char[]>> arena;  // the bytes of every path, in large blocks
  // Every entry below the roots (roots excluded), unordered, as each worker listed them: kept
  // apart so that what reads them can take a worker's share each, in parallel, with no copy.
  std::vector<std::vector<WalkEntry>> parts;
  std::vector<Diagnostic> diagnostics;  // unreadable folders

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

// Walks every root; symlinks are listed, never followed, so a symlinked folder cannot take the
// walk outside the environment or round a loop. Folders named in `prune` are listed but not
// entered. `threads` 0 means one per core.
[[nodiscard]] WalkResult walk_tree(const std::vector<std::string>& roots, unsigned threads = 0,
                                   const std::vector<std::string>& prune = {});

}  // namespace cudafix::resolver
