#!/usr/bin/env bash
# On the GPU machine (carry .dev/release): `verify` per device and `verify --nccl` on a hardlink
# copy of the real venv, with CUDA_VISIBLE_DEVICES by index, by UUID, and naming no device.
# Writes $OUT/verify_devices_gpu.log. On a one-GPU machine --nccl says it needs two.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
log=$OUT/verify_devices_gpu.log
: > "$log"
unset VIRTUAL_ENV
rm -rf /tmp/cf && mkdir -p /tmp/cf && tar -xzf .dev/release/cudafix-*-linux-x86_64.tar.gz -C /tmp/cf --strip-components=1
C=/tmp/cf/bin/cudafix
rm -rf /tmp/v && cp -al /opt/torch/.venv /tmp/v
nvidia-smi -L >> "$log" 2>&1
ls /proc/driver/nvidia/gpus/ >> "$log" 2>&1
run() {  # run LABEL ENV... -- ARGS
  local label=$1; shift
  local s=$EPOCHREALTIME
  env "$@" > /tmp/t.out 2>&1
  local rc=$? e=$EPOCHREALTIME
  echo "== $label: rc=$rc $(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.2f s", e - s }')" >> "$log"
  grep -vE '^\s+ok +[0-9.]+ ms' /tmp/t.out | head -40 | sed 's/^/  /' >> "$log"
}
run "verify" "$C" verify --venv /tmp/v
run "verify --nccl" "$C" verify --nccl --venv /tmp/v
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
run "CUDA_VISIBLE_DEVICES=0" CUDA_VISIBLE_DEVICES=0 "$C" verify --nccl --venv /tmp/v
run "CUDA_VISIBLE_DEVICES=$uuid" CUDA_VISIBLE_DEVICES="$uuid" "$C" verify --venv /tmp/v
run "CUDA_VISIBLE_DEVICES=1 (no such device)" CUDA_VISIBLE_DEVICES=1 "$C" verify --venv /tmp/v
"$C" verify --nccl --venv /tmp/v --json > "$OUT/verify_nccl.json" 2>/dev/null
cat "$log"
