#!/usr/bin/env bash
# `cudafix plan fix` on the GPU machine's real venv (hardlink copies only): the healthy venv;
# then a real wheel of nvidia-cudnn-cu13 packed from the venv's own files (stored, as pip would
# unpack it), a real `pip uninstall nvidia-cudnn-cu13`, and the repair plan with and without that
# wheel; then bench/plan_bench.py on another copy. Results go to $OUT.
#   bench/make_relocatable.sh && (device, carrying .dev/cudafix-dist) bash bench/plan_fix_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
rm -rf /tmp/wheels
copy_venv /tmp/v
copy_venv /tmp/v2
log=$OUT/plan_fix.txt
: > "$log"
site=$(echo /tmp/v/lib/python3*/site-packages)
echo "== healthy" >> "$log"
/usr/bin/time -f "plan fix: %e s" "$C" plan fix --venv /tmp/v --color never >> "$log" 2>&1
echo "rc=$?" >> "$log"
# A real wheel from the installed files: RECORD's rows, stored uncompressed.
/tmp/v/bin/python3 - "$site" /tmp/wheels >> "$log" 2>&1 <<'PY'
import csv, glob, os, sys, zipfile
site, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
info = glob.glob(os.path.join(site, "nvidia_cudnn_cu13-*.dist-info"))[0]
version = os.path.basename(info)[len("nvidia_cudnn_cu13-"):-len(".dist-info")]
path = os.path.join(out, f"nvidia_cudnn_cu13-{version}-py3-none-manylinux_2_27_x86_64.whl")
with open(os.path.join(info, "RECORD"), newline="") as f, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
    for row in csv.reader(f):
        p = os.path.normpath(os.path.join(site, row[0]))
        if os.path.isfile(p) and "__pycache__" not in row[0] and not row[0].endswith(("INSTALLER", "REQUESTED", "direct_url.json")):
            z.write(p, row[0])
print("wheel:", path, os.path.getsize(path))
PY
(cd /tmp && /tmp/v/bin/python3 -m pip uninstall -y nvidia-cudnn-cu13) >> "$log" 2>&1
echo "== after pip uninstall nvidia-cudnn-cu13, no wheel" >> "$log"
"$C" plan fix --venv /tmp/v --color never >> "$log" 2>&1
echo "rc=$?" >> "$log"
echo "== with --find-links /tmp/wheels" >> "$log"
/usr/bin/time -f "plan fix with the wheel: %e s" "$C" plan fix --venv /tmp/v --find-links /tmp/wheels --color never -o "$OUT/plan_fix.json" >> "$log" 2>&1
echo "rc=$?" >> "$log"
"$C" --timings plan fix --venv /tmp/v --find-links /tmp/wheels > /dev/null 2>> "$log"
python3 - "$OUT/plan_fix.json" >> "$log" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for s in d["steps"]:
    print(s["action"], s["name"], s["version"], "wheel:", (s["wheel"] or {}).get("file"), "simulated:", s["simulated"],
          "ok:", s["after_step"]["ok"], "writes:", len(s["writes"]))
print("needs:", d["needs"], "remaining:", d["remaining"], "fingerprint files:", len(d["fingerprint"]["files"]))
PY
echo "== bench/plan_bench.py on a copy" >> "$log"
python3 bench/plan_bench.py --cudafix "$C" --venv /tmp/v2 >> "$log" 2>&1
cat "$log"
