// The live verification of a transaction's steps, and the transaction carried out with it
// (installer/apply/plan_apply.hpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <future>
#include <map>
#include <set>

#include "installer/apply/plan_apply.hpp"
#include "installer/probe/runner.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::installer::apply {
namespace r = cudafix::resolver;
namespace pr = installer::probe;
namespace tx = installer::txn;

namespace {

// What `cudafix verify` found wrong after the last step, as problems beside the step's own.
std::vector<pr::Problem> verify_problems(const pr::VerifyReport& rep) {
  std::vector<pr::Problem> out;
  if (rep.verdict.outcome == pr::Outcome::ok) return out;
  if (!rep.failed_check) {
    const std::string where = rep.verdict.stage ? pr::stage_label(rep.records.stages[*rep.verdict.stage]) : "the probe";
    out.push_back({"the whole tree (" + where + ")", "every stage succeeds", rep.verdict.message, {}});
  }
  for (const auto& c : rep.checks)
    if (!c.ok)
      out.push_back({c.check + " (the whole tree)",
                     c.expected.empty() ? std::string("it passes") : c.expected,
                     c.found.empty() ? c.detail : c.found,
                     {}});
  return out;
}

// The environment as the probe's real loader will see it: scanned afresh (files just renamed into
// place are read, not a cache's answer), with the host's ld.so.cache, which the real loader reads
// whatever --ld-so-cache told the model.
r::Environment scan_for_probe(const r::EnvLayout& layout, r::ScanOptions opts) {
  opts.cache_dir.clear();
  opts.ld_so_cache.reset();
  return r::scan_environment(layout, opts);
}

// Why the baseline says the driver cannot verify anything: none here, or a driver stage that
// failed before any library of the environment was asked for; empty: it can.
std::string driver_unusable(const pr::ProbePoint& baseline) {
  if (baseline.no_driver()) return "no GPU driver (libcuda.so.1) here";
  if (baseline.verdict.outcome == pr::Outcome::ok || !baseline.failed_stage) return "";
  const std::string& stage = *baseline.failed_stage;
  if (stage.rfind("cudnn", 0) == 0 || stage == "dlopen library") return "";
  return fmt::format("the driver fails before the environment is used ({})", baseline.verdict.message);
}

std::string point_summary(const r::Environment& env, const pr::ProbePoint& pt) {
  std::string s = fmt::format("{} of {} libraries open", pt.opened(), pt.libraries.size());
  if (pt.left_out > 0) s += fmt::format(" ({} more past the limit of {} not opened)", pt.left_out, pr::k_max_opened);
  if (pt.consumer_missing) s += fmt::format(", the rest not yet: {} resolves nowhere", *pt.consumer_missing);
  if (pt.cudnn_version && pt.cudnn) s += fmt::format("; cuDNN {} from {}", *pt.cudnn_version, env.display(*pt.cudnn));
  return s;
}

// The whole tree's check repeats what a step's own found (the same cuDNN): each said once.
void add_whole_tree_problems(pr::StepJudgement& judgement, const pr::VerifyReport& whole) {
  auto& failures = judgement.failures;
  for (auto& p : verify_problems(whole))
    if (std::none_of(failures.begin(), failures.end(),
                     [&](const pr::Problem& f) { return f.expected == p.expected && f.found == p.found; }))
      failures.push_back(std::move(p));
}

// The steps one probe checks together: each step's first step of its group. A run of steps each
// of which only adds files that were not there (none of its paths exists before the transaction
// or is another step's) is probed once, after its last step: nothing a later step of the run
// does replaces or removes what an earlier one wrote, so the probe after the run sees each
// step's files as that step left them, and a failing check names the files, so the step. Any
// other step is probed on its own. (Each probe spawn costs the driver's initialisation: four
// providers reinstalled after one `pip uninstall` took five probes, now two.)
std::vector<std::size_t> probe_groups(const tx::Transaction& t) {
  const std::size_t n = t.step_count();
  std::vector<std::set<std::string>> paths(n);
  std::map<std::string, int> steps_of;
  for (std::size_t k = 0; k < n; ++k) {
    paths[k] = t.step_paths(k);
    for (const auto& p : paths[k]) ++steps_of[p];
  }
  const auto adds_only = [&](std::size_t k) {
    return std::all_of(paths[k].begin(), paths[k].end(), [&](const std::string& p) {
      struct stat st {};
      return steps_of[p] == 1 && ::lstat(p.c_str(), &st) != 0 && errno == ENOENT;
    });
  };
  std::vector<std::size_t> first_of(n);
  bool previous_adds_only = false;
  for (std::size_t k = 0; k < n; ++k) {
    const bool adds = adds_only(k);
    first_of[k] = k > 0 && adds && previous_adds_only ? first_of[k - 1] : k;
    previous_adds_only = adds;
  }
  return first_of;
}

}  // namespace

