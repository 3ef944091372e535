#!/usr/bin/env bash
# The hybrid CUDA 12/13 properties (tests/e2e/test_hybrid_property.cpp) over many more rounds than
# CI's 6 and 3, each seed its own sample: plan fix on a real pip-made venv, carried out, and fix
# after one pip uninstall of several providers, verified on the fakes after every step; each then
# judged by doctor, pip check and glibc's ld.so --list. ROUNDS is the number of each.
#   bench/hybrid_property.sh [BUILD_DIR] [ROUNDS] [SEEDS...]
set -euo pipefail
build=${1:-build}
rounds=${2:-60}
shift $(( $# > 2 ? 2 : $# ))
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1 2 3)
for seed in "${seeds[@]}"; do
  start=$(date +%s)
  CUDAFIX_HYBRID_ROUNDS=$rounds CUDAFIX_HYBRID_FIX_ROUNDS=$rounds CUDAFIX_SEED=$seed CUDAFIX_CACHE_DIR=$(mktemp -d) \
    "$build/tests/e2e_tests" --gtest_filter='HybridProperty.*' --gtest_brief=1
  echo "seed $seed: $rounds rounds of each passed in $(( $(date +%s) - start )) s"
done
