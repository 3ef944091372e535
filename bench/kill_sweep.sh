#!/usr/bin/env bash
# The whole kill -9 sweep: tests/e2e/test_kill_sweep.cpp with CUDAFIX_SWEEP_ALL=1, a SIGKILL at
# every journal step of install, remove, rollback, rollback --snapshot and fix (CI kills at the
# first three and last two steps and 8 more drawn from the run's seed, CUDAFIX_SEED), each recovered by `history` and judged by the tree, history,
# the next command and pip. Prints, per command, the trials, its steps and how many ended in the
# before and in the after state, then the suite's verdict; exits with the suite's status.
# Needs a build with the tests (cmake -S . -B build -DCUDAFIX_TESTS=ON; ninja -C build e2e_tests).
#   bench/kill_sweep.sh [E2E_TESTS (build/tests/e2e_tests)]
set -uo pipefail
cd "$(dirname "$0")/.."
tests=${1:-build/tests/e2e_tests}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s.%N)
TMPDIR=$tmp CUDAFIX_SWEEP_ALL=1 CUDAFIX_CACHE_DIR=$tmp/cache CUDAFIX_CACHE_SETTLE_MS=500 \
  "$tests" --gtest_filter='KillSweep.AKill*' > "$tmp/out" 2>&1
rc=$?
end=$(date +%s.%N)
printf '%-22s %7s %6s %7s %6s\n' command trials steps before after
sed -n 's/^kill sweep: \(.*\): \([0-9]*\) trials of \([0-9]*\) steps, \([0-9]*\) before, \([0-9]*\) after$/\1|\2|\3|\4|\5/p' \
  "$tmp/out" | while IFS='|' read -r name trials steps before after; do
  printf '%-22s %7s %6s %7s %6s\n' "$name" "$trials" "$steps" "$before" "$after"
done
grep -E '^\[  (FAILED|PASSED)  \]|^\[==========\] [0-9]+ tests? from' "$tmp/out"
awk -v a="$start" -v b="$end" 'BEGIN { printf "whole sweep: %.0f s\n", b - a }'
if [ "$rc" -ne 0 ]; then
  echo "failures (first 60 lines):"
  grep -B2 -A6 'Failure' "$tmp/out" | head -60
fi
exit "$rc"
