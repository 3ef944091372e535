#!/usr/bin/env bash
# On the GPU machine: issue 52's proof on a hardlink copy of the real CUDA 13 torch venv. The
# copy's nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9 is unlinked (the original keeps its
# file); the host's cuDNN 9.14 in ld.so.cache then answers libcudnn_graph.so.9's dlopen. doctor
# must name it before torch runs, `why` must follow the dlopen edge, verify must show what the real
# loader mapped, and `fix` from the venv's own packed wheel (bench/pack_cudnn_wheel.py, packed
# before the unlink) must bring it back so that torch runs a convolution with cuDNN 91900.
# Also: which cuDNN calls load which sub-libraries (cudnnCreate, the version checks, the backend's
# descriptors), read from /proc/self/maps in torch's process.
#   carry: .dev/release (contrib/release/make_bundle.sh .dev/release)
#   OUT=/tmp/out bash bench/dlopen_family_gpu.sh   writes $OUT/dlopen_family_gpu.log
set -u
cd "$(dirname "$0")/.." || exit 1
source bench/gpu_lib.sh
gpu_start dlopen_family_gpu
say "== $("$C" --version 2>&1 | head -1)"
command -v nvidia-smi > /dev/null && say "   $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
say "   host: $(ldconfig -p | grep -m1 'libcudnn_engines_precompiled.so.9 ')"
say "   host file: $(readlink -f "$(ldconfig -p | grep -m1 'libcudnn_engines_precompiled.so.9 ' | sed 's/.*=> //')")"
V=/tmp/v
copy_venv "$V"
site=$(ls -d $V/lib/python3*/site-packages)
rm -rf /tmp/wheels && mkdir -p /tmp/wheels
s=$EPOCHREALTIME
/opt/torch/.venv/bin/python3 bench/pack_cudnn_wheel.py "$site" /tmp/wheels >> "$log" 2>&1
say "  packed $(basename /tmp/wheels/*.whl) in $(awk -v s="$s" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.1f s", e - s }')"
E=$site/nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9
rm "$E"
say "== doctor (torch not yet run)"
"$C" doctor --venv "$V" --color never >> "$log" 2>&1
say "  rc=$?"
say "== why libcudnn_engines_precompiled.so.9"
"$C" why libcudnn_engines_precompiled.so.9 --venv "$V" --color never >> "$log" 2>&1
say "== verify"
timeout 300 "$C" verify --venv "$V" --color never >> "$log" 2>&1
say "  rc=$?"
timeout 300 "$C" verify --venv "$V" --json > "$OUT/verify_before.json" 2>&1
say "  torch before fix: $(torch_cudnn "$V")"
cat > /tmp/sublibs.py << 'PY'
import ctypes, torch
torch.cuda.init(); torch.zeros(1, device="cuda")
def maps(): return sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libcudnn' in l})
c = ctypes.CDLL("libcudnn.so.9")
print("after import", maps())
h = ctypes.c_void_p(); print("cudnnCreate", c.cudnnCreate(ctypes.byref(h)), maps())
for f in ["cudnnGraphVersionCheck", "cudnnOpsVersionCheck", "cudnnCnnVersionCheck", "cudnnAdvVersionCheck"]:
    try: print(f, getattr(c, f)(), maps())
    except AttributeError: print(f, "absent")
x = torch.randn(1, 3, 16, 16, device="cuda"); torch.nn.functional.conv2d(x, torch.randn(4, 3, 3, 3, device="cuda")); torch.cuda.synchronize()
print("after a convolution", maps())
PY
say "== which calls load which (broken copy)"
(cd /tmp && timeout 120 "$V/bin/python3" /tmp/sublibs.py >> "$log" 2>&1)
say "== fix from the packed wheel"
s=$EPOCHREALTIME
timeout 400 "$C" fix -y --find-links /tmp/wheels --venv "$V" --color never >> "$log" 2>&1
say "  rc=$? in $(awk -v s="$s" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.1f s", e - s }')"
say "  file: $(ls -la "$E" 2>&1)"
say "  same bytes as the original's: $(cmp "$E" /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9 && echo yes)"
say "== doctor after"
"$C" doctor --venv "$V" --color never >> "$log" 2>&1
say "  rc=$?"
say "== verify after"
timeout 300 "$C" verify --venv "$V" --color never >> "$log" 2>&1
say "  rc=$?"
say "  torch after fix: $(torch_cudnn "$V")"
say "== which calls load which (healthy copy)"
(cd /tmp && timeout 120 "$V/bin/python3" /tmp/sublibs.py >> "$log" 2>&1)
