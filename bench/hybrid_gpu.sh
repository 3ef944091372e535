#!/usr/bin/env bash
# On the GPU machine: the real CUDA 13 torch venv (a hardlink copy) with a CUDA 12 cuDNN dist-info
# left beside it, listing the same nvidia/cudnn/lib files (its RECORD's sizes are not the files',
# as a real cu12 RECORD's would not be): doctor names the hybrid, plan remove finds no break with
# owner counting, plan fix removes the leftover. Results under $OUT.
#   bench/make_relocatable.sh && (device) bash bench/hybrid_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
copy_venv /tmp/h
site=/tmp/h/lib/python3.12/site-packages
d=$site/nvidia_cudnn_cu12-9.10.2.21.dist-info
mkdir -p "$d"
printf 'Metadata-Version: 2.1\nName: nvidia-cudnn-cu12\nVersion: 9.10.2.21\n' > "$d/METADATA"
echo pip > "$d/INSTALLER"
grep '^nvidia/cudnn/lib/' "$site"/nvidia_cudnn_cu13-*.dist-info/RECORD |
  awk -F, '{printf "%s,sha256=AAAA,%d\n", $1, $3 + 1}' > "$d/RECORD"
printf 'nvidia_cudnn_cu12-9.10.2.21.dist-info/METADATA,,\nnvidia_cudnn_cu12-9.10.2.21.dist-info/RECORD,,\n' >> "$d/RECORD"
{
  echo "== doctor"; "$C" doctor --venv /tmp/h --color never; echo "rc=$?"
  echo "== plan remove nvidia-cudnn-cu12"; "$C" plan remove nvidia-cudnn-cu12 --venv /tmp/h --color never; echo "rc=$?"
  echo "== plan fix"; "$C" plan fix --venv /tmp/h --color never; echo "rc=$?"
} > "$OUT/hybrid.txt" 2>&1
"$C" plan remove nvidia-cudnn-cu12 --venv /tmp/h --json > "$OUT/hybrid_plan_remove.json" 2>&1
"$C" plan fix --venv /tmp/h --json > "$OUT/hybrid_plan_fix.json" 2>&1
# The healthy venv: no hybrid, plan fix has nothing to do.
"$C" doctor --venv /tmp/v --color never > "$OUT/healthy.txt" 2>&1 || true
