#include "resolver/plan/sync.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/unresolved.hpp"
#include "resolver/pep/pep440.hpp"
#include "resolver/plan/order_search.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::resolver::inline plan {

namespace {

// The first file of `d` whose bytes are not what its RECORD row says (its size, then its
// SHA-256), as "PATH differs"; empty when every hashed row matches. Compiled bytecode is left
// out: the interpreter may write it again.
struct RowCheck {
  int dist = -1;
  const RecordRow* row = nullptr;
  std::string path;
  bool differs = false;
};

std::vector<RowCheck> rows_to_check(const Environment& env, const std::vector<int>& dists) {
  std::vector<RowCheck> out;
  for (int d : dists) {
    const DistInfo& dist = env.dists[static_cast<std::size_t>(d)];
    for (const auto& row : dist.record) {
      if (row.hash_algo() != "sha256" || in_pycache(row.path)) continue;
      std::string abs = join_normal(dist.site_dir, row.path);
      if (!is_within(abs, env.layout.root_real)) continue;
      out.push_back({d, &row, std::move(abs), false});
    }
  }
  return out;
}

void check_rows(std::vector<RowCheck>& rows, unsigned threads) {
  parallel_for(rows.size(), threads, [&](std::size_t i) {
    RowCheck& c = rows[i];
    struct stat st {};
    if (::lstat(c.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      c.differs = true;  // gone, or no longer a file: env.missing says the first, this the second
      return;
    }
    const auto size = c.row->size();
    if (size && *size != static_cast<std::uint64_t>(st.st_size)) {
      c.differs = true;
      return;
    }
    try {
      c.differs = sha256_of_file(c.path) != c.row->hash;
    } catch (const Error&) {
      c.differs = true;
    }
  });
}

// Who writes a path, and with which bytes (RECORD's hash).
struct Writer {
  std::string who;
  std::string hash;
};

// The files each locked dist leaves in place: its wheel's RECORD where it is (re)installed, its
// installed RECORD where it is left as it is. A path two of them write with other bytes is the
// problem, naming both and the path.
std::string overlapping_paths(const Environment& env, const std::vector<LockedDist>& locked) {
  std::map<std::string, Writer> writers;
  const SiteDir* site = env.layout.platlib();
  for (const auto& l : locked) {
    const std::vector<RecordRow>* rows = nullptr;
    std::string folder, who;
    if (l.action && l.wheel && site) {
      rows = &l.wheel->record.rows;
      folder = site->real;
      who = fmt::format("{} {}'s wheel {}", l.name, l.version, base_name(l.wheel->file));
    } else if (const auto d = env.dist_index(l.name); d && !l.action) {
      const DistInfo& dist = env.dists[static_cast<std::size_t>(*d)];
      rows = &dist.record;
      folder = dist.site_dir;
      who = fmt::format("{} {} (installed)", l.name, l.version);
    }
    if (!rows) continue;
    for (const auto& row : *rows) {
      if (row.hash.empty() || in_pycache(row.path)) continue;
      const std::string abs = join_normal(folder, row.path);
      const auto [it, added] = writers.try_emplace(abs, Writer{who, std::string(row.hash)});
      if (added || it->second.hash == row.hash) continue;
      return fmt::format(
          "{} and {} both write {}, with other bytes; a lock cudafix installs has one owner for each path",
          it->second.who, who, env.display(abs));
    }
  }
  return {};
}

// Objects of `after` whose NEEDED resolves nowhere, that did resolve (or were not there) before,
// and that doctor cannot explain: "CONSUMER NEEDs SONAME".
std::vector<std::string> left_unresolved(const Environment& before, const Environment& after, const Knowledge& k) {
  std::vector<std::string> out;
  for (const auto& o : after.objects) {
    const SharedObject* was = before.object(o.path);
    for (const auto& r : o.resolutions) {
      if (r.found()) continue;
      if (was && std::any_of(was->resolutions.begin(), was->resolutions.end(),
                             [&](const Resolution& b) { return b.name == r.name && !b.found(); }))
        continue;
      if (explain_unresolved(after, k, o, r).kind != UnresolvedKind::unexplained) continue;
      out.push_back(fmt::format("{} NEEDs {}", after.display(o.path), r.name));
    }
  }
  return out;
}

std::vector<Step> sync_candidates(const Environment& env, const std::vector<LockedDist>& locked) {
  std::vector<Step> steps;
  std::set<std::string> held;
  for (const auto& l : locked) {
    held.insert(l.name);
    if (!l.action) continue;
    Step st;
    st.action = *l.action;
    st.name = l.name;
    st.version = l.version;
    st.accepts = "==" + l.version;
    st.wheel = l.wheel;
    st.why = l.why;
    if (const auto d = env.dist_index(l.name)) st.dist = *d;
    steps.push_back(std::move(st));
  }
  // Installs before reinstalls before removals: what a step removes is most often provided again
  // by an earlier one.
  std::stable_sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) {
    return (a.action == StepAction::install) > (b.action == StepAction::install);
  });
  for (std::size_t d = 0; d < env.dists.size(); ++d) {
    const DistInfo& dist = env.dists[d];
    if (dist.root == SiteRoot::system || held.count(dist.normalized)) continue;
    Step st;
    st.action = StepAction::remove;
    st.dist = static_cast<int>(d);
    st.name = dist.normalized;
    st.version = dist.version;
    st.why = fmt::format("{} is not in the lock", dist_label(dist));
    steps.push_back(std::move(st));
  }
  return steps;
}

