// A typed plan bound to the environment, checked, and staged (installer/apply/plan_apply.hpp).
#include "installer/apply/plan_apply.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

#include "installer/txn/changes.hpp"
#include "installer/wheel/read.hpp"
#include "resolver/base/text.hpp"
#include "resolver/pep/pep440.hpp"
#include "resolver/plan/provenance.hpp"
#include "resolver/plan/sync.hpp"

namespace cudafix::installer::apply {
namespace r = cudafix::resolver;
namespace tx = installer::txn;

const r::EnvLayout& writable(const r::Environment& env) {
  if (env.layout.kind == r::EnvKind::site_dir)
    throw r::Error(
        fmt::format("{} is a bare site folder; cudafix changes only a venv or an interpreter prefix "
                    "(give its root with --venv)",
                    env.layout.root));
  return env.layout;
}

namespace {

std::string counted(std::size_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

// What differs between the plan's fingerprint and the environment now, one line each.
std::vector<std::string> fingerprint_changes(const r::Environment& env, const r::Fingerprint& fp) {
  std::vector<std::string> out;
  std::map<std::string, std::string> now;
  for (const auto& d : env.dists)
    now[d.dir_name] = r::sha256_hex(d.record_storage ? std::string_view(d.record_storage->text) : "");
  std::set<std::string> seen;
  for (const auto& [dist, sha] : fp.records) {
    seen.insert(dist);
    const auto it = now.find(dist);
    if (it == now.end())
      out.push_back(dist + " is gone");
    else if (it->second != sha)
      out.push_back(dist + "/RECORD changed");
  }
  for (const auto& [dist, sha] : now)
    if (!seen.count(dist)) out.push_back(dist + " was installed");
  for (const auto& f : fp.files) {
    struct stat st {};
    const bool exists = ::lstat(f.path.c_str(), &st) == 0;
    if (exists != f.exists) {
      out.push_back(fmt::format("{} {}", env.display(f.path), exists ? "appeared" : "is gone"));
      continue;
    }
    if (!exists) continue;
    const std::int64_t mtime = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (st.st_dev != f.dev || st.st_ino != f.ino || static_cast<std::uint64_t>(st.st_size) != f.size ||
        mtime != f.mtime_ns)
      out.push_back(env.display(f.path) + " was modified");
  }
  return out;
}

// A refusal for a fingerprint that no longer matches: the first three differences, one a line,
// and how many more, then the command that makes a new plan on a line of its own (a changed
// environment can differ in thousands of files: all of them on one line buried the way out).
std::string changed_since_plan(const std::vector<std::string>& changes, const std::string& remake) {
  constexpr std::size_t k_shown = 3;
  std::string out = fmt::format("the environment changed since the plan was made ({}); nothing was changed:",
                                counted(changes.size(), "difference", "differences"));
  for (std::size_t i = 0; i < std::min(changes.size(), k_shown); ++i) out += "\n  " + changes[i];
  if (changes.size() > k_shown) out += fmt::format("\n  ... and {} more", changes.size() - k_shown);
  return out + "\n" + remake;
}

// The plan's fingerprint with absolute paths, checked against itself: its digest, and a stamp
// for every file a step touches (fingerprint_of's set), so that what changed since is caught.
r::Fingerprint checked_fingerprint(const r::Environment& env, const r::PlanFile& plan, const std::string& name) {
  r::Fingerprint fp;
  fp.records = plan.fingerprint.records;
  std::set<std::string> stamped;
  for (const auto& f : plan.fingerprint.files) {
    fp.files.push_back({r::absolute_path(env, f.path), f.exists, f.dev, f.ino, f.size, f.mtime_ns});
    stamped.insert(fp.files.back().path);
  }
  fp.digest = plan.fingerprint.digest;
  if (r::digest_of(fp) != fp.digest)
    throw r::Error(
        fmt::format("{}: fingerprint.digest: not the digest of the fingerprint's records and files (the "
                    "plan was edited); make a new plan",
                    name));
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const auto& st = plan.steps[i];
    for (const auto* list : {&st.deletes, &st.keeps, &st.writes})
      for (const auto& p : *list) {
        const std::string abs = r::absolute_path(env, p);
        if (!abs.ends_with("/") && !stamped.count(abs))
          throw r::Error(
              fmt::format("{}: fingerprint.files: no stamp of {}, which steps[{}] touches (the plan was "
                          "edited); make a new plan",
                          name, env.display(abs), i));
      }
  }
  return fp;
}

// A plan step's wheel as a file: the one it names, or, for a wheel read by range from an index,
// a download of it (cudafix's wheel cache first), its SHA-256 the plan's.
std::string planned_wheel_file(const r::PlanWheel& wheel, const ApplyOptions& options,
                               std::optional<source::WheelSources>& sources) {
  if (wheel.file) return *wheel.file;
  if (!wheel.url || wheel.sha256.empty()) throw r::Error("a step's wheel has neither a file nor a URL and its SHA-256");
  const std::string& url = *wheel.url;
  if (!options.source_settings) throw r::Error(fmt::format("{} is not downloaded yet, and no source is given", url));
  auto settings = options.source_settings();
  if (settings.offline) throw r::Error(fmt::format("{} is not downloaded yet, and --offline forbids it", url));
  if (!sources) {
    if (settings.cache_dir.empty())
      throw r::Error("no cache folder for downloaded wheels: set CUDAFIX_CACHE_DIR or HOME");
    sources.emplace(settings);
  }
  const std::string real_url = source::restore_credentials(url, settings.index_urls);
  const auto name = source::file_name_in_url(url);
  if (!name) throw r::Error(fmt::format("{}: the URL does not end with a wheel's file name", url));
  const auto got = sources->download(real_url, wheel.sha256, *name);
  if (got.file.empty()) throw r::Error(got.problem);
  return got.file;
}

// The step's dist, found in the environment by its dist-info folder, and checked to be the one
// the step names (the prompt shows the name and version: they must be what is changed).
std::optional<int> bound_dist(const r::Environment& env, const r::PlanStep& st, const std::string& where) {
  const bool needs_dist = st.action != r::StepAction::install;
  if (!st.dist) {
    if (needs_dist)
      throw r::Error(fmt::format("{}.dist: a {} step names the dist it changes", where, r::to_string(st.action)));
    if (env.dist_index(r::normalize_name(st.name)))
      throw r::Error(fmt::format("{}: installs {}, which is installed already, without naming the dist it replaces",
                                 where, st.name));
    return std::nullopt;
  }
  std::optional<int> found;
  for (std::size_t i = 0; i < env.dists.size(); ++i)
    if (env.dists[i].dir_name == *st.dist) found = static_cast<int>(i);
  if (!found) throw r::Error(fmt::format("{}.dist: {} is not installed in {}", where, *st.dist, env.layout.root));
  const auto& d = env.dists[static_cast<std::size_t>(*found)];
  const bool same =
      d.normalized == r::normalize_name(st.name) && (!needs_dist || r::same_version(d.version, st.version));
  if (!same)
    throw r::Error(fmt::format("{}: says {} {} {}, but its dist {} is {}", where, r::to_string(st.action), st.name,
                               st.version, *st.dist, r::dist_label(d)));
  return found;
}

// The paths a step lists, made absolute and sorted, against what the replay computed now.
void check_paths(const r::Environment& env, const std::vector<r::PlanPath>& planned, std::vector<std::string> now,
                 const std::string& where, const std::string& label) {
  std::vector<std::string> listed;
  for (const auto& p : planned) listed.push_back(r::absolute_path(env, p));
  std::sort(listed.begin(), listed.end());
  std::sort(now.begin(), now.end());
  if (listed == now) return;
  const auto why = [&](const std::string& p) {
    return r::is_within(p, env.layout.root_real) ? env.display(p) : p + " (outside the environment)";
  };
  for (const auto& p : listed)
    if (!std::binary_search(now.begin(), now.end(), p))
      throw r::Error(
          fmt::format("{}: lists {}, which {} does not touch in this environment now", where, why(p), label));
  for (const auto& p : now)
    if (!std::binary_search(listed.begin(), listed.end(), p))
      throw r::Error(fmt::format("{}: leaves out {}, which {} touches in this environment now", where, why(p), label));
  throw r::Error(fmt::format("{}: lists a path twice", where));
}

// What a plan says of one object, as the wheel read whole says it.
r::PlanObject as_planned(const std::string& path, const r::ElfInfo& elf) {
  return {path, elf.soname, elf.needed, elf.rpath, elf.runpath};
}

// What the plan's step says of each object against the wheel read whole: a plan made by range
// reads each object's dynamic section from a few windows of its deflate stream, which crafted
// bytes can make read as another segment (a plan naming libraries the wheel's objects do not
// need); a plan file can be edited too. What was shown and approved must be what is installed.
void check_objects(const r::PlanWheel& planned, const r::Wheel& read, const std::string& where) {
  std::map<std::string, r::PlanObject> listed;
  for (const auto& o : planned.objects) listed.emplace(o.path, o);
  const auto says = [](const r::PlanObject& o) {
    return fmt::format("SONAME {}, NEEDED [{}], RPATH {}, RUNPATH {}", o.soname.value_or("none"),
                       fmt::join(o.needed, ", "), o.rpath.value_or("none"), o.runpath.value_or("none"));
  };
  for (const auto& [path, elf] : read.elf) {
    const auto it = listed.find(path);
    const r::PlanObject whole = as_planned(path, elf);
    if (it == listed.end())
      throw r::Error(fmt::format("{}.wheel.objects: leaves out {}, which the wheel holds ({}); plan again", where, path,
                                 says(whole)));
    if (!(it->second == whole))
      throw r::Error(fmt::format("{}.wheel.objects: {}: the plan says {}, the wheel read whole {}; plan again", where,
                                 path, says(it->second), says(whole)));
    listed.erase(it);
  }
  if (!listed.empty())
    throw r::Error(fmt::format("{}.wheel.objects: lists {}, which the wheel holds no such object; plan again", where,
                               listed.begin()->first));
}

// A step bound to the environment: its dist, its wheel validated and read as the planner reads
// wheels (into `wheels`, which the step then points into).
PreparedStep bound_step(const r::Environment& env, const r::PlanStep& st, const std::string& where,
                        const ApplyOptions& options, std::optional<source::WheelSources>& sources,
                        std::optional<WheelTarget>& target, std::deque<r::Wheel>& wheels) {
  PreparedStep p;
  p.label = r::step_label(st);
  p.step.action = st.action;
  p.step.dist = bound_dist(env, st, where).value_or(-1);
  p.step.name = st.name;
  p.step.version = st.version;
  if (st.action != r::StepAction::remove) {
    if (!st.wheel)
      throw r::Error(fmt::format("{}: {} has no wheel (plan again with --find-links naming it)", where, p.label));
    auto wheel = validate_wheel(planned_wheel_file(*st.wheel, options, sources));
    if (!target && options.target) target = options.target();
    if (target) check_usable(wheel, target->tags, target->python_version);
    // Read as the planner reads it, its SHA-256 taken in the same pass.
    auto read = read_wheel(wheel.path, target ? target->tags : std::vector<std::string>{});
    if (read.sha256 != st.wheel->sha256)
      throw r::Error(fmt::format("{} changed since the plan was made (its SHA-256 differs)", wheel.path));
    if (r::normalize_name(wheel.name) != r::normalize_name(st.name) || !r::same_version(wheel.version, st.version))
      throw r::Error(fmt::format("{}.wheel: {} is {} {}, not the step's {} {}", where, wheel.path, wheel.name,
                                 wheel.version, st.name, st.version));
    check_objects(*st.wheel, read, where);
    wheels.push_back(std::move(read));
    p.step.wheel = &wheels.back();
    p.wheel = std::move(wheel);
  }
  // Said with the dist's name as pip list shows it, whatever spelling the plan file has.
  r::PlanStep named;
  named.action = st.action;
  named.name = p.wheel            ? p.wheel->project
               : p.step.dist >= 0 ? env.dists[static_cast<std::size_t>(p.step.dist)].name
                                  : st.name;
  named.version = st.version;
  p.label = r::step_label(named);
  return p;
}

}  // namespace

PreparedPlan prepare_plan(const r::Environment& env, const r::Knowledge& knowledge, const r::PlanFile& plan,
                          const std::string& name, const std::string& remake, const ApplyOptions& options) {
  if (!plan.ok)
    throw r::Error(
        fmt::format("{}: ok: false: planning found no safe order, so it cannot be carried out: {}; "
                    "nothing was changed",
                    name, plan.problem.value_or("(no problem given)")));
  const auto fp = checked_fingerprint(env, plan, name);
  if (const auto changes = fingerprint_changes(env, fp); !changes.empty())
    throw r::Error(changed_since_plan(changes, remake));
  PreparedPlan out;
  std::optional<source::WheelSources> sources;  // made when a step's wheel must be downloaded
  std::optional<WheelTarget> target;            // asked when a step has a wheel
  std::vector<r::Step> steps;
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    out.steps.push_back(
        bound_step(env, plan.steps[i], fmt::format("{}: steps[{}]", name, i), options, sources, target, out.wheels));
    steps.push_back(out.steps.back().step);
  }
  // Each step replayed on the model of the environment now, as the planner judged it: what it
  // deletes, keeps and writes must be what the plan lists, and nothing required may get worse.
  auto replayed = r::replay_steps(env, knowledge, std::move(steps), plan.cuda_major, options.threads);
  for (std::size_t i = 0; i < replayed.size(); ++i) {
    const auto& st = plan.steps[i];
    auto& now = replayed[i];
    const std::string where = fmt::format("{}: steps[{}]", name, i);
    const std::string& label = out.steps[i].label;
    check_paths(env, st.deletes, now.deletes, where + ".deletes", label);
    check_paths(env, st.keeps, now.keeps, where + ".keeps", label);
    check_paths(env, st.writes, now.writes, where + ".writes", label);
    if (options.lock_sync) {
      now.worse = r::sync_breaks(std::move(now.worse));
      now.ok = now.worse.empty();
    }
    if (!now.ok)
      throw r::Error(fmt::format("{} ({}) is unsafe in this environment now: {}; nothing was changed", where, label,
                                 r::describe_breaks(env, now.worse)));
    out.steps[i].step = std::move(now);
  }
  return out;
}

