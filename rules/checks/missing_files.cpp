// missing-files: Files a dist's RECORD lists that are not on disk.
// The rule's document below is what `cudafix explain missing-files` prints.
#include <fmt/format.h>

#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

// Scripts Debian's package moved (or dropped) after pip wrote RECORD in its build: said, not missing.
Finding moved_by_debian(const Context& c, const r::DistInfo& d, const MissingGroup& g) {
  Finding f;
  f.rule = "missing-files";
  f.severity = Severity::info;
  std::size_t moved = 0;
  for (const auto& [listed, bin] : g.moved_by_debian) {
    moved += bin.empty() ? 0 : 1;
    f.evidence.push_back(bin.empty() ? fmt::format("{}: not installed by the package", c.env.display(listed))
                                     : fmt::format("{} is {}", c.env.display(listed), bin));
    f.paths.push_back(listed);
  }
  f.message = fmt::format(
      "{}'s RECORD names {} script{} of Debian's package build; the package installs {} of them in {}, "
      "not where RECORD says (dh-python moves them after pip writes RECORD): not missing",
      r::dist_label(d), g.moved_by_debian.size(), g.moved_by_debian.size() == 1 ? "" : "s", moved,
      r::join_normal(d.site_dir, "../../../bin"));
  f.dists = {d.dir_name};
  return f;
}

void check(Context& c) {
  const auto& groups = c.groups;
  const auto& metadata_only = c.metadata_only;
  for (const auto& g : groups) {
    const auto& d = c.env.dists[static_cast<std::size_t>(g.dist)];
    if (!g.moved_by_debian.empty()) c.add(moved_by_debian(c, d, g));
    for (const bool libs : {true, false}) {
      const auto& paths = libs ? g.libraries : g.others;
      if (paths.empty()) continue;
      Finding f;
      f.rule = "missing-files";
      f.severity = libs ? Severity::error : Severity::warning;
      const bool one = paths.size() == 1;
      f.message = fmt::format("{} lists {} {} that {} not on disk", r::dist_label(d), paths.size(),
                              libs ? (one ? "shared object" : "shared objects") : (one ? "other file" : "other files"),
                              one ? "is" : "are");
      for (std::size_t i = 0; i < paths.size() && i < 20; ++i) f.evidence.push_back(c.env.display(paths[i]));
      if (paths.size() > 20) f.evidence.push_back(fmt::format("... and {} more", paths.size() - 20));
      f.dists = {d.dir_name};
      f.paths = paths;
      if (auto it = metadata_only.find(g.dist); it != metadata_only.end() && it->second >= 0)
        f.caused_by = {it->second};
      f.remedy = reinstall(d);
      c.add(std::move(f));
    }
  }
}

}  // namespace

extern const Rule missing_files;
const Rule missing_files{
    "missing-files",
    Severity::error,
    r::ScanDepth::files,
    false,
    false,
    "Files a dist's RECORD lists that are not on disk.",
    R"md(# missing-files

Files a dist's RECORD lists that are not on disk.

## What it finds
Every RECORD row whose file is absent, grouped per dist, shared objects apart from other files.
Compiled bytecode (`__pycache__/*.pyc`) is never reported: Python writes and drops it on its own.
In Debian's system `dist-packages`, scripts a RECORD names under the package build's
`../scripts/` or `scripts-3.N/` are not missing: Debian's packaging moves them to `/usr/bin` (or
drops them) after pip wrote RECORD; one info finding says where each went.

## Why it matters
A listed shared object that is gone is a library some import will fail to load, or will load
from elsewhere. It is what `pip uninstall` of a dist that shared paths with this one leaves
behind, and what an interrupted install leaves. pip still counts the dist as installed, so
`pip install` skips it.

## Severity
- error: a listed shared object is gone;
- warning: other listed files are gone (scripts, headers, Python sources);
- info: scripts Debian's package moved or dropped (see above).
When the dist lost every library it lists, the finding is nested under its `metadata-only`
finding, its root cause.

## How to fix it
Reinstall the dist as it is: `pip install --force-reinstall --no-deps NAME==VERSION`, or let
`cudafix plan fix` find it among the repair steps.

## Example
```console
$ cudafix doctor --select missing-files
error[missing-files] #1 nvidia-cudnn-cu13 9.19.0.56 lists 1 shared object that is not on disk
      nvidia/cudnn/lib/libcudnn.so.9
    next: pip install --force-reinstall --no-deps nvidia-cudnn-cu13==9.19.0.56
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
