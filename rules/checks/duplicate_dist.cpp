// duplicate-dist: The same distribution installed twice in one site folder (two dist-info folders of one name).
// The rule's document below is what `cudafix explain duplicate-dist` prints.
#include <fmt/format.h>

#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

void check(Context& c) {
  std::map<std::string, std::vector<const r::DistInfo*>> by_name;
  for (const auto& d : c.env.dists)
    if (d.root != r::SiteRoot::system) by_name[d.normalized].push_back(&d);
  for (const auto& [name, dists] : by_name) {
    if (dists.size() < 2) continue;
    Finding f;
    f.rule = "duplicate-dist";
    f.severity = Severity::error;
    std::vector<std::string> labels;
    for (const auto* d : dists) {
      f.dists.push_back(d->dir_name);
      labels.push_back(fmt::format("{} in {}", d->dir_name, c.env.display(d->site_dir)));
    }
    // An egg-info with no file list (Debian's packages leave one beside a dist-info) owns nothing
    // an uninstall could take from the other.
    std::size_t listing = 0;
    bool one_version = true;
    for (const auto* d : dists) {
      listing += d->format == r::DistFormat::dist_info || d->has_record ? 1 : 0;
      one_version = one_version && d->version == dists.front()->version;
    }
    if (listing <= 1) {
      f.severity = one_version ? Severity::info : Severity::warning;
      f.message = fmt::format(
          "{} is installed {} times: {}; pip and importlib see only the first; no more than one lists its "
          "files, so no uninstall deletes files the other lists",
          name, dists.size(), fmt::join(labels, ", "));
      c.add(std::move(f));
      continue;
    }
    f.message = fmt::format(
        "{} is installed {} times: {}; pip and importlib see only the first, and uninstalling "
        "deletes files the other still lists",
        name, dists.size(), fmt::join(labels, ", "));
    f.remedy = Remedy{"remove", f.dists, fmt::format("cudafix plan remove {}", dists.back()->dir_name)};
    c.add(std::move(f));
  }
}

}  // namespace

extern const Rule duplicate_dist;
const Rule duplicate_dist{
    "duplicate-dist",
    Severity::error,
    r::ScanDepth::dists,
    false,
    false,
    "The same distribution installed twice in one site folder (two dist-info folders of one name).",
    R"md(# duplicate-dist

The same distribution installed twice in one site folder (two dist-info folders of one name).

## What it finds
Two or more `.dist-info` or `.egg-info` dists whose names normalise (PEP 503) to the same project
in the same environment: what an interrupted upgrade or two installers writing one venv leave
behind, and what Debian's packages leave (a dist-info and an egg-info that lists no files).

## Why it matters
pip, uv and `importlib.metadata` each pick one of them, not always the same one: `pip list`
shows one version while the files on disk are the other's, and uninstalling one leaves the
other's RECORD pointing at files that are gone.

## Severity
- error: two or more of them list their files (RECORD, installed-files.txt);
- warning: at most one lists files, and their versions differ;
- info: at most one lists files, and they have one version (Debian's python3-cryptography).

## How to fix it
Remove the stale dist-info folder (the one whose RECORD does not match the files on disk), then
reinstall the project: `pip install --force-reinstall --no-deps NAME==VERSION`.

## Example
```console
$ cudafix doctor --select duplicate-dist
error[duplicate-dist] #1 nvidia-cublas is installed 2 times: nvidia_cublas-13.0.0.19.dist-info in lib/python3.12/site-packages, nvidia_cublas-13.1.0.3.dist-info in lib/python3.12/site-packages; pip and importlib see only the first, and uninstalling deletes files the other still lists
    next: cudafix plan remove nvidia_cublas-13.1.0.3.dist-info
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
