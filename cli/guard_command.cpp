// `cudafix guard -- COMMAND`: a cleanup someone already runs (pip uninstall, uv pip uninstall, a
// script), checked before where cudafix can tell what it removes, run under a snapshot, and undone
// when it leaves the environment worse than it found it (docs/cli.md).
//
// The command is forked first, before this process fences itself (Landlock is inherited by every
// child, and the command must write where it would without guard) and before any thread starts;
// it waits on a pipe until the snapshot is taken, then runs with the caller's streams, environment
// and folder, and the environment's lock released (pip and uv take <venv>/.lock themselves).
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <future>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/held_command.hpp"
#include "cli/json_output.hpp"
#include "cli/phase_clock.hpp"
#include "cli/printable.hpp"
#include "cli/session.hpp"
#include "cli/text_output.hpp"
#include "cli/transaction_steps.hpp"
#include "installer/probe/verdict.hpp"
#include "installer/probe/verify.hpp"
#include "installer/txn/changes.hpp"
#include "installer/txn/transaction.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/state_folder.hpp"
#include "resolver/plan/plan.hpp"
#include "resolver/plan/uninstall_command.hpp"
#include "rules/doctor.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;
namespace tx = installer::txn;
namespace pr = installer::probe;
// Its keys in the order written: schema, command and venv first (docs/json.md).
using json = nlohmann::ordered_json;

namespace {

// ---- the marker a killed guard leaves ------------------------------------------------------

constexpr std::size_t k_marker_max_bytes = 32 << 10;
constexpr std::size_t k_marker_args = 64;
constexpr std::size_t k_marker_arg_bytes = 512;
constexpr std::size_t k_notices_max = 16;

std::string guards_dir(const std::string& root) { return root + "/.cudafix/guards"; }

std::string marker_path(const std::string& root, const std::string& snapshot) {
  return guards_dir(root) + "/" + snapshot + ".json";
}

// The command as a shell would show it, each word quoted where it needs to be.
std::string shown_command(const std::vector<std::string>& argv) {
  std::vector<std::string> words;
  for (const auto& a : argv) {
    const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_./=:,+@%", c) != nullptr;
    });
    if (plain) {
      words.push_back(a);
      continue;
    }
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    words.push_back(q + "'");
  }
  return fmt::format("{}", fmt::join(words, " "));
}

// Written before the command runs and held locked (flock) while guard lives: one found unlocked
// belongs to a guard that was killed. Removed when guard ends.
class Marker {
 public:
  Marker(const std::string& root, const std::string& snapshot, const std::vector<std::string>& argv)
      : path_(marker_path(root, snapshot)) {
    tx::make_state_folders(root);
    if (::mkdir(guards_dir(root).c_str(), 0700) != 0 && errno != EEXIST)
      throw r::Error(fmt::format("{}: {}", guards_dir(root), std::strerror(errno)));
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd_ < 0) throw r::Error(fmt::format("{}: {}", path_, std::strerror(errno)));
    if (::flock(fd_, LOCK_EX) != 0) throw r::Error(fmt::format("{}: flock: {}", path_, std::strerror(errno)));
    json args = json::array();
    for (std::size_t i = 0; i < argv.size() && i < k_marker_args; ++i)
      args.push_back(r::to_valid_utf8(argv[i].substr(0, k_marker_arg_bytes)));
    const std::string text = json{
        {"snapshot", snapshot},
        {"pid", static_cast<long>(::getpid())},
        {"time", static_cast<std::int64_t>(std::time(nullptr))},
        {"command", args}}.dump();
    if (::write(fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size()) || ::fsync(fd_) != 0)
      throw r::Error(fmt::format("{}: {}", path_, std::strerror(errno)));
  }
  ~Marker() {
    if (!left_) ::unlink(path_.c_str());
    ::close(fd_);
  }
  // Guard failed after the command ran: the marker stays, so that later commands name the snapshot.
  void leave() { left_ = true; }
  Marker(const Marker&) = delete;
  Marker& operator=(const Marker&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
  bool left_ = false;
};

// ---- the baseline and what got worse -------------------------------------------------------

struct Baseline {
  rules::DoctorReport report;
  std::set<std::string> errors;  // each error finding's rule and message
};