VerifyStepsOptions VerifyStepsOptions::for_command(r::ScanOptions scan, bool verify,
                                                   std::function<void(const std::string&)> note) {
  VerifyStepsOptions o;
  o.scan = std::move(scan);
  if (verify) o.probe.probe = pr::installed_probe();
  o.note = std::move(note);
  return o;
}

namespace {

// Each step of a group probed together its own entry, with the failures in the files it wrote;
// one that names none of the group's files is the probed step's (`step`, the group's last).
std::vector<StepChecks::Step> group_entries(const tx::Transaction& t, const std::vector<std::string>& labels,
                                            std::size_t first, std::size_t step, const pr::ProbePoint& point,
                                            pr::StepJudgement judgement) {
  std::vector<StepChecks::Step> entries;
  for (std::size_t k = first; k <= step; ++k) entries.push_back({k, labels[k], point, {}});
  entries.back().judgement.excused = judgement.excused;
  for (auto& f : judgement.failures) {
    std::size_t owner = step;
    for (std::size_t k = first; k < step && owner == step; ++k) {
      const auto paths = t.step_paths(k);
      if (std::any_of(f.files.begin(), f.files.end(), [&](const std::string& p) { return paths.count(p) > 0; }))
        owner = k;
    }
    entries[owner - first].judgement.failures.push_back(std::move(f));
  }
  return entries;
}

// What a failed verification says, from the first step that failed, every failing check listed
// (another step's by its name); empty where every check passed.
std::string failures_text(const std::vector<StepChecks::Step>& entries) {
  std::string failed;
  std::size_t count = 0, failed_step = 0;
  for (const auto& e : entries) count += e.judgement.failures.size();
  for (const auto& e : entries)
    for (const auto& f : e.judgement.failures) {
      if (failed.empty()) {
        failed = fmt::format("verification after step {} ({}) failed, {} {}:", e.step + 1, e.label, count,
                             count == 1 ? "check" : "checks");
        failed_step = e.step;
      }
      failed += e.step == failed_step ? "\n  " + f.text()
                                      : fmt::format("\n  after step {} ({}): {}", e.step + 1, e.label, f.text());
    }
  return failed;
}

}  // namespace

std::future<EarlyBaseline> start_baseline(const r::EnvLayout& layout, const r::Knowledge& knowledge,
                                          const PreparedPlan& plan, const VerifyStepsOptions& options) {
  std::set<std::string> paths;
  for (const auto& p : plan.steps) {
    paths.insert(p.step.writes.begin(), p.step.writes.end());
    paths.insert(p.step.deletes.begin(), p.step.deletes.end());
  }
  return std::async(std::launch::async, [&layout, &knowledge, scan = options.scan, vo = options.probe,
                                         written = std::vector<std::string>(paths.begin(), paths.end())] {
    EarlyBaseline b{scan_for_probe(layout, scan), {}, {}};
    b.extra = pr::libraries_among(b.env, written);
    b.point = pr::probe_point(b.env, knowledge, vo, written);
    return b;
  });
}

