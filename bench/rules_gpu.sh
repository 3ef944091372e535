#!/usr/bin/env bash
# On the GPU machine: the rooms refactor's answers on the real torch venv (a hardlink copy), and
# what doctor, rules and explain say there. Results under $OUT.
#   bench/make_relocatable.sh && (device) bash bench/rules_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
copy_venv /tmp/v
{
  "$C" --version
  for cmd in "scan --json" "why libcudnn.so.9 --json" "plan remove nvidia-cudnn-cu13 --json" "doctor --json"; do
    "$C" $cmd --venv /tmp/v > "$OUT/tmp.json" 2>/dev/null
    echo "$cmd rc=$? md5=$(md5sum < "$OUT/tmp.json" | cut -c1-8)"
  done
  # A cached run gives the same answer as a fresh one.
  "$C" scan --json --venv /tmp/v --no-cache | md5sum | cut -c1-8
} > "$OUT/answers.txt" 2>&1
"$C" doctor --json --venv /tmp/v > "$OUT/doctor.json" 2>&1
"$C" doctor --venv /tmp/v --color never > "$OUT/doctor.txt" 2>&1; echo "rc=$?" >> "$OUT/doctor.txt"
"$C" doctor -v --venv /tmp/v --color never > "$OUT/doctor_v.txt" 2>&1
{
  "$C" rules --venv /tmp/v --color never; echo "rc=$?"
  "$C" explain shadowed-library; echo "rc=$?"
  "$C" explain shadowd 2>&1; echo "rc=$?"
  "$C" frobnicate 2>&1; echo "rc=$?"
} > "$OUT/rules.txt" 2>&1
# Bare environment: the bundle runs with nothing set.
env -i "$C" rules --json > "$OUT/rules_env_i.json" 2>&1; echo "env -i rc=$?" >> "$OUT/answers.txt"
rm -f "$OUT/tmp.json"
