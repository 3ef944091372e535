#!/usr/bin/env bash
# One batch on the GPU machine (real /opt/torch/.venv, hardlink copy only): correctness of the
# model against the real loader, and the scan benchmarks. Results go to $OUT.
#   bench/make_relocatable.sh && (device) bash bench/gpu_run.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
copy_venv /tmp/v
{
  nproc; uname -a; ldd --version | head -1; /tmp/v/bin/python3 -V; /usr/local/bin/uv --version
  "$C" --version
} > "$OUT/machine.txt" 2>&1

# The model on the real venv.
"$C" scan --venv /tmp/v --json > "$OUT/scan.json"; echo "scan rc=$?" >> "$OUT/machine.txt"
"$C" scan --venv /tmp/v --color never > "$OUT/scan.txt" 2>&1
"$C" why libcudnn.so.9 --venv /tmp/v --color never > "$OUT/why.txt" 2>&1; echo "why libcudnn rc=$?" >> "$OUT/why.txt"
"$C" why libcublas.so.13 --venv /tmp/v --color never >> "$OUT/why.txt" 2>&1
"$C" why torch/lib/libtorch_cuda.so --venv /tmp/v --color never >> "$OUT/why.txt" 2>&1

# What the real loader maps after `import torch` and a cuDNN call.
/tmp/v/bin/python3 - > "$OUT/maps.txt" 2>&1 <<'PY'
import torch
print("cudnn", torch.backends.cudnn.version())
x = torch.zeros(1, 1, 8, 8, device="cuda")
torch.nn.functional.conv2d(x, torch.zeros(1, 1, 3, 3, device="cuda"))
torch.cuda.synchronize()
seen = set()
for line in open("/proc/self/maps"):
    parts = line.split()
    if len(parts) >= 6 and ".so" in parts[5] and parts[5] not in seen:
        seen.add(parts[5])
        print(parts[5])
PY

# Benchmarks: the real venv (with uv), then the corpus at 1x, 4x, 16x.
B="/tmp/v/bin/python3 bench/scan_bench.py --cudafix $C"
$B --venv /tmp/v --uv /usr/local/bin/uv --runs 10 > "$OUT/bench_real.txt" 2>&1
$B --corpus tests/data/good_torch_cu130_venv.json.gz --scales 1 --python /tmp/v/bin/python3 --runs 10 > "$OUT/bench_corpus.txt" 2>&1
$B --corpus tests/data/good_torch_cu130_venv.json.gz --scales 4,16 --python /tmp/v/bin/python3 --runs 5 --skip-ldd >> "$OUT/bench_corpus.txt" 2>&1
echo done >> "$OUT/machine.txt"
