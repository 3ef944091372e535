#include "resolver/plan/fix.hpp"

#include "resolver/plan/order_search.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/requirements.hpp"
#include "resolver/env/unresolved.hpp"
#include "resolver/plan/dlopen_family.hpp"
#include "resolver/plan/provenance.hpp"
#include "resolver/plan/uninstall.hpp"

namespace cudafix::resolver::inline plan {

std::string_view to_string(StepAction a) {
  switch (a) {
    case StepAction::remove:
      return "remove";
    case StepAction::reinstall:
      return "reinstall";
    case StepAction::install:
      return "install";
  }
  return "remove";
}

namespace {

// ---- what the requirements ask for ---------------------------------------------------------

struct Wanted {
  std::string name;  // normalised
  std::vector<SpecifierSet> specifiers;
  std::vector<std::string> asked_by;  // "torch 2.11.0 requires nvidia-cudnn-cu13==9.19.0.56"
};

// Requirements of kept dists (pip check's reading) and the extras chains below them that name a
// provider of the target major which is missing or of another version.
std::map<std::string, Wanted> wanted_providers(const Environment& env, const Knowledge& k,
                                               const ParsedRequirements& reqs, const MarkerEnvironment& markers,
                                               int target) {
  std::map<std::string, Wanted> out;
  std::set<std::pair<std::string, std::string>> followed;  // (dist, extra)
  std::function<void(const DistInfo&, const Requirement&, const std::string&)> consider =
      [&](const DistInfo& by, const Requirement& req, const std::string& line) {
        const auto installed = env.dist_index(req.normalized);
        // An extras chain: what the installed dependency asks for under each extra requested.
        if (installed && !req.extras.empty()) {
          const DistInfo& dep = env.dists[static_cast<std::size_t>(*installed)];
          for (const auto& extra : req.extras) {
            if (!followed.insert({dep.normalized, normalize_name(extra)}).second) continue;
            MarkerEnvironment with_extra = markers;
            with_extra["extra"] = normalize_name(extra);
            for (const auto& l : dep.metadata.requires_dist) {
              try {
                const Requirement r = Requirement::parse(l);
                if (!r.marker || !r.marker->mentions_extra()) continue;
                if (!r.marker->evaluate(with_extra).value_or(false)) continue;
                consider(dep, r, l);
              } catch (const std::invalid_argument&) {
                continue;  // doctor reports it (invalid-metadata)
              }
            }
          }
        }
        if (!is_provider_name(k, req.normalized)) return;
        const auto m = major_of_provider_name(k, req.normalized);
        if (m && *m != target) return;
        if (installed) {
          const auto v = Version::parse(env.dists[static_cast<std::size_t>(*installed)].version);
          if (v && req.specifier.contains(*v, true)) return;
        }
        Wanted& w = out[req.normalized];
        w.name = req.normalized;
        w.specifiers.push_back(req.specifier);
        w.asked_by.push_back(fmt::format("{} requires {}", dist_label(by), line));
      };
  for (const DistInfo* d : visible_dists(env)) {
    const auto di = static_cast<std::size_t>(d - env.dists.data());
    for (std::size_t i = 0; i < reqs.lines[di].size(); ++i) {
      const auto& line = reqs.lines[di][i];
      if (line.req && line.applies) consider(*d, *line.req, d->metadata.requires_dist[i]);
    }
  }
  return out;
}

// The exact version a specifier set pins (`==9.19.0.56`), if it pins one.
std::optional<std::string> pinned(const std::vector<SpecifierSet>& sets) {
  for (const auto& s : sets)
    for (const auto& c : s.clauses())
      if ((c.op() == "==" || c.op() == "===") && !c.version_text().ends_with(".*")) return c.version_text();
  return std::nullopt;
}

// Whether `w`'s Requires-Python accepts the interpreter (pip's check_requires_python: a
// specifier that does not parse is ignored, pre-releases of the interpreter accepted).
bool python_accepts(const Wheel& w, const std::string& python_version) {
  if (python_version.empty() || !w.metadata.requires_python) return true;
  const auto spec = SpecifierSet::parse(*w.metadata.requires_python);
  const auto v = Version::parse(python_version);
  return !spec || !v || spec->contains(*v, true);
}

// The newest usable wheel of `name` that `accepts`; of one version, the one with the most
// specific tag (pip's candidate sort: version, then tag priority).
const Wheel* best_wheel(const FixOptions& options, const std::string& name,
                        const std::function<bool(const Version&)>& accepts) {
  const Wheel* best = nullptr;
  std::optional<Version> best_v;
  for (const auto& w : options.wheels) {
    if (w.wheel_name.normalized != name || !w.compatible || !python_accepts(w, options.python_version)) continue;
    const auto v = Version::parse(w.wheel_name.version);
    if (!v || !accepts(*v)) continue;
    if (!best_v || *best_v < *v || (*best_v == *v && w.tag_rank < best->tag_rank)) {
      best = &w;
      best_v = v;
    }
  }
  return best;
}

// ---- a front end's dlopened family -----------------------------------------------------------

// Whether `w` installs a file at `abs` (a path of the environment's install site).
bool wheel_holds(const Environment& env, const Wheel& w, const std::string& abs) {
  const SiteDir* site = env.site_of(abs);
  if (!site) return false;
  const std::string rel = relative_to(abs, site->real);
  return std::any_of(w.record.rows.begin(), w.record.rows.end(), [&](const RecordRow& r) { return r.path == rel; });
}

// The family members that still resolve outside their front end's dist after the plan, each
// with why: the wheel at hand lacks the file, or no wheel was at hand.
std::vector<std::string> family_shortfall(const Environment& after, const Knowledge& k, const FixOptions& options) {
  std::vector<std::string> out;
  for (const auto& m : family_members(after, k)) {
    // Resolving nowhere is doctor's missing-dlopen-library, which the plan's check after shows.
    if (!m.split() || m.place == MemberPlace::nowhere) continue;
    const DistInfo& dist = after.dists[static_cast<std::size_t>(m.front_dist)];
    const Wheel* w = best_wheel(options, dist.normalized, [&](const Version& v) {
      const auto have = Version::parse(dist.version);
      return have && v == *have;
    });
    const std::string lacks = own_build_present(after, m)
                                  ? fmt::format("its own build is at {}, but the search finds the other first",
                                                after.display(expected_path(m)))
                              : w ? fmt::format("{}'s wheel {} does not hold {}", dist_label(dist),
                                                w->file.empty() ? w->url : w->file, after.display(expected_path(m)))
                                  : fmt::format("no wheel of {} is at hand to bring it back", dist_label(dist));
    const std::string error = runtime_error_of(m);
    out.push_back(fmt::format("{} loads {} with dlopen, which resolves to {}{}: {}", describe_front(after, m),
                              m.dlopen.resolution.name, describe_place(after, m),
                              error.empty() ? "" : " (" + error + ")", lacks));
  }
  return out;
}

// ---- simulation ----------------------------------------------------------------------------

struct State {
  EarlierSteps earlier;
  WhatIf what_if;
};

DistInfo dist_from_wheel(const Wheel& w, const SiteDir& site) {
  DistInfo d;
  d.dir_name = w.dist_info;
  d.site_dir = site.real;
  d.root = site.root;
  d.name = w.metadata.name;
  d.normalized = normalize_name(w.metadata.name);
  d.version = w.metadata.version;
  d.metadata = w.metadata;
  d.record_storage = w.record.storage;
  d.record = w.record.rows;
  d.has_record = true;
  for (const auto& line : d.metadata.requires_dist) d.requirements.push_back(requirement_ref(line));
  return d;
}

void apply_remove(const Environment& env, Step& step, State& s) {
  const Deletion del = uninstall_paths(env, {step.dist}, OwnerCounting::cudafix, s.earlier);
  step.deletes = del.files;
  for (const auto& dir : del.dirs) step.deletes.push_back(dir + "/");
  std::sort(step.deletes.begin(), step.deletes.end());
  step.keeps = del.kept;
  s.earlier.removed.insert(step.dist);
  s.earlier.deleted.insert(del.files.begin(), del.files.end());
  s.what_if.removed_dists.push_back(step.dist);
  s.what_if.deleted.insert(del.files.begin(), del.files.end());
}

void write_file(State& s, const std::string& path, int dist, bool added, std::optional<ElfInfo> elf) {
  s.what_if.written.push_back({path, dist, added, std::move(elf)});
  s.earlier.deleted.erase(path);
  s.what_if.deleted.erase(path);
}

// The libraries a reinstall's wheel holds that the installed RECORD does not list (a wheel of
// the same version built again with a library its first build lacked): the install writes them.
void add_wheel_libraries(const Environment& env, Step& step, State& s) {
  const DistInfo& d = env.dists[static_cast<std::size_t>(step.dist)];
  const std::set<std::string> listed(step.writes.begin(), step.writes.end());
  std::string abs;
  for (const auto& row : step.wheel->record.rows) {
    if (!looks_like_shared_object(base_name(row.path))) continue;
    join_normal(d.site_dir, row.path, abs);
    if (listed.count(abs) || !is_within(abs, env.layout.root_real)) continue;
    std::optional<ElfInfo> elf;
    if (auto it = step.wheel->elf.find(std::string(row.path)); it != step.wheel->elf.end()) elf = it->second;
    s.earlier.listed.insert(abs);
    write_file(s, abs, step.dist, false, std::move(elf));
    step.writes.push_back(abs);
  }
}

void apply_reinstall(const Environment& env, Step& step, State& s) {
  const DistInfo& d = env.dists[static_cast<std::size_t>(step.dist)];
  std::string abs;
  for (const auto& row : d.record) {
    join_normal(d.site_dir, row.path, abs);
    std::optional<ElfInfo> elf;
    if (step.wheel) {
      if (auto it = step.wheel->elf.find(std::string(row.path)); it != step.wheel->elf.end()) elf = it->second;
    } else if (const SharedObject* o = env.object(abs); o && o->elf.status == ElfReadStatus::ok) {
      elf = o->elf.info;  // the file there now: another dist's bytes of the same library
    }
    write_file(s, abs, step.dist, false, std::move(elf));
    step.writes.push_back(abs);
  }
  if (step.wheel) add_wheel_libraries(env, step, s);
}

// Without a wheel, an install of a known provider is assumed to write its family's sonames into
// its family's folder (the knowledge table), so that later steps see a provider there; the step
// says it was not simulated from a real file list.
void apply_assumed_install(const Environment& env, const Knowledge& k, Step& step, State& s) {
  step.simulated = false;
  const auto family = k.family_of_dist(step.name);
  const SiteDir* site = env.layout.platlib();
  if (!family || !site) return;
  const FamilyMajor& fm = family->first->majors.at(family->second);
  if (fm.folders.empty()) return;
  DistInfo d;
  d.name = step.name;
  d.normalized = step.name;
  d.version = step.version;
  d.dir_name = fmt::format("{}-{}.dist-info", step.name, step.version);
  d.site_dir = site->real;
  d.root = site->root;
  const int index = static_cast<int>(s.what_if.added_dists.size());
  s.what_if.added_dists.push_back(std::move(d));
  for (const auto& soname : fm.sonames) {
    const std::string path = join_normal(site->real, fm.folders.front() + "/" + soname);
    s.earlier.listed.insert(path);
    write_file(s, path, index, true, std::nullopt);
    step.writes.push_back(path);
  }
  if (step.dist >= 0) apply_remove(env, step, s);
}

void apply_install(const Environment& env, const Knowledge& k, Step& step, State& s) {
  if (!step.wheel) {
    apply_assumed_install(env, k, step, s);
    return;
  }
  const SiteDir* site = env.layout.platlib();
  if (!site) return;
  const int index = static_cast<int>(s.what_if.added_dists.size());
  s.what_if.added_dists.push_back(dist_from_wheel(*step.wheel, *site));
  std::vector<std::pair<std::string, const RecordRow*>> files;
  std::string abs;
  for (const auto& row : step.wheel->record.rows) {
    join_normal(site->real, row.path, abs);
    if (!is_within(abs, env.layout.root_real)) continue;  // read_dist_info would refuse it too
    files.emplace_back(abs, &row);
    s.earlier.listed.insert(abs);
  }
  // Another version installed: its files that the new wheel does not write go (owner-counted).
  if (step.dist >= 0) apply_remove(env, step, s);
  for (const auto& [path, row] : files) {
    std::optional<ElfInfo> elf;
    if (auto it = step.wheel->elf.find(std::string(row->path)); it != step.wheel->elf.end()) elf = it->second;
    write_file(s, path, index, true, std::move(elf));
    step.writes.push_back(path);
  }
}

void apply(const Environment& env, const Knowledge& k, Step& step, State& s) {
  switch (step.action) {
    case StepAction::remove:
      apply_remove(env, step, s);
      break;
    case StepAction::reinstall:
      apply_reinstall(env, step, s);
      break;
    case StepAction::install:
      apply_install(env, k, step, s);
      break;
  }
}

// ---- the desired state ---------------------------------------------------------------------

std::vector<std::string> short_of_desired(const Environment& before, const Environment& after, const Knowledge& k,
                                          int target) {
  std::vector<std::string> out;
  const auto majors = soname_majors(k);
  const auto provider = providers_of(after, k);
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& o : after.objects) {
    if (o.owners.empty()) continue;
    const DistInfo& dist = after.dists[static_cast<std::size_t>(o.owners.front())];
    if (provider[static_cast<std::size_t>(o.owners.front())]) continue;
    for (const auto& r : o.resolutions) {
      if (!majors.count(r.name) || !seen.insert({dist.normalized, r.name}).second) continue;
      const std::string who = fmt::format("{} ({}) NEEDs {}", after.display(o.path), dist_label(dist), r.name);
      if (!r.found()) {
        // What doctor explains (an earlier import provides it, a driver library) is no shortfall.
        if (explain_unresolved(after, k, o, r).kind == UnresolvedKind::unexplained)
          out.push_back(who + ", which resolves nowhere");
        continue;
      }
      const std::string real = real_path_of(*r.path);
      if (!after.site_of(real)) {
        // With a provider of the target major in the environment, which one loads is a matter of
        // import order (doctor's unresolved-library and shadowed-library), not of what is installed.
        const auto in_env = after.providers(r.name);
        const bool provided = std::any_of(in_env.begin(), in_env.end(), [&](const SharedObject* p) {
          return !p->owners.empty() &&
                 major_of_dist(k, after.dists[static_cast<std::size_t>(p->owners.front())]) == target;
        });
        if (!provided) out.push_back(fmt::format("{}, which resolves outside the environment to {}", who, real));
        continue;
      }
      const SharedObject* p = after.object(real);
      std::optional<int> m;
      if (p && p->bytes_owner >= 0)
        m = major_of_dist(k, after.dists[static_cast<std::size_t>(p->bytes_owner)]);
      else if (before.object(real))
        m = major_of_file(before, k, real);
      else if (p && !p->owners.empty())
        m = major_of_dist(k, after.dists[static_cast<std::size_t>(p->owners.front())]);
      if (m && *m != target)
        out.push_back(fmt::format("{}, which resolves to {}, a CUDA {} library", who, after.display(real), *m));
    }
  }
  return out;
}

// The smallest set of steps no order carries out together, each with what it breaks when it
// comes last after the largest safe set of steps that can go before it.
std::vector<Step> conflicting_steps(const std::vector<Step>& candidates, const OrderSearch& search,
                                    const std::map<std::vector<std::size_t>, Step>& judged_sets) {
  const auto& conflict = search.conflict;
  std::vector<Step> out;
  for (std::size_t s : conflict) {
    Step st = candidates[s];
    st.ok = false;
    const std::vector<std::size_t>* before = nullptr;  // the largest reached set holding the rest, not s
    for (const auto& m : search.reached) {
      if (std::find(m.begin(), m.end(), s) != m.end()) continue;
      const bool holds_rest = std::all_of(conflict.begin(), conflict.end(), [&](std::size_t c) {
        return c == s || std::find(m.begin(), m.end(), c) != m.end();
      });
      if (holds_rest && (!before || m.size() > before->size())) before = &m;
    }
    if (before) {
      auto set = *before;
      set.insert(std::upper_bound(set.begin(), set.end(), s), s);
      if (const auto it = judged_sets.find(set); it != judged_sets.end()) st.worse = it->second.worse;
    }
    out.push_back(std::move(st));
  }
  return out;
}

std::string no_order_problem(const Environment& env, const OrderSearch& search, const std::vector<Step>& conflict) {
  if (search.out_of_budget)
    return fmt::format(
        "no safe order found within the search's budget ({} judgments, the longest safe prefix {} "
        "steps); plan fewer steps at a time (--cuda-major, or remove some dists first)",
        search.judged, search.deepest.size());
  std::vector<std::string> names, why;
  for (const auto& st : conflict) {
    names.push_back(fmt::format("{} {}", to_string(st.action), st.name));
    if (!st.worse.empty())
      why.push_back(fmt::format("{} {} would make what is required worse: {}", to_string(st.action), st.name,
                                describe_breaks(env, st.worse)));
  }
  const std::string what = names.size() == 1 ? fmt::format("no order can carry out {}", names.front())
                                             : fmt::format("no order carries out these {} steps together: {}",
                                                           names.size(), fmt::join(names, ", "));
  return why.empty() ? fmt::format("no safe order: {}", what)
                     : fmt::format("no safe order: {}; {}", what, fmt::join(why, "; "));
}

}  // namespace

