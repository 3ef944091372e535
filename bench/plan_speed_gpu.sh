#!/usr/bin/env bash
# On the GPU machine: what planning from local wheels and the repair cost against the install it
# makes (hardlink copies of the real venv only). The four CUDA 13 provider wheels (cuDNN, NCCL,
# cuSPARSELt, NVSHMEM), packed from the pristine venv's own files and deflated as NVIDIA's are,
# are in W; the venv is broken by `pip uninstall -y nvidia-cudnn-cu13`. Then, ROUNDS rounds, each
# on fresh copies of the broken venv, side by side:
#   plan fix --find-links W                    (the folder of four wheels)
#   cudafix install W/nvidia_cudnn_cu13-*.whl --no-verify -y
#   cudafix fix --no-verify -y --find-links W
#   uv pip install --offline --no-deps --no-index of the cuDNN wheel (a cold cache)
# and once, `--timings plan fix` (the time spent reading wheels, the bytes read and inflated);
# then the same plan by range from tests/e2e/index_server.py serving the cuDNN wheel on
# 127.0.0.1: the bytes read against the wheel's size, and its objects, writes and verdict against
# the plan from the local wheel.
#   carry: .dev/release (contrib/release/make_bundle.sh .dev/release)
#   OUT=/tmp/out ROUNDS=3 [W=DIR] bash bench/plan_speed_gpu.sh   writes $OUT/plan_speed.log
set -u
cd "$(dirname "$0")/.." || exit 1
log=${OUT:-/tmp/out}/plan_speed.log
source bench/gpu_lib.sh
: > "$log"
ROUNDS=${ROUNDS:-3}
PY=/opt/torch/.venv/bin/python3
SITE=$(echo /opt/torch/.venv/lib/python3*/site-packages)
W=${W:-/tmp/pw} # packed here unless it holds the four wheels already (fix_multi_gpu.sh's /tmp/mw)
secs() { echo "${1%% s rc=*}"; }
unpack_bundle
say "== $("$C" --version 2>&1 | head -1); uv $(uv --version | cut -d' ' -f2); $(nproc) cores"
if [ "$(ls "$W"/*.whl 2> /dev/null | wc -l)" != 4 ]; then
  rm -rf "$W" && mkdir -p "$W"
  pids=()
  for d in nvidia-cudnn-cu13 nvidia-nccl-cu13 nvidia-cusparselt-cu13 nvidia-nvshmem-cu13; do
    "$PY" bench/pack_dist_wheel.py "$SITE" "$d" "$W" > "/tmp/pack-$d.txt" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || say "packing failed: $(tail -3 /tmp/pack-*.txt)"; done
fi
CUDNN=$(echo "$W"/nvidia_cudnn_cu13-*.whl)
say "  W: $(ls "$W" | tr '\n' ' ')($(du -sb "$W" | cut -f1) bytes; cuDNN's $(stat -c %s "$CUDNN"))"
copy_venv /tmp/pb
(cd /tmp && /tmp/pb/bin/python3 -m pip uninstall -y -q nvidia-cudnn-cu13) >> "$log" 2>&1
say "  broken: $(torch_cudnn /tmp/pb)"
fresh() { rm -rf "$1" && cp -al /tmp/pb "$1"; }

say "== --timings plan fix --find-links W"
"$C" --timings plan fix --venv /tmp/pb --find-links "$W" -o /tmp/plan.json > /dev/null 2> /tmp/timings.txt
sed 's/^/  /' /tmp/timings.txt >> "$log"
# The plan's objects, read by ranges, against the pristine venv's files read whole here.
"$PY" - /tmp/plan.json "$SITE" >> "$log" 2>&1 << 'PY'
import json, os, struct, sys
plan, site = json.load(open(sys.argv[1])), sys.argv[2]
def dynamic(path):
    b = open(path, "rb").read()
    if b[:4] != b"\x7fELF" or b[4] != 2:
        return None
    phoff, phentsize, phnum = struct.unpack_from("<Q", b, 32)[0], *struct.unpack_from("<HH", b, 54)
    loads, dyn = [], None
    for i in range(phnum):
        t, _, off, vaddr, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", b, phoff + i * phentsize)
        if t == 1: loads.append((vaddr, off, filesz))
        if t == 2: dyn = (off, filesz)
    entries = [struct.unpack_from("<qQ", b, dyn[0] + k) for k in range(0, dyn[1], 16)]
    strtab = next(v for t, v in entries if t == 5)
    stroff = next(off + strtab - va for va, off, sz in loads if va <= strtab < va + sz)
    s = lambda o: b[stroff + o:b.index(b"\0", stroff + o)].decode()
    get = lambda tag: [s(v) for t, v in entries if t == tag]
    return {"soname": (get(14) or [None])[0], "needed": get(1), "rpath": (get(15) or [None])[0],
            "runpath": (get(29) or [None])[0]}
