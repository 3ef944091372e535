// `cudafix guard -- COMMAND`: parses, shows and exits; the work (the snapshot, the baseline, what
// got worse, whose changes those were, the undo) is installer/guard/'s.
//
// The command is forked first, before this process fences itself (Landlock is inherited by every
// child, and the command must write where it would without guard) and before any thread starts;
// it waits on a pipe until the snapshot is taken, then runs with the caller's streams, environment
// and folder, and the environment's lock released (pip and uv take <venv>/.lock themselves).
#include <fmt/format.h>

#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
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
#include "installer/guard/guarded_command.hpp"
#include "installer/probe/verdict.hpp"
#include "installer/txn/file_ops.hpp"
#include "installer/txn/guard_record.hpp"
#include "installer/txn/transaction.hpp"
#include "resolver/base/text.hpp"
#include "resolver/plan/plan.hpp"
#include "rules/doctor.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;
namespace tx = installer::txn;
namespace pr = installer::probe;
namespace gd = installer::guard;
// Its keys in the order written: schema, command and venv first (docs/json.md).
using json = nlohmann::ordered_json;

namespace {

json worse_json(const std::vector<gd::Worse>& worse) {
  json a = json::array();
  for (const auto& w : worse) a.push_back({{"kind", w.kind}, {"what", w.what}, {"message", w.message}});
  return a;
}

json claimed_json(const std::vector<gd::Claimed>& list) {
  json a = json::array();
  for (const auto& c : list) {
    json e{{"path", c.path}, {"what", c.what}, {"writer", c.writer}};
    if (!c.found.empty()) e["found"] = c.found;
    a.push_back(e);
  }
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

// Doctor's judgement, as installer/guard/ asks for it (rules/ is not its to include).
gd::Judge doctor_judge(const GlobalOptions& g, const r::Knowledge& knowledge,
                       const std::map<std::string, rules::RuleSettings>& settings) {
  return [&g, &knowledge, &settings](const r::Environment& env) {
    rules::DoctorOptions opts;
    opts.threads = g.threads;
    opts.settings = settings;
    const auto report = rules::run_doctor(env, knowledge, opts);
    gd::Judgement j;
    j.errors = report.errors;
    j.warnings = report.warnings;
    for (const auto& f : report.findings)
      if (f.severity == rules::Severity::error) j.error_keys.insert(f.rule + "\n" + f.message);
    return j;
  };
}

// "  /v/lib/.../x.so was removed (by cudafix transaction ...)", a few and a count.
std::string paths_text(const std::string& root, const std::vector<gd::Claimed>& list, bool with_found) {
  std::string text;
  std::size_t n = 0;
  for (const auto& c : list) {
    if (++n > 8) {
      text += fmt::format("\n    ... and {} more (--json lists every one)", list.size() - 8);
      break;
    }
    text += fmt::format("\n    {} {}{}, by {}", r::relative_to(c.path, root), c.what,
                        with_found ? " and " + c.found + " since" : "", c.writer);
  }
  return text;
}

// guard's refusal of an uninstall plan remove judges to break something: plan remove's findings
// and the owner-counted alternative.
int show_refusal(const GlobalOptions& g, json& j, const std::function<std::string()>& document,
                 const r::Environment& env, const gd::UninstallRead& uninstall, const std::string& shown,
                 std::ostream& out) {
  const std::string names = fmt::format("{}", fmt::join(uninstall.names, " "));
  const std::string alternative =
      uninstall.plan->safe_with_cudafix()
          ? fmt::format("`cudafix remove {}` removes them counting owners, which breaks nothing", names)
          : fmt::format("`cudafix remove {}` would break it too (above)", names);
  const std::string why = fmt::format(
      "refused: `{}` would break what is listed above; it was not run and nothing was changed. {}; "
      "--allow-break runs it anyway, under a snapshot",
      shown, alternative);
  j["refused"] = why;
  j["snapshot"] = nullptr;
  j["snapshot_scope"] = nullptr;
  j["exit_code"] = nullptr;
  j["worse"] = json::array();
  j["undone"] = false;
  if (g.json)
    out << document() << '\n';
  else
    std::cerr << plan_remove_text(env, *uninstall.plan, style_for(g)) << printable_lines(why) << '\n';
  return 1;
}

// Lets the held command run, the signals sent to guard passed on to it; its exit code.
int run_held(HeldCommand& command, const std::string& program) {
  PassingSignalsOn signals(command.pid());
  if (const int failed = command.go(); failed != 0)
    std::cerr << fmt::format("cudafix guard: cannot run {}: {}\n", printable(program), std::strerror(failed));
  return command.wait();
}

// The outcome, as JSON or text; the exit code: the command's where nothing of its doing got
// worse, else 1.
int show_guard_outcome(const GlobalOptions& g, json& j, const std::function<std::string()>& document,
                       const gd::Outcome& result, const std::string& shown, int code, const std::string& name,
                       const std::string& root, PhaseClock& clock, std::ostream& out) {
  j["after_probe"] = probe_summary_json(result.after_probe, result.after_probe_why_not);
  j["probed_after"] = result.after_probe.has_value();
  j["after"] = {{"errors", result.after.errors}, {"warnings", result.after.warnings}};
  j["worse"] = worse_json(result.worse);
  j["still_worse"] = worse_json(result.still_worse);
  json ours = json::array();
  for (const auto& c : result.ours) ours.push_back({{"path", c.path}, {"what", c.what}});
  j["changes"] = {
      {"command", ours}, {"others", claimed_json(result.others)}, {"overlap", claimed_json(result.overlap)}};
  static constexpr const char* k_verdicts[] = {"nothing_worse", "kept",    "undone",       "not_ours",
                                               "overlap",       "altered", "snapshot_gone"};
  j["verdict"] = k_verdicts[static_cast<int>(result.verdict)];
  j["undone"] = result.verdict == gd::Verdict::undone;
  j["kept"] = result.snapshot_kept;
  j["snapshot_gone"] = result.snapshot_gone;
  if (!result.transaction.empty()) j["transaction"] = result.transaction;
  std::string broke;
  for (const auto& w : result.worse)
    broke += fmt::format("\n  {}[{}]: {}", w.kind == "doctor" ? "error" : w.kind, w.what, w.message);
  const std::string others = result.others.empty() ? ""
                                                   : fmt::format("\nchanged meanwhile by other writers, and kept:{}",
                                                                 paths_text(root, result.others, false));
  std::string text;
  int rc = 1;
  switch (result.verdict) {
    case gd::Verdict::nothing_worse:
      rc = code;
      text = fmt::format("cudafix guard: `{}` exited {}; nothing got worse; ", shown, code);
      if (result.snapshot_gone)
        text += fmt::format("snapshot '{}' is gone: the command removed it (cudafix's folder {}/.cudafix)", name, root);
      else if (result.snapshot_kept)
        text += fmt::format("snapshot '{}' kept (`cudafix rollback --snapshot {}` restores it)", name, name);
      else
        text += fmt::format("snapshot '{}' deleted", name);
      break;
    case gd::Verdict::kept:
      text = fmt::format(
          "cudafix guard: `{}` exited {} and broke:{}\nkept as it is (--keep); `cudafix rollback "
          "--snapshot {}` undoes it",
          shown, code, broke, name);
      break;
    case gd::Verdict::undone:
      text = fmt::format(
          "cudafix guard: `{}` exited {} and broke:{}\nundone: its {} changes put back from snapshot "
          "'{}' ({} files put back, {} moved aside; transaction {}, `cudafix rollback {}` redoes the "
          "command's change){}",
          shown, code, broke, result.ours.size(), name, result.restored, result.moved_aside, result.transaction,
          result.transaction, others);
      if (!result.still_worse.empty()) {
        std::string still;
        for (const auto& w : result.still_worse)
          still += fmt::format("\n  {}[{}]: {}", w.kind == "doctor" ? "error" : w.kind, w.what, w.message);
        text += fmt::format(
            "\nbut the environment is still worse than before:{}\nthe command changed what it was not read to "
            "change (`{}` was taken for an uninstall of the dists it names); snapshot '{}' is kept: `cudafix "
            "rollback --snapshot {}` restores what it holds",
            still, shown, name, name);
      }
      break;
    case gd::Verdict::not_ours:
      rc = code;
      text = fmt::format(
          "cudafix guard: `{}` exited {}; the environment got worse meanwhile:{}\nbut not by the "
          "command's changes ({}): nothing was undone{}; snapshot '{}' {}",
          shown, code, broke,
          result.ours.empty() ? std::string("it changed nothing of what the snapshot holds")
                              : std::string("plan remove judged its uninstall harmless"),
          others, name,
          result.snapshot_kept
              ? fmt::format("kept: `cudafix rollback --snapshot {}` restores every path it holds", name)
              : std::string("deleted"));
      break;
    case gd::Verdict::overlap:
      text = fmt::format(
          "cudafix guard: `{}` exited {} and broke:{}\nit was NOT undone: another writer changed the "
          "same paths meanwhile, and guard does not guess whose bytes should stay:{}\nsnapshot '{}' is "
          "kept: `cudafix rollback --snapshot {}` restores every path it holds as it was before the "
          "command",
          shown, code, broke, paths_text(root, result.overlap, true), name, name);
      break;
    case gd::Verdict::altered:
      text = fmt::format(
          "cudafix guard: `{}` exited {} and broke:{}\nit could NOT be undone: the command wrote these "
          "files of snapshot '{}' in place: {}",
          shown, code, broke, name, fmt::join(result.altered, ", "));
      j["error"] =
          fmt::format("snapshot '{}' was altered (written in place): {}", name, fmt::join(result.altered, ", "));
      break;
    case gd::Verdict::snapshot_gone:
      text = fmt::format(
          "cudafix guard: `{}` exited {} and broke:{}\nit could NOT be undone: the command removed "
          "snapshot '{}' (cudafix's folder {}/.cudafix)",
          shown, code, broke, name, root);
      break;
  }
  clock.lap("finish");
  j["seconds"] = clock.seconds();
  j["phases"] = clock.phases();
  if (g.timings) std::cerr << clock.timings_text();
  if (g.json)
    out << document() << '\n';
  else if (!g.quiet || rc != code)
    std::cerr << printable_lines(text) << '\n';
  return rc;
}

}  // namespace

int run_guard(const GlobalOptions& g, const GuardCliOptions& o, std::ostream& out) {
  if (o.command.empty()) throw r::Error("guard: give the command to run after --");
  // Where guard's own time goes, phase by phase, for the JSON (`phases`) and --timings.
  PhaseClock clock;
  const auto lap = [&](const char* phase) { clock.lap(phase); };
  HeldCommand command(o.command);  // before the fence and before any thread: it must stay unfenced
  const std::string shown = tx::shown_command(o.command);
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
  const auto uninstall = gd::read_uninstall(env, knowledge, o.command, g.threads);
  if (uninstall) {
    json u{{"tool", uninstall->tool},
           {"dists", uninstall->names},
           {"skipped", uninstall->skipped},
           {"problems", uninstall->problems},
           {"safe", !uninstall->plan || uninstall->plan->safe()},
           {"plan", nullptr}};
    if (uninstall->plan) plan_text = plan_remove_json(env, knowledge, *uninstall->plan);
    j["uninstall"] = u;
    if (uninstall->refused(o.allow_break)) {
      command.abandon();
      return show_refusal(g, j, document, env, *uninstall, shown, out);
    }
  }
  j["refused"] = nullptr;
  lap("check");

  gd::Settings gs;
  gs.command = o.command;
  gs.probe = o.no_verify ? "" : probe_path();
  gs.threads = g.threads;
  gs.keep = o.keep;
  gs.retention_root = keep.root;
  gs.retention_count = keep.count;
  const auto rescan = [&] { return r::scan_environment(env.layout, scan_options(g, r::ScanDepth::full, true)); };
  gd::GuardedCommand guarded(env, knowledge, doctor_judge(g, knowledge, settings), gs, {lap, rescan});
  guarded.start_baseline();
  const tx::SnapshotInfo* snap = nullptr;
  try {
    snap = &guarded.take_snapshot(uninstall);
  } catch (const r::Error& e) {
    command.abandon();
    throw r::Error(fmt::format("guard cannot snapshot {}: {}; `{}` was not run and nothing was changed",
                               env.layout.root, e.what(), shown));
  }
  const std::string name = snap->name;
  const auto record_before = [&] {
    j["before"] = {{"errors", guarded.before().errors},
                   {"warnings", guarded.before().warnings},
                   {"probe", probe_summary_json(guarded.before_probe(), guarded.probe_why_not())}};
  };
  j["snapshot"] = name;
  j["snapshot_scope"] = snap->scope ? json(*snap->scope) : json();
  j["before"] = nullptr;  // its place in the document
  const bool probe_beside_command = guarded.probe_beside_command();
  if (!probe_beside_command) {
    guarded.finish_baseline();
    record_before();
  }
  say(fmt::format("cudafix guard: snapshot '{}' taken ({} files{}); doctor: {}; probe: {}; running `{}`", name,
                  snap->files, printable(scope_text(snap->scope)),
                  count_of(static_cast<std::size_t>(guarded.before().errors), "error", "errors"),
                  probe_beside_command     ? std::string("running beside it (it deletes no library)")
                  : guarded.before_probe() ? std::string(pr::to_string(guarded.before_probe()->verdict.outcome))
                                           : "not run, " + guarded.probe_why_not(),
                  shown));

  // The command, with the lock released.
  lock.reset();
  const int code = run_held(command, o.command[0]);
  tx::test_pause("guard-ran");  // the tests' seam: the command has ended, the lock is not held
  j["exit_code"] = code;
  lap("command");

  gd::Outcome result;
  try {
    if (probe_beside_command) {
      guarded.finish_baseline();
      record_before();
    }
    lock.emplace(root, lock_wait(g), say_waiting);
    // The caches answer only for folders and objects whose stamps are the ones kept, and keep
    // nothing written within their settle time: what the command changed is read from the disk.
    const r::Environment now = rescan();
    result = guarded.judge(now);
  } catch (const std::exception& e) {
    guarded.leave_record();
    throw r::Error(
        fmt::format("{}; `{}` exited {}, and snapshot '{}' is kept: `cudafix rollback --snapshot {}` "
                    "restores the environment as it was before it",
                    e.what(), shown, code, name, name));
  }
  return show_guard_outcome(g, j, document, result, shown, code, name, root, clock, out);
}

std::vector<std::string> killed_guard_notices(const std::string& root) { return gd::killed_guard_notices(root); }

void forget_guard(const std::string& root, const std::string& snapshot) { tx::forget_guard_record(root, snapshot); }

}  // namespace cudafix::cli