std::string describe_breaks(const Environment& env, const std::vector<Break>& worse) {
  std::vector<std::string> parts;
  for (const auto& b : worse) parts.push_back(fmt::format("{} {}: {}", env.display(b.consumer), b.soname, b.why));
  return fmt::format("{}", fmt::join(parts, "; "));
}

namespace {

// Each provider of the target major to reinstall as it is: its libraries are gone, its files hold
// another major's bytes, or a library its front end dlopens resolves outside it and the wheel at
// hand holds that library.
void reinstall_candidates(const Environment& env, const Knowledge& k, const FixOptions& options, int target,
                          const std::set<int>& replaced, std::vector<Step>& out) {
  const auto shared = env.shared_paths();
  std::vector<FamilyMember> splits;
  for (auto& m : family_members(env, k))
    if (m.split()) splits.push_back(std::move(m));
  for (std::size_t d = 0; d < env.dists.size(); ++d) {
    const DistInfo& dist = env.dists[d];
    if (!is_cuda_provider(k, dist) || replaced.count(static_cast<int>(d))) continue;
    const auto m = major_of_dist(k, dist);
    if (!m || *m != target) continue;
    std::vector<std::string> reasons;
    std::size_t gone = 0;
    for (const auto& p : env.missing[d]) gone += looks_like_shared_object(base_name(p)) ? 1 : 0;
    if (gone) reasons.push_back(fmt::format("{} of its libraries are gone", gone));
    std::size_t foreign = 0;
    std::string example;
    for (const auto& [path, owners] : shared) {
      if (std::find(owners.begin(), owners.end(), static_cast<int>(d)) == owners.end() || in_pycache(path)) continue;
      const bool other_major = std::any_of(owners.begin(), owners.end(), [&](int o) {
        return major_of_dist(k, env.dists[static_cast<std::size_t>(o)]) != m;
      });
      if (!other_major) continue;
      const auto whose = whose_bytes(env, path, owners);
      if (whose.empty() || std::find(whose.begin(), whose.end(), static_cast<int>(d)) != whose.end()) continue;
      if (example.empty())
        example = fmt::format("{} holds {}'s bytes", env.display(path),
                              dist_label(env.dists[static_cast<std::size_t>(whose.front())]));
      ++foreign;
    }
    if (foreign) reasons.push_back(fmt::format("{} of its files hold another major's bytes ({})", foreign, example));
    const Wheel* wheel = best_wheel(options, dist.normalized, [&](const Version& v) {
      const auto have = Version::parse(dist.version);
      return have && v == *have;
    });
    for (const auto& split : splits)
      if (split.front_dist == static_cast<int>(d) && wheel && !own_build_present(env, split) &&
          wheel_holds(env, *wheel, expected_path(split)))
        reasons.push_back(fmt::format("{} loads {} with dlopen, which resolves to {}", env.display(split.front->path),
                                      split.dlopen.resolution.name, describe_place(env, split)));
    if (reasons.empty()) continue;
    Step st;
    st.action = StepAction::reinstall;
    st.dist = static_cast<int>(d);
    st.name = dist.normalized;
    st.version = dist.version;
    st.accepts = "==" + dist.version;
    st.wheel = wheel;
    st.why = fmt::format("{}: {}", dist_label(dist), fmt::join(reasons, "; "));
    out.push_back(std::move(st));
  }
}

// The plan's target and evidence, and its candidate steps in order of preference (none where
// the plan has a problem or nothing needs CUDA libraries). Which steps there are does not depend
// on the wheels at hand, only each step's `wheel`.
std::vector<Step> candidate_steps(const Environment& env, const Knowledge& k, const FixOptions& options,
                                  FixPlan& plan) {
  const MarkerEnvironment markers = marker_environment_of(env.layout);
  const ParsedRequirements reqs = parse_requirements(env, markers, options.threads);
  plan.evidence = consumer_needs(env, k, reqs, markers);
  std::map<int, std::set<std::string>> by_major;  // major -> consumers needing it
  for (const auto& e : plan.evidence) by_major[e.major].insert(dist_label(env.dists[static_cast<std::size_t>(e.dist)]));
  if (options.cuda_major) {
    plan.target = options.cuda_major;
    plan.target_given = true;
  } else if (by_major.size() == 1) {
    plan.target = by_major.begin()->first;
  } else if (by_major.size() > 1) {
    std::vector<std::string> who;
    for (const auto& [m, dists] : by_major) who.push_back(fmt::format("CUDA {}: {}", m, fmt::join(dists, ", ")));
    plan.problem = fmt::format("the consumers need different CUDA majors ({}); choose one with --cuda-major",
                               fmt::join(who, "; "));
    return {};
  } else {
    return {};  // nothing in the environment needs CUDA libraries: nothing to do
  }
  const int target = *plan.target;

  // The candidate steps, in order of preference.
  std::vector<Step> candidates;
  std::set<int> replaced;  // installed dists an install replaces (no reinstall for them)
  const auto wanted = wanted_providers(env, k, reqs, markers, target);
  std::vector<Step> installs;
  for (const auto& entry : wanted) {
    // Named references: lambdas cannot capture structured bindings (clang 14).
    const std::string& name = entry.first;
    const Wanted& w = entry.second;
    Step st;
    st.action = StepAction::install;
    st.name = name;
    const auto installed = env.dist_index(name);
    if (installed) {
      st.dist = *installed;
      replaced.insert(*installed);
    }
    st.wheel = best_wheel(options, name, [&](const Version& v) {
      return std::all_of(w.specifiers.begin(), w.specifiers.end(),
                         [&](const SpecifierSet& s) { return s.contains(v, true); });
    });
    std::vector<std::string> specs;
    for (const auto& s : w.specifiers) specs.push_back(s.str());
    st.accepts = fmt::format("{}", fmt::join(specs, ","));
    st.version = st.wheel ? st.wheel->wheel_name.version : pinned(w.specifiers).value_or(st.accepts);
    st.why =
        fmt::format("{}{}", fmt::join(w.asked_by, "; "),
                    installed ? fmt::format(" (installed: {})", env.dists[static_cast<std::size_t>(*installed)].version)
                              : " (not installed)");
    installs.push_back(std::move(st));
  }
  reinstall_candidates(env, k, options, target, replaced, candidates);
  for (auto& st : installs) candidates.push_back(std::move(st));
  for (std::size_t d = 0; d < env.dists.size(); ++d) {
    const DistInfo& dist = env.dists[d];
    if (!is_cuda_provider(k, dist) || replaced.count(static_cast<int>(d))) continue;
    const auto m = major_of_dist(k, dist);
    if (!m || *m == target) continue;
    Step st;
    st.action = StepAction::remove;
    st.dist = static_cast<int>(d);
    st.name = dist.normalized;
    st.version = dist.version;
    st.why = fmt::format("{} provides CUDA {}; the target is CUDA {}", dist_label(dist), *m, target);
    candidates.push_back(std::move(st));
  }
  return candidates;
}

}  // namespace

