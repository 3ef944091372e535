// `cudafix fix`: plan fix, then the plan carried out as one transaction verified after each
// step (cli/transaction_steps.hpp), with doctor's verdict before and after.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>
#include <set>

#include "cli/commands.hpp"
#include "cli/json_output.hpp"
#include "cli/json_writer.hpp"
#include "cli/phase_clock.hpp"
#include "cli/session.hpp"
#include "cli/text_output.hpp"
#include "cli/transaction_steps.hpp"
#include "installer/txn/transaction.hpp"
#include "resolver/base/text.hpp"
#include "rules/doctor.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;
namespace tx = installer::txn;

namespace {

// What doctor says of an environment, as `fix` reports it before and after.
struct Health {
  int errors = 0, warnings = 0;
  std::vector<std::string> error_rules;  // the rules that found errors, each once, in doctor's order
  rules::DoctorReport report;            // whose errors and warnings are what fix leaves, where it ends
};

Health health_of(const GlobalOptions& g, const r::Environment& env, const r::Knowledge& knowledge,
                 const std::map<std::string, rules::RuleSettings>& settings) {
  rules::DoctorOptions opts;
  opts.threads = g.threads;
  opts.settings = settings;
  const auto report = rules::run_doctor(env, knowledge, opts);
  Health h{report.errors, report.warnings, {}, report};
  for (const auto& f : report.findings)
    if (f.severity == rules::Severity::error &&
        std::find(h.error_rules.begin(), h.error_rules.end(), f.rule) == h.error_rules.end())
      h.error_rules.push_back(f.rule);
  return h;
}

void health_json(JsonWriter& w, const Health& h) {
  w.begin_object().key("errors").value(h.errors).key("warnings").value(h.warnings);
  w.key("error_rules").strings(h.error_rules).end_object();
}

std::string health_text(const Health& h) {
  std::string s = fmt::format("{} {}", h.errors, h.errors == 1 ? "error" : "errors");
  if (!h.error_rules.empty()) s += fmt::format(" ({})", fmt::join(h.error_rules, ", "));
  return s + fmt::format(", {} {}", h.warnings, h.warnings == 1 ? "warning" : "warnings");
}

// The cuDNN the last verification loaded: its version and the file, as the loader named it; not
// known where no verification ran.
struct CudnnLoaded {
  bool known = false;
  std::optional<long long> version;
  std::optional<std::string> path;
};

CudnnLoaded cudnn_loaded(const StepChecks& checks) {
  if (!checks.last || checks.unverified) return {};
  CudnnLoaded c{true, checks.last->cudnn_version, std::nullopt};
  for (const auto& f : checks.last->loaded)
    if (f.soname.starts_with("libcudnn.so") && f.path) c.path = r::real_path_of(*f.path);
  return c;
}

void cudnn_json(JsonWriter& w, const CudnnLoaded& c) {
  if (!c.known) {
    w.null();
    return;
  }
  w.begin_object().key("version");
  if (c.version)
    w.value(static_cast<std::int64_t>(*c.version));
  else
    w.null();
  w.key("path");
  if (c.path)
    w.value(*c.path);
  else
    w.null();
  w.end_object();
}

// What to do about a finding fix leaves: its remedy's command, but for those fix has just tried,
// fix's own plan ("cudafix plan fix") and a reinstall or install of a dist whose wheel fix has
// just written (`written`: their PEP 503 names), for which the rule's document is the next step.
NextStep next_step_after_fix(const r::Environment& env, std::set<std::string> written) {
  return [&env, written = std::move(written)](const rules::Finding& f) -> std::string {
    std::string command = f.remedy ? f.remedy->command : "";
    constexpr std::string_view k_or_fix = "   (or: cudafix plan fix)";
    if (command.ends_with(k_or_fix)) command.resize(command.size() - k_or_fix.size());
    const auto just_written = [&](const std::string& dist) {  // a dist-info folder's name, or a project's
      const auto it =
          std::find_if(env.dists.begin(), env.dists.end(), [&](const r::DistInfo& d) { return d.dir_name == dist; });
      return written.count(it != env.dists.end() ? it->normalized : r::normalize_name(dist)) > 0;
    };
    const bool tried = f.remedy && (f.remedy->action == "reinstall" || f.remedy->action == "install") &&
                       !f.remedy->dists.empty() &&
                       std::all_of(f.remedy->dists.begin(), f.remedy->dists.end(), just_written);
    if (tried || command.empty() || command.starts_with("cudafix plan fix")) return "cudafix explain " + f.rule;
    return command;
  };
}

// Each line of `text` but the empty ones, indented by `by` spaces.
std::string indented(const std::string& text, std::size_t by) {
  std::string out;
  for (const auto line : r::split(text, '\n'))
    if (!line.empty()) out += std::string(by, ' ') + std::string(line) + "\n";
  return out;
}

// One run of fix: what it read and planned, and its document, whose keys are set as the run
// learns their values and written once, where it ends, through one JsonWriter (the plan rendered
// into it).
struct FixRun {
  const GlobalOptions& g;
  const FixCliOptions& o;
  std::ostream& out;
  const r::Environment& env;
  const r::Knowledge& knowledge;
  const std::map<std::string, rules::RuleSettings>& settings;
  const PlannedFix& planned;
  const Health& before;
  PhaseClock& clock;
  Style st;
  JsonFields doc;

