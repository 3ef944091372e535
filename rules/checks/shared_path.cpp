// shared-path: Paths that two installed dists both list in their RECORD, and whose bytes are on disk.
// The rule's document below is what `cudafix explain shared-path` prints.
#include <fmt/format.h>

#include <set>

#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

void check(Context& c) {
  // One finding per set of owners, listing every path they share.
  std::map<std::vector<int>, std::vector<std::string>> by_owners;
  for (auto& [path, owners] : c.env.shared_paths()) {
    if (r::in_pycache(path)) continue;
    by_owners[owners].push_back(path);
  }
  for (const auto& [owners, paths] : by_owners) {
    Finding f;
    f.rule = "shared-path";
    std::vector<std::string> labels;
    std::set<int> majors;
    for (int o : owners) {
      const auto& d = c.env.dists[static_cast<std::size_t>(o)];
      f.dists.push_back(d.dir_name);
      labels.push_back(r::dist_label(d));
      if (auto m = r::major_of_dist(c.knowledge, d)) majors.insert(*m);
    }
    bool libraries = false, differ = false, harmless = true;
    for (const auto& p : paths) {
      const auto base = r::base_name(p);
      libraries = libraries || r::looks_like_shared_object(base);
      const auto& known = c.knowledge.harmless_shared_paths;
      harmless = harmless && std::find(known.begin(), known.end(), c.env.display(p)) != known.end();
      std::set<std::string> recorded;
      for (int o : owners)
        if (const auto* row = r::row_for(c.env.dists[static_cast<std::size_t>(o)], p))
          recorded.insert(fmt::format("{}/{}", row->hash, row->size_value));
      std::vector<std::string> whose;
      for (int o : r::whose_bytes(c.env, p, owners)) whose.push_back(c.env.dists[static_cast<std::size_t>(o)].name);
      differ = differ || recorded.size() > 1;
      if (f.evidence.size() < 12)
        f.evidence.push_back(fmt::format("{}: bytes on disk are {}", c.env.display(p),
                                         whose.empty() ? std::string("no owner's (neither size nor hash matches)")
                                                       : fmt::format("{}'s", fmt::join(whose, "'s and "))));
    }
    if (paths.size() > 12) f.evidence.push_back(fmt::format("... and {} more shared paths", paths.size() - 12));
    for (int o : owners) {
      const auto& d = c.env.dists[static_cast<std::size_t>(o)];
      std::vector<std::string> left;
      for (int other : owners)
        if (other != o) left.push_back(c.env.dists[static_cast<std::size_t>(other)].name);
      f.evidence.push_back(fmt::format("`pip uninstall {}` would delete all {} shared paths, leaving {} without them",
                                       d.name, paths.size(), fmt::join(left, ", ")));
    }
    const bool majors_differ = majors.size() > 1;
    f.severity = harmless                                 ? Severity::info
                 : libraries && (differ || majors_differ) ? Severity::error
                                                          : Severity::warning;
    f.message = fmt::format("{} {}{} {} written by both {}{}", paths.size(), paths.size() == 1 ? "path" : "paths",
                            libraries ? " (shared objects among them)" : "", paths.size() == 1 ? "is" : "are",
                            fmt::join(labels, " and "),
                            harmless        ? ": known harmless"
                            : majors_differ ? fmt::format(", wheels of CUDA {}", fmt::join(majors, " and "))
                            : differ        ? ", with different contents"
                                            : ", with the same contents");
    f.paths = paths;
    f.remedy = Remedy{"remove",
                      {f.dists.front()},
                      fmt::format("cudafix plan remove {}   (what removing one owner would break)",
                                  c.env.dists[static_cast<std::size_t>(owners.front())].name)};
    c.add(std::move(f));
  }
}

}  // namespace

extern const Rule shared_path;
const Rule shared_path{
    "shared-path",
    Severity::error,
    r::ScanDepth::files,
    false,
    false,
    "Paths that two installed dists both list in their RECORD, and whose bytes are on disk.",
    R"md(# shared-path

Paths that two installed dists both list in their RECORD, and whose bytes are on disk.

## What it finds
One finding per set of owners, listing every path they share (bytecode left out). For each
path it says whose bytes are on disk: the owner whose RECORD matches the file's size (and its
SHA-256 when sizes tie), or no owner's. It also says what `pip uninstall` of each owner would
delete: every shared path, since pip does not count owners.

## Why it matters
Wheels of two CUDA majors write the same files: `nvidia-cudnn-cu12` and `nvidia-cudnn-cu13` both
list `nvidia/cudnn/lib/libcudnn.so.9`, and so do both NCCL wheels for `nvidia/nccl/lib/libnccl.so.2`.
The one installed last owns the bytes. `pip uninstall` of either deletes the file for both, and
the survivor stays "installed" with its library gone: torch then fails at import, or loads a
cuDNN from outside the environment.

## Severity
- error: shared objects among the paths, and the owners' RECORDs disagree on their contents or
  the owners are wheels of different CUDA majors;
- warning: the owners list the same contents (a re-packaged wheel, a rename);
- info: every path is known harmless (`nvidia/__init__.py`; the knowledge's `harmless_shared_paths`).

## How to fix it
Decide which owner should stay, then remove the other with owner-counted removal, which keeps
every path the kept dist lists: `cudafix plan remove DIST` shows what `pip uninstall` would
delete and break, and `cudafix plan fix` plans the whole repair (reinstall the target major's
providers first, then remove the other major's).

## Example
```console
$ cudafix doctor --select shared-path
error[shared-path] #1 45 paths (shared objects among them) are written by both nvidia-nccl-cu12 2.27.3 and nvidia-nccl-cu13 2.28.9, wheels of CUDA 12 and 13
      nvidia/nccl/lib/libnccl.so.2: bytes on disk are nvidia-nccl-cu13's
      ...
      `pip uninstall nvidia-nccl-cu12` would delete all 45 shared paths, leaving nvidia-nccl-cu13 without them
    next: cudafix plan remove nvidia-nccl-cu12   (what removing one owner would break)
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
