#include "resolver/env/environment.hpp"

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
#include "resolver/env/egg_info.hpp"
#include "resolver/env/fs_walk.hpp"
#include "resolver/env/requirements.hpp"
#include "resolver/env/scan_phases.hpp"
#include "resolver/env/walk_cache.hpp"

namespace cudafix::resolver::inline env {
namespace {

struct DistInfoLocation {
  const SiteDir* site;
  std::string name;
};

// The real site folders to walk, each once.
std::vector<const SiteDir*> unique_sites(const EnvLayout& layout) {
  std::vector<const SiteDir*> out;
  for (const auto& s : layout.sites) {
    bool seen = false;
    for (const auto* o : out) seen |= o->real == s.real;
    if (!seen) out.push_back(&s);
  }
  return out;
}

void sort_diagnostics(std::vector<Diagnostic>& diags) {
  std::sort(diags.begin(), diags.end(), [](const Diagnostic& a, const Diagnostic& b) {
    return std::tie(a.file, a.line, a.offset, a.message) < std::tie(b.file, b.line, b.offset, b.message);
  });
}

}  // namespace

const SiteDir* Environment::site_of(std::string_view path) const {
  for (const auto& s : layout.sites)
    if (is_within(path, s.real)) return &s;
  return nullptr;
}

std::string Environment::display(const std::string& path) const {
  const SiteDir* s = site_of(path);
  return s ? relative_to(path, s->real) : path;
}

namespace {}  // namespace

bool Environment::present(std::string_view path) const {
  if (on_disk.contains(path)) return true;
  if (!in_pycache(path)) return false;
  struct stat st {};
  return ::lstat(std::string(path).c_str(), &st) == 0;
}

std::string Environment::unwalked_path(const UnwalkedRow& u) const {
  const auto& d = dists[static_cast<std::size_t>(u.dist)];
  return join_normal(d.site_dir, d.record[u.row].path);
}

std::vector<int> Environment::owners_of(const std::string& path) const {
  if (auto index = on_disk.find(path)) {
    if (auto it = more_owners.find(*index); it != more_owners.end()) return it->second;
    if (first_owner[*index] >= 0) return {first_owner[*index]};
    return {};
  }
  std::vector<int> out;
  const std::uint64_t h = path_hash(path);
  auto it = std::lower_bound(unwalked.begin(), unwalked.end(), h,
                             [](const UnwalkedRow& u, std::uint64_t x) { return u.hash < x; });
  for (; it != unwalked.end() && it->hash == h; ++it)
    if ((out.empty() || out.back() != it->dist) && unwalked_path(*it) == path) out.push_back(it->dist);
  return out;
}

std::vector<std::pair<std::string, std::vector<int>>> Environment::shared_paths() const {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  for (const auto& [index, owners] : more_owners) out.emplace_back(std::string(on_disk.keys()[index]), owners);
  // Unwalked rows of one path sit together (same hash); only runs of several dists matter.
  for (std::size_t i = 0; i < unwalked.size();) {
    std::size_t j = i;
    while (j < unwalked.size() && unwalked[j].hash == unwalked[i].hash) ++j;
    if (unwalked[j - 1].dist != unwalked[i].dist) {
      std::map<std::string, std::vector<int>> by_path;
      for (std::size_t k = i; k < j; ++k) {
        auto& owners = by_path[unwalked_path(unwalked[k])];
        if (owners.empty() || owners.back() != unwalked[k].dist) owners.push_back(unwalked[k].dist);
      }
      for (auto& [path, owners] : by_path)
        if (owners.size() > 1) out.emplace_back(path, std::move(owners));
    }
    i = j;
  }
  for (auto& [path, owners] : out) std::sort(owners.begin(), owners.end());
  std::sort(out.begin(), out.end());
  return out;
}

const SharedObject* Environment::object(const std::string& path) const {
  auto it = object_by_path.find(path);
  return it == object_by_path.end() ? nullptr : &objects[it->second];
}

std::optional<int> Environment::dist_index(std::string_view normalized_name) const {
  auto it = dist_by_name.find(normalized_name);
  if (it == dist_by_name.end()) return std::nullopt;
  return it->second;
}

std::vector<const SharedObject*> Environment::providers(const std::string& soname) const {
  std::vector<const SharedObject*> out;
  if (auto it = objects_by_name.find(soname); it != objects_by_name.end())
    for (auto i : it->second) out.push_back(&objects[i]);
  return out;
}

std::vector<const SharedObject*> Environment::consumers(const std::string& soname) const {
  std::vector<const SharedObject*> out;
  if (auto it = objects_needing.find(soname); it != objects_needing.end())
    for (auto i : it->second) out.push_back(&objects[i]);
  return out;
}

std::vector<int> Environment::requirement_closure(int dist) const {
  // A search over (dist, extras asked of it); then ordered deps-first for import. Flat
  // arrays by dist index: the process model asks this of all 197 dists of a venv, and sets of
  // (dist, extra) strings were a tenth of its time.
  std::vector<char> reached(dists.size(), 0);
  std::vector<std::vector<std::string_view>> extras_asked(dists.size());
  std::vector<std::pair<int, std::vector<std::string_view>>> queue{{dist, {}}};
  std::vector<int> found;
  while (!queue.empty()) {
    auto [d, extras] = std::move(queue.back());
    queue.pop_back();
    for (const auto& ref : dists[static_cast<std::size_t>(d)].requirements) {
      bool applies = ref.gated_by.empty();
      for (const auto& g : ref.gated_by) applies |= std::find(extras.begin(), extras.end(), g) != extras.end();
      if (!applies) continue;
      const auto target = dist_index(ref.name);
      if (!target || *target == dist) continue;
      const auto t = static_cast<std::size_t>(*target);
      std::vector<std::string_view> fresh;
      for (const auto& e : ref.extras) {
        auto& asked = extras_asked[t];
        if (std::find(asked.begin(), asked.end(), e) != asked.end()) continue;
        asked.push_back(e);
        fresh.push_back(e);
      }
      const bool first = !reached[t];
      reached[t] = 1;
      if (first) found.push_back(*target);
      if (first || !fresh.empty()) queue.push_back({*target, std::move(fresh)});
    }
  }
  // Import order: a dist after everything it requires (depth-first post-order, by name).
  std::vector<int> order;
  std::vector<char> done(dists.size(), 0);
  std::function<void(int)> visit = [&](int d) {
    if (done[static_cast<std::size_t>(d)]) return;
    done[static_cast<std::size_t>(d)] = 1;
    for (const auto& ref : dists[static_cast<std::size_t>(d)].requirements) {
      const auto target = dist_index(ref.name);
      if (target && reached[static_cast<std::size_t>(*target)]) visit(*target);
    }
    order.push_back(d);
  };
  std::sort(found.begin(), found.end());
  for (int d : found) visit(d);
  return order;
}

Process Environment::process_for(int dist) const {
  return process_for(dist, [&](int d) {
    return static_cast<std::size_t>(d) < imported.size() ? &imported[static_cast<std::size_t>(d)] : nullptr;
  });
}

Process Environment::process_for(int dist,
                                 const std::function<const std::vector<LoadedObject>*(int)>& imported_of) const {
  Process p = base_process ? *base_process : loader->start_process();
  if (dist < 0) return p;
  const std::vector<int> closure = static_cast<std::size_t>(dist) < closures.size()
                                       ? closures[static_cast<std::size_t>(dist)]
                                       : requirement_closure(dist);
  for (int d : closure) {
    if (const auto* done = imported_of(d)) {
      for (const auto& o : *done) loader->preload(p, o);
      continue;
    }
    for (const auto& o : objects)
      if (o.entry_point && std::find(o.owners.begin(), o.owners.end(), d) != o.owners.end()) loader->load(p, o.path);
  }
  p.load_start = p.objects.size();
  return p;
}

namespace {

enum class FollowLinks { no, yes };

// The dist-info and egg-info folders, egg-info files and egg-links directly in each site: one
// readdir each. The walk never follows a symlink, so the full scan takes only real folders;
// reading metadata alone follows them, as pip does.
std::vector<DistInfoLocation> list_dist_infos(const std::vector<const SiteDir*>& sites, FollowLinks follow) {
  std::vector<DistInfoLocation> out;
  for (const auto* s : sites) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(s->real, ec)) {
      std::string name = e.path().filename().string();
      if (!is_dist_entry(name)) continue;
      const bool linked = e.is_symlink(ec);
      if (follow == FollowLinks::no && linked) continue;
      const bool folder = e.is_directory(ec);
      const bool file = e.is_regular_file(ec);
      const bool taken = name.ends_with(".dist-info") ? folder : name.ends_with(".egg-info") ? folder || file : file;
      if (taken) out.push_back({s, std::move(name)});
    }
  }
  return out;
}