std::vector<std::string> PreparedPlan::labels() const {
  std::vector<std::string> said;
  for (const auto& st : steps) said.push_back(st.label);
  return said;
}

r::Deletion stage_leftovers(const r::Environment& env, int dist, r::EarlierSteps& earlier, tx::Transaction& t) {
  auto del = r::uninstall_paths(env, {dist}, r::OwnerCounting::cudafix, earlier);
  std::set<std::string> holding_written;
  for (const auto& p : earlier.listed)
    for (std::string up = r::parent_dir(p); r::is_within(up, env.layout.root_real) && up != env.layout.root_real;
         up = r::parent_dir(up))
      if (!holding_written.insert(up).second) break;
  std::erase_if(del.dirs, [&](const std::string& d) { return holding_written.count(d) > 0; });
  std::erase_if(del.files, [&](const std::string& f) { return earlier.listed.count(f) > 0; });
  tx::plan_removal_ops(env, del, t);
  earlier.removed.insert(dist);
  earlier.deleted.insert(del.files.begin(), del.files.end());
  return del;
}

namespace {

// A replay's deletion list (folders end in '/') as the removal the transaction stages.
r::Deletion deletion_of(const std::vector<std::string>& deletes) {
  r::Deletion del;
  for (const auto& abs : deletes) {
    if (abs.ends_with("/"))
      del.dirs.push_back(abs.substr(0, abs.size() - 1));
    else
      del.files.push_back(abs);
  }
  return del;
}

std::vector<std::string> deletion_list(const r::Deletion& del) {
  std::vector<std::string> out = del.files;
  for (const auto& d : del.dirs) out.push_back(d + "/");
  return out;
}

// The first path, in sorted order, that `a` holds and `b` lacks.
std::optional<std::string> first_missing(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::string> only;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only));
  if (only.empty()) return std::nullopt;
  return only.front();
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

