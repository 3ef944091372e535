#!/usr/bin/env bash
# `cudafix plan remove nvidia-cudnn-cu13` on the GPU machine's real venv (a hardlink copy), then
# the real `pip uninstall` with the copy's own interpreter, then the real loader: which files
# `import torch` and a cuDNN convolution map (/proc/self/maps), before and after. Results go to $OUT.
#   bench/make_relocatable.sh && (device, carrying .dev/cudafix-dist) bash bench/plan_remove_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
DIST=${DIST:-nvidia-cudnn-cu13}
copy_venv /tmp/v
log=$OUT/plan_remove.txt
: > "$log"

# The files a process maps after import torch and one cuDNN convolution on the GPU.
maps() {
  (cd /tmp && /tmp/v/bin/python3 - <<'EOF'
import json, torch
result = {}
try:
    x = torch.randn(1, 3, 16, 16, device="cuda")
    w = torch.randn(4, 3, 3, 3, device="cuda")
    torch.nn.functional.conv2d(x, w)
    torch.cuda.synchronize()
    result["cudnn_version"] = torch.backends.cudnn.version()
except Exception as e:  # what the user would see; the mapped files are the evidence either way
    result["error"] = f"{type(e).__name__}: {e}"
result["maps"] = sorted({l.split()[-1] for l in open("/proc/self/maps") if "/" in l and ".so" in l})
print(json.dumps(result))
EOF
  )
}
tree() { find /tmp/v \( -type d -printf '%p/\n' \) -o \( ! -type d -printf '%p\n' \) | sort; }

maps > "$OUT/maps_before.json" 2>> "$log"
echo "maps before rc=$?" >> "$log"
tree > "$OUT/tree_before.txt"
for i in 1 2 3; do
  /usr/bin/time -f "plan remove: %e s" "$C" plan remove "$DIST" --venv /tmp/v --json > "$OUT/plan.json" 2>> "$log"
  echo "plan rc=$?" >> "$log"
  /usr/bin/time -f "doctor: %e s" "$C" doctor --venv /tmp/v --json > /dev/null 2>> "$log"
done
"$C" plan remove "$DIST" --venv /tmp/v --color never -v > "$OUT/plan_text.txt" 2>&1
"$C" --timings plan remove "$DIST" --venv /tmp/v > /dev/null 2>> "$log"
(cd /tmp && /tmp/v/bin/python3 -m pip uninstall -y "$DIST") >> "$log" 2>&1
echo "pip uninstall rc=$?" >> "$log"
tree > "$OUT/tree_after.txt"
maps > "$OUT/maps_after.json" 2>> "$OUT/maps_after.err"
echo "maps after rc=$?" >> "$log"
"$C" doctor --venv /tmp/v --json > "$OUT/doctor_after.json" 2>> "$log"
"$C" verify --venv /tmp/v --json > "$OUT/verify_after.json" 2>> "$log"

python3 - "$OUT" >> "$log" 2>&1 <<'EOF'
import json, sys, os
out = sys.argv[1]
plan = json.load(open(f"{out}/plan.json"))
site = [l for l in open(f"{out}/tree_before.txt").read().split() if l.endswith("/site-packages/")][0].rstrip("/")
before = set(open(f"{out}/tree_before.txt").read().split("\n")) - {""}
after = set(open(f"{out}/tree_after.txt").read().split("\n")) - {""}
removed = before - after
predicted = {p if p.startswith("/") else f"{site}/{p}" for p in plan["pip_would_delete"]}
print("pip_would_delete:", len(predicted), "removed by pip:", len(removed), "equal:", predicted == removed)
for p in sorted(predicted - removed)[:20]: print("  predicted, not removed:", p)
for p in sorted(removed - predicted)[:20]: print("  removed, not predicted:", p)
print("safe:", plan["safe"], "safe_with_cudafix:", plan["safe_with_cudafix"])
for b in plan["breaks"]:
    print("break:", b["consumer"], b["soname"], b["before"], "->", b["after"], b["after_version"])
print("requirement_breaks:", plan["requirement_breaks"])
print("left_metadata_only:", plan["left_metadata_only"])
mb = json.load(open(f"{out}/maps_before.json"))
print("before: cudnn", mb.get("cudnn_version"), mb.get("error"), [m for m in mb["maps"] if "cudnn" in m])
try:
    ma = json.load(open(f"{out}/maps_after.json"))
    print("after: cudnn", ma.get("cudnn_version"), ma.get("error"), [m for m in ma["maps"] if "cudnn" in m])
    real = {os.path.realpath(m) for m in ma["maps"]}
    for b in plan["breaks"]:
        if b["soname"].startswith("libcudnn.so"):
            want = os.path.realpath(b["after"]) if b["after"] else None
            print("prediction for", b["consumer"], b["soname"], "->", want, "loaded:", want in real if want else "nothing predicted")
except Exception as e:
    print("after: import or cuDNN call failed:", e, open(f"{out}/maps_after.err").read()[-2000:])
EOF
cat "$log"