std::vector<ReadDistInfo> read_dist_infos(const std::vector<DistInfoLocation>& locations, unsigned threads,
                                          ReadRecord with_record) {
  std::vector<ReadDistInfo> reads(locations.size());
  parallel_for(locations.size(), threads, [&](std::size_t i) {
    const auto& at = locations[i];
    reads[i] = at.name.ends_with(".dist-info") ? read_dist_info(at.site->real, at.name, at.site->root, with_record)
                                               : read_egg_info(at.site->real, at.name, at.site->root, with_record);
  });
  return reads;
}

// The dists in name order, so indices are the same whatever order the reads finished in.
void add_dists(Environment& env, std::vector<ReadDistInfo> reads) {
  std::vector<std::size_t> order(reads.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(reads[a].dist.normalized, reads[a].dist.dir_name) <
           std::tie(reads[b].dist.normalized, reads[b].dist.dir_name);
  });
  for (auto i : order) {
    env.dist_by_name.emplace(reads[i].dist.normalized, static_cast<int>(env.dists.size()));
    env.dists.push_back(std::move(reads[i].dist));
    for (auto& d : reads[i].diagnostics) env.diagnostics.push_back(std::move(d));
  }
}

// The shared objects among the candidates, with their owners (so after ownership).
// `candidates` are in path order, so the objects are made in the order they are kept in: each on
// its own core (its owners looked up, its ELF facts copied into the cache), then gathered.
void add_objects(Environment& env, const std::vector<std::string>& candidates, std::vector<ElfRead> reads,
                 const std::vector<std::string>& symlink_candidates, unsigned threads) {
  std::vector<std::optional<SharedObject>> made(candidates.size());
  parallel_for(candidates.size(), threads, [&](std::size_t i) {
    if (reads[i].status == ElfReadStatus::not_elf) return;
    SharedObject o;
    o.path = candidates[i];
    o.owners = env.owners_of(o.path);
    o.elf = reads[i];
    o.entry_point = o.elf.status == ElfReadStatus::ok && !o.elf.info.soname;
    env.elf_cache->put(o.path, std::move(reads[i]));
    made[i] = std::move(o);
  });
  for (auto& o : made) {
    if (!o) continue;
    if (o->elf.status == ElfReadStatus::invalid) env.diagnostics.push_back(o->elf.diagnostic);
    env.objects.push_back(std::move(*o));
  }
  // The objects are in path order: a symlink's target is found by a binary search, and the
  // indexes are made once, below.
  for (const auto& link : symlink_candidates) {
    const std::string target = real_path_of(link);
    const auto it = std::lower_bound(env.objects.begin(), env.objects.end(), target,
                                     [](const SharedObject& o, const std::string& p) { return o.path < p; });
    if (it != env.objects.end() && it->path == target) it->aliases.push_back(link);
  }
  for (auto& o : env.objects) std::sort(o.aliases.begin(), o.aliases.end());
  index_objects(env);
}

}  // namespace