  // The document's keys after its plan, the run's timings, and the exit code.
  JsonFields& times() {
    doc.set("seconds", clock.seconds()).set("phases", [this](JsonWriter& w) { clock.write_phases(w); });
    if (g.timings) std::cerr << clock.timings_text();
    return doc;
  }
  // Where fix ends before changing anything: the document or `text`; returns `rc`.
  int finish(int rc, const std::string& text) {
    times();
    if (g.json) {
      JsonWriter w;
      w.begin_object().key("schema").value(1).key("command").value("fix").key("venv").value(env.layout.root);
      doc.write(w);
      w.end_object();
      out << w.str() << '\n';
    } else if (!g.quiet || rc != 0) {
      out << text;
    }
    return rc;
  }
  void left(const r::Environment& of, const rules::DoctorReport& report, NextStep next) {
    doc.set("left", [&of, &report, next = std::move(next), this](JsonWriter& w) {
      write_findings_left(w, of, knowledge, report, next);
    });
  }
};

// Where fix ends without changing anything: no safe plan, nothing to do, a wheel no source has,
// a dry run. None: the plan is to be carried out.
std::optional<int> answer_without_change(FixRun& run, const std::string& shown) {
  auto& [g, o, out, env, knowledge, settings, planned, before, clock, st, doc] = run;
  if (!planned.plan.ok()) return run.finish(1, shown + "nothing was changed: no safe plan (above)\n");
  if (planned.plan.steps.empty()) {
    doc.set("after", [&before](JsonWriter& w) { health_json(w, before); });
    const auto next = next_step_after_fix(env, {});
    run.left(env, before.report, next);
    const int found = before.errors + before.warnings;
    if (found == 0)
      return run.finish(
          0, fmt::format("nothing to do: {} needs no step (doctor: {})\n", env.layout.root, health_text(before)));
    // Not "nothing to do": doctor's findings are there, and none of them is fix's to repair.
    return run.finish(0,
                      fmt::format("fix has no step for {} (doctor: {}); {}:\n{}", env.layout.root, health_text(before),
                                  found == 1 ? std::string("it does not repair this finding")
                                             : fmt::format("it repairs none of these {} findings", found),
                                  findings_left_text(before.report, next, st)));
  }
  if (!planned.plan.needs.empty()) {
    std::vector<std::string> names;
    for (const auto& n : planned.plan.needs) names.push_back(n.name + " " + n.version);
    doc.set("error", fmt::format("no wheel for {}", fmt::join(names, ", "))).set("exit", 2);
    return run.finish(2, shown + fmt::format("nothing was changed: no wheel for {} in the sources given (--find-links "
                                             "DIR, --index-url URL, or the pip and uv caches with --offline)\n",
                                             fmt::join(names, ", ")));
  }
  if (o.dry_run) {
    // The plan is judged on a simulated model that doctor's file rules cannot read, so which
    // findings its steps leave is known only once they have run.
    doc.set_null("left");
    const std::string findings =
        before.errors + before.warnings == 0
            ? ""
            : fmt::format("doctor finds {} now; fix names the findings its steps leave once it has carried them out\n",
                          health_text(before));
    return run.finish(0, shown + findings + "dry run: nothing was changed (run without --dry-run to carry it out)\n");
  }
  return std::nullopt;
}

// What fix says once its steps are carried out: doctor before and after, what is left, the
// verification.
std::string fix_summary(const FixRun& run, std::size_t steps, const Health& after, const NextStep& next,
                        const StepChecks& checks, const CudnnLoaded& cudnn) {
  const auto& env = run.env;
  std::string summary = fmt::format("fixed {}: {} {}\n", env.layout.root, steps, steps == 1 ? "step" : "steps");
  summary += fmt::format("  before: {}\n  after:  {}\n", health_text(run.before), health_text(after));
  if (const int left = after.errors + after.warnings; left > 0)
    // Without colour: the summary goes out through printable_lines, which would escape it.
    summary += fmt::format("  left: {} that fix does not repair:\n{}",
                           count_of(static_cast<std::size_t>(left), "finding", "findings"),
                           indented(findings_left_text(after.report, next, Style{false, run.st.verbose}), 4));
  if (run.o.no_verify)
    summary += "  not verified (--no-verify)\n";
  else if (checks.unverified)
    summary += fmt::format("  not verified: {}; run `cudafix verify` on a GPU node\n", checks.unverified_why);
  else
    summary += fmt::format("  verified on the GPU after each step; cuDNN {} loaded from {}\n",
                           cudnn.version ? fmt::format("{}", *cudnn.version) : "?",
                           cudnn.path ? env.display(*cudnn.path) : "?");
  return summary + fmt::format("  took {:.2f} s", run.clock.seconds());
}

// The plan carried out as `apply` carries out a saved plan (the same typed value, bound and
// replayed), each step verified; then the environment scanned and judged again.
int carry_out(FixRun& run, const Retention& keep) {
  auto& [g, o, out, env, knowledge, settings, planned, before, clock, st, doc] = run;
  auto apply = apply_options(g, env);
  apply.carry_out_progress = [&g] { return progress_bar(g, "fixing", "changes"); };
  const PreparedPlan prepared = installer::apply::prepare_plan(
      env, knowledge, r::plan_file_of(env, planned.plan, planned.fingerprint, planned.tags, planned.source_problems),
      "the plan", "another tool changed it while fix planned: run `cudafix fix` again", apply);
  clock.lap("bind");
  const auto said = prepared.labels();
  check_one_file_system(env.layout);
  if (!confirmed(g, fmt::format("carry out these {} steps", said.size())))
    return declined(g, out, "fix", env.layout.root);

  clock.lap("confirm");
  tx::Transaction t(env.layout.root_real, "fix");
  StepChecks checks;
  const auto done = installer::apply::carry_out_plan(
      env, knowledge, prepared, t, apply,
      installer::apply::VerifyStepsOptions::for_command(scan_options(g), !o.no_verify, notes(g)), !o.no_verify, checks,
      [&clock](const char* phase) { clock.lap(phase); });
  if (done.failed) return verification_failed(g, out, "fix", env, t, *done.failed, checks);

  // The caches answer only for folders and objects whose stamps are the ones kept, and keep
  // nothing written within their settle time: the files just renamed into place (other inodes,
  // new ctimes) are read from the disk, the tens of thousands the steps left alone are not.
  const r::Environment now = r::scan_environment(env.layout, scan_options(g));
  clock.lap("rescan");
  const Health after = health_of(g, now, knowledge, settings);
  clock.lap("doctor after");
  const CudnnLoaded cudnn = cudnn_loaded(checks);
  std::set<std::string> written;
  for (const auto& p : prepared.steps)
    if (p.step.action != r::StepAction::remove) written.insert(r::normalize_name(p.step.name));
  const auto next = next_step_after_fix(now, std::move(written));
  const std::string summary = fix_summary(run, said.size(), after, next, checks, cudnn);
  doc.set("changed", true).set("steps", said).set("after", [&after](JsonWriter& w) { health_json(w, after); });
  run.left(now, after.report, next);
  doc.set("verified", !o.no_verify && !checks.unverified)
      .set("cudnn", [&cudnn](JsonWriter& w) { cudnn_json(w, cudnn); })
      .set("verification", [&now, &checks](JsonWriter& w) { write_verification(w, now, checks); });
  clock.lap("finish");
  report_done(g, out, "fix", env.layout.root, t, summary, keep, run.times());
  return checks.unverified ? 4 : 0;
}

}  // namespace