void check_staged_step(std::size_t step, const std::string& label, const r::Step& replayed, const StagedStep& staged) {
  const std::set<std::string> generated(staged.generated.begin(), staged.generated.end());
  const auto modelled = [&](const std::vector<std::string>& paths) {
    std::vector<std::string> out;
    for (const auto& p : paths)
      if (!generated.count(p)) out.push_back(p);
    return sorted(std::move(out));
  };
  const auto refuse = [&](const char* what, const std::string& path, const char* how) {
    throw r::Error(fmt::format("step {} ({}): the transaction {} {}, which the plan's replay {}; nothing was changed",
                               step + 1, label, what, path, how));
  };
  const auto staged_writes = modelled(staged.writes), planned_writes = modelled(replayed.writes);
  // A reinstall is replayed as its dist's RECORD rewritten in place, whatever the wheel holds;
  // what the wheel adds to that listing, or leaves out of it (bytecode pip compiled,
  // direct_url.json, moved aside with the leftovers), the replay does not model. The libraries
  // are what it judged: a reinstall may write none it did not.
  if (replayed.action == r::StepAction::reinstall) {
    std::vector<std::string> libraries;
    for (const auto& p : staged_writes)
      if (r::looks_like_shared_object(r::base_name(p))) libraries.push_back(p);
    if (const auto p = first_missing(libraries, planned_writes)) refuse("would write", *p, "does not write");
    return;
  }
  if (const auto p = first_missing(staged_writes, planned_writes)) refuse("would write", *p, "does not write");
  if (const auto p = first_missing(planned_writes, staged_writes)) refuse("would not write", *p, "writes");
  const auto staged_deletes = modelled(staged.deletes), planned_deletes = modelled(replayed.deletes);
  if (const auto p = first_missing(staged_deletes, planned_deletes)) refuse("would delete", *p, "does not delete");
  if (const auto p = first_missing(planned_deletes, staged_deletes)) refuse("would not delete", *p, "deletes");
}