same = differ = 0
for st in plan["steps"]:
    for o in (st.get("wheel") or {}).get("objects", []):
        want = dynamic(os.path.join(site, o["path"]))
        got = {k: o[k] for k in ("soname", "needed", "rpath", "runpath")}
        if want == got: same += 1
        else:
            differ += 1
            print("  DIFFERS", o["path"], got, want)
print(f"  the plan's objects against the installed files read whole: {same} identical, {differ} differ")
PY

for r in $(seq "$ROUNDS"); do
  say "== round $r"
  fresh /tmp/pc
  p=$(t "$C" plan fix --venv /tmp/pc --find-links "$W" --json)
  say "  plan fix --find-links W:            $p"
  fresh /tmp/pc
  i=$(t "$C" install "$CUDNN" --no-verify -y --venv /tmp/pc)
  say "  cudafix install cuDNN --no-verify:  $i   torch: $(torch_cudnn /tmp/pc)"
  fresh /tmp/pc
  f=$(t "$C" --timings fix --no-verify -y --find-links "$W" --venv /tmp/pc)
  say "  cudafix fix --no-verify:            $f   torch: $(torch_cudnn /tmp/pc)"
  grep -E "^error|refus|ms$" /tmp/t.out | tr -s ' ' | paste -sd';' | cut -c1-900 | sed 's/^/    /' >> "$log"
  fresh /tmp/pc
  rm -rf /tmp/puvc
  u=$(t env UV_CACHE_DIR=/tmp/puvc uv pip install -q --offline --no-deps --no-index --python /tmp/pc/bin/python3 "$CUDNN")
  say "  uv pip install cuDNN (cold cache):  $u"
  say "  fix - install: $(awk -v a="$(secs "$f")" -v b="$(secs "$i")" 'BEGIN { printf "%.3f s", a - b }')"
done

say "== plan fix by range from an index on 127.0.0.1 serving the cuDNN wheel (tests/e2e/index_server.py)"
rm -rf /tmp/pidx && mkdir -p /tmp/pidx && ln "$CUDNN" /tmp/pidx/
python3 tests/e2e/index_server.py /tmp/pidx /tmp/pidx.log > /tmp/pport.txt 2> /tmp/pserver.err &
server=$!
for _ in $(seq 50); do [ -s /tmp/pport.txt ] && break; sleep 0.1; done
for r in 1 2; do
  rm -rf /tmp/pcache
  say "  plan fix --index-url: $(t env CUDAFIX_CACHE_DIR=/tmp/pcache "$C" plan fix --venv /tmp/pb --index-url "http://127.0.0.1:$(cat /tmp/pport.txt)/simple" -o /tmp/plan_range.json --json)"
done
kill "$server"
"$PY" - /tmp/plan_range.json /tmp/plan.json >> "$log" 2>&1 << 'PY'
import json, sys
ranged, whole = (json.load(open(p)) for p in sys.argv[1:3])
a = next(s for s in ranged["steps"] if s["name"] == "nvidia-cudnn-cu13")
b = next(s for s in whole["steps"] if s["name"] == "nvidia-cudnn-cu13")
r = a["wheel"].get("read") or {}
if r:
    print(f"  read {r['bytes']} of {r['of']} bytes = {100 * r['bytes'] / r['of']:.2f}% of the wheel")
print("  objects identical to the local wheel's plan:", a["wheel"]["objects"] == b["wheel"]["objects"],
      f"({len(a['wheel']['objects'])}); writes identical: {a['writes'] == b['writes']}; "
      f"after_step identical: {a['after_step'] == b['after_step']}")
PY
rm -rf /tmp/pc /tmp/puvc /tmp/pidx /tmp/pcache
cat "$log"
