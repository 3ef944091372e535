// mixed-cuda-major: Objects that load CUDA libraries of two majors, and the providers of a major no consumer needs.
// The rule's document below is what `cudafix explain mixed-cuda-major` prints.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "resolver/base/text.hpp"
#include "resolver/plan/consumer_needs.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

// The majors an object's NEEDED name unambiguously (libcudart.so.13: 13; libcudnn.so.9: none).
std::set<int> majors_needed(const Context& c, const r::SharedObject& o) {
  std::set<int> out;
  if (o.elf.status != r::ElfReadStatus::ok) return out;
  for (const auto& name : o.elf.info.needed) {
    std::set<int> majors;
    for (const auto& [family, major] : c.families(name)) majors.insert(major);
    if (majors.size() == 1) out.insert(*majors.begin());
  }
  return out;
}

// The provider a consumer's resolution loads: the owner whose bytes the file holds; where they are
// no owner's (or the owners' RECORDs cannot tell), each owner of a major the consumer needs, else
// every owner.
void mark_loaded(const Context& c, const std::string& path, int whose, const std::set<int>& needed,
                 std::set<int>& loaded) {
  if (whose >= 0) {
    loaded.insert(whose);
    return;
  }
  const auto owners = c.env.owners_of(path);
  std::vector<int> of_needed_major;
  for (int d : owners)
    if (const auto m = r::major_of_dist(c.knowledge, c.env.dists[static_cast<std::size_t>(d)]); m && needed.count(*m))
      of_needed_major.push_back(d);
  for (int d : of_needed_major.empty() ? owners : of_needed_major) loaded.insert(d);
}

// The majors the consumers need (consumer_needs: NEEDED, Requires-Dist with its extras, torch's
// build), per major each consumer dist with the first reason.
using NeedsByMajor = std::map<int, std::map<int, std::string>>;
NeedsByMajor needs_by_major(Context& c) {
  c.parse_requirements();
  NeedsByMajor out;
  for (const auto& n : r::consumer_needs(c.env, c.knowledge, *c.requirements, c.markers))
    if (n.dist >= 0) out[n.major].try_emplace(n.dist, n.why);
  return out;
}

// "torch 2.7.1+cu128 needs CUDA 12, jax-cuda13-plugin 0.8.0 needs CUDA 13"
std::vector<std::string> needs_lines(const Context& c, const NeedsByMajor& needs) {
  std::vector<std::string> out;
  for (const auto& [major, who] : needs) {
    std::vector<std::string> names;
    for (const auto& [dist, why] : who) names.push_back(r::dist_label(c.env.dists[static_cast<std::size_t>(dist)]));
    const std::size_t shown = std::min<std::size_t>(names.size(), 3);
    std::string list = fmt::format("{}", fmt::join(names.begin(), names.begin() + static_cast<long>(shown), ", "));
    if (names.size() > shown) list += fmt::format(" and {} more", names.size() - shown);
    out.push_back(fmt::format("{} {} CUDA {}", list, names.size() == 1 ? "needs" : "need", major));
  }
  return out;
}