std::size_t stage_plan(const r::Environment& env, const PreparedPlan& plan, tx::Transaction& t,
                       const ApplyOptions& options) {
  const auto& layout = writable(env);
  r::EarlierSteps earlier;  // the dists removed or replaced so far, and the paths written
  std::size_t files = 0;
  // Every step's wheel staged at once, side by side; each one's puts planned in its step.
  std::vector<const ValidatedWheel*> wheels;
  for (const auto& prepared : plan.steps)
    if (prepared.step.action != r::StepAction::remove) wheels.push_back(&*prepared.wheel);
  const Progress progress = options.wheel_progress && !wheels.empty() ? options.wheel_progress() : Progress{};
  auto staged_wheels = stage_wheels(wheels, layout, t, options.threads, false, progress);
  std::size_t next_wheel = 0;
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const auto& prepared = plan.steps[i];
    const r::Step& st = prepared.step;
    StagedStep staged;
    if (st.action == r::StepAction::remove) {
      // An uninstall stages the replay's own list, which the planner judged and the plan names.
      const r::Deletion del = deletion_of(st.deletes);
      tx::plan_removal_ops(env, del, t);
      earlier.removed.insert(st.dist);
      earlier.deleted.insert(del.files.begin(), del.files.end());
      staged.deletes = deletion_list(del);
      files += del.files.size();
    } else {
      auto& wheel = staged_wheels[next_wheel++];
      plan_puts(wheel, t);
      earlier.listed.insert(wheel.targets.begin(), wheel.targets.end());
      if (st.dist >= 0) staged.deletes = deletion_list(stage_leftovers(env, st.dist, earlier, t));
      files += wheel.targets.size();
      staged.writes = std::move(wheel.targets);
      staged.generated = std::move(wheel.generated);
    }
    check_staged_step(i, prepared.label, st, staged);
    t.mark_step();
  }
  return files;
}

}  // namespace cudafix::installer::apply