std::set<std::string> wheels_wanted(const Environment& env, const Knowledge& k, const FixOptions& options) {
  FixPlan plan;
  std::set<std::string> out;
  for (const auto& st : candidate_steps(env, k, options, plan))
    if (st.action != StepAction::remove) out.insert(st.name);
  // A front end whose family resolves elsewhere is reinstalled only from a wheel that holds the
  // member: its wheel must be read to know.
  if (plan.target)
    for (const auto& m : family_members(env, k))
      if (m.split()) out.insert(env.dists[static_cast<std::size_t>(m.front_dist)].normalized);
  return out;
}

FixPlan plan_fix(const Environment& env, const Knowledge& k, const FixOptions& options) {
  FixPlan plan;
  const std::vector<Step> candidates = candidate_steps(env, k, options, plan);
  if (!plan.ok() || !plan.target) return plan;
  const int target = *plan.target;

  // An order in which every step's state, with everything before it, is no worse than before the
  // plan (resolver/plan/order_search.hpp): the preferred order first, backtracking where it fails.
  // Each judgment applies the prefix's steps afresh and simulates the result; the step it adds is
  // kept, by its place in the search, for the plan and for saying what blocks.
  std::map<std::vector<std::size_t>, Step> judged;       // by prefix, in the order taken
  std::map<std::vector<std::size_t>, Step> judged_sets;  // by the prefix's steps, ascending
  const auto search = search_order(candidates.size(), [&](const std::vector<std::size_t>& prefix) {
    State trial;
    Step st;
    for (std::size_t i : prefix) {
      st = candidates[i];
      apply(env, k, st, trial);
    }
    const Environment after = simulate(env, trial.what_if, options.threads);
    st.worse = worse_resolutions(env, after, k, target);
    st.ok = st.worse.empty();
    judged[prefix] = st;
    auto set = prefix;
    std::sort(set.begin(), set.end());
    judged_sets[set] = st;
    return st.ok;
  });
  const std::vector<std::size_t>& taken = search.found ? search.order : search.deepest;
  std::vector<std::size_t> prefix;
  State state;
  for (std::size_t i : taken) {
    prefix.push_back(i);
    plan.steps.push_back(judged.at(prefix));
    Step replay = candidates[i];
    apply(env, k, replay, state);
  }
  if (!search.found) {
    // The first step that could not follow the longest safe prefix, as the refused step.
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (std::find(taken.begin(), taken.end(), i) != taken.end()) continue;
      auto next = prefix;
      next.push_back(i);
      if (const auto it = judged.find(next); it != judged.end()) {
        plan.steps.push_back(it->second);
        break;
      }
    }
    plan.conflict = conflicting_steps(candidates, search, judged_sets);
    plan.problem = no_order_problem(env, search, plan.conflict);
    return plan;
  }
  const Environment last = simulate(env, state.what_if, options.threads);
  for (const auto& st : plan.steps)
    if (!st.wheel && st.action != StepAction::remove) plan.needs.push_back({st.name, st.version, st.why});
  plan.remaining = short_of_desired(env, last, k, target);
  for (auto& r : family_shortfall(last, k, options)) plan.remaining.push_back(std::move(r));
  return plan;
}

