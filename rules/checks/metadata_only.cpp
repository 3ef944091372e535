// metadata-only: CUDA provider dists that are installed but whose libraries are all gone.
// The rule's document below is what `cudafix explain metadata-only` prints.
#include <fmt/format.h>

#include <algorithm>

#include "resolver/base/text.hpp"
#include "resolver/env/requirements.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

std::size_t listed_libraries(const r::DistInfo& d) {
  return static_cast<std::size_t>(std::count_if(d.record.begin(), d.record.end(), [](const r::RecordRow& row) {
    return r::looks_like_shared_object(r::base_name(row.path));
  }));
}

// Whether the RECORD lists anything besides the dist-info folder's own files.
bool has_payload(const r::DistInfo& d) {
  return std::any_of(d.record.begin(), d.record.end(), [&](const r::RecordRow& row) {
    return row.path.substr(0, d.dir_name.size() + 1) != d.dir_name + "/";
  });
}

// Fills c.metadata_only, per dist, with the id of its finding (for caused_by).
void check(Context& c) {
  auto& ids = c.metadata_only;
  for (const auto& g : c.groups) {
    const auto& d = c.env.dists[static_cast<std::size_t>(g.dist)];
    if (!r::is_cuda_provider(c.knowledge, d) || g.libraries.empty() || g.libraries.size() < listed_libraries(d))
      continue;
    Finding f;
    f.rule = "metadata-only";
    f.severity = Severity::error;
    f.message = fmt::format(
        "{} is installed but {} gone: pip still counts it as installed and will skip `pip install` of it as "
        "already satisfied",
        r::dist_label(d),
        g.libraries.size() == 1 ? std::string("its only library is")
                                : fmt::format("all {} of its libraries are", g.libraries.size()));
    for (const auto& p : g.libraries) f.evidence.push_back(fmt::format("missing: {}", c.env.display(p)));
    f.dists = {d.dir_name};
    f.paths = g.libraries;
    f.remedy = reinstall(d);
    f.remedy->command += "   (or: cudafix plan fix)";
    ids[g.dist] = c.add(std::move(f));
  }
  // Dists with no files but their dist-info: a meta package by design (cuda-toolkit, whose
  // extras pull the real wheels), or an nvidia placeholder (0.0.x) that stands in for one.
  for (const auto* d : r::visible_dists(c.env)) {
    if (has_payload(*d)) continue;
    Finding f;
    f.rule = "metadata-only";
    f.dists = {d->dir_name};
    const auto& meta = c.knowledge.meta_packages;
    if (std::find(meta.begin(), meta.end(), d->normalized) != meta.end()) {
      f.severity = Severity::info;
      f.message = fmt::format("{} has no files by design: a meta package whose extras pull in the real wheels",
                              r::dist_label(*d));
    } else if (d->normalized.rfind("nvidia-", 0) == 0 && d->version.rfind("0.0.", 0) == 0) {
      f.severity = Severity::warning;
      f.message = fmt::format("{} is a placeholder wheel with no files: the real package was never installed",
                              r::dist_label(*d));
    } else {
      continue;
    }
    c.add(std::move(f));
  }
}

}  // namespace

extern const Rule metadata_only;
const Rule metadata_only{
    "metadata-only",
    Severity::error,
    r::ScanDepth::files,
    false,
    true,
    "CUDA provider dists that are installed but whose libraries are all gone.",
    R"md(# metadata-only

CUDA provider dists that are installed but whose libraries are all gone.

## What it finds
A dist that provides CUDA libraries (a family of the knowledge: cuDNN, cuBLAS, NCCL, ...) whose
RECORD lists shared objects none of which is on disk: only its dist-info is left. Also dists
with no files at all: nvidia placeholder wheels (0.0.x) and meta packages.

## Why it matters
This is the state `pip uninstall nvidia-cudnn-cu12` leaves `nvidia-cudnn-cu13` in when both
listed the same files. `pip list` and `pip check` still show it as installed, `pip install` skips
it as already satisfied, and torch fails at import or silently loads an older cuDNN from the
system. It is the root cause: the missing files, and the unresolved and shadowed libraries they
provided, are nested under it.

## Severity
- error: a CUDA provider whose listed libraries are all gone;
- warning: an nvidia placeholder wheel (0.0.x) with no files: the real package was never installed;
- info: a meta package by design (the knowledge's `meta_packages`, e.g. cuda-toolkit, whose
  extras pull in the real wheels).

## How to fix it
Reinstall it: `pip install --force-reinstall --no-deps NAME==VERSION` (a plain `pip install`
does nothing, since pip thinks it is there), or `cudafix plan fix`, which finds the wheel and
checks that the order of the repair never makes a required library worse.

## Example
```console
$ cudafix doctor --select metadata-only,missing-files
error[metadata-only] #1 nvidia-cudnn-cu13 9.19.0.56 is installed but its only library is gone: pip still counts it as installed and will skip `pip install` of it as already satisfied
      missing: nvidia/cudnn/lib/libcudnn.so.9
    └ error[missing-files] #2 nvidia-cudnn-cu13 9.19.0.56 lists 1 shared object that is not on disk
          nvidia/cudnn/lib/libcudnn.so.9
    next: pip install --force-reinstall --no-deps nvidia-cudnn-cu13==9.19.0.56   (or: cudafix plan fix)
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
