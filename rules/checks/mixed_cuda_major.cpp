// mixed-cuda-major: Objects that load CUDA libraries of two majors, and providers of a major nothing needs.
// The rule's document below is what `cudafix explain mixed-cuda-major` prints.
#include <fmt/format.h>

#include <set>

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

void check(Context& c) {
  std::set<int> needed_anywhere;
  std::set<int> provider_dists_used;  // dists whose files some object resolves to
  for (const auto& o : c.env.objects) {
    const auto needed = majors_needed(c, o);
    needed_anywhere.insert(needed.begin(), needed.end());
    std::vector<std::string> mismatches;
    std::set<int> loaded;
    for (const auto& res : o.resolutions) {
      if (!res.found() || !c.is_cuda(res.name)) continue;
      for (int owner : c.env.owners_of(*res.path)) provider_dists_used.insert(owner);
      if (!c.env.site_of(*res.path)) continue;
      int whose = -1;
      const auto major = r::major_of_file(c.env, c.knowledge, *res.path, &whose);
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
  // Providers of a major nothing needs, whose libraries nothing loads.
  for (std::size_t i = 0; i < c.env.dists.size(); ++i) {
    const auto& d = c.env.dists[i];
    const auto fam = c.knowledge.family_of_dist(d.normalized);
    if (!fam || needed_anywhere.empty() || needed_anywhere.count(fam->second) ||
        provider_dists_used.count(static_cast<int>(i)))
      continue;
    Finding f;
    f.rule = "mixed-cuda-major";
    f.severity = Severity::warning;
    f.message = fmt::format("{} provides {} for CUDA {}, which nothing in the environment needs (it needs CUDA {})",
                            r::dist_label(d), fam->first->name, fam->second, fmt::join(needed_anywhere, " and "));
    f.dists = {d.dir_name};
    f.remedy = Remedy{"remove", {d.dir_name}, fmt::format("cudafix plan remove {}", d.name)};
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
    "Objects that load CUDA libraries of two majors, and providers of a major nothing needs.",
    R"md(# mixed-cuda-major

Objects that load CUDA libraries of two majors, and providers of a major nothing needs.

## What it finds
For each ELF object: the CUDA majors its NEEDED name unambiguously (`libcudart.so.13` is 13;
`libcudnn.so.9` is both), and the major of each CUDA library it resolves to inside the
environment (its owner's, or, for a shared path, the owner whose bytes are on disk). Then every
provider dist of a major that no object in the environment needs and whose libraries nothing
loads.

## Why it matters
A torch built for CUDA 13 that loads a CUDA 12 cuBLAS fails with undefined symbols or, worse,
runs with the wrong kernels. Leftover providers of the other major are what later `pip uninstall`
runs trip over: their files are the shared paths that vanish.

## Severity
- error: one object needs two majors at once, or loads a library of another major than it needs;
- warning: the environment mixes majors: a provider of a major no consumer needs.

## How to fix it
`cudafix plan fix` picks the major the consumers need (torch, jax, cupy) and plans the repair:
the target major's clobbered providers reinstalled first, then the other major's removed with
owner-counted removal. `cudafix plan remove DIST` shows what removing one of them would do.

## Example
```console
$ cudafix doctor --select mixed-cuda-major
warning[mixed-cuda-major] #1 nvidia-nccl-cu12 2.27.3 provides nccl for CUDA 12, which nothing in the environment needs (it needs CUDA 13)
    next: cudafix plan remove nvidia-nccl-cu12
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
