// missing-dlopen-library: Libraries that a library loads with dlopen at run time and that resolve nowhere.
// The rule's document below is what `cudafix explain missing-dlopen-library` prints.
#include <fmt/format.h>

#include <set>

#include "resolver/base/text.hpp"
#include "resolver/env/unresolved.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

// What brings back a library a dlopen needs: reinstalling the installed dist that lists it (its
// file is gone), else installing the one dist that provides it for its only CUDA major.
std::optional<Remedy> remedy_for_missing(const Context& c, const std::vector<MissingGroup>& groups,
                                         const std::string& soname) {
  for (const auto& g : groups)
    for (const auto& p : g.libraries)
      if (r::base_name(p) == soname) return reinstall(c.env.dists[static_cast<std::size_t>(g.dist)]);
  const auto& families = c.families(soname);
  if (families.size() != 1) return std::nullopt;
  const auto& m = families.front().first->majors.at(families.front().second);
  if (m.dists.empty()) return std::nullopt;
  return Remedy{"install", {}, fmt::format("pip install {}", m.dists.front())};
}

void check(Context& c) {
  const auto& missing_files = c.groups;
  const auto cause_by_soname = c.causes_by_soname();
  std::set<std::string> loader_sonames;
  for (const auto& [name, g] : c.knowledge.dlopen) loader_sonames.insert(g.loaded_by);
  for (const auto& loader_soname : loader_sonames) {
    for (const auto* loader : c.env.providers(loader_soname)) {
      if (loader->elf.status != r::ElfReadStatus::ok || loader->elf.info.soname != loader_soname) continue;
      // One finding per group, naming the sonames of it that resolve nowhere.
      struct Group {
        const r::SonameGroup* knowledge = nullptr;
        std::vector<std::string> loads, missing;
      };
      std::map<std::string, Group> groups;
      for (const auto& d : r::resolve_dlopens(c.env, c.knowledge, *loader)) {
        auto& g = groups[d.group];
        g.knowledge = d.knowledge;
        g.loads.push_back(d.resolution.name);
        if (!d.resolution.found()) g.missing.push_back(d.resolution.name);
      }
      for (const auto& [name, g] : groups) {
        if (g.missing.empty()) continue;
        Finding f;
        f.rule = "missing-dlopen-library";
        f.severity = Severity::error;
        f.message = fmt::format("{} loads {} with dlopen at run time, and {} resolve{} nowhere ({})",
                                c.env.display(loader->path), fmt::join(g.loads, ", "), fmt::join(g.missing, ", "),
                                g.missing.size() == 1 ? "s" : "", g.knowledge->why);
        f.paths = {loader->path};
        f.sonames = g.missing;
        for (const auto& soname : g.missing)
          if (auto it = cause_by_soname.find(soname);
              it != cause_by_soname.end() &&
              std::find(f.caused_by.begin(), f.caused_by.end(), it->second) == f.caused_by.end())
            f.caused_by.push_back(it->second);
        if (!loader->owners.empty()) f.dists = {c.env.dists[static_cast<std::size_t>(loader->owners.front())].dir_name};
        // A library another dist provides (cuBLASLt, NVRTC) comes back from that dist; the
        // loader's own sub-libraries from reinstalling the loader's dist.
        f.remedy = remedy_for_missing(c, missing_files, g.missing.front());
        if (!f.remedy && !loader->owners.empty())
          f.remedy = reinstall(c.env.dists[static_cast<std::size_t>(loader->owners.front())]);
        if (f.remedy)
          for (const auto& d : f.remedy->dists)
            if (std::find(f.dists.begin(), f.dists.end(), d) == f.dists.end()) f.dists.push_back(d);
        c.add(std::move(f));
      }
    }
  }
}

}  // namespace

extern const Rule missing_dlopen_library;
const Rule missing_dlopen_library{
    "missing-dlopen-library",
    Severity::error,
    r::ScanDepth::full,
    false,
    false,
    "Libraries that a library loads with dlopen at run time and that resolve nowhere.",
    R"md(# missing-dlopen-library

Libraries that a library loads with dlopen at run time and that resolve nowhere.

## What it finds
The knowledge's `[dlopen.*]` tables name the sub-libraries a library opens at run time (cuDNN's
`libcudnn.so.9` opens `libcudnn_ops.so.9`, `libcudnn_cnn.so.9`, ... and cuBLAS's Lt). For each such
library present in the environment, every sub-library it would open is searched as dlopen
searches (the opener's RUNPATH, LD_LIBRARY_PATH, ld.so.cache, the default folders).

## Why it matters
These are never in DT_NEEDED, so `ldd`, `pip check` and an import test all pass: the failure
comes later, at the first convolution (`CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED`), hours into a job.

## Severity
- error: always: a run-time load will fail.

## How to fix it
Reinstall the dist that lists the missing sub-library (`cudafix plan fix` finds it), or install
the one dist that provides it for the opener's CUDA major.

## Example
```console
$ cudafix doctor --select missing-dlopen-library
error[missing-dlopen-library] #1 nvidia/cudnn/lib/libcudnn.so.9 loads libcudnn_adv.so.9, libcudnn_cnn.so.9, libcudnn_ops.so.9, ... with dlopen at run time, and libcudnn_ops.so.9 resolves nowhere (cuDNN's sub-libraries, loaded when first used)
    next: pip install --force-reinstall --no-deps nvidia-cudnn-cu13==9.19.0.56
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
