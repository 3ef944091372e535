// The repair plan assembled from the wheels at hand (installer/apply/fix_plan.hpp).
#include "installer/apply/fix_plan.hpp"

#include <fmt/format.h>

#include <chrono>
#include <set>

#include "installer/source/find_links.hpp"
#include "resolver/base/diagnostic.hpp"

namespace cudafix::installer::apply {
namespace r = cudafix::resolver;

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// The wheels the sources had for the steps that had none at hand, each read or its problem said.
// Returns whether any was added.
bool add_wheels_of(std::vector<source::Obtained> got, r::FixOptions& opts, std::vector<std::string>& problems) {
  bool added = false;
  for (auto& one : got) {
    if (one.remote) {
      auto wheel = std::move(*one.remote);
      wheel.source = one.origin;
      opts.wheels.push_back(std::move(wheel));
      added = true;
      continue;
    }
    if (one.file.empty()) {
      problems.push_back(one.problem);
      continue;
    }
    try {
      auto wheel = installer::read_wheel(one.file, opts.supported_tags);
      wheel.source = one.origin;
      opts.wheels.push_back(std::move(wheel));
      added = true;
    } catch (const r::Error& e) {
      problems.push_back(fmt::format("{} (from {}): {}", one.file, one.origin, e.what()));
    }
  }
  return added;
}

// The plan, made again with the wheels the sources had for each step that had none at hand,
// until no step wants one they can give (three rounds at most).
r::FixPlan plan_with_sources(const r::Environment& env, const r::Knowledge& knowledge, r::FixOptions& opts,
                             const FixPlanRequest& request, std::vector<std::string>& problems) {
  r::FixPlan plan = r::plan_fix(env, knowledge, opts);
  if (!request.source_settings) return plan;
  auto settings = request.source_settings();
  if (settings.index_urls.empty() && !settings.offline) return plan;
  if (settings.cache_dir.empty())
    throw r::Error("no cache folder for downloaded wheels: set CUDAFIX_CACHE_DIR or HOME");
  settings.by_range = true;  // a plan needs a wheel's RECORD and dynamic sections, not all its bytes
  source::WheelSources sources(std::move(settings));
  std::set<std::string> asked;
  for (int round = 0; round < 3; ++round) {
    std::vector<source::Wanted> wanted;
    for (const auto& st : plan.steps)
      if (st.action != r::StepAction::remove && !st.wheel && asked.insert(st.name + " " + st.accepts).second)
        wanted.push_back({st.name, st.accepts});
    if (wanted.empty()) break;
    if (!add_wheels_of(sources.obtain(wanted), opts, problems)) break;
    plan = r::plan_fix(env, knowledge, opts);
  }
  problems.insert(problems.end(), sources.cache_problems().begin(), sources.cache_problems().end());
  return plan;
}

}  // namespace

PlannedFix make_fix_plan(const r::Environment& env, const r::Knowledge& knowledge, const FixPlanRequest& request) {
  PlannedFix out;
  r::FixOptions& opts = out.options;
  opts.cuda_major = request.cuda_major;
  opts.threads = request.threads;
  opts.supported_tags = request.supported_tags;
  opts.python_version = request.python_version;
  // Only the wheels of dists the plan installs or reinstalls are read: which those are does not
  // depend on the wheels.
  const auto listing = std::chrono::steady_clock::now();
  const auto wanted = r::wheels_wanted(env, knowledge, opts);
  auto found = source::find_wheels(request.find_links, opts.supported_tags, &wanted, &out.cost.read);
  // A wanted wheel a folder holds but that was refused (a damaged zip, a member inflating past its
  // size) is a source problem as an index's is: in the plan, not only on standard error.
  for (const auto& diag : found.diagnostics) out.source_problems.push_back(diag.to_string());
  opts.wheels = std::move(found.wheels);
  out.cost.find_links_ms = ms_since(listing);
  const auto planning = std::chrono::steady_clock::now();
  out.plan = plan_with_sources(env, knowledge, opts, request, out.source_problems);
  out.cost.plan_ms = ms_since(planning);
  const auto fingerprinting = std::chrono::steady_clock::now();
  out.fingerprint = r::fingerprint_of(env, out.plan);
  out.cost.fingerprint_ms = ms_since(fingerprinting);
  out.cost.wheels_read = opts.wheels.size() + found.diagnostics.size();
  out.cost.dists_wanted = wanted.size();
  // The tags a needed wheel may carry here: the most specific ones of each kind.
  for (const auto& t : opts.supported_tags)
    if (out.tags.size() < 3 || t.ends_with("-any")) out.tags.push_back(t);
  return out;
}

}  // namespace cudafix::installer::apply