Baseline doctor_baseline(const GlobalOptions& g, const r::Environment& env, const r::Knowledge& knowledge,
                         const std::map<std::string, rules::RuleSettings>& settings) {
  rules::DoctorOptions opts;
  opts.threads = g.threads;
  opts.settings = settings;
  Baseline h{rules::run_doctor(env, knowledge, opts), {}};
  for (const auto& f : h.report.findings)
    if (f.severity == rules::Severity::error) h.errors.insert(f.rule + "\n" + f.message);
  return h;
}

// A file of the consumer's tree as the probe found it: whether anything replaced or changed it.
struct TreeStamp {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  std::int64_t mtime = 0, ctime = 0;
  bool operator==(const TreeStamp&) const = default;
};

TreeStamp tree_stamp_of(const std::string& path, bool follow) {
  struct stat st {};
  TreeStamp s;
  if ((follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) return s;
  s = {true,
       st.st_dev,
       st.st_ino,
       st.st_size,
       static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
       static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
  return s;
}

// Every file the baseline probe had mapped, its link and its target, stamped.
std::map<std::string, std::pair<TreeStamp, TreeStamp>> tree_stamps(const pr::VerifyReport& probe) {
  std::map<std::string, std::pair<TreeStamp, TreeStamp>> out;
  const auto add = [&](const std::optional<std::string>& p) {
    if (p && !p->empty()) out[*p] = {tree_stamp_of(*p, false), tree_stamp_of(*p, true)};
  };
  for (const auto& f : probe.loaded) {
    add(f.path);
    add(f.predicted);
  }
  add(probe.consumer);
  add(probe.cudnn);
  return out;
}

// Whether a deletion holds a shared object or a link to one ("libx.so", "libx.so.9", "_C.so"):
// the loader could see it go.
bool deletes_no_library(const r::Deletion& deletion) {
  return std::none_of(deletion.files.begin(), deletion.files.end(),
                      [](const std::string& f) { return r::base_name(f).find(".so") != std::string::npos; });
}

bool tree_changed(const std::map<std::string, std::pair<TreeStamp, TreeStamp>>& before) {
  return std::any_of(before.begin(), before.end(), [](const auto& kv) {
    return kv.second != std::pair<TreeStamp, TreeStamp>{tree_stamp_of(kv.first, false), tree_stamp_of(kv.first, true)};
  });
}

struct GotWorse {
  std::string kind;  // "doctor", "resolution", "probe"
  std::string what;  // the rule, the soname, the stage or check
  std::string message;
};

// What the probe did well before and not after: a stage that passed and now fails, a check that
// held and now does not.
std::vector<GotWorse> probe_worse(const pr::VerifyReport& before, const pr::VerifyReport& after) {
  std::vector<GotWorse> out;
  std::set<std::string> passed;
  for (const auto& s : before.records.stages)
    if (s.ok) passed.insert(pr::stage_label(s));
  for (const auto& s : after.records.stages) {
    const std::string label = pr::stage_label(s);
    if (!s.ok && passed.count(label))
      out.push_back({"probe", label, s.detail.empty() ? after.verdict.message : s.detail});
  }
  for (const auto& c : after.checks) {
    if (c.ok) continue;
    const bool held = std::any_of(before.checks.begin(), before.checks.end(),
                                  [&](const pr::Check& b) { return b.check == c.check && b.ok; });
    if (held)
      out.push_back({"probe", c.check,
                     c.expected.empty() ? c.detail : fmt::format("expected {}, found {}", c.expected, c.found)});
  }
  if (out.empty() && before.verdict.outcome == pr::Outcome::ok && after.verdict.outcome != pr::Outcome::ok)
    out.push_back({"probe", std::string(pr::to_string(after.verdict.outcome)), after.verdict.message});
  return out;
}

std::vector<GotWorse> model_worse(const r::Environment& before_env, const r::Environment& after_env,
                                  const r::Knowledge& knowledge, const Baseline& before, const Baseline& after) {
  std::vector<GotWorse> out;
  for (const auto& f : after.report.findings)
    if (f.severity == rules::Severity::error && !before.errors.count(f.rule + "\n" + f.message))
      out.push_back({"doctor", f.rule, f.message});
  // A resolution doctor does not call an error (one that moved to the host's library, where a
  // rule is configured off) still counts: the planner's judgement, as plan remove gives it.
  const auto breaks = r::worse_resolutions(before_env, after_env, knowledge);
  if (out.empty())
    for (const auto& b : breaks) out.push_back({"resolution", b.soname, r::describe_breaks(before_env, {b})});
  return out;
}

json worse_json(const std::vector<GotWorse>& worse) {
  json a = json::array();
  for (const auto& w : worse) a.push_back({{"kind", w.kind}, {"what", w.what}, {"message", w.message}});
  return a;
}

json probe_summary_json(const std::optional<pr::VerifyReport>& p, const std::string& why_not) {
  if (!p) return {{"ran", false}, {"why_not", why_not}};
  json passed = json::array();
  for (const auto& s : p->records.stages)
    if (s.ok) passed.push_back(pr::stage_label(s));
  return {{"ran", true},
          {"outcome", pr::to_string(p->verdict.outcome)},
          {"message", p->verdict.message},
          {"stages_passed", passed},
          {"cudnn_version", p->cudnn_version ? json(*p->cudnn_version) : json()}};
}

std::string snapshot_name_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return fmt::format("guard-{}-{}", buf, ::getpid());
}

// The dists an uninstall names that are installed, as pip finds them (PEP 503 names); the names
// it would skip ("Skipping X as it is not installed") go to `skipped`. `unnamed`: whether a
// requirement names no project (a path, a URL), so what pip removes is not known from the names.
std::vector<int> uninstalled_dists(const r::Environment& env, const r::UninstallCommand& cmd,
                                   std::vector<std::string>& skipped, std::vector<std::string>& problems,
                                   bool& unnamed) {
  std::vector<std::string> requirements = cmd.requirements;
  const auto files = r::read_requirement_files(cmd.requirement_files);
  requirements.insert(requirements.end(), files.requirements.begin(), files.requirements.end());
  problems = files.problems;
  std::vector<int> out;
  for (const auto& req : requirements) {
    const auto project = r::requirement_project(req);
    if (!project) {
      unnamed = true;
      continue;
    }
    const auto d = env.dist_index(r::normalize_name(*project));
    if (!d) {
      skipped.push_back(*project);
      continue;
    }
    if (std::find(out.begin(), out.end(), *d) == out.end()) out.push_back(*d);
  }
  return out;
}

}  // namespace

