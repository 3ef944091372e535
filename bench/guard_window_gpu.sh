#!/usr/bin/env bash
# On the GPU machine: issue 51's proof on a hardlink copy of the real CUDA 13 torch venv.
# `guard --allow-break -- python3 -m pip uninstall -y nvidia-cudnn-cu13` while a `cudafix install`
# of another wheel commits in guard's window (the command has ended, guard paused before it takes
# the lock again: CUDAFIX_TEST_PAUSE_AT=guard-ran). Passes when the uninstall is undone, the
# install is kept (pip lists it, history says committed, its rollback is not refused) and torch
# runs a convolution with cuDNN 91900.
#   carry: .dev/release (contrib/release/make_bundle.sh .dev/release)
#   OUT=/tmp/out bash bench/guard_window_gpu.sh   writes $OUT/guard_window_gpu.log and guard's JSON
set -u
cd "$(dirname "$0")/.." || exit 1
log=${OUT:-/tmp/out}/guard_window_gpu.log
source bench/gpu_lib.sh
: > "$log"
V=/tmp/v
fail=0
check() { # check WHAT yes|no
  if [ "$2" = yes ]; then say "  PASS $1"; else
    say "  FAIL $1"
    fail=1
  fi
}
unpack_bundle
say "== $("$C" --version 2>&1 | head -1)"
command -v nvidia-smi > /dev/null && say "   $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
copy_venv "$V"
say "  torch before: $(torch_cudnn "$V")"
# A small wheel of another project, made here (no index on this machine).
W=/tmp/window_wheels && rm -rf "$W" && mkdir -p "$W"
"$V/bin/python3" - "$W" << 'PY'
import base64, hashlib, sys, zipfile
out = sys.argv[1]
files = {"windowpkg/__init__.py": b"X = 1\n",
         "windowpkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: windowpkg\nVersion: 1.0\n",
         "windowpkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
def row(n, b):
    return "%s,sha256=%s,%d" % (n, base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode(), len(b))
record = "\n".join([row(n, b) for n, b in files.items()] + ["windowpkg-1.0.dist-info/RECORD,,"]) + "\n"
with zipfile.ZipFile(out + "/windowpkg-1.0-py3-none-any.whl", "w") as z:
    for n, b in files.items():
        z.writestr(n, b)
    z.writestr("windowpkg-1.0.dist-info/RECORD", record)
PY
rm -f /tmp/window_trace
s=$EPOCHREALTIME
(CUDAFIX_TEST_PAUSE_AT=guard-ran:6000 CUDAFIX_TEST_FAULT_TRACE=/tmp/window_trace "$C" guard --allow-break --json \
  --venv "$V" -- "$V/bin/python3" -m pip uninstall -y nvidia-cudnn-cu13 > "$OUT/guard_window.json" \
  2> "$OUT/guard_window.err"; echo $? > /tmp/window_rc) &
for _ in $(seq 600); do grep -q "mark guard-ran" /tmp/window_trace 2> /dev/null && break; sleep 0.05; done
r=$(t "$C" install -y --no-verify --venv "$V" "$W/windowpkg-1.0-py3-none-any.whl")
say "  cudafix install in the window: $r"
wait
e=$EPOCHREALTIME
rc=$(cat /tmp/window_rc)
say "  guard: rc=$rc, $(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.2f s", e - s }') (6 s of it the pause)"
verdict=$("$V/bin/python3" -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(d["verdict"], len(d["changes"]["command"]), len(d["changes"]["others"]), len(d["changes"]["overlap"]), d.get("after_probe",{}).get("cudnn_version"))' "$OUT/guard_window.json")
say "  verdict, changes (command, others, overlap), cuDNN the probe saw after the command: $verdict"
listed=$("$V/bin/python3" -m pip list --format freeze 2> /dev/null)
tc=$(torch_cudnn "$V")
say "  torch after: $tc"
hist=$("$C" history --venv "$V" 2>&1 | grep -c "install")
back=$(t "$C" rollback -y --dry-run --venv "$V")
check "guard exit 1, verdict undone" "$([ "$rc" = 1 ] && [ "${verdict%% *}" = undone ] && echo yes)"
check "nvidia-cudnn-cu13 back, windowpkg kept" \
  "$(echo "$listed" | grep -q '^nvidia-cudnn-cu13==' && echo "$listed" | grep -q '^windowpkg==1.0' && echo yes)"
check "history lists the install ($hist lines), a rollback is not refused ($back)" \
  "$([ "$hist" -ge 1 ] && [ "${back##*rc=}" = 0 ] && echo yes)"
check "torch: $tc" "$([ "$tc" = "cudnn 91900" ] && echo yes)"
exit $fail
