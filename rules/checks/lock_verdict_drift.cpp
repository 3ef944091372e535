// lock-verdict-drift: with `doctor --lock LOCK`, a GPU verdict the lock records (`cudafix lock
// --verified`) that no longer holds: the consumer now resolves another cuDNN, or none.
// The rule's document below is what `cudafix explain lock-verdict-drift` prints.
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

void check(Context& c) {
  for (const auto& d : c.drift())
    if (d.kind == r::DriftKind::verdict) c.add(drift_finding(c, d, "lock-verdict-drift", Severity::error));
}

}  // namespace

extern const Rule lock_verdict_drift;
const Rule lock_verdict_drift{
    "lock-verdict-drift",
    Severity::error,
    r::ScanDepth::full,
    false,
    false,
    "A GPU verdict the lock records that no longer holds: its consumer resolves another cuDNN (with `--lock`).",
    R"md(# lock-verdict-drift

A GPU verdict the lock records that no longer holds: its consumer resolves another cuDNN (with `--lock`).

## What it finds
`cudafix lock --verified` records, per device, the verdict of a passing probe: the consumer it
dlopened (`torch/lib/libtorch_cuda.so`), the libcudnn it mapped, cuDNN's and the driver's
versions. With `doctor --lock LOCK`, the loader model resolves the consumer's cuDNN again; where
it now resolves another file, or none, or the consumer is gone, the verdict no longer holds.
What can be told without the GPU is told: a changed driver needs `cudafix verify`. Without
`--lock` the rule does not run.

## Why it matters
The verdict is the lock's promise that its libraries work on that GPU. A consumer that now maps
another cuDNN (a second cuDNN wheel shadowing the first, an LD_LIBRARY_PATH) runs code the probe
never opened.

## Severity
- error: always.

## How to fix it
`cudafix sync LOCK` puts the locked libraries back; `cudafix why libcudnn.so.9` shows how the
consumer resolves it now. Run `cudafix lock --verified` again once the environment is as meant.

## Example
```console
cudafix doctor --lock pylock.toml --select lock-verdict-drift
error[lock-verdict-drift] #1 the verdict recorded for device GPU-5c1e... no longer holds: torch/lib/libtorch_cuda.so was verified with nvidia/cudnn/lib/libcudnn.so.9 for libcudnn.so.9, it now resolves nowhere
      locked: nvidia/cudnn/lib/libcudnn.so.9
      lock: pylock.toml
    next: cudafix sync pylock.toml
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