std::function<void(std::size_t)> step_verifier(const r::Environment& env, const r::Knowledge& knowledge,
                                               const std::vector<std::string>& labels, const tx::Transaction& t,
                                               const VerifyStepsOptions& options, StepChecks& checks,
                                               std::future<EarlyBaseline>* early) {
  const r::EnvLayout& layout = env.layout;
  const auto note = [say = options.note](const std::string& line) {
    if (say) say(line);
  };
  // What the whole transaction writes, opened at every point (the tree may not reach it).
  std::set<std::string> all_paths;
  for (std::size_t k = 0; k < t.step_count(); ++k) all_paths.merge(t.step_paths(k));
  const std::vector<std::string> written(all_paths.begin(), all_paths.end());
  std::optional<EarlyBaseline> started;
  if (early != nullptr && early->valid()) started = early->get();
  if (!checks.skip) {
    // The early baseline opened the libraries this transaction changes: the probe it would make now.
    if (started && pr::libraries_among(started->env, written) == started->extra)
      checks.baseline = std::move(started->point);
    else
      checks.baseline = pr::probe_point(scan_for_probe(layout, options.scan), knowledge, options.probe, written);
    checks.unverified_why = driver_unusable(*checks.baseline);
    checks.unverified = !checks.unverified_why.empty();
    note(checks.unverified
             ? fmt::format("baseline before step 1: {}; the steps go on unverified", checks.unverified_why)
             : fmt::format("baseline before step 1: {}", point_summary(env, *checks.baseline)));
  }
  return [&layout, &knowledge, &labels, &t, &checks, scan = options.scan, vo = options.probe, note, written,
          first_of = probe_groups(t)](std::size_t step) mutable {
    if (checks.skip || checks.unverified) return;
    const bool last = step + 1 == labels.size();
    // A step probed with the rest of its group: after the group's last step.
    if (!last && step + 1 < first_of.size() && first_of[step + 1] == first_of[step]) return;
    const std::size_t first = first_of[step];
    const r::Environment now = scan_for_probe(layout, scan);
    vo.consumer = checks.baseline->consumer;
    std::set<std::string> changed;
    for (std::size_t k = last ? 0 : first; k <= step; ++k) changed.merge(t.step_paths(k));
    // After the last step the whole tree is verified too, by a second probe run beside the
    // step's own (each spawn costs the driver's initialisation, most of a second on a GPU); its
    // report counts only where the step passed, as a failed step says why already.
    std::future<pr::VerifyReport> whole_tree;
    if (last) {
      pr::VerifyOptions whole;
      whole.probe = vo.probe;
      whole.timeout = vo.timeout;
      whole_tree = std::async(std::launch::async,
                              [&now, &knowledge, whole] { return pr::verify_environment(now, knowledge, whole); });
    }
    // (A future of std::async waits for its task when it goes, should the step's probe throw.)
    const pr::ProbePoint point = pr::probe_point(now, knowledge, vo, written);
    pr::StepJudgement judgement = pr::judge_step(now, *checks.baseline, point, changed, last);
    if (last) {
      auto whole = whole_tree.get();
      if (judgement.ok()) {
        checks.last = std::move(whole);
        add_whole_tree_problems(judgement, *checks.last);
      }
    }
    auto entries = group_entries(t, labels, first, step, point, std::move(judgement));
    const std::string summary = point_summary(now, point);
    const std::string together = first == step
                                     ? ""
                                     : fmt::format(
                                           " (steps {}-{} add only files that were not there: one probe after step {} "
                                           "checked them together)",
                                           first + 1, step + 1, step + 1);
    std::string failed = failures_text(entries);
    if (!failed.empty() && first != step) failed += "\n " + together;
    for (auto& e : entries) checks.steps.push_back(std::move(e));
    if (!failed.empty()) {
      checks.failed = true;
      throw r::Error(failed);
    }
    note(first == step ? fmt::format("verified after step {} ({}): {}{}", step + 1, labels[step], summary,
                                     last ? "; the whole tree loads" : "")
                       : fmt::format("verified after steps {}-{} ({}): {}{}{}", first + 1, step + 1,
                                     fmt::join(labels.begin() + static_cast<std::ptrdiff_t>(first),
                                               labels.begin() + static_cast<std::ptrdiff_t>(step) + 1, ", "),
                                     summary, last ? "; the whole tree loads" : "", together));
  };
}

std::optional<std::string> carry_out_verified(tx::Transaction& t, const std::function<void(std::size_t)>& check,
                                              const StepChecks& checks) {
  try {
    t.carry_out(check);
  } catch (const r::Error& e) {
    if (!checks.failed) throw;
    return std::string(e.what());
  }
  return std::nullopt;
}

CarriedOut carry_out_plan(const r::Environment& env, const r::Knowledge& knowledge, const PreparedPlan& plan,
                          tx::Transaction& t, const ApplyOptions& apply, const VerifyStepsOptions& verify,
                          bool verify_steps, StepChecks& checks, const std::function<void(const char*)>& phase) {
  const auto done = [&phase](const char* part) {
    if (phase) phase(part);
  };
  auto baseline = verify_steps ? start_baseline(env.layout, knowledge, plan, verify) : std::future<EarlyBaseline>{};
  CarriedOut out;
  out.files = stage_plan(env, plan, t, apply);
  done("stage");
  if (apply.carry_out_progress) t.on_progress(apply.carry_out_progress());
  checks.skip = !verify_steps;
  const auto labels = plan.labels();  // the verifier holds them while it runs
  const auto check = step_verifier(env, knowledge, labels, t, verify, checks, &baseline);
  done("baseline probe");
  out.failed = carry_out_verified(t, check, checks);
  if (!out.failed) done("steps and their checks");
  return out;
}

}  // namespace cudafix::installer::apply
