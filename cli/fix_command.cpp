// `cudafix fix`: plan fix, then the plan carried out as one transaction verified after each
// step (cli/transaction_steps.hpp), with doctor's verdict before and after.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "cli/commands.hpp"
#include "cli/json_output.hpp"
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

nlohmann::ordered_json health_json(const Health& h) {
  return {{"errors", h.errors}, {"warnings", h.warnings}, {"error_rules", h.error_rules}};
}

std::string health_text(const Health& h) {
  std::string s = fmt::format("{} {}", h.errors, h.errors == 1 ? "error" : "errors");
  if (!h.error_rules.empty()) s += fmt::format(" ({})", fmt::join(h.error_rules, ", "));
  return s + fmt::format(", {} {}", h.warnings, h.warnings == 1 ? "warning" : "warnings");
}

// The cuDNN the last verification loaded: its version and the file, as the loader named it.
nlohmann::ordered_json cudnn_loaded(const StepChecks& checks) {
  if (!checks.last || checks.unverified) return nullptr;
  nlohmann::ordered_json j{{"version", nullptr}, {"path", nullptr}};
  if (checks.last->cudnn_version) j["version"] = *checks.last->cudnn_version;
  for (const auto& f : checks.last->loaded)
    if (f.soname.starts_with("libcudnn.so") && f.path) j["path"] = r::real_path_of(*f.path);
  return j;
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
  const Style st = style_for(g);
  nlohmann::ordered_json j = document_start("fix", env.layout.root);
  // The documents cli/ wrote already go into fix's as they are: the plan's is a serialisation
  // for -o and --json, never read back here.
  RawJson raw{{"plan", planned.document}};
  j["plan"] = nullptr;  // its place among the keys; raw's text is written there
  j["dry_run"] = o.dry_run;
  j["changed"] = false;
  j["before"] = health_json(before);
  const auto finish = [&](int rc, const std::string& text) {
    j["seconds"] = clock.seconds();
    j["phases"] = clock.phases();
    if (g.timings) std::cerr << clock.timings_text();
    if (g.json)
      out << dump_with(j, raw) << '\n';
    else if (!g.quiet || rc != 0)
      out << text;
    return rc;
  };
  if (!planned.plan.ok())
    return finish(1, plan_fix_text(env, planned.plan, st) + "nothing was changed: no safe plan (above)\n");
  if (planned.plan.steps.empty()) {
    j["after"] = j["before"];
    const auto next = next_step_after_fix(env, {});
    j["left"] = nullptr;
    raw["left"] = findings_left_json(env, knowledge, before.report, next);
    const int found = before.errors + before.warnings;
    if (found == 0)
      return finish(
          0, fmt::format("nothing to do: {} needs no step (doctor: {})\n", env.layout.root, health_text(before)));
    // Not "nothing to do": doctor's findings are there, and none of them is fix's to repair.
    return finish(0, fmt::format("fix has no step for {} (doctor: {}); {}:\n{}", env.layout.root, health_text(before),
                                 found == 1 ? std::string("it does not repair this finding")
                                            : fmt::format("it repairs none of these {} findings", found),
                                 findings_left_text(before.report, next, st)));
  }
  const std::string shown = plan_fix_text(env, planned.plan, st);
  if (!planned.plan.needs.empty()) {
    std::vector<std::string> names;
    for (const auto& n : planned.plan.needs) names.push_back(n.name + " " + n.version);
    j["error"] = fmt::format("no wheel for {}", fmt::join(names, ", "));
    j["exit"] = 2;
    return finish(2, shown + fmt::format("nothing was changed: no wheel for {} in the sources given (--find-links "
                                         "DIR, --index-url URL, or the pip and uv caches with --offline)\n",
                                         fmt::join(names, ", ")));
  }
  if (o.dry_run) {
    // The plan is judged on a simulated model that doctor's file rules cannot read, so which
    // findings its steps leave is known only once they have run.
    j["left"] = nullptr;
    const std::string findings =
        before.errors + before.warnings == 0
            ? ""
            : fmt::format("doctor finds {} now; fix names the findings its steps leave once it has carried them out\n",
                          health_text(before));
    return finish(0, shown + findings + "dry run: nothing was changed (run without --dry-run to carry it out)\n");
  }
  if (!g.json && !g.quiet) out << shown << std::flush;
  // Carried out as `apply` carries out a saved plan: the same typed value, bound and replayed.
  const auto apply = apply_options(g, env);
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
  // The baseline probe runs beside the staging: the driver's initialisation costs as much.
  const auto verify_options = verify_steps_options(g, !o.no_verify);
  auto baseline = o.no_verify ? std::future<installer::apply::EarlyBaseline>{}
                              : installer::apply::start_baseline(env.layout, knowledge, prepared, verify_options);
  installer::apply::stage_plan(env, prepared, t, apply);
  clock.lap("stage");
  show_progress(g, t, "fixing");
  StepChecks checks;
  checks.skip = o.no_verify;
  const auto check = installer::apply::step_verifier(env, knowledge, said, t, verify_options, checks, &baseline);
  clock.lap("baseline probe");
  if (const auto rc = carry_out_verified(g, out, "fix", env, t, check, checks)) return *rc;
  clock.lap("steps and their checks");

  // The caches answer only for folders and objects whose stamps are the ones kept, and keep
  // nothing written within their settle time: the files just renamed into place (other inodes,
  // new ctimes) are read from the disk, the tens of thousands the steps left alone are not.
  const r::Environment now = r::scan_environment(env.layout, scan_options(g));
  clock.lap("rescan");
  const Health after = health_of(g, now, knowledge, settings);
  clock.lap("doctor after");
  const nlohmann::ordered_json cudnn = cudnn_loaded(checks);
  const bool verified = !o.no_verify && !checks.unverified;
  std::set<std::string> written;
  for (const auto& p : prepared.steps)
    if (p.step.action != r::StepAction::remove) written.insert(r::normalize_name(p.step.name));
  const auto next = next_step_after_fix(now, std::move(written));
  std::string summary =
      fmt::format("fixed {}: {} {}\n", env.layout.root, said.size(), said.size() == 1 ? "step" : "steps");
  summary += fmt::format("  before: {}\n  after:  {}\n", health_text(before), health_text(after));
  if (const int left = after.errors + after.warnings; left > 0)
    // Without colour: the summary goes out through printable_lines, which would escape it.
    summary += fmt::format("  left: {} that fix does not repair:\n{}",
                           count_of(static_cast<std::size_t>(left), "finding", "findings"),
                           indented(findings_left_text(after.report, next, Style{false, st.verbose}), 4));
  if (o.no_verify)
    summary += "  not verified (--no-verify)\n";
  else if (checks.unverified)
    summary += fmt::format("  not verified: {}; run `cudafix verify` on a GPU node\n", checks.unverified_why);
  else
    summary += fmt::format("  verified on the GPU after each step; cuDNN {} loaded from {}\n",
                           cudnn["version"].is_null() ? "?" : cudnn["version"].dump(),
                           cudnn["path"].is_null() ? "?" : env.display(cudnn["path"].get<std::string>()));
  summary += fmt::format("  took {:.2f} s", clock.seconds());
  j["changed"] = true;
  j["steps"] = said;
  j["after"] = health_json(after);
  j["left"] = nullptr;
  raw["left"] = findings_left_json(now, knowledge, after.report, next);
  j["verified"] = verified;
  j["cudnn"] = cudnn;
  j["verification"] = verification_json(now, checks);
  clock.lap("finish");
  j["seconds"] = clock.seconds();
  j["phases"] = clock.phases();
  if (g.timings) std::cerr << clock.timings_text();
  report_done(g, out, "fix", env.layout.root, t, summary, keep, j, raw);
  return checks.unverified ? 4 : 0;
}

}  // namespace cudafix::cli
