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
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/held_command.hpp"
#include "cli/json_output.hpp"
#include "cli/json_writer.hpp"
#include "cli/phase_clock.hpp"
#include "cli/printable.hpp"
#include "cli/session.hpp"
#include "cli/text_output.hpp"
#include "cli/transaction_steps.hpp"
#include "installer/guard/guarded_command.hpp"
#include "installer/probe/runner.hpp"
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

namespace {

void worse_json(JsonWriter& w, const std::vector<gd::Worse>& worse) {
  w.begin_array();
  for (const auto& x : worse)
    w.begin_object().key("kind").value(x.kind).key("what").value(x.what).key("message").value(x.message).end_object();
  w.end_array();
}

void claimed_json(JsonWriter& w, const std::vector<gd::Claimed>& list) {
  w.begin_array();
  for (const auto& c : list) {
    w.begin_object().key("path").value(c.path).key("what").value(c.what).key("writer").value(c.writer);
    if (!c.found.empty()) w.key("found").value(c.found);
    w.end_object();
  }
  w.end_array();
}

void probe_summary_json(JsonWriter& w, const std::optional<pr::VerifyReport>& p, const std::string& why_not) {
  if (!p) {
    w.begin_object().key("ran").value(false).key("why_not").value(why_not).end_object();
    return;
  }
  w.begin_object().key("ran").value(true).key("outcome").value(pr::to_string(p->verdict.outcome));
  w.key("message").value(p->verdict.message).key("stages_passed").begin_array();
  for (const auto& s : p->records.stages)
    if (s.ok) w.value(pr::stage_label(s));
  w.end_array().key("cudnn_version");
  if (p->cudnn_version)
    w.value(static_cast<std::int64_t>(*p->cudnn_version));
  else
    w.null();
  w.end_object();
}

// guard's document (docs/json.md), its keys set as guard learns their values and written once,
// where it ends, through one writer: plan remove's document for the uninstall included.
void write_guard_document(std::ostream& out, const JsonFields& doc) {
  JsonWriter w;
  w.begin_object();
  doc.write(w);
  w.end_object();
  out << w.str() << '\n';
}

// What guard read the command as, when an uninstall: "uninstall" (plan remove's document as its
// "plan", where cudafix planned it).
void uninstall_json(JsonWriter& w, const r::Environment& env, const r::Knowledge& knowledge,
                    const gd::UninstallRead& u) {
  w.begin_object().key("tool").value(u.tool).key("dists").strings(u.names).key("skipped").strings(u.skipped);
  w.key("problems").strings(u.problems).key("safe").value(!u.plan || u.plan->safe()).key("plan");
  if (u.plan)
    write_plan_remove(w, env, knowledge, *u.plan);
  else
    w.null();
  w.end_object();
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
int show_refusal(const GlobalOptions& g, JsonFields& j, const r::Environment& env, const gd::UninstallRead& uninstall,
                 const std::string& shown, std::ostream& out) {
  const std::string names = fmt::format("{}", fmt::join(uninstall.names, " "));
  const std::string alternative =
      uninstall.plan->safe_with_cudafix()
          ? fmt::format("`cudafix remove {}` removes them counting owners, which breaks nothing", names)
          : fmt::format("`cudafix remove {}` would break it too (above)", names);
  const std::string why = fmt::format(
      "refused: `{}` would break what is listed above; it was not run and nothing was changed. {}; "
      "--allow-break runs it anyway, under a snapshot",
      shown, alternative);
  j.set("refused", why).set_null("snapshot").set_null("snapshot_scope").set_null("exit_code");
  j.set("worse", [](JsonWriter& w) { w.begin_array().end_array(); }).set("undone", false);
  if (g.json)
    write_guard_document(out, j);
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

// What the command did and what guard did about it, as the document's keys after "exit_code".
void outcome_fields(JsonFields& j, const gd::Outcome& result, const std::string& name) {
  j.set("after_probe",
        [&result](JsonWriter& w) { probe_summary_json(w, result.after_probe, result.after_probe_why_not); });
  j.set("probed_after", result.after_probe.has_value());
  j.set("after", [&result](JsonWriter& w) {
    w.begin_object().key("errors").value(result.after.errors).key("warnings").value(result.after.warnings);
    w.end_object();
  });
  j.set("worse", [&result](JsonWriter& w) { worse_json(w, result.worse); });
  j.set("still_worse", [&result](JsonWriter& w) { worse_json(w, result.still_worse); });
  j.set("changes", [&result](JsonWriter& w) {
    w.begin_object().key("command").begin_array();
    for (const auto& c : result.ours) w.begin_object().key("path").value(c.path).key("what").value(c.what).end_object();
    w.end_array().key("others");
    claimed_json(w, result.others);
    w.key("overlap");
    claimed_json(w, result.overlap);
    w.end_object();
  });
  static constexpr const char* k_verdicts[] = {"nothing_worse", "kept",    "undone",       "not_ours",
                                               "overlap",       "altered", "snapshot_gone"};
  j.set("verdict", k_verdicts[static_cast<int>(result.verdict)]);
  j.set("undone", result.verdict == gd::Verdict::undone);
  j.set("kept", result.snapshot_kept);
  j.set("snapshot_gone", result.snapshot_gone);
  if (!result.transaction.empty()) j.set("transaction", result.transaction);
  if (result.verdict == gd::Verdict::altered)
    j.set("error",
          fmt::format("snapshot '{}' was altered (written in place): {}", name, fmt::join(result.altered, ", ")));
}

// The outcome in words, and the exit code: the command's where nothing of its doing got worse,
// else 1.
std::pair<std::string, int> outcome_text(const gd::Outcome& result, const std::string& shown, int code,
                                         const std::string& name, const std::string& root) {
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
      break;
    case gd::Verdict::snapshot_gone:
      text = fmt::format(
          "cudafix guard: `{}` exited {} and broke:{}\nit could NOT be undone: the command removed "
          "snapshot '{}' (cudafix's folder {}/.cudafix)",
          shown, code, broke, name, root);
      break;
  }
  return {text, rc};
}

// The outcome, as JSON or text; the exit code (outcome_text's).
int show_guard_outcome(const GlobalOptions& g, JsonFields& j, const gd::Outcome& result, const std::string& shown,
                       int code, const std::string& name, const std::string& root, PhaseClock& clock,
                       std::ostream& out) {
  outcome_fields(j, result, name);
  const auto [text, rc] = outcome_text(result, shown, code, name, root);
  clock.lap("finish");
  j.set("seconds", clock.seconds()).set("phases", [&clock](JsonWriter& w) { clock.write_phases(w); });
  if (g.timings) std::cerr << clock.timings_text();
  if (g.json)
    write_guard_document(out, j);
  else if (!g.quiet || rc != code)
    std::cerr << printable_lines(text) << '\n';
  return rc;
}

// The snapshot taken before the command, or an Error saying the command was not run.
const tx::SnapshotInfo& snapshot_before(gd::GuardedCommand& guarded, HeldCommand& command,
                                        const std::optional<gd::UninstallRead>& uninstall, const r::Environment& env,
                                        const std::string& shown) {
  try {
    return guarded.take_snapshot(uninstall);
  } catch (const r::Error& e) {
    command.abandon();
    throw r::Error(fmt::format("guard cannot snapshot {}: {}; `{}` was not run and nothing was changed",
                               env.layout.root, e.what(), shown));
  }
}

// installer/guard/'s settings from the command line's and the environment's configuration.
gd::Settings guard_settings(const GlobalOptions& g, const GuardCliOptions& o, const Retention& keep) {
  gd::Settings gs;
  gs.command = o.command;
  gs.probe = o.no_verify ? "" : installer::probe::installed_probe();
  gs.threads = g.threads;
  gs.keep = o.keep;
  gs.retention_root = keep.root;
  gs.retention_count = keep.count;
  return gs;
}

// The environment before the command: doctor's counts and the baseline probe.
void before_json(JsonWriter& w, const gd::GuardedCommand& guarded) {
  w.begin_object().key("errors").value(guarded.before().errors).key("warnings").value(guarded.before().warnings);
  w.key("probe");
  probe_summary_json(w, guarded.before_probe(), guarded.probe_why_not());
  w.end_object();
}

// What guard says once its snapshot is taken, before the command runs (`beside`: with the
// baseline probe still running, beside the command).
std::string snapshot_taken_text(const gd::GuardedCommand& guarded, const tx::SnapshotInfo& snap, bool beside,
                                const std::string& shown) {
  return fmt::format("cudafix guard: snapshot '{}' taken ({} files{}); doctor: {}; probe: {}; running `{}`", snap.name,
                     snap.files, printable(scope_text(snap.scope)),
                     count_of(static_cast<std::size_t>(guarded.before().errors), "error", "errors"),
                     beside                   ? std::string("running beside it (it deletes no library)")
                     : guarded.before_probe() ? std::string(pr::to_string(guarded.before_probe()->verdict.outcome))
                                              : "not run, " + guarded.probe_why_not(),
                     shown);
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
  JsonFields j;
  j.set("schema", 1).set("command", "guard").set("venv", env.layout.root).set("run", o.command);

  // Before: an uninstall cudafix can read is judged as plan remove judges it.
  j.set_null("uninstall");
  const auto uninstall = gd::read_uninstall(env, knowledge, o.command, g.threads);
  if (uninstall) {
    j.set("uninstall", [&](JsonWriter& w) { uninstall_json(w, env, knowledge, *uninstall); });
    if (uninstall->refused(o.allow_break)) {
      command.abandon();
      return show_refusal(g, j, env, *uninstall, shown, out);
    }
  }
  j.set_null("refused");
  lap("check");

  const auto rescan = [&] { return r::scan_environment(env.layout, scan_options(g, r::ScanDepth::full, true)); };
  gd::GuardedCommand guarded(env, knowledge, doctor_judge(g, knowledge, settings), guard_settings(g, o, keep),
                             {lap, rescan});
  guarded.start_baseline();
  const tx::SnapshotInfo& snap = snapshot_before(guarded, command, uninstall, env, shown);
  const std::string name = snap.name;
  const auto record_before = [&] { j.set("before", [&guarded](JsonWriter& w) { before_json(w, guarded); }); };
  j.set("snapshot", name);
  if (snap.scope)
    j.set("snapshot_scope", *snap.scope);
  else
    j.set_null("snapshot_scope");
  j.set_null("before");  // its place in the document
  const bool probe_beside_command = guarded.probe_beside_command();
  if (!probe_beside_command) {
    guarded.finish_baseline();
    record_before();
  }
  say(snapshot_taken_text(guarded, snap, probe_beside_command, shown));

  // The command, with the lock released.
  lock.reset();
  const int code = run_held(command, o.command[0]);
  tx::test_pause("guard-ran");  // the tests' seam: the command has ended, the lock is not held
  j.set("exit_code", code);
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
  return show_guard_outcome(g, j, result, shown, code, name, root, clock, out);
}

std::vector<std::string> killed_guard_notices(const std::string& root) { return gd::killed_guard_notices(root); }

void forget_guard(const std::string& root, const std::string& snapshot) { tx::forget_guard_record(root, snapshot); }

}  // namespace cudafix::cli
