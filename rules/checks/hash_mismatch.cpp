// hash-mismatch: Files whose SHA-256 is not the one their RECORD holds (with `--verify-hashes`).
// The rule's document below is what `cudafix explain hash-mismatch` prints.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

void check(Context& c) {
  if (!c.options.verify_hashes) return;
  DoctorReport& report = c.report;
  struct Job {
    int dist;
    const r::RecordRow* row;
    std::string path;
  };
  std::vector<Job> jobs;
  std::uint64_t total_bytes = 0;
  std::string abs;
  for (std::size_t i = 0; i < c.env.dists.size(); ++i) {
    const auto& d = c.env.dists[i];
    for (const auto& row : d.record) {
      if (row.hash_algo() != "sha256" || row.hash.empty()) continue;  // rows without a hash are skipped
      r::join_normal(d.site_dir, row.path, abs);
      if (!r::is_within(abs, c.env.layout.root_real) && !c.env.site_of(abs)) continue;
      if (!c.env.present(abs)) continue;
      jobs.push_back({static_cast<int>(i), &row, abs});
      total_bytes += row.size_value;
    }
  }
  // Largest first, so one big library does not finish last on one core.
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.row->size() > b.row->size(); });
  std::vector<std::string> digests(jobs.size());
  std::atomic<std::uint64_t> done{0};
  r::parallel_for(jobs.size(), c.options.threads, [&](std::size_t k) {
    std::uint64_t n = 0;
    digests[k] = r::sha256_of_file(jobs[k].path, r::DigestForm::record, &n);
    const auto now = done.fetch_add(n) + n;
    if (c.options.hash_progress) c.options.hash_progress(now, total_bytes);
  });
  report.hashed_files = jobs.size();
  report.hashed_bytes = done.load();
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    const auto& j = jobs[k];
    if (digests[k] == j.row->hash) continue;
    const auto& d = c.env.dists[static_cast<std::size_t>(j.dist)];
    Finding f;
    f.rule = "hash-mismatch";
    f.severity = r::looks_like_shared_object(r::base_name(j.path)) ? Severity::error : Severity::warning;
    std::string matches;
    for (int other : c.env.owners_of(j.path)) {
      if (other == j.dist) continue;
      const auto& od = c.env.dists[static_cast<std::size_t>(other)];
      if (const auto* row = r::row_for(od, j.path); row && row->hash == digests[k])
        matches = fmt::format(": the content is {}'s (it matches that dist's RECORD)", r::dist_label(od));
    }
    f.message = fmt::format("{} does not match the hash {} recorded for it{}", c.env.display(j.path), r::dist_label(d),
                            matches);
    f.evidence = {fmt::format("RECORD sha256={}", j.row->hash),
                  fmt::format("on disk sha256={}", digests[k].empty() ? "(unreadable)" : digests[k])};
    f.dists = {d.dir_name};
    f.paths = {j.path};
    f.remedy = reinstall(d);
    c.add(std::move(f));
  }
}

}  // namespace

extern const Rule hash_mismatch;
const Rule hash_mismatch{
    "hash-mismatch",
    Severity::error,
    r::ScanDepth::files,
    false,
    false,
    "Files whose SHA-256 is not the one their RECORD holds (with `--verify-hashes`).",
    R"md(# hash-mismatch

Files whose SHA-256 is not the one their RECORD holds (with `--verify-hashes`).

## What it finds
With `doctor --verify-hashes`, every file a RECORD lists with a sha256 is hashed (in parallel,
largest first) and compared; a file another owner's RECORD matches is named as that owner's
content. Rows without a hash are skipped. Without the flag the rule does not run: it reads every
byte of the environment.

## Why it matters
A library whose bytes are not its dist's is another wheel's (two majors writing one path), a
partial write, or an edit: the version `pip list` reports is not the code that runs.

## Severity
- error: a shared object;
- warning: another file.

## How to fix it
Reinstall the dist whose RECORD it is: `pip install --force-reinstall --no-deps NAME==VERSION`;
when the content is another owner's, decide which owner stays (`cudafix plan fix`).

## Example
```console
$ cudafix doctor --verify-hashes --select hash-mismatch
error[hash-mismatch] #1 nvidia/cudnn/lib/libcudnn.so.9 does not match the hash nvidia-cudnn-cu12 9.10.2.21 recorded for it: the content is nvidia-cudnn-cu13 9.19.0.56's (it matches that dist's RECORD)
      RECORD sha256=...
      on disk sha256=...
    next: pip install --force-reinstall --no-deps nvidia-cudnn-cu12==9.10.2.21
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
