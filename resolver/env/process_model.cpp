// The process model: the simulated imports and dlopens that resolve every NEEDED (scan_phases.hpp).
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

// What one simulated import (or dlopen) taught about the objects it mapped first.
struct Learned {
  std::size_t object;
  std::vector<Resolution> resolutions;
  std::string context;
  int dist = -1;  // the dist whose import (or lone dlopen) it was
};

// Each dist's depth in the requirement graph (0: requires nothing installed); a dist is imported
// only after everything of a smaller depth it requires. Cycles count as depth 0 where they close.
std::vector<int> requirement_depths(const Environment& env) {
  std::vector<int> depth(env.dists.size(), -1);
  std::vector<bool> active(env.dists.size(), false);
  std::function<int(int)> visit = [&](int d) -> int {
    auto& dd = depth[static_cast<std::size_t>(d)];
    if (dd >= 0) return dd;
    if (active[static_cast<std::size_t>(d)]) return 0;
    active[static_cast<std::size_t>(d)] = true;
    int best = 0;
    for (int r : env.closures[static_cast<std::size_t>(d)]) best = std::max(best, visit(r) + 1);
    active[static_cast<std::size_t>(d)] = false;
    return dd = best;
  };
  for (std::size_t d = 0; d < env.dists.size(); ++d) visit(static_cast<int>(d));
  return depth;
}

}  // namespace

