// `cudafix sync LOCK`: the environment brought to exactly a PEP 751 lock. The lock is read
// (resolver/pep/pylock), its packages chosen for this environment (markers, the best wheel by
// tags), the wheels of what differs fetched and their SHA-256 checked against the lock, the plan
// made (resolver/plan/sync) and carried out as `fix` carries out its own: bound and replayed
// (installer/apply prepare_plan), staged, verified after each step, undone when a check fails.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <iostream>
#include <optional>
#include <set>

#include "cli/commands.hpp"
#include "cli/json_output.hpp"
#include "cli/json_writer.hpp"
#include "cli/phase_clock.hpp"
#include "cli/printable.hpp"
#include "cli/session.hpp"
#include "cli/transaction_steps.hpp"
#include "cli/usage.hpp"
#include "installer/source/find_links.hpp"
#include "installer/txn/file_ops.hpp"
#include "installer/txn/transaction.hpp"
#include "installer/wheel/read.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/requirements.hpp"
#include "resolver/pep/pylock.hpp"
#include "resolver/plan/sync.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;
namespace tx = installer::txn;
namespace src = installer::source;

namespace {

// A sync refused before anything was written (a wrong hash, a package cudafix cannot install):
// exit 1, as fix's refusals.
struct Refused : r::Error {
  using r::Error::Error;
};

// One package of the lock wanted here, and the wheel chosen for it.
struct Wanted {
  const r::LockPackage* package = nullptr;
  const r::LockFile* wheel = nullptr;  // none: the lock names no wheel (found by name and version)
};

// A marker that cannot be evaluated here (PEP 751's `extras` and `dependency_groups`, which
// cudafix does not choose yet) refuses the sync rather than drop, and so remove, its package.
bool marker_holds(const std::string& marker, const r::MarkerEnvironment& env, const std::string& where) {
  std::optional<bool> holds;
  std::string why;
  try {
    holds = r::Marker::parse(marker).evaluate(env, &why);
  } catch (const std::invalid_argument& e) {
    why = e.what();
  }
  if (!holds)
    throw Refused(
        fmt::format("{}: the marker '{}' cannot be evaluated here{}", where, marker, why.empty() ? "" : ": " + why));
  return *holds;
}

// The lock's packages this environment wants (their markers true), each with its best wheel
// for the interpreter's tags; a package cudafix cannot install here is refused by name.
std::vector<Wanted> wanted_packages(const r::Lock& lock, const std::string& name, const r::Environment& env,
                                    const std::vector<std::string>& tags, const std::string& python) {
  const r::MarkerEnvironment markers = r::marker_environment_of(env.layout);
  if (lock.requires_python) {
    const auto spec = r::SpecifierSet::parse(*lock.requires_python);
    const auto v = r::Version::parse(python);
    if (spec && v && !spec->contains(*v, true))
      throw Refused(fmt::format("{}: requires-python is '{}', and this interpreter is Python {}", name,
                                *lock.requires_python, python));
  }
  if (!lock.environments.empty() &&
      std::none_of(lock.environments.begin(), lock.environments.end(),
                   [&](const std::string& m) { return marker_holds(m, markers, name + ": environments"); }))
    throw Refused(
        fmt::format("{}: none of its environments ({}) is this one", name, fmt::join(lock.environments, "; ")));
  std::vector<Wanted> out;
  for (const auto& p : lock.packages) {
    if (p.marker && !marker_holds(*p.marker, markers, fmt::format("{}: {}", name, p.name))) continue;
    if (!p.version)
      throw Refused(fmt::format("{}: {} has no version; cudafix syncs pinned packages only", name, p.name));
    Wanted w{&p, nullptr};
    std::optional<std::size_t> best;
    for (const auto& f : p.wheels) {
      const auto wn = r::parse_wheel_name(f.file_name());
      const auto rank = wn ? r::tag_rank(*wn, tags) : std::nullopt;
      if (rank && (!best || *rank < *best)) {
        best = rank;
        w.wheel = &f;
      }
    }
    if (!w.wheel && !p.wheels.empty())
      throw Refused(fmt::format("{}: none of the {} wheels of {} {} is usable here (this interpreter takes {}, ...)",
                                name, p.wheels.size(), p.name, *p.version, tags.empty() ? "no tag" : tags.front()));
    if (p.wheels.empty() && (p.sdist || p.vcs || p.directory || p.archive))
      throw Refused(fmt::format("{}: {} {} has only {}; cudafix installs wheels only", name, p.name, *p.version,
                                p.sdist       ? "an sdist"
                                : p.vcs       ? "a VCS source"
                                : p.directory ? "a source tree"
                                              : "an archive"));
    out.push_back(w);
  }
  return out;
}

// What fetching one package's wheel gave.
struct Fetched {
  std::string file;    // in cudafix's cache, or a --find-links folder
  std::string origin;  // where it came from
  std::string sha256;
  bool pinned = true;  // the lock gave its hash
};

// The lock's folder (its real path), registered with the confined file code the first time a
// wheel's `path` is opened, so that it opens beneath it (openat2 RESOLVE_BENEATH): a `..` or a
// symlink leading out is refused by the kernel. A lock of URLs registers nothing.
const std::string& confined_lock_folder(const std::string& lock_path) {
  static std::string folder;
  if (!folder.empty()) return folder;
  std::error_code ec;
  const auto real = std::filesystem::canonical(std::filesystem::absolute(lock_path).parent_path(), ec);
  if (ec) throw r::Error(fmt::format("{}: {}", lock_path, ec.message()));
  tx::confine_to(real.string());
  folder = real.string();
  return folder;
}

// The lock's own source of a wheel, into cudafix's cache: `path` opened confined, `url` over
// installer/source/http (file:// too). Empty file and `problem` set where it could not be had.
src::Obtained from_lock(src::WheelSources& sources, const r::LockFile& f, const std::string& lock_path) {
  const std::string filename = f.file_name();
  src::Obtained o;
  // cudafix's cache by the lock's hash first; a download is kept under the hash it has, which
  // fetch_one compares with the lock's, whatever the source.
  if (const auto sha = f.hashes.sha256()) {
    o.file = sources.cached(*sha, filename);
    o.origin = "cudafix's wheel cache";
    if (!o.file.empty()) return o;
  }
  if (f.url) return sources.download(*f.url, "", filename);
  int fd = -1;
  try {
    // An absolute path is the lock's own choice of file, joined to nothing.
    fd = f.path->starts_with("/")
             ? ::open(f.path->c_str(), O_RDONLY | O_CLOEXEC)
             : tx::open_file(confined_lock_folder(lock_path) + "/" + *f.path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw r::Error(fmt::format("{}: {}", *f.path, std::strerror(errno)));
  } catch (const r::Error& e) {
    o.problem = e.what();
    return o;
  }
  o = sources.keep_copy(fd, filename, *f.path);
  ::close(fd);
  return o;
}

// Every hash the lock gives for a package's wheels: a wheel found by name and version elsewhere
// must have one of them.
std::vector<std::string> lock_hashes(const r::LockPackage& p) {
  std::vector<std::string> out;
  for (const auto& w : p.wheels)
    if (auto h = w.hashes.sha256()) out.push_back(*h);
  return out;
}

// One package's wheel: the lock's source first, then --find-links, the caches and the index by
// name and version; its SHA-256 checked against the lock's. nullopt: found nowhere (`problems`).
std::optional<Fetched> fetch_one(src::WheelSources& sources, const Wanted& w, const std::string& lock_path,
                                 const std::vector<r::Wheel>& linked, std::vector<std::string>& problems) {
  const r::LockPackage& p = *w.package;
  const auto hashes = lock_hashes(p);
  Fetched got;
  got.pinned = !hashes.empty();
  if (w.wheel) {
    const auto o = from_lock(sources, *w.wheel, lock_path);
    if (!o.file.empty()) {
      got.file = o.file;
      got.origin = o.origin;
    } else {
      problems.push_back(fmt::format("{} {}: {}", p.name, *p.version, o.problem));
    }
  }
  const auto version = r::Version::parse(*p.version);
  for (const auto& l : linked) {
    if (!got.file.empty()) break;
    const auto v = r::Version::parse(l.wheel_name.version);
    if (l.wheel_name.normalized == p.name && v && version && *v == *version && l.compatible) {
      got.file = l.file;
      got.origin = l.source;
    }
  }
  if (got.file.empty()) {
    const auto o = sources.obtain({{p.name, "==" + *p.version}});
    if (o.front().file.empty()) {
      problems.push_back(fmt::format("{} {}: {}", p.name, *p.version, o.front().problem));
      return std::nullopt;
    }
    got.file = o.front().file;
    got.origin = o.front().origin;
  }
  got.sha256 = r::sha256_of_file(got.file, r::DigestForm::hex);
  if (got.pinned && std::find(hashes.begin(), hashes.end(), got.sha256) == hashes.end())
    throw Refused(fmt::format("{} {}: the wheel {} (from {}) has SHA-256 {}, but the lock says {}; refused", p.name,
                              *p.version, got.file, got.origin, got.sha256, fmt::join(hashes, " or ")));
  return got;
}

struct SyncInputs {
  std::vector<r::LockedDist> locked;
  std::deque<r::Wheel> wheels;        // what the locked dists point into
  std::vector<std::string> unpinned;  // "name version": wheels the lock gave no hash for
  std::vector<std::string> problems;  // wheels that could not be had
  std::vector<std::string> fetched;   // "name version from ORIGIN"
};

SyncInputs sync_inputs(const GlobalOptions& g, const SyncCliOptions& o, const r::Lock& lock, const r::Environment& env,
                       const std::vector<std::string>& tags) {
  SyncInputs in;
  const auto wanted = wanted_packages(lock, o.lock, env, tags, requires_python_version(g, env));
  for (const auto& w : wanted) in.locked.push_back({w.package->name, *w.package->version, {}, {}, nullptr});
  r::sync_needs(env, in.locked, g.threads);
  std::set<std::string> names;
  for (const auto& l : in.locked)
    if (l.action) names.insert(l.name);
  if (names.empty()) return in;
  auto settings = wheel_source_settings(g, env, tags);
  if (settings.cache_dir.empty())
    throw r::Error("no cache folder for the lock's wheels: set CUDAFIX_CACHE_DIR or HOME");
  src::WheelSources sources(std::move(settings));
  const auto linked = src::find_wheels(g.find_links.empty() ? g.config_find_links : g.find_links, tags, &names);
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    auto& l = in.locked[i];
    if (!l.action) continue;
    const auto got = fetch_one(sources, wanted[i], o.lock, linked.wheels, in.problems);
    if (!got) continue;
    if (!got->pinned) {
      if (o.require_hashes)
        throw Refused(fmt::format("{} {}: the lock gives no hash for its wheel, and --require-hashes is given", l.name,
                                  l.version));
      in.unpinned.push_back(fmt::format("{} {} (sha256 {})", l.name, l.version, got->sha256));
    }
    auto wheel = installer::read_wheel(got->file, tags);
    if (wheel.wheel_name.normalized != l.name || !r::Version::parse(wheel.wheel_name.version) ||
        *r::Version::parse(wheel.wheel_name.version) != *r::Version::parse(l.version))
      throw Refused(fmt::format("{} {}: the wheel {} is {} {}", l.name, l.version, got->file,
                                wheel.wheel_name.normalized, wheel.wheel_name.version));
    wheel.source = got->origin;
    in.wheels.push_back(std::move(wheel));
    l.wheel = &in.wheels.back();
    in.fetched.push_back(fmt::format("{} {} from {}", l.name, l.version, got->origin));
  }
  return in;
}

std::string sync_plan_text(const r::Environment& env, const std::string& lock, const r::FixPlan& plan,
                           const SyncInputs& in, const Style& st) {
  std::string out = fmt::format("{} {} -> {}\n", st.bold("cudafix sync"), printable(lock), printable(env.layout.root));
  for (const auto& u : in.unpinned)
    out += st.warn(fmt::format("  unpinned: {}: the lock gives no hash; taken as it is\n", printable(u)));
  int n = 0;
  for (const auto& s : plan.steps) {
    out += fmt::format(
        "\n{}{}\n",
        st.bold(fmt::format("{}. {} {} {}", ++n, r::to_string(s.action), printable(s.name), printable(s.version))),
        s.wheel ? st.dim(" from " + printable(s.wheel->file)) : std::string());
    out += fmt::format("   why: {}\n", printable(s.why, k_line_limit));
    if (!s.deletes.empty()) out += fmt::format("   deletes {}\n", count_of(s.deletes.size(), "path", "paths"));
    if (!s.writes.empty()) out += fmt::format("   writes {}\n", count_of(s.writes.size(), "file", "files"));
  }
  if (!plan.needs.empty()) {
    out += "\nwheels found nowhere (the lock's sources, --find-links, the caches, the index):\n";
    for (const auto& p : in.problems) out += fmt::format("  {}\n", printable(p, k_line_limit));
  }
  out += "\n";
  if (!plan.ok()) return out + st.bad(printable(plan.problem, k_line_limit) + "\n");
  if (plan.steps.empty()) return out + st.good("nothing to do: the environment is the lock's\n");
  return out + st.good(fmt::format("a safe order of {} found\n", count_of(plan.steps.size(), "step", "steps")));
}

// One run of sync: what it read, and its document, whose keys are set as the run learns their
// values and written once, where it ends, through one JsonWriter (the plan rendered into it).
struct SyncRun {
  const GlobalOptions& g;
  const SyncCliOptions& o;
  const r::Environment& env;
  const r::Knowledge& knowledge;
  const Retention& keep;
  PhaseClock& clock;
  std::ostream& out;
  JsonFields doc;

