// unsatisfied-extra: Extras chains a dist asks for that are not met: what `pip check` does not look at.
// The rule's document below is what `cudafix explain unsatisfied-extra` prints.
#include <fmt/format.h>

#include <set>

#include "resolver/base/text.hpp"
#include "resolver/env/requirements.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

void follow_extra(Context& c, const r::DistInfo& root, const std::string& chain, const r::DistInfo& dist,
                  const std::string& extra, std::set<std::pair<std::string, std::string>>& seen) {
  if (!seen.insert({dist.normalized, extra}).second) return;
  const bool declared = std::any_of(dist.metadata.provides_extra.begin(), dist.metadata.provides_extra.end(),
                                    [&](const std::string& e) { return r::normalize_name(e) == extra; });
  auto report = [&](std::string message, std::vector<std::string> dists) {
    Finding f;
    f.rule = "unsatisfied-extra";
    f.severity = Severity::warning;
    f.message = std::move(message);
    f.evidence = {fmt::format("chain: {}", chain)};
    f.dists = std::move(dists);
    f.remedy = Remedy{"install", {dist.name}, "cudafix plan fix"};
    c.add(std::move(f));
  };
  if (!declared) {
    report(fmt::format("{} asks for {}[{}], but {} has no extra '{}'", r::dist_label(root), dist.name, extra,
                       r::dist_label(dist), extra),
           {root.dir_name, dist.dir_name});
    return;
  }
  for (const std::size_t k : lines_of_extra(c, dist, extra)) {
    const r::Requirement& req = *c.requirements->lines[c.index_of(dist)][k].req;
    const std::string& line = dist.metadata.requires_dist[k];
    const std::string link = fmt::format("{} -> {}", chain, without_marker(line));
    const r::DistInfo* dep = installed(c.env, req.normalized);
    if (!dep) {
      report(fmt::format("{} needs {} through {}[{}], and {} is not installed", r::dist_label(root),
                         without_marker(line), dist.name, extra, req.name),
             {root.dir_name, dist.dir_name});
      continue;
    }
    const auto& version = c.requirements->versions[c.index_of(*dep)];
    if (version && !req.specifier.contains(*version, true)) {
      report(fmt::format("{} needs {} through {}[{}], but {} {} is installed", r::dist_label(root),
                         without_marker(line), dist.name, extra, dep->name, dep->version),
             {root.dir_name, dist.dir_name, dep->dir_name});
      continue;
    }
    for (const auto& e : req.extras) follow_extra(c, root, link, *dep, e, seen);
  }
}

void check(Context& c) {
  c.parse_requirements();
  for (const auto* d : r::visible_dists(c.env)) {
    const auto& lines = c.requirements->lines[c.index_of(*d)];
    for (std::size_t k = 0; k < lines.size(); ++k) {
      if (!lines[k].req || !lines[k].applies || lines[k].req->extras.empty()) continue;
      const r::Requirement& req = *lines[k].req;
      const std::string& line = d->metadata.requires_dist[k];
      const r::DistInfo* dep = installed(c.env, req.normalized);
      if (!dep) continue;  // unsatisfied-requirement says so
      std::set<std::pair<std::string, std::string>> seen;
      for (const auto& e : req.extras)
        follow_extra(c, *d, fmt::format("{} -> {}", d->name, without_marker(line)), *dep, e, seen);
    }
  }
}

}  // namespace

extern const Rule unsatisfied_extra;
const Rule unsatisfied_extra{
    "unsatisfied-extra",
    Severity::warning,
    r::ScanDepth::dists,
    true,
    false,
    "Extras chains a dist asks for that are not met: what `pip check` does not look at.",
    R"md(# unsatisfied-extra

Extras chains a dist asks for that are not met: what `pip check` does not look at.

## What it finds
A requirement with extras (`cuda-toolkit[cudnn,nvrtc]==13.0.2`) brings in the dists those extras
list. `pip check` checks only the requirement itself; this rule follows each chain of extras and
reports a dist it names that is missing or of a version the chain does not allow.

## Why it matters
torch for CUDA 13 reaches most of its NVIDIA wheels through `cuda-toolkit[...]` extras. When one
of them is missing, `pip check` is silent and the library the extra provided is not there.

## Severity
- warning: always: pip would not call it broken, but the chain the dist asked for is not met.

## How to fix it
Install the dist the chain names (the finding's `next:` line), or reinstall the requirement with
its extras (`pip install 'cuda-toolkit[cudnn]==13.0.2'`).

## Example
```console
$ cudafix doctor --select unsatisfied-extra
warning[unsatisfied-extra] #1 torch 2.11.0 needs nvidia-cudnn-cu13==9.19.0.56 through cuda-toolkit[cudnn], and nvidia-cudnn-cu13 is not installed
      chain: torch -> cuda-toolkit[cudnn]==13.0.2 -> nvidia-cudnn-cu13==9.19.0.56
    next: cudafix plan fix
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
