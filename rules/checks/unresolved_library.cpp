// unresolved-library: NEEDED entries that resolve nowhere, explained where they can be.
// The rule's document below is what `cudafix explain unresolved-library` prints.
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

void check(Context& c) {
  const auto cause_by_soname = c.causes_by_soname();

  struct Group {
    r::UnresolvedKind kind;
    std::string text;
    std::vector<std::string> consumers;
    std::set<std::string> dists;
  };
  std::map<std::pair<std::string, int>, Group> groups_by;
  for (const auto& o : c.env.objects) {
    for (const auto& res : o.resolutions) {
      if (res.found()) continue;
      const auto e = r::explain_unresolved(c.env, c.knowledge, o, res);
      auto& g = groups_by[{res.name, static_cast<int>(e.kind)}];
      g.kind = e.kind;
      if (g.text.empty()) g.text = e.text;
      g.consumers.push_back(o.path);
      for (int owner : o.owners) g.dists.insert(c.env.dists[static_cast<std::size_t>(owner)].dir_name);
    }
  }
  for (auto& [key, g] : groups_by) {
    const std::string& soname = key.first;
    Finding f;
    f.rule = "unresolved-library";
    switch (g.kind) {
      // Explained, and nothing to act on: shown with -v and in --json.
      case r::UnresolvedKind::driver_library:
      case r::UnresolvedKind::earlier_import:
      case r::UnresolvedKind::loaded_by_sibling:
      case r::UnresolvedKind::optional_library:
        f.severity = Severity::info;
        break;
      case r::UnresolvedKind::stale_build_path:
        f.severity = Severity::warning;
        break;
      case r::UnresolvedKind::unexplained:
        f.severity = c.is_cuda(soname) ? Severity::error : Severity::warning;
        break;
    }
    f.message = fmt::format("{} resolves nowhere for {} object{} ({}): {}", soname, g.consumers.size(),
                            g.consumers.size() == 1 ? "" : "s", r::to_string(g.kind), g.text);
    name_soname_consumers(c, f, soname, g.consumers, g.dists, cause_by_soname, 8);
    c.add(std::move(f));
  }
}

}  // namespace

extern const Rule unresolved_library;
const Rule unresolved_library{
    "unresolved-library",
    Severity::error,
    r::ScanDepth::full,
    false,
    false,
    "NEEDED entries that resolve nowhere, explained where they can be.",
    R"md(# unresolved-library

NEEDED entries that resolve nowhere, explained where they can be.

## What it finds
Every DT_NEEDED of every ELF object in the environment that the loader model (glibc's search,
step by step, in the process each dist's import builds) cannot find, grouped per soname and per
explanation: a driver library (libcuda.so.1, found on a GPU host), a library an earlier import
maps, one the library beside it loads first, an optional transport or feature, a build machine's
stale RPATH, or unexplained.

## Why it matters
An unexplained CUDA soname is an import that fails: `ImportError: libcudnn.so.9: cannot open
shared object file`, or a torch that works on your laptop and not in the container. The
explained ones are facts worth knowing but not acting on: an optional plugin (NCCL's RDMA
transport, cupy's cuTENSOR module, mpi4py's MPICH build) is loaded only when its feature is used.

## Severity
- error: an unexplained CUDA-family soname (the knowledge's families);
- warning: another unexplained soname, or one only a build machine's stale RPATH could provide;
- info: explained: a driver library, an earlier import's library, one loaded by the library
  beside it, or an optional library that only an optional feature needs (shown with `-v` and in
  `--json`).

## How to fix it
`cudafix why SONAME` shows who needs it, who provides it, and where the loader looks. If a
provider dist lost the file, reinstall it (`cudafix plan fix`); if the library is a system one
(an RDMA or MPI library), install it from the system's packages only if you use that feature.

## Example
```console
$ cudafix doctor --select unresolved-library
error[unresolved-library] #1 libcudnn.so.9 resolves nowhere for 1 object (unexplained): nothing in the environment or on this host provides libcudnn.so.9
      needed by torch/lib/libtorch_cuda.so
    next: cudafix why libcudnn.so.9
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