Fingerprint fingerprint_of(const Environment& env, const FixPlan& plan) {
  Fingerprint fp;
  // RECORD's bytes as the scan read them (a RECORD changed since is a changed environment too,
  // which the dist-info stamps below would not all catch).
  fp.records.resize(env.dists.size());
  parallel_for(env.dists.size(), 0, [&](std::size_t i) {
    const DistInfo& d = env.dists[i];
    fp.records[i] = {d.dir_name, sha256_hex(d.record_storage ? std::string_view(d.record_storage->text) : "")};
  });
  std::set<std::string> touched;
  for (const auto& st : plan.steps) {
    for (const auto& p : st.deletes)
      if (!p.ends_with("/")) touched.insert(p);
    touched.insert(st.keeps.begin(), st.keeps.end());
    touched.insert(st.writes.begin(), st.writes.end());
  }
  for (const auto& p : touched) {
    FileStamp f;
    f.path = p;
    struct stat st {};
    if (::lstat(p.c_str(), &st) == 0) {
      f.exists = true;
      f.dev = static_cast<std::uint64_t>(st.st_dev);
      f.ino = static_cast<std::uint64_t>(st.st_ino);
      f.size = static_cast<std::uint64_t>(st.st_size);
      f.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    }
    fp.files.push_back(std::move(f));
  }
  fp.digest = digest_of(fp);
  return fp;
}

std::string digest_of(const Fingerprint& fp) {
  std::string all;
  for (const auto& [dist, digest] : fp.records) all += dist + '\0' + digest + '\0';
  for (const auto& f : fp.files)
    all += fmt::format("{}|{}|{}|{}|{}|{}", f.path, f.exists, f.dev, f.ino, f.size, f.mtime_ns) + '\0';
  return sha256_hex(all);
}

std::vector<Step> replay_steps(const Environment& env, const Knowledge& k, std::vector<Step> steps,
                               std::optional<int> target, unsigned threads) {
  State state;
  for (auto& st : steps) {
    st.deletes.clear();
    st.keeps.clear();
    st.writes.clear();
    apply(env, k, st, state);
    const Environment after = simulate(env, state.what_if, threads);
    st.worse = worse_resolutions(env, after, k, target);
    st.ok = st.worse.empty();
  }
  return steps;
}

Environment simulate_steps(const Environment& env, const Knowledge& k, std::vector<Step>& steps, unsigned threads) {
  State state;
  for (auto& st : steps) {
    st.deletes.clear();
    st.keeps.clear();
    st.writes.clear();
    apply(env, k, st, state);
  }
  return simulate(env, state.what_if, threads);
}

}  // namespace cudafix::resolver::inline plan