int run_fix(const GlobalOptions& options, const FixCliOptions& o, std::ostream& out) {
  // Where fix's time goes, phase by phase, for the JSON (`phases`) and --timings.
  PhaseClock clock;
  Located located = locate(options, Access::write);
  const GlobalOptions g = with_configured_sources(options, located.config);
  if (!o.dry_run) refuse_externally_managed(located.layout, g);
  const Retention keep = retention(located);
  // A dry run only reads, as plan fix does; a real one plans under the lock it writes under.
  std::optional<tx::EnvLock> lock;
  if (!o.dry_run) lock.emplace(located.layout.root_real, lock_wait(g), say_waiting);
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located), r::ScanDepth::full, true);
  clock.lap("scan");
  const Health before = health_of(g, env, knowledge, settings);
  clock.lap("doctor");
  const PlannedFix planned = make_fix_plan(g, env, knowledge, o.cuda_major);
  clock.lap("plan");
  FixRun run{g, o, out, env, knowledge, settings, planned, before, clock, style_for(g), {}};
  run.doc
      .set("plan",
           [&](JsonWriter& w) {
             write_plan_fix(w, env, knowledge, planned.plan, planned.fingerprint, planned.tags,
                            planned.source_problems);
           })
      .set("dry_run", o.dry_run)
      .set("changed", false)
      .set("before", [&before](JsonWriter& w) { health_json(w, before); });
  const std::string shown = plan_fix_text(env, planned.plan, run.st);
  if (const auto rc = answer_without_change(run, shown)) return *rc;
  if (!g.json && !g.quiet) out << shown << std::flush;
  return carry_out(run, keep);
}

}  // namespace cudafix::cli
