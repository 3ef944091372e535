// Ownership: every RECORD row matched against the walk, and the owners of every path (scan_phases.hpp).
#include "resolver/env/scan_phases.hpp"

#include <fmt/format.h>

#include <sys/stat.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <iterator>
#include <map>
#include <set>

#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"
#include "resolver/elf/elf_store.hpp"
#include "resolver/env/fs_walk.hpp"
#include "resolver/env/requirements.hpp"
#include "resolver/env/walk_cache.hpp"

namespace cudafix::resolver::inline env {
namespace {

// The nearest ancestor of `path` below `top` that is a symlink on disk, if any.
std::optional<std::string> symlinked_ancestor(const std::string& path, const std::string& top,
                                              const std::unordered_set<std::string>& symlinks) {
  for (std::string dir = parent_dir(path); dir.size() > top.size() && is_within(dir, top); dir = parent_dir(dir))
    if (symlinks.count(dir)) return dir;
  return std::nullopt;
}

// The rows of every chunk sorted by (hash, dist, row), in parallel: the hash's top bits split them
// into buckets that sort on their own and follow one another in order. The corpus has 20,000
// such rows (bytecode in __pycache__), and one sort after the parallel part took 2.5 ms here.
template <class Chunks>
std::vector<Environment::UnwalkedRow> sorted_unwalked(const Chunks& chunks, unsigned threads) {
  constexpr int k_bucket_bits = 6;
  constexpr std::size_t k_buckets = std::size_t{1} << k_bucket_bits;
  auto bucket_of = [](const Environment::UnwalkedRow& u) { return u.hash >> (64 - k_bucket_bits); };
  std::vector<std::size_t> start(k_buckets + 1, 0);
  for (const auto& chunk : chunks)
    for (const auto& u : chunk.unwalked) ++start[bucket_of(u) + 1];
  for (std::size_t b = 0; b < k_buckets; ++b) start[b + 1] += start[b];
  std::vector<Environment::UnwalkedRow> rows(start.back());
  std::vector<std::size_t> next(start.begin(), start.end() - 1);
  for (const auto& chunk : chunks)
    for (const auto& u : chunk.unwalked) rows[next[bucket_of(u)]++] = u;
  parallel_for(k_buckets, threads, [&](std::size_t b) {
    std::sort(
        rows.begin() + static_cast<std::ptrdiff_t>(start[b]), rows.begin() + static_cast<std::ptrdiff_t>(start[b + 1]),
        [](const auto& x, const auto& y) { return std::tie(x.hash, x.dist, x.row) < std::tie(y.hash, y.dist, y.row); });
  });
  return rows;
}

}  // namespace

void index_ownership(Environment& env, const std::unordered_set<std::string>& symlinks, unsigned threads) {
  env.missing.resize(env.dists.size());
  env.first_owner.assign(env.on_disk.size(), -1);
  // In parallel over chunks of rows (torch alone lists 15,000 files): each row's place in the
  // walk (read-only lookups), or its path when the walk did not see it. Then owners are
  // recorded in one pass, in dist order.
  constexpr std::size_t k_chunk = 1024;  // small enough to spread torch over 16 cores
  struct Chunk {
    std::size_t dist, begin, end;
    std::vector<Environment::UnwalkedRow> unwalked;
    std::vector<std::string> missing;
    std::vector<Diagnostic> diagnostics;
    std::vector<std::uint32_t> shared;  // walked paths another dist claimed first
  };
  std::vector<Chunk> chunks;
  for (std::size_t di = 0; di < env.dists.size(); ++di) {
    for (std::size_t b = 0; b < env.dists[di].record.size(); b += k_chunk)
      chunks.push_back({di, b, std::min(b + k_chunk, env.dists[di].record.size()), {}, {}, {}, {}});
  }
  parallel_for(chunks.size(), threads, [&](std::size_t c) {
    Chunk& chunk = chunks[c];
    const DistInfo& d = env.dists[chunk.dist];
    const SiteDir* site = nullptr;
    for (const auto& s : env.layout.sites)
      if (s.real == d.site_dir) site = &s;
    const std::string bound = site ? site->bound : env.layout.root_real;
    const std::string record_file = d.site_dir + "/" + d.dir_name + "/" + d.record_name();
    // A clean relative row (nearly all of them) is looked up as the site dir, hashed once per
    // chunk, followed by the row as written: no joined path unless the walk did not see it.
    const std::string prefix = d.site_dir.ends_with('/') ? d.site_dir : d.site_dir + "/";
    PathHash prefix_hash;
    prefix_hash.add(prefix);
    // Such a row stays within the site dir, so within its bound when the site dir is; and it is
    // bytecode when its joined path is: when the site dir is in a __pycache__, or the row is.
    const bool site_within_bound = is_within(std::string_view(prefix).substr(0, prefix.size() - 1), bound);
    const bool site_in_pycache = in_pycache(prefix);
    // Rows go in batches: a batch's paths are hashed first, their slots in the walk's index
    // prefetched, and then looked up, so that the lookups' cache misses overlap.
    constexpr std::size_t k_batch = 16;
    std::array<bool, k_batch> clean{};
    std::array<std::string, k_batch> paths;  // joined: rows that are not clean
    std::array<std::uint64_t, k_batch> hashes{};
    std::array<bool, k_batch> escapes{};
    std::array<std::optional<std::uint32_t>, k_batch> found{};
    for (std::size_t b = chunk.begin; b < chunk.end; b += k_batch) {
      const std::size_t n = std::min(k_batch, chunk.end - b);
      for (std::size_t i = 0; i < n; ++i) {
        const std::string_view rel = d.record[b + i].path;
        clean[i] = site_within_bound && is_clean_relative(rel);
        if (clean[i]) {
          hashes[i] = PathHash(prefix_hash).add(rel).value();
        } else {
          join_normal(d.site_dir, rel, paths[i]);
          hashes[i] = path_hash(paths[i]);
        }
        env.on_disk.prefetch(hashes[i]);
      }
      // Then each found row's owner slot, a random write into the walk's order, prefetched in
      // turn before the rows are claimed.
      for (std::size_t i = 0; i < n; ++i) {
        const auto& row = d.record[b + i];
        escapes[i] = !clean[i] && !is_within(paths[i], bound);
        if (escapes[i]) continue;
        found[i] = clean[i] ? env.on_disk.find(prefix, row.path, hashes[i]) : env.on_disk.find(paths[i], hashes[i]);
        if (found[i]) __builtin_prefetch(&env.first_owner[*found[i]], 1);
      }
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t k = b + i;
        const auto& row = d.record[k];
        if (escapes[i]) {
          chunk.diagnostics.push_back(
              {record_file, row.line, std::nullopt,
               fmt::format("path '{}' escapes the environment ({}); ignored", to_valid_utf8(row.path), bound)});
          continue;
        }
        const auto index = found[i];
        if (index) {
          // Most paths have one owner: claim it without a lock; a second owner is sorted out below.
          int expected = -1;
          const int dist = static_cast<int>(chunk.dist);
          if (!std::atomic_ref<int>(env.first_owner[*index]).compare_exchange_strong(expected, dist) &&
              expected != dist)
            chunk.shared.push_back(*index);
          continue;
        }
        chunk.unwalked.push_back({hashes[i], static_cast<int>(chunk.dist), static_cast<std::uint32_t>(k)});
        if (clean[i]) {
          // Bytecode rows, a third of all rows, are settled without their path.
          if (site_in_pycache || row.path.starts_with("__pycache__/") || in_pycache(row.path)) continue;
          join_normal(d.site_dir, row.path, paths[i]);
        }
        const std::string& abs = paths[i];
        if (in_pycache(abs)) continue;  // not walked, and never a finding
        if (env.site_of(abs)) {
          if (auto link = symlinked_ancestor(abs, d.site_dir, symlinks)) {
            chunk.diagnostics.push_back(
                {record_file, row.line, std::nullopt,
                 fmt::format("path '{}' goes through the symlinked folder {}", to_valid_utf8(row.path), *link)});
          }
          chunk.missing.push_back(abs);
          continue;
        }
        // Outside the walked folders (bin/ scripts): few rows, one lstat each.
        std::error_code ec;
        if (!std::filesystem::exists(std::filesystem::symlink_status(abs, ec))) chunk.missing.push_back(abs);
      }
    }
  });
  for (auto& chunk : chunks) {
    const int dist = static_cast<int>(chunk.dist);
    for (const auto w : chunk.shared) {
      auto& owners = env.more_owners[w];
      if (owners.empty()) owners.push_back(env.first_owner[w]);
      if (std::find(owners.begin(), owners.end(), dist) == owners.end()) owners.push_back(dist);
    }
    for (auto& m : chunk.missing) env.missing[chunk.dist].push_back(std::move(m));
    for (auto& d : chunk.diagnostics) env.diagnostics.push_back(std::move(d));
  }
  for (auto& [index, owners] : env.more_owners) std::sort(owners.begin(), owners.end());
  env.unwalked = sorted_unwalked(chunks, threads);
  for (auto& m : env.missing) {
    std::sort(m.begin(), m.end());
    m.erase(std::unique(m.begin(), m.end()), m.end());
  }
}

}  // namespace cudafix::resolver::inline env