// Indexes for object(), providers() and consumers(), each object once per name, in path order.
void index_objects(Environment& env) {
  env.object_by_path.clear();
  env.objects_by_name.clear();
  env.objects_needing.clear();
  for (std::size_t i = 0; i < env.objects.size(); ++i) env.object_by_path[env.objects[i].path] = i;
  // Objects go in in index order, so a name an object has twice (its file's and its SONAME) is
  // the last one listed there: no list of its names made and sorted to find it.
  auto add = [](auto& index, std::string_view name, std::size_t i) {
    auto it = index.find(name);
    if (it == index.end()) it = index.emplace(std::string(name), std::vector<std::size_t>()).first;
    if (it->second.empty() || it->second.back() != i) it->second.push_back(i);
  };
  for (std::size_t i = 0; i < env.objects.size(); ++i) {
    const auto& o = env.objects[i];
    add(env.objects_by_name, base_name(o.path), i);
    for (const auto& a : o.aliases) add(env.objects_by_name, base_name(a), i);
    if (o.elf.status != ElfReadStatus::ok) continue;
    if (o.elf.info.soname) add(env.objects_by_name, *o.elf.info.soname, i);
    for (const auto& n : o.elf.info.needed) add(env.objects_needing, n, i);
  }
}

Environment scan_environment(const EnvLayout& layout, const ScanOptions& options) {
  Environment env;
  auto t0 = std::chrono::steady_clock::now();
  auto phase = [&](const char* name) {
    const auto t = std::chrono::steady_clock::now();
    env.timings.emplace_back(name, std::chrono::duration<double, std::milli>(t - t0).count());
    t0 = t;
  };
  env.layout = layout;
  env.elf_cache = std::make_shared<ElfCache>();

  std::vector<std::string> roots;
  const auto sites = unique_sites(layout);
  for (const auto* s : sites) roots.push_back(s->real);
  if (options.depth == ScanDepth::dists) {
    // The dist-info folders of each site, from one readdir each: no walk, no RECORD.
    const auto dist_infos = list_dist_infos(sites, FollowLinks::yes);
    phase("list dist-info");
    add_dists(env, read_dist_infos(dist_infos, options.threads, ReadRecord::no));
    env.missing.resize(env.dists.size());
    phase("read dist-info");
    sort_diagnostics(env.diagnostics);
    return env;
  }
  // With cores to spare, the phases overlap where they do not depend on each other: dist-info
  // (found by one readdir of each site) is read while the tree is walked, and the ELF files the
  // walk found are read while its paths are indexed; each overlapped phase is then timed by its
  // own end. With 2 or 3 cores each phase already keeps them busy, and overlapping measured
  // slower (144 ms against 106 ms on the corpus, 2 cores; measured again once the walk had its
  // cache: 27.8 against 28.6 ms cached, but 50.6 against 40.6 with --no-cache, the walk left on
  // one thread after the reads ended): there they run one after another.
  //
  // Side by side, the dist-info reads get a quarter of the cores, but two from 5 to 7, and the
  // walk the rest. Given all of them each, the walk's workers held every pool thread until it
  // ended, the reads ran on one thread and finished 2 ms after the walk (16 cores), and the walk
  // itself was no faster on 16 workers than on 12. On one thread of 6 or 7 the reads ended 10 ms
  // after the walk (GPU machine's venv, --threads 6: 44.3-46.5 ms against 33.2-36.2 with two).
  const unsigned threads = thread_count(options.threads);
  const auto launch = threads >= 4 ? std::launch::async : std::launch::deferred;
  // The host's loader is asked (ld.so --help, 0.7 ms) while the tree is walked: started now, read
  // when the loader model is made. (Asked on a thread of its own instead, it took a core from
  // the walk on 2 cores and made a malloc arena of its own, a huge page to clear: 2.8 to 4.9 ms
  // slower; asked after the ELF reads, the scan waited for it.)
  std::optional<HostDetection> host_detection;
  if (!options.host && options.depth != ScanDepth::files) host_detection.emplace();
  const unsigned read_threads =
      launch == std::launch::async ? std::max(threads / 4, std::min(2U, (threads + 1) / 3)) : threads;
  const unsigned walk_threads = launch == std::launch::async ? threads - read_threads : threads;
  auto dists_read = std::async(launch, [&, dist_infos = list_dist_infos(sites, FollowLinks::no)] {
    return read_dist_infos(dist_infos, read_threads, ReadRecord::yes);
  });
  WalkResult walk = walk_tree(roots, walk_threads, {"__pycache__"},
                              options.cache_dir.empty() ? std::string() : walk_cache_file(options.cache_dir, roots));
  phase("walk");
  env.diagnostics = std::move(walk.diagnostics);
  env.walk_cache = std::move(walk.cache);

  // Each worker's share of the walk sorted out on its own core: the files that go into the index,
  // copied to their place in it, and the shared objects and symlinks found.
  struct Found {
    std::vector<std::string> objects, linked_objects, symlinks;
    std::size_t files = 0, at = 0;
  };
  std::vector<Found> found(walk.parts.size());
  parallel_for(walk.parts.size(), threads, [&](std::size_t p) {
    for (const auto& e : walk.parts[p]) {
      if (e.type == EntryType::directory) continue;
      ++found[p].files;
      if (e.type != EntryType::file && e.type != EntryType::symlink) continue;
      if (e.type == EntryType::symlink) found[p].symlinks.emplace_back(e.path);
      if (e.shared_object_name)
        (e.type == EntryType::file ? found[p].objects : found[p].linked_objects).emplace_back(e.path);
    }
  });
  std::vector<std::string> candidates;
  std::vector<std::string> symlink_candidates;
  std::unordered_set<std::string> symlinks;
  std::size_t files = 0;
  for (auto& f : found) {
    f.at = files;
    files += f.files;
    std::move(f.objects.begin(), f.objects.end(), std::back_inserter(candidates));
    std::move(f.linked_objects.begin(), f.linked_objects.end(), std::back_inserter(symlink_candidates));
    for (auto& l : f.symlinks) symlinks.insert(std::move(l));
  }
  std::sort(candidates.begin(), candidates.end());  // the order objects are kept in
  const bool wants_elf = options.depth != ScanDepth::files;
  // Kept where the walk kept its listings: on file systems whose ctime the cache trusts.
  const std::string elf_store = env.walk_cache.trusted ? elf_store_file(options.cache_dir, roots) : std::string();
  auto elf_read = std::async(launch, [&] {
    return wants_elf ? read_elf_files(candidates, options.threads, elf_store, env.elf_store) : std::vector<ElfRead>{};
  });
  std::vector<std::string_view> paths(files);
  std::vector<std::uint64_t> hashes(files);
  parallel_for(walk.parts.size(), threads, [&](std::size_t p) {
    std::size_t k = found[p].at;
    for (const auto& e : walk.parts[p]) {
      if (e.type == EntryType::directory) continue;
      paths[k] = e.path;
      hashes[k++] = e.hash;
    }
  });
  env.on_disk.assign_distinct(std::move(paths), hashes, options.threads);
  env.path_arena = std::move(walk.arena);
  phase("index the walk");
  add_dists(env, dists_read.get());
  phase("read dist-info");
  // Reads env.dists and env.layout only, which nothing below changes.
  auto requirements_parsed = std::async(options.parse_requirements ? launch : std::launch::deferred, [&] {
    return std::make_shared<const ParsedRequirements>(
        parse_requirements(env, marker_environment_of(env.layout), options.threads));
  });
  auto keep_requirements = [&] {
    if (options.parse_requirements) env.requirements = requirements_parsed.get();
  };
  index_ownership(env, symlinks, options.threads);
  phase("ownership");
  auto elf_reads = elf_read.get();
  if (!wants_elf) {
    keep_requirements();
    sort_diagnostics(env.diagnostics);
    return env;
  }
  add_objects(env, candidates, std::move(elf_reads), symlink_candidates, options.threads);
  phase("read ELF");

  LoaderConfig config;
  config.host = options.host ? *options.host : host_detection->get();
  auto ld_cache = std::make_shared<LdCache>(LdCache::load(options.ld_so_cache.value_or(config.host.ld_so_cache)));
  config.ld_library_path = options.ld_library_path;
  config.preload = options.preload;
  const std::string python = layout.root + "/bin/python3";
  std::error_code ec;
  if (layout.kind != EnvKind::site_dir && std::filesystem::exists(python, ec)) {
    env.main_executable = real_path_of(python);
    config.main_executable = env.main_executable;
  }
  env.loader = std::make_shared<LoaderModel>(std::move(config), env.elf_cache, std::move(ld_cache));
  // The walk starts at each site's realpath and follows no symlink: the objects it found as
  // regular files are real, and so are their folders.
  env.loader->know_real_files(candidates);
  phase("host and ld.so.cache");
  if (options.resolve) resolve_objects(env, options.threads);
  phase("process model");
  keep_requirements();
  sort_diagnostics(env.diagnostics);
  return env;
}