// Objects that need two majors, or load a library of another major than they need.
void check_objects(Context& c, const std::vector<bool>& provider, std::set<int>& loaded_by_consumers) {
  for (const auto& o : c.env.objects) {
    const auto needed = majors_needed(c, o);
    const bool consumer = !o.owners.empty() && std::none_of(o.owners.begin(), o.owners.end(), [&](int d) {
      return provider[static_cast<std::size_t>(d)];
    });
    std::vector<std::string> mismatches;
    std::set<int> loaded;
    for (const auto& res : o.resolutions) {
      if (!res.found() || !c.is_cuda(res.name)) continue;
      if (!c.env.site_of(*res.path)) continue;
      int whose = -1;
      const auto major = r::major_of_file(c.env, c.knowledge, *res.path, &whose);
      if (consumer) mark_loaded(c, *res.path, whose, needed, loaded_by_consumers);
      if (!major) continue;
      loaded.insert(*major);
      if (!needed.empty() && !needed.count(*major))
        mismatches.push_back(fmt::format(
            "{} => {} ({}, CUDA {})", res.name, c.env.display(*res.path),
            whose < 0 ? "no dist" : r::dist_label(c.env.dists[static_cast<std::size_t>(whose)]) + "'s bytes", *major));
    }
    if (needed.size() < 2 && mismatches.empty() && loaded.size() < 2) continue;
    Finding f;
    f.rule = "mixed-cuda-major";
    f.severity = Severity::error;
    f.message =
        needed.size() > 1
            ? fmt::format("{} needs two CUDA majors at once ({})", c.env.display(o.path), fmt::join(needed, " and "))
        : !needed.empty()
            ? fmt::format("{} needs CUDA {} but loads libraries of another major", c.env.display(o.path),
                          *needed.begin())
            : fmt::format("{} would load libraries of CUDA {}", c.env.display(o.path), fmt::join(loaded, " and "));
    f.evidence = mismatches;
    f.paths = {o.path};
    for (int owner : o.owners) f.dists.push_back(c.env.dists[static_cast<std::size_t>(owner)].dir_name);
    f.remedy = Remedy{"fix-plan", {}, "cudafix plan fix"};
    c.add(std::move(f));
  }
}

void add_evidence(const Context& c, const NeedsByMajor& needs, Finding& f) {
  for (const auto& [m, who] : needs)
    for (const auto& [dist, why] : who) {
      const std::string label = r::dist_label(c.env.dists[static_cast<std::size_t>(dist)]);
      // The NEEDED reasons start with the dist's label already.
      const std::string_view reason = std::string_view(why).starts_with(label + ": ")
                                          ? std::string_view(why).substr(label.size() + 2)
                                          : std::string_view(why);
      f.evidence.push_back(fmt::format("{} needs CUDA {}: {}", label, m, reason));
    }
}

// Consumers that need different majors: what `plan fix` refuses to choose between.
void check_consumers_disagree(Context& c, const NeedsByMajor& needs) {
  Finding f;
  f.rule = "mixed-cuda-major";
  f.severity = Severity::warning;
  f.message = fmt::format(
      "the consumers need different CUDA majors: {}; one environment serves one major (their providers share "
      "paths), so each needs the other's moved to an environment of its own, or `cudafix plan fix --cuda-major N`",
      fmt::join(needs_lines(c, needs), "; "));
  add_evidence(c, needs, f);
  for (const auto& [m, who] : needs)
    for (const auto& [dist, why] : who) f.dists.push_back(c.env.dists[static_cast<std::size_t>(dist)].dir_name);
  f.remedy = Remedy{"fix-plan", {}, "cudafix plan fix --cuda-major N"};
  c.add(std::move(f));
}

// The hybrid: providers of a major no consumer needs, whose bytes no consumer loads; one finding
// per such major, listing them all.
void check_unneeded_providers(Context& c, const NeedsByMajor& needs, const std::set<int>& loaded_by_consumers) {
  std::map<int, std::vector<std::size_t>> foreign;
  for (std::size_t i = 0; i < c.env.dists.size(); ++i) {
    const auto fam = c.knowledge.family_of_dist(c.env.dists[i].normalized);
    if (!fam || needs.count(fam->second) || loaded_by_consumers.count(static_cast<int>(i))) continue;
    foreign[fam->second].push_back(i);
  }
  for (const auto& [major, dists] : foreign) {
    std::set<int> majors;
    for (const auto& [m, who] : needs) majors.insert(m);
    majors.insert(major);
    Finding f;
    f.rule = "mixed-cuda-major";
    f.severity = Severity::warning;
    std::vector<std::string> labels;
    for (std::size_t i : dists) {
      const auto& d = c.env.dists[i];
      labels.push_back(r::dist_label(d));
      f.dists.push_back(d.dir_name);
      const auto fam = c.knowledge.family_of_dist(d.normalized);
      f.evidence.push_back(fmt::format("{}: {} for CUDA {}", r::dist_label(d), fam->first->name, major));
    }
    add_evidence(c, needs, f);
    f.message = fmt::format("the environment mixes CUDA {}: {}; {} {} CUDA {} and no consumer needs {}: {}",
                            fmt::join(majors, " and "), fmt::join(needs_lines(c, needs), ", "),
                            dists.size() == 1 ? std::string("this dist") : fmt::format("these {} dists", dists.size()),
                            dists.size() == 1 ? "provides" : "provide", major, dists.size() == 1 ? "it" : "them",
                            fmt::join(labels, ", "));
    f.remedy = Remedy{"fix-plan", f.dists, "cudafix plan fix"};
    c.add(std::move(f));
  }
}

