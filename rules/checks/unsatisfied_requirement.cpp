// unsatisfied-requirement: Requirements of installed dists that are not installed or not satisfied, exactly as `pip
// check` reports them. The rule's document below is what `cudafix explain unsatisfied-requirement` prints.
#include <fmt/format.h>

#include "resolver/base/text.hpp"
#include "resolver/env/requirements.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

void check(Context& c) {
  c.parse_requirements();
  for (const auto* d : r::visible_dists(c.env)) {
    const auto& lines = c.requirements->lines[c.index_of(*d)];
    for (std::size_t k = 0; k < lines.size(); ++k) {
      const std::string& line = d->metadata.requires_dist[k];
      const auto& parsed = lines[k];
      if (!parsed.req) {
        Finding f;
        f.rule = "invalid-metadata";
        f.severity = Severity::warning;
        f.message = fmt::format("{}: Requires-Dist '{}' is not a PEP 508 requirement", r::dist_label(*d), line);
        f.evidence = {parsed.error};
        f.dists = {d->dir_name};
        c.add(std::move(f));
        continue;
      }
      if (!parsed.applies) continue;
      const r::Requirement& req = *parsed.req;
      const r::DistInfo* dep = installed(c.env, req.normalized);
      Finding f;
      f.rule = "unsatisfied-requirement";
      f.severity = Severity::error;
      f.dists = {d->dir_name};
      if (!dep) {
        f.message = fmt::format("{} requires {}, which is not installed", r::dist_label(*d), line);
        f.remedy = Remedy{"install", {req.name}, fmt::format("pip install '{}'", without_marker(line))};
        c.add(std::move(f));
        continue;
      }
      const auto& version = c.requirements->versions[c.index_of(*dep)];
      if (!version || req.specifier.contains(*version, true)) continue;
      f.message =
          fmt::format("{} has requirement {}, but you have {} {}", r::dist_label(*d), line, dep->name, dep->version);
      f.dists.push_back(dep->dir_name);
      f.remedy = Remedy{"install", {dep->name}, "cudafix plan fix"};
      c.add(std::move(f));
    }
  }
}

}  // namespace

extern const Rule unsatisfied_requirement;
const Rule unsatisfied_requirement{
    "unsatisfied-requirement",
    Severity::error,
    r::ScanDepth::dists,
    true,
    false,
    "Requirements of installed dists that are not installed or not satisfied, exactly as `pip check` reports them.",
    R"md(# unsatisfied-requirement

Requirements of installed dists that are not installed or not satisfied, exactly as `pip check` reports them.

## What it finds
Every Requires-Dist line of every installed dist whose marker holds in this environment (PEP 508,
as packaging 23 reads it), whose named dist is missing or whose installed version the specifier
(PEP 440) does not contain. Lines that are not PEP 508 are reported as `invalid-metadata`.

## Why it matters
It is `pip check`'s verdict, so a CI that runs `pip check` and cudafix agrees. A torch whose
`nvidia-cudnn-cu13==9.19.0.56` pin is not met may import and then load the wrong cuDNN.

## Severity
- error: always, as `pip check` exits 1 for it.

## How to fix it
Install what is missing (`pip install 'REQUIREMENT'`), or let `cudafix plan fix` plan the
install of the CUDA providers among them.

## Example
```console
$ cudafix doctor --select unsatisfied-requirement
error[unsatisfied-requirement] #1 torch 2.11.0 requires filelock, which is not installed
    next: pip install 'filelock'
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
