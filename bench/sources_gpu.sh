#!/usr/bin/env bash
# On the GPU machine: where wheels come from, on the real CUDA 13 torch venv (hardlink copies
# only). The nvidia-cudnn-cu13 wheel packed from the venv's own files is served by the tests'
# index server on 127.0.0.1; then the seed case (`pip uninstall nvidia-cudnn-cu13`) is planned
# from the index by range (bytes read against the wheel's size, and the objects against a
# plan from the whole wheel), applied with the live verification and rolled back; the download
# is timed against `pip download` from the same server; and pip 24's cache (http-v2) and uv
# 0.11's (wheels-v6, archive-v0), each filled from that server, are used with --offline, the
# server stopped. Results under $OUT.
#   bench/make_relocatable.sh && (device, carrying .dev/cudafix-dist) bash bench/sources_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
log=$OUT/sources.txt
: > "$log"
export CUDAFIX_CACHE_DIR=/tmp/cfcache
rm -rf /tmp/cfcache /tmp/pipcache /tmp/uvc /tmp/wheels /tmp/dl
copy_venv /tmp/v
site=$(echo /tmp/v/lib/python3*/site-packages)
/tmp/v/bin/python3 bench/pack_cudnn_wheel.py "$site" /tmp/wheels >> "$log" 2>&1
W=$(ls /tmp/wheels/*.whl)
unset PIP_FIND_LINKS PIP_INDEX_URL UV_INDEX_URL
start_server() {  # start_server LOG ARGS... -> $PORT, $SERVER
  rm -f /tmp/port.txt
  python3 tests/e2e/index_server.py /tmp/wheels "$1" "${@:2}" > /tmp/port.txt 2>/tmp/server.err &
  SERVER=$!
  for _ in $(seq 50); do [ -s /tmp/port.txt ] && break; sleep 0.1; done
  PORT=$(cat /tmp/port.txt)
}
t() {
  local s=$EPOCHREALTIME
  "$@" > /tmp/t.out 2>&1
  local rc=$? e=$EPOCHREALTIME
  awk -v s="$s" -v e="$e" -v rc="$rc" 'BEGIN { printf "%.3f s rc=%d", e - s, rc }'
}
torch_cudnn() { (cd /tmp && "$1/bin/python3" -c "import torch; x=torch.randn(1,3,16,16,device='cuda'); y=torch.nn.functional.conv2d(x, torch.randn(4,3,3,3,device='cuda')); torch.cuda.synchronize(); print('cudnn', torch.backends.cudnn.version())" 2>&1 | tail -1); }
listing() { (cd "$1" && find . -path ./.cudafix -prune -o -path ./.lock -prune -o -printf '%p %i %s %m %l\n' | sort); }

start_server /tmp/idx.log
echo "== index on 127.0.0.1:$PORT serving $(basename "$W") ($(stat -c %s "$W") bytes)" >> "$log"
/tmp/v/bin/python3 -m pip uninstall -y -q nvidia-cudnn-cu13 >> "$log" 2>&1
echo "after pip uninstall: $(torch_cudnn /tmp/v)" >> "$log"
"$C" doctor --venv /tmp/v --color never 2>&1 | grep -E "error|metadata" | head -4 >> "$log"

echo "== plan by range (3 runs, cold wheel cache each)" >> "$log"
for i in 1 2 3; do
  rm -rf /tmp/cfcache
  echo "  plan fix --index-url: $(t "$C" plan fix --venv /tmp/v --index-url "http://127.0.0.1:$PORT/simple" -o /tmp/plan.json --json)" >> "$log"
  grep -m2 "error" /tmp/t.out >> "$log"
done
python3 - /tmp/plan.json >> "$log" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for s in d["steps"]:
    w = s["wheel"] or {}
    r = w.get("read") or {}
    print(f"  step {s['action']} {s['name']} {s['version']}: source {w.get('source')}")
    if r:
        print(f"  read {r['bytes']} of {r['of']} bytes = {100 * r['bytes'] / r['of']:.2f}%; objects {len(w['objects'])}; ok {s['after_step']['ok']}")
print("  source_problems:", d["source_problems"])
PY
"$C" plan fix --venv /tmp/v --find-links /tmp/wheels --json > /tmp/plan_whole.json 2>/dev/null
python3 - /tmp/plan.json /tmp/plan_whole.json >> "$log" <<'PY'
import json, sys
a, b = (json.load(open(p))["steps"][0] for p in sys.argv[1:3])
print("  objects by range == objects of the whole wheel:", a["wheel"]["objects"] == b["wheel"]["objects"],
      f"({len(a['wheel']['objects'])} objects)")
print("  writes equal:", a["writes"] == b["writes"], " after_step equal:", a["after_step"] == b["after_step"])
PY
echo "  range requests: $(grep -c '"range": "' /tmp/idx.log), whole-file requests: $(grep '/files/' /tmp/idx.log | grep -c '"range": null')" >> "$log"

echo "== download of the same wheel from the same server (3 runs)" >> "$log"
MAIN_PORT=$PORT MAIN_SERVER=$SERVER
start_server /tmp/idx2.log --fault no-range
for i in 1 2 3; do
  rm -rf /tmp/cfcache /tmp/dl /tmp/pipdl
  echo "  cudafix (whole, via a server that ignores Range): $(t "$C" plan fix --venv /tmp/v --index-url "http://127.0.0.1:$PORT/simple" --json)" >> "$log"
  echo "  pip download --no-deps:                           $(t /tmp/v/bin/python3 -m pip download -q --no-deps --no-cache-dir -d /tmp/pipdl --index-url "http://127.0.0.1:$PORT/simple" nvidia-cudnn-cu13)" >> "$log"
done
kill $SERVER; PORT=$MAIN_PORT SERVER=$MAIN_SERVER

echo "== apply the range plan with the live verification, then rollback" >> "$log"
listing /tmp/v > /tmp/broken.txt
rm -rf /tmp/cfcache
echo "  apply: $(t "$C" apply /tmp/plan.json -y --venv /tmp/v --index-url "http://127.0.0.1:$PORT/simple")" >> "$log"
sed 's/^/    /' /tmp/t.out | tail -4 >> "$log"
echo "  torch after apply: $(torch_cudnn /tmp/v)" >> "$log"
echo "  rollback: $(t "$C" rollback -y --venv /tmp/v)" >> "$log"
listing /tmp/v > /tmp/rolled.txt
if diff -q /tmp/broken.txt /tmp/rolled.txt > /dev/null; then echo "  listing after rollback: IDENTICAL to the broken state ($(wc -l < /tmp/broken.txt) paths)" >> "$log"; else echo "  listing after rollback: DIFFERS" >> "$log"; diff /tmp/broken.txt /tmp/rolled.txt | head >> "$log"; fi

echo "== pip $(/tmp/v/bin/python3 -m pip --version | cut -d' ' -f2) cache, filled from the server" >> "$log"
/tmp/v/bin/python3 -m pip download -q --no-deps -d /tmp/dl --cache-dir /tmp/pipcache --trusted-host 127.0.0.1 --index-url "http://127.0.0.1:$PORT/simple" nvidia-cudnn-cu13 >> "$log" 2>&1
echo "  layout: $(cd /tmp/pipcache && find . -type f | sed 's|/[0-9a-f]\{20,\}|/<sha224>|' | sort | uniq -c | head -5 | tr '\n' ';')" >> "$log"
echo "== uv $(uv --version | cut -d' ' -f2) cache, filled from the server" >> "$log"
uv venv -q /tmp/u --python /opt/torch/.venv/bin/python3 >> "$log" 2>&1
UV_CACHE_DIR=/tmp/uvc uv pip install -q --no-deps --python /tmp/u/bin/python3 --index-url "http://127.0.0.1:$PORT/simple" nvidia-cudnn-cu13 >> "$log" 2>&1
echo "  uv rc=$?; wheels-v6 entries:" >> "$log"
(cd /tmp/uvc && find wheels-v* -maxdepth 4 | head -12 | sed 's/^/    /') >> "$log"
for e in /tmp/uvc/wheels-v6/*/*/*/*; do [ -L "$e" ] && echo "    $e -> $(readlink "$e")" >> "$log"; done
kill $SERVER
echo "== offline, the server stopped" >> "$log"
for which in pip uv; do
  if [ $which = pip ]; then envs="PIP_CACHE_DIR=/tmp/pipcache UV_CACHE_DIR=/nonexistent"; else envs="PIP_CACHE_DIR=/nonexistent UV_CACHE_DIR=/tmp/uvc"; fi
  rm -rf /tmp/cfcache
  echo "  $which: plan fix --offline: $(t env $envs "$C" plan fix --venv /tmp/v --offline -o /tmp/plan_$which.json --json)" >> "$log"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); s=d['steps'][0]; print('    ', s['action'], s['name'], 'from', (s['wheel'] or {}).get('source'), d['source_problems'])" /tmp/plan_$which.json >> "$log" 2>&1
  echo "  $which: apply --offline: $(t env $envs "$C" apply /tmp/plan_$which.json -y --offline --venv /tmp/v)" >> "$log"
  tail -2 /tmp/t.out | sed 's/^/    /' >> "$log"
  echo "    torch: $(torch_cudnn /tmp/v)" >> "$log"
  echo "  rollback: $(t "$C" rollback -y --venv /tmp/v)" >> "$log"
done
listing /tmp/v > /tmp/rolled2.txt
if diff -q /tmp/broken.txt /tmp/rolled2.txt > /dev/null; then echo "  listing after both rollbacks: IDENTICAL to the broken state" >> "$log"; else echo "  listing after rollbacks: DIFFERS" >> "$log"; fi
cat "$log"
