// lock-package-drift: with `doctor --lock LOCK`, packages whose version differs from the lock's,
// locked packages not installed, and installed ones the lock does not hold.
// The rule's document below is what `cudafix explain lock-package-drift` prints.
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

void check(Context& c) {
  for (const auto& d : c.drift()) {
    if (d.kind != r::DriftKind::version && d.kind != r::DriftKind::missing && d.kind != r::DriftKind::unlocked)
      continue;
    c.add(drift_finding(c, d, "lock-package-drift",
                        d.kind == r::DriftKind::unlocked ? Severity::warning : Severity::error));
  }
}

}  // namespace

extern const Rule lock_package_drift;
const Rule lock_package_drift{
    "lock-package-drift",
    Severity::error,
    r::ScanDepth::dists,
    false,
    false,
    "Packages whose version differs from a lock's, locked ones missing, unlocked ones present (with `--lock`).",
    R"md(# lock-package-drift

Packages whose version differs from a lock's, locked ones missing, unlocked ones present (with `--lock`).

## What it finds
With `doctor --lock LOCK` (a PEP 751 `pylock.toml`: `cudafix lock` writes one, uv and pip do
too), each package of the lock whose marker holds here is looked for by its PEP 503 name: one
installed at another version (compared as PEP 440 versions), one not installed at all; and each
installed dist the lock does not hold. Without `--lock` the rule does not run.

## Why it matters
A lock says what every node of a pool holds. A node that drifted from it (a `pip install` by
hand, an upgrade a dependency pulled in, an uninstall) runs other code than the one verified,
and what was verified on the GPU no longer says anything about it.

## Severity
- error: a locked package at another version, or missing;
- warning: a package the lock does not hold.

## How to fix it
`cudafix sync LOCK` brings the environment back to exactly the lock, as one transaction; or
write the lock again from this environment (`cudafix lock -o LOCK`) when the change was meant.

## Example
```console
cudafix doctor --lock pylock.toml --select lock-package-drift
error[lock-package-drift] #1 nvidia-cudnn-cu12 is locked and not installed
      locked: 9.10.2.21
      lock: pylock.toml
    next: cudafix sync pylock.toml
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