  JsonFields& times() {
    doc.set("seconds", clock.seconds()).set("phases", [this](JsonWriter& w) { clock.write_phases(w); });
    if (g.timings) std::cerr << clock.timings_text();
    return doc;
  }
  // Where sync ends before changing anything: the document or `text`; returns `rc`.
  int finish(int rc, const std::string& text) {
    times();
    if (g.json)
      write_document(out, "sync", env.layout.root, doc);
    else if (!g.quiet || rc != 0)
      out << text;
    return rc;
  }
};

// The plan bound and replayed as `apply` binds a saved one (every wheel validated whole, each
// member against its RECORD hash), then, but for --dry-run, carried out as `fix` carries out its
// plan (installer/apply carry_out_plan): one transaction, verified after each step, undone when a
// check fails.
int carry_out_sync(SyncRun& run, const r::FixPlan& plan, const r::Fingerprint& fingerprint,
                   const std::vector<std::string>& tags, const std::vector<std::string>& problems,
                   const std::string& shown) {
  const auto& [g, o, env, knowledge, keep, clock, out, doc] = run;
  auto apply = apply_options(g, env);
  apply.lock_sync = true;
  apply.carry_out_progress = [&g] { return progress_bar(g, "syncing", "changes"); };
  const PreparedPlan prepared =
      installer::apply::prepare_plan(env, knowledge, r::plan_file_of(env, plan, fingerprint, tags, problems), o.lock,
                                     "another tool changed it while sync planned: run `cudafix sync` again", apply);
  clock.lap("bind");
  const auto said = prepared.labels();
  if (o.dry_run)
    return run.finish(0, shown +
                             "dry run: every check passed and nothing was changed (run without --dry-run to carry "
                             "it out)\n");
  if (!g.json && !g.quiet) out << shown << std::flush;
  check_one_file_system(env.layout);
  if (!confirmed(g, fmt::format("carry out these {} steps", said.size())))
    return declined(g, out, "sync", env.layout.root);
  clock.lap("confirm");
  tx::Transaction t(env.layout.root_real, "sync");
  StepChecks checks;
  const auto done = installer::apply::carry_out_plan(
      env, knowledge, prepared, t, apply,
      installer::apply::VerifyStepsOptions::for_command(scan_options(g), !o.no_verify, notes(g)), !o.no_verify, checks,
      [&clock](const char* phase) { clock.lap(phase); });
  if (done.failed) return verification_failed(g, out, "sync", env, t, *done.failed, checks);
  std::string summary =
      fmt::format("synced {} to {}: {}\n", env.layout.root, o.lock, count_of(said.size(), "step", "steps"));
  if (o.no_verify)
    summary += "  not verified (--no-verify)\n";
  else if (checks.unverified)
    summary += fmt::format("  not verified: {}; run `cudafix verify` on a GPU node\n", checks.unverified_why);
  else
    summary += "  verified on the GPU after each step\n";
  summary += fmt::format("  took {:.2f} s", clock.seconds());
  run.doc.set("changed", true)
      .set("steps", said)
      .set("verified", !o.no_verify && !checks.unverified)
      .set("verification", [&env, &checks](JsonWriter& w) { write_verification(w, env, checks); });
  report_done(g, out, "sync", env.layout.root, t, summary, keep, run.times());
  return checks.unverified ? 4 : 0;
}

}  // namespace