int run_guard(const GlobalOptions& g, const GuardCliOptions& o, std::ostream& out) {
  if (o.command.empty()) throw r::Error("guard: give the command to run after --");
  // Where guard's own time goes, phase by phase, for the JSON (`phases`) and --timings.
  PhaseClock clock;
  const auto lap = [&](const char* phase) { clock.lap(phase); };
  HeldCommand command(o.command);  // before the fence and before any thread: it must stay unfenced
  const std::string shown = shown_command(o.command);
  const auto say = [&](const std::string& text) {
    if (!g.quiet && !g.json) std::cerr << printable_lines(text) << '\n';
  };

  Located located = locate(g, Access::write);
  refuse_externally_managed(located.layout, g);
  const Retention keep = retention(located);
  const std::string root = located.layout.root_real;
  std::optional<tx::EnvLock> lock;
  lock.emplace(root, lock_wait(g), say_waiting);
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located), r::ScanDepth::full, true);
  writable(env);
  lap("scan");
  try {
    check_one_file_system(env.layout);
  } catch (const r::Error& e) {
    throw r::Error(fmt::format("guard cannot snapshot {}: {}; `{}` was not run", env.layout.root, e.what(), shown));
  }
  json j{{"schema", 1}, {"command", "guard"}, {"venv", env.layout.root}, {"run", o.command}};

  // Before: an uninstall cudafix can read is judged as plan remove judges it.
  j["uninstall"] = nullptr;
  // plan remove's document for the uninstall, spliced in as `uninstall.plan` when the document is
  // written (document()): written once as JSON text, never parsed back.
  std::optional<std::string> plan_text;
  const auto document = [&] {
    if (!plan_text || !j["uninstall"].is_object()) return j.dump();
    return dump_with(j, {{"uninstall", dump_with(j["uninstall"], {{"plan", *plan_text}})}});
  };
  // Whether the command may run while the baseline probe is still loading the consumer's tree:
  // only an uninstall cudafix read whose deletions hold no shared object, which no load can see.
  bool touches_no_library = false;
  // The dists whose files alone the snapshot keeps: an uninstall cudafix read whole deletes no
  // other (pip and uv delete what the dists' RECORDs list, the byte code and the folders that
  // empties). An egg or a dist without RECORD is removed by guesses (top_level.txt,
  // easy-install.pth): the whole environment then, as for any other command.
  std::optional<std::vector<int>> scope;
  if (const auto uninstall = r::parse_uninstall_command(o.command)) {
    std::vector<std::string> skipped, problems;
    bool unnamed = false;
    const auto dists = uninstalled_dists(env, *uninstall, skipped, problems, unnamed);
    const bool by_record = std::all_of(dists.begin(), dists.end(), [&](int d) {
      const auto& dist = env.dists[static_cast<std::size_t>(d)];
      return dist.format == r::DistFormat::dist_info && dist.has_record && dist.record_problem.empty();
    });
    if (problems.empty() && !unnamed && by_record) scope = dists;
    json u{{"tool", uninstall->tool}, {"dists", json::array()}, {"skipped", skipped},
           {"problems", problems},    {"safe", true},           {"plan", nullptr}};
    std::vector<std::string> names;
    for (int d : dists) names.push_back(env.dists[static_cast<std::size_t>(d)].name);
    u["dists"] = names;
    touches_no_library = problems.empty();
    if (!dists.empty()) {
      const auto plan = r::plan_removal(env, knowledge, dists, g.threads);
      touches_no_library = touches_no_library && deletes_no_library(plan.pip.deletion);
      u["safe"] = plan.safe();
      plan_text = plan_remove_json(env, knowledge, plan);
      if (!plan.safe() && !o.allow_break) {
        command.abandon();
        const std::string alternative =
            plan.safe_with_cudafix()
                ? fmt::format("`cudafix remove {}` removes them counting owners, which breaks nothing",
                              fmt::join(names, " "))
                : fmt::format("`cudafix remove {}` would break it too (above)", fmt::join(names, " "));
        const std::string why = fmt::format(
            "refused: `{}` would break what is listed above; it was not run and nothing was changed. {}; "
            "--allow-break runs it anyway, under a snapshot",
            shown, alternative);
        j["uninstall"] = u;
        j["refused"] = why;
        j["snapshot"] = nullptr;
        j["snapshot_scope"] = nullptr;
        j["exit_code"] = nullptr;
        j["worse"] = json::array();
        j["undone"] = false;
        if (g.json)
          out << document() << '\n';
        else
          std::cerr << plan_remove_text(env, plan, style_for(g)) << printable_lines(why) << '\n';
        return 1;
      }
    }
    j["uninstall"] = u;
  }
  j["refused"] = nullptr;
  lap("check");

  // The baseline: the probe, started first (it takes longest), while doctor runs and the
  // snapshot is taken.
  std::future<std::optional<pr::VerifyReport>> probing;
  std::string probe_why_not = o.no_verify ? "--no-verify" : "";
  if (!o.no_verify) {
    pr::VerifyOptions vo;
    vo.probe = probe_path();
    probing = std::async(std::launch::async, [&env, &knowledge, vo]() -> std::optional<pr::VerifyReport> {
      return pr::verify_environment(env, knowledge, vo);
    });
  }
  const Baseline before = doctor_baseline(g, env, knowledge, settings);
  lap("doctor");
  const std::string name = snapshot_name_now();
  tx::SnapshotInfo snap;
  try {
    snap = tx::take_snapshot(env, name, {}, scope);
  } catch (const r::Error& e) {
    if (probing.valid()) (void)probing.get();
    command.abandon();
    throw r::Error(fmt::format("guard cannot snapshot {}: {}; `{}` was not run and nothing was changed",
                               env.layout.root, e.what(), shown));
  }
  lap("snapshot");
  std::optional<pr::VerifyReport> baseline_probe;
  std::map<std::string, std::pair<TreeStamp, TreeStamp>> stamps;
  // The baseline probe's verdict, and the consumer's tree it mapped, stamped.
  const auto take_baseline = [&] {
    if (probing.valid()) baseline_probe = probing.get();
    if (baseline_probe && baseline_probe->verdict.outcome == pr::Outcome::no_driver) {
      probe_why_not = "no GPU driver (libcuda.so.1) here";
      baseline_probe.reset();
    }
    if (baseline_probe) stamps = tree_stamps(*baseline_probe);
    j["before"] = {{"errors", before.report.errors},
                   {"warnings", before.report.warnings},
                   {"probe", probe_summary_json(baseline_probe, probe_why_not)}};
  };
  j["snapshot"] = name;
  j["snapshot_scope"] = snap.scope ? json(*snap.scope) : json();
  j["before"] = nullptr;  // its place in the document, filled by take_baseline
  const bool probe_beside_command = touches_no_library && probing.valid();
  if (!probe_beside_command) take_baseline();
  lap("probe");
  say(fmt::format("cudafix guard: snapshot '{}' taken ({} files{}); doctor: {}; probe: {}; running `{}`", name,
                  snap.files, printable(scope_text(snap.scope)),
                  count_of(static_cast<std::size_t>(before.report.errors), "error", "errors"),
                  probe_beside_command ? std::string("running beside it (it deletes no library)")
                  : baseline_probe     ? std::string(pr::to_string(baseline_probe->verdict.outcome))
                                       : "not run, " + probe_why_not,
                  shown));

  // The command, with the lock released.
  int code = 0;
  // Until guard ends: a guard killed after the command, before it undid a break, is reported too.
  Marker marker(root, name, o.command);
  {
    lock.reset();
    PassingSignalsOn signals(command.pid());
    if (const int failed = command.go(); failed != 0) {
      std::cerr << fmt::format("cudafix guard: cannot run {}: {}\n", printable(o.command[0]), std::strerror(failed));
    }
    code = command.wait();
  }
  j["exit_code"] = code;
  lap("command");

  try {
    if (probe_beside_command) {
      take_baseline();
      lap("probe");
    }
    lock.emplace(root, lock_wait(g), say_waiting);
    // After: the environment scanned afresh, judged against the baseline.
    // The caches answer only for folders and objects whose stamps are the ones kept, and keep
    // nothing written within their settle time: what the command changed is read from the disk.
    const r::Environment now = r::scan_environment(env.layout, scan_options(g, r::ScanDepth::full, true));
    const Baseline after = doctor_baseline(g, now, knowledge, settings);
    std::vector<GotWorse> worse = model_worse(env, now, knowledge, before, after);
    lap("rescan");
    bool probed_after = false;
    if (baseline_probe && (tree_changed(stamps) || !worse.empty())) {
      pr::VerifyOptions vo;
      vo.probe = probe_path();
      const auto after_probe = pr::verify_environment(now, knowledge, vo);
      probed_after = true;
      for (auto& w : probe_worse(*baseline_probe, after_probe)) worse.push_back(std::move(w));
      j["after_probe"] = probe_summary_json(after_probe, "");
      lap("probe_after");
    } else {
      j["after_probe"] = probe_summary_json(std::nullopt, baseline_probe ? "the command changed no file of the "
                                                                           "consumer's library tree"
                                                                         : probe_why_not);
    }
    j["probed_after"] = probed_after;
    j["after"] = {{"errors", after.report.errors}, {"warnings", after.report.warnings}};
    j["worse"] = worse_json(worse);
    j["undone"] = false;
    j["kept"] = o.keep || !worse.empty();
    const auto finish = [&](int rc, const std::string& text) {
      lap("finish");
      j["seconds"] = clock.seconds();
      j["phases"] = clock.phases();
      if (g.timings) std::cerr << clock.timings_text();
      if (g.json)
        out << document() << '\n';
      else if (!g.quiet || rc != code)
        std::cerr << printable_lines(text) << '\n';
      return rc;
    };
    std::string broke;
    for (const auto& w : worse)
      broke += fmt::format("\n  {}[{}]: {}", w.kind == "doctor" ? "error" : w.kind, w.what, w.message);

    if (worse.empty()) {
      if (!o.keep) {
        tx::delete_snapshot(root, name);
        lap("delete");
        j["kept"] = false;
        return finish(code, fmt::format("cudafix guard: `{}` exited {}; nothing got worse; snapshot '{}' deleted",
                                        shown, code, name));
      }
      return finish(code, fmt::format("cudafix guard: `{}` exited {}; nothing got worse; snapshot '{}' kept "
                                      "(`cudafix rollback --snapshot {}` restores it)",
                                      shown, code, name, name));
    }
    if (o.keep)
      return finish(1, fmt::format("cudafix guard: `{}` exited {} and broke:{}\nkept as it is (--keep); `cudafix "
                                   "rollback --snapshot {}` undoes it",
                                   shown, code, broke, name));
    tx::Transaction t(root, "guard: rollback --snapshot " + name);
    const auto check = tx::plan_restore(now, name, t);
    if (!check.altered.empty()) {
      t.abandon();
      j["kept"] = true;
      j["error"] =
          fmt::format("snapshot '{}' was altered (written in place): {}", name, fmt::join(check.altered, ", "));
      return finish(1, fmt::format("cudafix guard: `{}` exited {} and broke:{}\nit could NOT be undone: the command "
                                   "wrote these files of snapshot '{}' in place: {}",
                                   shown, code, broke, name, fmt::join(check.altered, ", ")));
    }
    t.carry_out();
    (void)tx::prune_transactions(keep.root, keep.count);
    tx::delete_snapshot(root, name);
    j["undone"] = true;
    j["kept"] = false;
    j["transaction"] = t.id();
    return finish(1, fmt::format("cudafix guard: `{}` exited {} and broke:{}\nundone: snapshot '{}' restored ({} files "
                                 "put back, {} moved aside; transaction {}, `cudafix rollback {}` redoes the command's "
                                 "change)",
                                 shown, code, broke, name, check.restore, check.remove, t.id(), t.id()));
  } catch (const std::exception& e) {
    // The command ran and what it left was not judged (or not undone): the snapshot stays.
    marker.leave();
    throw r::Error(
        fmt::format("{}; `{}` exited {}, and snapshot '{}' is kept: `cudafix rollback --snapshot {}` "
                    "restores the environment as it was before it",
                    e.what(), shown, code, name, name));
  }
}

