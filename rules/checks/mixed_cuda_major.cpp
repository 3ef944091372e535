// mixed-cuda-major: Objects that load CUDA libraries of two majors, and the providers of a major no consumer needs.
// The rule's document below is what `cudafix explain mixed-cuda-major` prints.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "resolver/base/text.hpp"
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

// The consumers: objects no CUDA provider dist ships (torch's, jax's, cupy's), with the dist that
// owns each. A provider's own NEEDED (libcublas.so.13 NEEDs libcublasLt.so.13) is no need.
std::vector<std::pair<const r::SharedObject*, int>> consumer_objects(const Context& c,
                                                                     const std::vector<bool>& provider) {
  std::vector<std::pair<const r::SharedObject*, int>> out;
  for (const auto& o : c.env.objects) {
    if (o.owners.empty()) continue;
    const bool shipped_by_provider =
        std::any_of(o.owners.begin(), o.owners.end(), [&](int d) { return provider[static_cast<std::size_t>(d)]; });
    if (!shipped_by_provider) out.emplace_back(&o, o.owners.front());
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

void check(Context& c) {
  std::vector<bool> provider(c.env.dists.size());
  for (std::size_t i = 0; i < c.env.dists.size(); ++i) provider[i] = r::is_cuda_provider(c.knowledge, c.env.dists[i]);
  // The majors the consumers need: per major, each consumer dist with its first object that needs it.
  std::map<int, std::map<int, const r::SharedObject*>> consumer_needs;
  std::set<int> loaded_by_consumers;  // provider dists whose bytes a consumer's NEEDED resolves to
  for (const auto& [o, owner] : consumer_objects(c, provider))
    for (int major : majors_needed(c, *o)) consumer_needs[major].try_emplace(owner, o);
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
  if (consumer_needs.empty()) return;  // nothing to judge the providers by
  // The hybrid: providers of a major no consumer needs, whose bytes no consumer loads; one finding
  // per such major, listing them all.
  std::map<int, std::vector<std::size_t>> foreign;
  for (std::size_t i = 0; i < c.env.dists.size(); ++i) {
    const auto fam = c.knowledge.family_of_dist(c.env.dists[i].normalized);
    if (!fam || consumer_needs.count(fam->second) || loaded_by_consumers.count(static_cast<int>(i))) continue;
    foreign[fam->second].push_back(i);
  }
  std::vector<std::string> needs;
  std::set<int> majors_in_env;
  for (const auto& [major, who] : consumer_needs) {
    std::vector<std::string> names;
    for (const auto& [dist, object] : who) names.push_back(r::dist_label(c.env.dists[static_cast<std::size_t>(dist)]));
    const std::size_t shown = std::min<std::size_t>(names.size(), 3);
    std::string list = fmt::format("{}", fmt::join(names.begin(), names.begin() + static_cast<long>(shown), ", "));
    if (names.size() > shown) list += fmt::format(" and {} more", names.size() - shown);
    needs.push_back(fmt::format("{} {} CUDA {}", list, names.size() == 1 ? "needs" : "need", major));
    majors_in_env.insert(major);
  }
  for (const auto& [major, dists] : foreign) {
    std::set<int> majors = majors_in_env;
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
    for (const auto& [m, who] : consumer_needs)
      for (const auto& [dist, object] : who)
        f.evidence.push_back(fmt::format("{} needs CUDA {}: {} NEEDs CUDA {} libraries",
                                         r::dist_label(c.env.dists[static_cast<std::size_t>(dist)]), m,
                                         c.env.display(object->path), m));
    f.message = fmt::format("the environment mixes CUDA {}: {}; {} {} CUDA {} and no consumer needs {}: {}",
                            fmt::join(majors, " and "), fmt::join(needs, ", "),
                            dists.size() == 1 ? std::string("this dist") : fmt::format("these {} dists", dists.size()),
                            dists.size() == 1 ? "provides" : "provide", major, dists.size() == 1 ? "it" : "them",
                            fmt::join(labels, ", "));
    f.remedy = Remedy{"fix-plan", f.dists, "cudafix plan fix"};
    c.add(std::move(f));
  }
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
hybrid: the consumers are the dists that NEED CUDA libraries without shipping any (torch, jax,
cupy); every provider dist of a major no consumer needs, and whose bytes no consumer loads, is
listed in one finding per such major. A provider's own NEEDED (libcublas.so.13 NEEDs
libcublasLt.so.13) is no need, and a leftover dist-info of the other major that lists the right
major's files is listed too.

## Why it matters
A torch built for CUDA 13 that loads a CUDA 12 cuBLAS fails with undefined symbols or, worse,
runs with the wrong kernels. Leftover providers of the other major are what later `pip uninstall`
runs trip over: their files are the shared paths that vanish.

## Severity
- error: one object needs two majors at once, or loads a library of another major than it needs;
- warning: the environment mixes majors: providers of a major no consumer needs, in one finding.

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
