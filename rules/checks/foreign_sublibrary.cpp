// foreign-sublibrary: Libraries a front end dlopens from its own dist that resolve to another copy.
// The rule's document below is what `cudafix explain foreign-sublibrary` prints.
#include <fmt/format.h>

#include <algorithm>

#include "resolver/base/text.hpp"
#include "resolver/plan/dlopen_family.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

// Why the front end's dist does not hold the member: its file is gone, or it never listed it.
std::string why_not_own(const Context& c, const r::FamilyMember& m) {
  const auto& dist = c.env.dists[static_cast<std::size_t>(m.front_dist)];
  const std::string expected = r::expected_path(m);
  const auto& gone = c.env.missing[static_cast<std::size_t>(m.front_dist)];
  if (std::find(gone.begin(), gone.end(), expected) != gone.end())
    return fmt::format("{} lists {} but the file is gone", r::dist_label(dist), c.env.display(expected));
  if (r::row_for(dist, expected))
    return fmt::format("{} lists {}, and another file answers first", r::dist_label(dist), c.env.display(expected));
  return fmt::format("{} does not ship {} here (its RECORD does not list it)", r::dist_label(dist),
                     c.env.display(expected));
}

Finding finding_for(const Context& c, const r::FamilyMember& m, const std::map<std::string, int>& causes) {
  const auto& front_dist = c.env.dists[static_cast<std::size_t>(m.front_dist)];
  Finding f;
  f.rule = "foreign-sublibrary";
  f.severity = m.place == r::MemberPlace::unowned ? Severity::warning : Severity::error;
  const std::string error = r::runtime_error_of(m);
  f.message = fmt::format("{} loads {} with dlopen, which resolves to {}, not to {}'s own build{}",
                          describe_front(c.env, m), m.dlopen.resolution.name, r::describe_place(c.env, m),
                          r::dist_label(front_dist), error.empty() ? "" : ": " + error);
  f.evidence.push_back(why_not_own(c, m));
  f.evidence.push_back(fmt::format("{} ({})", m.dlopen.knowledge->why, m.dlopen.group));
  f.paths = {m.front->path, m.real};
  f.sonames = {m.dlopen.resolution.name};
  f.dists = {front_dist.dir_name};
  if (m.other_dist >= 0) f.dists.push_back(c.env.dists[static_cast<std::size_t>(m.other_dist)].dir_name);
  if (auto it = causes.find(m.dlopen.resolution.name); it != causes.end()) f.caused_by.push_back(it->second);
  f.remedy = reinstall(front_dist);
  return f;
}

void check(Context& c) {
  const auto causes = c.causes_by_soname();
  for (const auto& m : r::family_members(c.env, c.knowledge))
    // Resolving nowhere is missing-dlopen-library's.
    if (m.split() && m.place != r::MemberPlace::nowhere) c.add(finding_for(c, m, causes));
}

}  // namespace

extern const Rule foreign_sublibrary;
const Rule foreign_sublibrary{
    "foreign-sublibrary",
    Severity::error,
    r::ScanDepth::full,
    false,
    false,
    "Libraries a front end dlopens from its own dist that resolve to another copy.",
    R"md(# foreign-sublibrary

Libraries a front end dlopens from its own dist that resolve to another copy.

## What it finds
cuDNN's dispatcher (`libcudnn.so.9`) and `libcudnn_graph.so.9` open their sub-libraries and
engines with dlopen by bare soname (the knowledge's `[dlopen.*]` tables marked `same_dist`). Each
must be the file the front end's own dist installed beside it. When that dist does not hold it
here (the file is gone, or the wheel never shipped it), the loader goes on searching and takes
the next copy: another dist's bytes at the shared `nvidia/cudnn/lib`, a folder on
`LD_LIBRARY_PATH`, or the host's cuDNN through ld.so.cache. The finding names the front end and
its dist, the file that answers instead (its dist, or its release and Debian package), and the
error cuDNN gives.

## Why it matters
Nothing fails at import: `ldd`, `pip check` and `import torch` all pass. cuDNN asks for each
sub-library by its own release first (`libcudnn_engines_precompiled.so.9.19.0`, `.so.9.19`), then
by soname, and takes the first file the loader finds. Another build either fails cuDNN's version
check (`CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH`) or does not link against this cuDNN
("undefined symbol ... version libcudnn_graph.so.9") and is dropped: on an H100 with the venv's
precompiled engines gone and the host's cuDNN 9.14 in ld.so.cache, a cuDNN convolution returned
`CUDNN_STATUS_NOT_SUPPORTED` and torch ran on the runtime-compiled engines alone. A copy no dist's RECORD describes is a warning: its build cannot be told.

## Severity
- error: the member resolves to another dist's bytes or outside the environment.
- warning: it resolves to a file of the environment that no RECORD describes.

## How to fix it
Reinstall the front end's dist from a wheel that holds the file: `cudafix fix` does it, and says
so when the wheel at hand lacks it (then a wheel of another build or version is needed).

## Example
```console
$ cudafix doctor --select foreign-sublibrary
error[foreign-sublibrary] #1 nvidia/cudnn/lib/libcudnn_graph.so.9 (nvidia-cudnn-cu13 9.19.0.56) loads libcudnn_engines_precompiled.so.9 with dlopen, which resolves to /lib/x86_64-linux-gnu/libcudnn_engines_precompiled.so.9 (release 9.14.0, Debian package libcudnn9-cuda-13), outside the environment, by ld.so.cache, not to nvidia-cudnn-cu13 9.19.0.56's own build: libcudnn_graph.so.9 gets another build, which fails its version check (CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH) or does not link against it and is dropped, so what needs it fails
    next: pip install --force-reinstall --no-deps nvidia-cudnn-cu13==9.19.0.56
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