std::string no_order(const Environment& env, const OrderSearch& search, const std::vector<Step>& candidates,
                     const std::vector<Break>& first_worse) {
  if (search.out_of_budget)
    return fmt::format("no order of the {} steps keeps every required library present within the search's budget",
                       candidates.size());
  std::vector<std::string> names;
  for (std::size_t s : search.conflict)
    names.push_back(fmt::format("{} {}", to_string(candidates[s].action), candidates[s].name));
  return fmt::format("no order of the steps keeps every required library present ({}): {}", fmt::join(names, ", "),
                     describe_breaks(env, first_worse));
}

// search_order where it can search (64 steps at most); past that, the order of preference alone,
// each prefix judged: a lock installed into a fresh venv has more packages than that.
OrderSearch ordered(std::size_t n, const std::function<bool(const std::vector<std::size_t>&)>& safe) {
  if (n <= 64) return search_order(n, safe);
  OrderSearch out;
  for (std::size_t i = 0; i < n; ++i) {
    auto prefix = out.order;
    prefix.push_back(i);
    ++out.judged;
    if (!safe(prefix)) {
      out.deepest = out.order;
      out.conflict = {i};
      out.order.clear();
      return out;
    }
    out.order = std::move(prefix);
  }
  out.found = true;
  return out;
}

}  // namespace

std::vector<Break> sync_breaks(std::vector<Break> worse) {
  std::erase_if(worse, [](const Break& b) { return b.after.has_value(); });
  return worse;
}

void sync_needs(const Environment& env, std::vector<LockedDist>& locked, unsigned threads) {
  std::vector<int> whole_check;
  for (auto& l : locked) {
    l.action.reset();
    l.why.clear();
    const auto d = env.dist_index(l.name);
    if (!d) {
      l.action = StepAction::install;
      l.why = fmt::format("the lock holds {} {}; it is not installed", l.name, l.version);
    } else if (const DistInfo& dist = env.dists[static_cast<std::size_t>(*d)]; !same_version(dist.version, l.version)) {
      l.action = StepAction::install;
      l.why = fmt::format("the lock holds {} {}; {} is installed", l.name, l.version, dist.version);
    } else {
      whole_check.push_back(*d);
    }
  }
  auto rows = rows_to_check(env, whole_check);
  check_rows(rows, threads);
  std::map<int, std::pair<std::size_t, std::string>> differing;  // dist -> (count, first path)
  for (const auto& c : rows) {
    if (!c.differs) continue;
    auto& [count, first] = differing[c.dist];
    if (count++ == 0) first = env.display(c.path);
  }
  for (auto& l : locked) {
    const auto d = env.dist_index(l.name);
    if (l.action || !d) continue;
    const auto it = differing.find(*d);
    if (it == differing.end()) continue;
    l.action = StepAction::reinstall;
    l.why = fmt::format("{} {}: {} of its files are gone or hold other bytes than its RECORD says ({})", l.name,
                        l.version, it->second.first, it->second.second);
  }
}

FixPlan plan_sync(const Environment& env, const Knowledge& k, const std::vector<LockedDist>& locked, unsigned threads) {
  FixPlan plan;
  for (const auto& l : locked)
    if (l.action && !l.wheel) plan.needs.push_back({l.name, l.version, l.why});
  if (!plan.needs.empty()) {
    plan.problem = "the wheels of some of the lock's packages could not be had";
    return plan;
  }
  if (auto clash = overlapping_paths(env, locked); !clash.empty()) {
    plan.problem = std::move(clash);
    return plan;
  }
  const std::vector<Step> candidates = sync_candidates(env, locked);
  std::map<std::vector<std::size_t>, Step> judged;
  const auto judge = [&](const std::vector<std::size_t>& prefix) {
    std::vector<Step> steps;
    for (std::size_t i : prefix) steps.push_back(candidates[i]);
    const Environment after = simulate_steps(env, k, steps, threads);
    Step st = steps.back();
    st.worse = sync_breaks(worse_resolutions(env, after, k));
    st.ok = st.worse.empty();
    judged[prefix] = st;
    return st.ok;
  };
  const auto search = ordered(candidates.size(), judge);
  if (!search.found) {
    std::vector<Break> first;
    for (const auto& [prefix, st] : judged)
      if (!st.ok && first.empty()) first = st.worse;
    plan.problem = no_order(env, search, candidates, first);
    return plan;
  }
  std::vector<std::size_t> prefix;
  std::vector<Step> all;
  for (std::size_t i : search.order) {
    prefix.push_back(i);
    plan.steps.push_back(judged.at(prefix));
    all.push_back(candidates[i]);
  }
  if (all.empty()) return plan;
  const Environment last = simulate_steps(env, k, all, threads);
  if (const auto nowhere = left_unresolved(env, last, k); !nowhere.empty())
    plan.problem = fmt::format("after the sync, {} would resolve nowhere", fmt::join(nowhere, "; "));
  return plan;
}

}  // namespace cudafix::resolver::inline plan
