// lock-file-drift: with `doctor --lock LOCK`, installed files that differ from the locked wheel's,
// and locked libraries whose bytes are not the locked sha256.
// The rule's document below is what `cudafix explain lock-file-drift` prints.
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

void check(Context& c) {
  for (const auto& d : c.drift()) {
    if (d.kind != r::DriftKind::files && d.kind != r::DriftKind::library_bytes) continue;
    c.add(drift_finding(c, d, "lock-file-drift",
                        d.kind == r::DriftKind::library_bytes ? Severity::error : Severity::warning));
  }
}

}  // namespace

extern const Rule lock_file_drift;
const Rule lock_file_drift{
    "lock-file-drift",
    Severity::error,
    r::ScanDepth::files,
    false,
    false,
    "Files that differ from a lock's wheels, libraries whose bytes are not the locked sha256 (with `--lock`).",
    R"md(# lock-file-drift

Files that differ from a lock's wheels, libraries whose bytes are not the locked sha256 (with `--lock`).

## What it finds
With `doctor --lock LOCK`, for each locked package that is installed: every shared object the
lock lists under `[packages.tool.cudafix] libraries` is hashed (in parallel) and compared with
its locked sha256, a library that is gone counting as different; and the installed RECORD is
compared with the one the lock was written from (`record`, a digest of its rows inside the site
folder), with the files RECORD lists that are not on disk named. Locks without cudafix's table
(uv's, pip's) give this rule nothing to compare. Without `--lock` the rule does not run.

## Why it matters
The same version with other bytes is another build: another wheel installed over it (two CUDA
majors' wheels writing one path), a library copied in by hand, a partial write. The GPU check
recorded in the lock was made with the locked bytes, not these.

## Severity
- error: a locked library whose bytes differ, or that is gone;
- warning: the RECORD differs, or files it lists are missing.

## How to fix it
`cudafix sync LOCK` reinstalls the locked wheel, every file's hash checked; `cudafix why
SONAME` shows who else provides a library whose bytes changed.

## Example
```console
cudafix doctor --lock pylock.toml --select lock-file-drift
error[lock-file-drift] #1 nvidia-cudnn-cu12's nvidia/cudnn/lib/libcudnn.so.9 (libcudnn.so.9) holds other bytes than the locked ones (sha256 9f2c..., locked 4b1e...)
      locked: 4b1e...
      found: 9f2c...
      lock: pylock.toml
    next: cudafix sync pylock.toml
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