std::vector<std::string> killed_guard_notices(const std::string& root) {
  std::vector<std::string> out;
  if (!r::state_folder_problem(root).empty()) return out;  // doctor's untrusted-state says why
  const std::string dir = guards_dir(root);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return out;
  std::error_code ec;
  std::size_t seen = 0;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end && out.size() < k_notices_max;
       it.increment(ec)) {
    if (++seen > 4 * k_notices_max) break;
    const std::string file = it->path().filename().string();
    if (!file.ends_with(".json")) continue;
    const std::string snapshot = file.substr(0, file.size() - 5);
    if (!r::is_snapshot_name(snapshot)) continue;
    const int fd = ::open((dir + "/" + file).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat fst {};
    const bool regular =
        ::fstat(fd, &fst) == 0 && S_ISREG(fst.st_mode) && static_cast<std::size_t>(fst.st_size) <= k_marker_max_bytes;
    // Locked: its guard is alive and running the command.
    const bool dead = regular && ::flock(fd, LOCK_SH | LOCK_NB) == 0;
    std::string text;
    if (dead) {
      char buf[4096];
      for (ssize_t n; text.size() <= k_marker_max_bytes && (n = ::read(fd, buf, sizeof buf)) > 0;)
        text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    if (!dead || text.size() > k_marker_max_bytes) continue;
    const auto j = json::parse(text, nullptr, false);
    if (!j.is_object() || !j.contains("snapshot") || j["snapshot"] != snapshot) continue;
    struct stat snap {};
    if (::lstat((tx::snapshot_dir(root, snapshot) + "/manifest.json").c_str(), &snap) != 0) continue;
    std::vector<std::string> argv;
    if (j.contains("command") && j["command"].is_array())
      for (const auto& a : j["command"])
        if (a.is_string() && argv.size() < k_marker_args)
          argv.push_back(a.get<std::string>().substr(0, k_marker_arg_bytes));
    const std::string when =
        j.contains("time") && j["time"].is_number_integer()
            ? fmt::format(" (started {} s ago)",
                          std::max<std::int64_t>(0, std::time(nullptr) - j["time"].get<std::int64_t>()))
            : "";
    out.push_back(
        fmt::format("a guard was killed while `{}` ran{}: snapshot '{}' holds the environment as it was before; "
                    "`cudafix rollback --snapshot {}` restores it, `cudafix snapshot --delete {}` drops it",
                    printable(shown_command(argv)), when, snapshot, snapshot, snapshot));
  }
  return out;
}

void forget_guard(const std::string& root, const std::string& snapshot) {
  if (!r::is_snapshot_name(snapshot)) return;
  ::unlink(marker_path(root, snapshot).c_str());
}

}  // namespace cudafix::cli