Environment simulate(const Environment& before, const WhatIf& change, unsigned threads) {
  Environment env;
  env.layout = before.layout;
  env.elf_cache = before.elf_cache;
  env.main_executable = before.main_executable;
  std::unordered_set<std::string> written;
  for (const auto& w : change.written) written.insert(w.path);
  // A file deleted and then written again (a reinstall after a removal) is there.
  auto deleted = std::make_shared<std::unordered_set<std::string>>(change.deleted);
  for (const auto& w : written) deleted->erase(w);
  std::vector<int> new_index(before.dists.size(), -1);
  auto add_dist = [&](const DistInfo& d, std::vector<std::string> missing) {
    env.dist_by_name.emplace(d.normalized, static_cast<int>(env.dists.size()));
    env.dists.push_back(d);
    std::erase_if(missing, [&](const std::string& p) { return written.count(p) > 0; });
    std::sort(missing.begin(), missing.end());
    missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
    env.missing.push_back(std::move(missing));
  };
  // What the change deletes from a kept dist's files is missing afterwards.
  std::vector<std::vector<std::string>> newly_missing(before.dists.size());
  for (const auto& p : *deleted)
    for (int owner : before.owners_of(p)) newly_missing[static_cast<std::size_t>(owner)].push_back(p);
  for (std::size_t d = 0; d < before.dists.size(); ++d) {
    if (std::find(change.removed_dists.begin(), change.removed_dists.end(), static_cast<int>(d)) !=
        change.removed_dists.end())
      continue;
    new_index[d] = static_cast<int>(env.dists.size());
    auto missing = before.missing.empty() ? std::vector<std::string>{} : before.missing[d];
    missing.insert(missing.end(), newly_missing[d].begin(), newly_missing[d].end());
    add_dist(before.dists[d], std::move(missing));
  }
  const int first_added = static_cast<int>(env.dists.size());
  for (const auto& d : change.added_dists) add_dist(d, {});
  auto index_of = [&](const WhatIf::Written& w) {
    return w.added ? first_added + w.dist : new_index[static_cast<std::size_t>(w.dist)];
  };
  for (const auto& o : before.objects) {
    if (deleted->count(o.path) && !written.count(o.path)) continue;
    // Copied field by field: the resolutions (every place looked, per NEEDED) are redone.
    SharedObject kept;
    kept.path = o.path;
    kept.elf = o.elf;
    kept.entry_point = o.entry_point;
    for (int owner : o.owners)
      if (new_index[static_cast<std::size_t>(owner)] >= 0)
        kept.owners.push_back(new_index[static_cast<std::size_t>(owner)]);
    for (const auto& a : o.aliases)
      if (!deleted->count(a)) kept.aliases.push_back(a);
    env.objects.push_back(std::move(kept));
  }
  // Written files: an object on disk gets its new bytes' owner; a new one joins the model, its
  // dynamic section from the wheel or, without one, assumed (its own name as SONAME, no NEEDED).
  std::unordered_map<std::string, std::size_t> at;
  for (std::size_t i = 0; i < env.objects.size(); ++i) at[env.objects[i].path] = i;
  auto added_files = std::make_shared<std::unordered_set<std::string>>();
  auto added_dirs = std::make_shared<std::set<std::string>>();
  const HostInfo host = before.loader ? before.loader->config().host : HostInfo{};
  for (const auto& w : change.written) {
    if (!looks_like_shared_object(base_name(w.path))) continue;
    const int owner = index_of(w);
    if (owner < 0) continue;
    auto it = at.find(w.path);
    if (it != at.end()) {
      auto& o = env.objects[it->second];
      if (std::find(o.owners.begin(), o.owners.end(), owner) == o.owners.end()) o.owners.push_back(owner);
      o.bytes_owner = owner;
      continue;
    }
    SharedObject o;
    o.path = w.path;
    o.owners = {owner};
    o.bytes_owner = owner;
    o.elf.status = ElfReadStatus::ok;
    if (w.elf) {
      o.elf.info = *w.elf;
    } else {
      o.assumed_elf = true;
      o.elf.info.elf_class = host.elf_class;
      o.elf.info.machine = host.machine;
      o.elf.info.soname = std::string(base_name(w.path));
    }
    o.entry_point = !o.elf.info.soname;
    struct stat st {};
    if (::lstat(w.path.c_str(), &st) != 0) {
      before.elf_cache->put(w.path, o.elf);
      added_files->insert(w.path);
      for (std::string dir = parent_dir(w.path); dir.size() > 1 && ::lstat(dir.c_str(), &st) != 0;
           dir = parent_dir(dir))
        added_dirs->insert(dir);
    }
    at[o.path] = env.objects.size();
    env.objects.push_back(std::move(o));
  }
  std::sort(env.objects.begin(), env.objects.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  index_objects(env);
  if (before.loader) {
    LoaderConfig changes;
    changes.deleted = deleted;
    changes.added = added_files;
    changes.added_dirs = added_dirs;
    env.loader = before.loader->what_if(changes);
    resolve_objects(env, threads);
  }
  return env;
}

}  // namespace cudafix::resolver::inline env
