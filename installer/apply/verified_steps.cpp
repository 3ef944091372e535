// The live verification of a transaction's steps, and the transaction carried out with it
// (installer/apply/plan_apply.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <set>

#include "installer/apply/plan_apply.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::installer::apply {
namespace r = cudafix::resolver;
namespace pr = installer::probe;
namespace tx = installer::txn;

namespace {

std::string steps_failed_text(std::size_t step, const std::string& label, const std::vector<pr::Problem>& failures) {
  std::string out = fmt::format("verification after step {} ({}) failed, {} {}:", step + 1, label, failures.size(),
                                failures.size() == 1 ? "check" : "checks");
  for (const auto& p : failures) out += "\n  " + p.text();
  return out;
}

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

}  // namespace

std::function<void(std::size_t)> step_verifier(const r::Environment& env, const r::Knowledge& knowledge,
                                               const std::vector<std::string>& labels, const tx::Transaction& t,
                                               const VerifyStepsOptions& options, StepChecks& checks) {
  const r::EnvLayout& layout = env.layout;
  const auto note = [say = options.note](const std::string& line) {
    if (say) say(line);
  };
  // What the whole transaction writes, opened at every point (the tree may not reach it).
  std::set<std::string> all_paths;
  for (std::size_t k = 0; k < t.step_count(); ++k) all_paths.merge(t.step_paths(k));
  const std::vector<std::string> written(all_paths.begin(), all_paths.end());
  if (!checks.skip) {
    checks.baseline = pr::probe_point(scan_for_probe(layout, options.scan), knowledge, options.probe, written);
    checks.unverified_why = driver_unusable(*checks.baseline);
    checks.unverified = !checks.unverified_why.empty();
    note(checks.unverified
             ? fmt::format("baseline before step 1: {}; the steps go on unverified", checks.unverified_why)
             : fmt::format("baseline before step 1: {}", point_summary(env, *checks.baseline)));
  }
  return [&layout, &knowledge, &labels, &t, &checks, scan = options.scan, vo = options.probe, note,
          written](std::size_t step) mutable {
    if (checks.skip || checks.unverified) return;
    const r::Environment now = scan_for_probe(layout, scan);
    vo.consumer = checks.baseline->consumer;
    const bool last = step + 1 == labels.size();
    std::set<std::string> changed = t.step_paths(step);
    if (last)
      for (std::size_t k = 0; k < step; ++k) changed.merge(t.step_paths(k));
    // After the last step the whole tree is verified too, by a second probe run beside the
    // step's own (each spawn costs the driver's initialisation, most of a second on a GPU); its
    // report counts only where the step passed, as a failed step says why already.
    std::future<pr::VerifyReport> whole_tree;
    if (last) {
      pr::VerifyOptions whole;
      whole.probe = vo.probe;
      whole.timeout = vo.timeout;
      whole_tree = r::run_async(std::launch::async, [&now, &knowledge, whole] {
        return pr::verify_environment(now, knowledge, whole);
      });
    }
    // (A future of std::async waits for its task when it goes, should the step's probe throw.)
    StepChecks::Step result{step, labels[step], pr::probe_point(now, knowledge, vo, written), {}};
    result.judgement = pr::judge_step(now, *checks.baseline, result.point, changed, last);
    if (last) {
      auto whole = whole_tree.get();
      if (result.judgement.ok()) {
        checks.last = std::move(whole);
        add_whole_tree_problems(result.judgement, *checks.last);
      }
    }
    const bool ok = result.judgement.ok();
    const std::string summary = point_summary(now, result.point);
    checks.steps.push_back(std::move(result));
    if (!ok) {
      checks.failed = true;
      throw r::Error(steps_failed_text(step, labels[step], checks.steps.back().judgement.failures));
    }
    note(fmt::format("verified after step {} ({}): {}{}", step + 1, labels[step], summary,
                     last ? "; the whole tree loads" : ""));
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

}  // namespace cudafix::installer::apply