// Runs the process model: each dist's extension modules are imported in a process that already
// imported its requirements; every object keeps the resolutions of the first import that maps
// it, in import order (by depth, then by name). What each import mapped is remembered, so a
// dependent's process is assembled rather than simulated again: a dist of depth N > 0 starts
// from what the dists of its closure at lower depths imported (one at its own depth or above is
// in a requirement cycle with it, and brings nothing), and runs as soon as those have run rather
// than after its whole depth; one of depth 0 imports its closure afresh.
void resolve_objects(Environment& env, unsigned threads) {
  env.closures.resize(env.dists.size());
  parallel_for(env.dists.size(), threads,
               [&](std::size_t d) { env.closures[d] = env.requirement_closure(static_cast<int>(d)); });
  env.base_process = env.loader->start_process();

  std::map<int, std::vector<std::size_t>> entry_points;
  for (std::size_t i = 0; i < env.objects.size(); ++i)
    if (env.objects[i].entry_point)
      for (int d : env.objects[i].owners) entry_points[d].push_back(i);
  const std::vector<int> depth = requirement_depths(env);
  auto depth_of = [&](int d) { return depth[static_cast<std::size_t>(d)]; };
  std::map<int, std::vector<int>> by_depth;
  for (std::size_t d = 0; d < env.dists.size(); ++d) by_depth[depth[d]].push_back(static_cast<int>(d));

  // The dists with something to import, by depth then index.
  std::vector<int> tasks;
  for (const auto& [level, dists] : by_depth)
    for (int d : dists)
      if (entry_points.count(d)) tasks.push_back(d);
  auto waits_of = [&](const std::vector<int>& order) {
    std::map<int, std::size_t> task_of;
    for (std::size_t t = 0; t < order.size(); ++t) task_of[order[t]] = t;
    std::vector<std::vector<std::size_t>> waits(order.size());
    for (std::size_t t = 0; t < order.size(); ++t)
      for (int c : env.closures[static_cast<std::size_t>(order[t])])
        if (depth_of(c) < depth_of(order[t]) && task_of.count(c)) waits[t].push_back(task_of.at(c));
    return waits;
  };
  // Started longest chain first: a task's chain is its imports (entry points, a measure of its
  // time) and the longest chain of the tasks that wait for it. In depth order torch waited behind
  // forty small dists and, with torchvision after it, ended the phase alone on 2 cores. The
  // results do not depend on this order: what each import learnt is applied by depth afterwards.
  {
    const auto waits = waits_of(tasks);
    std::vector<std::size_t> chain(tasks.size(), 0);
    for (std::size_t t = tasks.size(); t-- > 0;) {
      chain[t] += entry_points.at(tasks[t]).size();
      for (std::size_t w : waits[t]) chain[w] = std::max(chain[w], chain[t]);
    }
    std::vector<std::size_t> order(tasks.size());
    for (std::size_t t = 0; t < order.size(); ++t) order[t] = t;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return chain[a] > chain[b]; });
    std::vector<int> by_chain;
    for (std::size_t t : order) by_chain.push_back(tasks[t]);
    tasks = std::move(by_chain);
  }
  const auto waits_for = waits_of(tasks);
  std::vector<std::vector<LoadedObject>> imported(env.dists.size());
  std::vector<std::vector<Learned>> learned(env.dists.size());
  const std::vector<LoadedObject> nothing;
  run_in_dependency_order(waits_for, threads, [&](std::size_t t) {
    const int d = tasks[t];
    Process p = env.process_for(d, [&](int c) -> const std::vector<LoadedObject>* {
      if (depth_of(d) == 0) return nullptr;
      return depth_of(c) < depth_of(d) ? &imported[static_cast<std::size_t>(c)] : &nothing;
    });
    // What each import mapped, kept once every import has run: until then the process needs it.
    std::vector<std::pair<std::size_t, std::size_t>> mapped;
    for (auto i : entry_points.at(d)) {
      env.loader->load(p, env.objects[i].path);
      mapped.emplace_back(p.load_start, p.objects.size());
    }
    for (std::size_t e = 0; e < mapped.size(); ++e) {
      const std::string context = fmt::format("import of {} ({})", env.dists[static_cast<std::size_t>(d)].name,
                                              env.display(env.objects[entry_points.at(d)[e]].path));
      for (std::size_t j = mapped[e].first; j < mapped[e].second; ++j) {
        auto& lo = p.objects[j];
        if (auto it = env.object_by_path.find(lo.real); it != env.object_by_path.end())
          learned[static_cast<std::size_t>(d)].push_back({it->second, std::move(lo.needed), context, d});
        imported[static_cast<std::size_t>(d)].push_back(
            LoadedObject{std::move(lo.path), std::move(lo.real), std::move(lo.names), lo.elf, -1, {}, {}, true});
      }
    }
  });
  env.imported = std::move(imported);

  std::vector<bool> assigned(env.objects.size(), false);
  auto apply = [&](std::vector<Learned>& list) {
    for (auto& l : list) {
      if (assigned[l.object]) continue;
      assigned[l.object] = true;
      env.objects[l.object].resolutions = std::move(l.resolutions);
      env.objects[l.object].context = std::move(l.context);
      env.objects[l.object].loaded_in = l.dist;
    }
  };
  // First import wins, in import order: by depth, then by name.
  for (const auto& [level, dists] : by_depth)
    for (int d : dists) apply(learned[static_cast<std::size_t>(d)]);

  // What no import maps is dlopened alone, after its dist's requirements. Each object starts
  // from the same process, so a dist's objects are split into groups of a few that run in
  // parallel (nvshmem's 11 in one group were the longest task of the process model).
  std::map<int, std::vector<std::size_t>> alone;
  for (std::size_t i = 0; i < env.objects.size(); ++i)
    if (!assigned[i] && env.objects[i].elf.status == ElfReadStatus::ok)
      alone[env.objects[i].owners.empty() ? -1 : env.objects[i].owners.front()].push_back(i);
  constexpr std::size_t k_alone_group = 3;
  std::vector<std::pair<int, std::vector<std::size_t>>> groups;
  for (const auto& [owner, objects] : alone)
    for (std::size_t b = 0; b < objects.size(); b += k_alone_group) {
      const auto first = objects.begin() + static_cast<std::ptrdiff_t>(b);
      const auto last = first + static_cast<std::ptrdiff_t>(std::min(k_alone_group, objects.size() - b));
      groups.emplace_back(owner, std::vector<std::size_t>(first, last));
    }
  std::vector<std::vector<Learned>> dlopened(groups.size());
  parallel_for(groups.size(), threads, [&](std::size_t k) {
    const int owner = groups[k].first;
    Process p = env.process_for(owner);
    const std::string context = owner < 0 ? "dlopen alone"
                                          : fmt::format("dlopen after importing what {} requires",
                                                        env.dists[static_cast<std::size_t>(owner)].name);
    for (auto i : groups[k].second) {
      p.begin_trial();  // each object alone: undo its load before the next
      const int idx = env.loader->load(p, env.objects[i].path);
      if (idx >= 0) dlopened[k].push_back({i, p.objects[static_cast<std::size_t>(idx)].needed, context, owner});
      p.rollback();
    }
  });
  for (auto& list : dlopened) apply(list);
}

}  // namespace cudafix::resolver::inline env
