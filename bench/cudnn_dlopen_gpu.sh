#!/usr/bin/env bash
# On the GPU machine: which cuDNN library dlopens cuBLAS(Lt) and NVRTC, and by which soname, as
# the facts behind knowledge.toml's [dlopen.*] tables. Two sources, on a hardlink copy:
#   - the names each libcudnn*.so.9 carries as strings (what it could dlopen);
#   - glibc's own account (LD_DEBUG=files: "dynamically loaded by") while torch runs cuDNN
#     convolutions, an LSTM and cuDNN attention (the runtime-compiled engines use NVRTC).
# Then `cudafix doctor` on the same copy, to show the tables resolve there. Results go to $OUT.
#   bench/make_relocatable.sh && (device, carrying .dev/cudafix-dist) bash bench/cudnn_dlopen_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
copy_venv /tmp/v
site=$(echo /tmp/v/lib/python3*/site-packages)

/tmp/v/bin/python3 - "$site" > "$OUT/cudnn_strings.txt" 2>&1 <<'PY'
import glob, os, re, sys
site = sys.argv[1]
pattern = re.compile(rb"lib(cublas|cublasLt|nvrtc|nvrtc-builtins|cudart|cuda)\.so[.0-9]*")
for lib in sorted(glob.glob(os.path.join(site, "nvidia/cudnn/lib/libcudnn*.so*"))):
    with open(lib, "rb") as f:
        names = sorted({m.group(0).decode() for m in pattern.finditer(f.read())})
    print(os.path.basename(lib), names)
PY

cat > /tmp/cudnn_work.py <<'PY'
import torch
print("cudnn", torch.backends.cudnn.version(), "torch", torch.__version__, "cuda", torch.version.cuda)
torch.backends.cudnn.benchmark = True
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    x = torch.randn(8, 16, 32, 32, device="cuda", dtype=dtype)
    w = torch.randn(32, 16, 3, 3, device="cuda", dtype=dtype)
    torch.nn.functional.conv2d(x, w, padding=1).sum()
lstm = torch.nn.LSTM(32, 64, num_layers=2).cuda()
lstm(torch.randn(5, 3, 32, device="cuda"))
try:
    from torch.nn.attention import sdpa_kernel, SDPBackend
    q = torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    print("cudnn attention ran")
except Exception as e:
    print("cudnn attention:", type(e).__name__, e)
torch.cuda.synchronize()
PY
LD_DEBUG=files LD_DEBUG_OUTPUT=/tmp/lddebug /tmp/v/bin/python3 /tmp/cudnn_work.py > "$OUT/cudnn_work.txt" 2>&1
echo "rc=$?" >> "$OUT/cudnn_work.txt"
cat /tmp/lddebug.* | grep -E "file=lib(cudnn|cublas|nvrtc)[^ ]*.*dynamically loaded by" \
  | sed -E 's/^ *[0-9]+: *//; s/ \[[0-9]+\]//g; s/ +/ /g' | sort -u > "$OUT/cudnn_dlopen.txt"
# Who loaded cuBLAS and NVRTC: torch, by full path, before cuDNN asks for them by soname (so
# glibc shows no load of them by cuDNN; the names cuDNN carries are the evidence for those).
cat /tmp/lddebug.* | grep -E "file=[^ ]*lib(cublas|nvrtc)[^ ]*;" | sed -E 's/^ *[0-9]+: *//' | sort -u \
  > "$OUT/cublas_nvrtc_files.txt"
rm -f /tmp/lddebug.*

"$C" doctor --venv /tmp/v --color never > "$OUT/doctor.txt" 2>&1; echo "rc=$?" >> "$OUT/doctor.txt"
"$C" doctor --venv /tmp/v --json > "$OUT/doctor.json" 2>/dev/null
for i in 1 2 3; do "$C" doctor --venv /tmp/v --timings > /dev/null 2>> "$OUT/doctor_timings.txt"; done
for i in 1 2 3; do "$C" scan --venv /tmp/v --json --timings > /dev/null 2>> "$OUT/scan_timings.txt"; done
nproc > "$OUT/machine.txt"