void check(Context& c) {
  std::vector<bool> provider(c.env.dists.size());
  for (std::size_t i = 0; i < c.env.dists.size(); ++i) provider[i] = r::is_cuda_provider(c.knowledge, c.env.dists[i]);
  std::set<int> loaded_by_consumers;  // provider dists whose bytes a consumer's NEEDED resolves to
  check_objects(c, provider, loaded_by_consumers);
  const auto needs = needs_by_major(c);
  if (needs.empty()) return;  // nothing to judge the providers by
  if (needs.size() > 1) check_consumers_disagree(c, needs);
  check_unneeded_providers(c, needs, loaded_by_consumers);
}

}  // namespace

extern const Rule mixed_cuda_major;
const Rule mixed_cuda_major{
    "mixed-cuda-major",
    Severity::error,
    r::ScanDepth::full,
    false,
    false,
    "Objects that load CUDA libraries of two majors, and the providers of a major no consumer needs.",
    R"md(# mixed-cuda-major

Objects that load CUDA libraries of two majors, and the providers of a major no consumer needs.

## What it finds
For each ELF object: the CUDA majors its NEEDED name unambiguously (`libcudart.so.13` is 13;
`libcudnn.so.9` is both), and the major of each CUDA library it resolves to inside the
environment (its owner's, or, for a shared path, the owner whose bytes are on disk). Then the
hybrid: the consumers are the dists that use CUDA libraries without shipping any (torch, jax,
cupy), and what each needs is judged as `plan fix` judges it: the sonames its objects NEED that
one major ships, its Requires-Dist on provider dists (markers evaluated, and the extras another
dist asks of it: JAX's CUDA plugins NEED no CUDA library and load them all by dlopen), and
torch's build (`torch/version.py`). Consumers that need different majors are one warning, as
`plan fix` refuses to choose between them; every provider dist of a major no consumer needs,
and whose bytes no consumer loads, is listed in one finding per such major. A provider's own NEEDED (libcublas.so.13 NEEDs
libcublasLt.so.13) is no need, and a leftover dist-info of the other major that lists the right
major's files is listed too.

## Why it matters
A torch built for CUDA 13 that loads a CUDA 12 cuBLAS fails with undefined symbols or, worse,
runs with the wrong kernels. Leftover providers of the other major are what later `pip uninstall`
runs trip over: their files are the shared paths that vanish.

## Severity
- error: one object needs two majors at once, or loads a library of another major than it needs;
- warning: the environment mixes majors: providers of a major no consumer needs, in one finding;
  or consumers that need different majors.

## How to fix it
`cudafix plan fix` picks the major the consumers need (torch, jax, cupy) and plans the repair:
the target major's clobbered providers reinstalled first, then the other major's removed with
owner-counted removal. `cudafix plan remove DIST` shows what removing one of them would do.

## Example
```console
$ cudafix doctor --select mixed-cuda-major
warning[mixed-cuda-major] #1 the environment mixes CUDA 12 and 13: torch 2.7.1+cu128 needs CUDA 12; these 3 dists provide CUDA 13 and no consumer needs them: nvidia-cublas 13.1.0.3, nvidia-cuda-runtime 13.0.96, nvidia-nccl-cu13 2.28.9
      nvidia-cublas 13.1.0.3: cublas for CUDA 13
      ...
    next: cudafix plan fix
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