CLI::App* add_sync_command(CLI::App& app, SyncCliOptions& o) {
  auto* sync = app.add_subcommand(
      "sync", "bring the environment to exactly a PEP 751 lock (pylock.toml), as one verified transaction");
  sync->add_option("LOCK", o.lock, "the lock file (uv's `uv pip compile -o pylock.toml`, or `cudafix lock`)")
      ->required()
      ->check(existing_file());
  sync->add_flag("--dry-run", o.dry_run, "show the plan and run every check; change nothing");
  sync->add_flag("--no-verify", o.no_verify, "skip the live GPU check after each step");
  sync->add_flag("--require-hashes", o.require_hashes, "refuse a wheel the lock gives no SHA-256 for");
  return sync;
}

int run_sync(const GlobalOptions& options, const SyncCliOptions& o, std::ostream& out) {
  PhaseClock clock;
  Located located = locate(options, Access::write);
  const GlobalOptions g = with_configured_sources(options, located.config);
  if (!o.dry_run) refuse_externally_managed(located.layout, g);
  const Retention keep = retention(located);
  std::optional<tx::EnvLock> env_lock;
  if (!o.dry_run) env_lock.emplace(located.layout.root_real, lock_wait(g), say_waiting);
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located), r::ScanDepth::full, true);
  clock.lap("scan");
  SyncRun run{g, o, env, knowledge, keep, clock, out, {}};
  run.doc.set("lock", o.lock).set("dry_run", o.dry_run).set("changed", false);
  std::vector<std::string> warnings;
  const r::Lock lock = r::read_lock(o.lock, &warnings);
  for (const auto& w : warnings)
    if (!g.quiet) std::cerr << fmt::format("cudafix: warning: {}\n", printable(w, k_line_limit));
  const auto tags = environment_tags(g, env).tags;
  SyncInputs in;
  try {
    in = sync_inputs(g, o, lock, env, tags);
  } catch (const Refused& e) {
    run.doc.set("error", std::string(e.what())).set("exit", 1);
    return run.finish(1, fmt::format("nothing was changed: {}\n", e.what()));
  }
  clock.lap("wheels");
  // A source that failed where another gave the wheel is said too (as fix says its sources').
  for (const auto& problem : in.problems)
    if (!g.quiet) std::cerr << fmt::format("cudafix: warning: {}\n", printable(problem, k_line_limit));
  const r::FixPlan plan = r::plan_sync(env, knowledge, in.locked, g.threads);
  const r::Fingerprint fingerprint = r::fingerprint_of(env, plan);
  clock.lap("plan");
  run.doc.set("plan", [&](JsonWriter& w) { write_plan_fix(w, env, knowledge, plan, fingerprint, tags, in.problems); })
      .set("unpinned", in.unpinned)
      .set("fetched", in.fetched);
  const Style st = style_for(g);
  const std::string shown = sync_plan_text(env, o.lock, plan, in, st);
  if (!plan.needs.empty()) {
    std::vector<std::string> names;
    for (const auto& n : plan.needs) names.push_back(n.name + " " + n.version);
    run.doc.set("error", fmt::format("no wheel for {}", fmt::join(names, ", "))).set("exit", 2);
    return run.finish(2, shown + "nothing was changed: a wheel the lock holds was found nowhere (above)\n");
  }
  if (!plan.ok()) {
    run.doc.set("error", plan.problem).set("exit", 1);
    return run.finish(1, shown + "nothing was changed: the lock cannot be synced here (above)\n");
  }
  if (plan.steps.empty()) return run.finish(0, shown);
  return carry_out_sync(run, plan, fingerprint, tags, in.problems, shown);
}

}  // namespace cudafix::cli
