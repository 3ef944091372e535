#!/usr/bin/env bash
# On the GPU machine: range planning (issue 54) of the real NVIDIA wheels, each packed back from a
# hardlink copy of the real CUDA 13 torch venv (bench/pack_dist_wheel.py) and served by the tests'
# index server on 127.0.0.1 after pip uninstalled it from a copy: `plan fix` by range, the bytes it
# read against the wheel's size, the requests the server saw, the seconds and the plan's peak RSS
# (getrusage), with the same plan's from an index that has no wheel (the floor). Each wheel's objects are profiled
# (bench/elf_deflate_profile.py: where their sections lie deflated), and the server's log and the
# profiles are kept under $OUT for reading by hand.
#   carry: .dev/release (BUILD=build-gpu contrib/release/make_bundle.sh .dev/release)
# WRAP: a command each plan runs under (WRAP="taskset -c 0": one core; WRAP="env
# MALLOC_ARENA_MAX=1": one malloc arena), to tell what of the RSS the threads hold.
# BASELINE: another cudafix binary built relocatable (bench/make_relocatable.sh), whose plans of
# the same wheels, venv and server are measured in the same run, a row each after this build's.
#   OUT=/tmp/out [NO_PROFILE=1] [REUSE_WHEELS=1] [BASELINE=.dev/baseline/cudafix] bash bench/range_real_gpu.sh [DIST...]
#   writes $OUT/range_real_gpu.log
set -u
cd "$(dirname "$0")/.." || exit 1
source bench/gpu_lib.sh
gpu_start range_real_gpu
dists=("$@")
[ ${#dists[@]} -gt 0 ] || dists=(nvidia-nccl-cu13 nvidia-cudnn-cu13)
site=$(ls -d /opt/torch/.venv/lib/python3*/site-packages)
# REUSE_WHEELS=1: the wheels an earlier run in this machine packed are planned again (packing
# cuDNN's takes a minute of the device's time).
[ -n "${REUSE_WHEELS:-}" ] || rm -rf /tmp/wheels
mkdir -p /tmp/wheels
for dist in "${dists[@]}"; do
  ls /tmp/wheels/"$(echo "$dist" | tr - _)"-*.whl > /dev/null 2>&1 ||
    "$py" bench/pack_dist_wheel.py "$site" "$dist" /tmp/wheels >> "$log" 2>&1 &
done
wait
say "== $("$C" --version 2>&1 | head -1); $(nproc) cores"
printf '%-26s %12s %12s %8s %9s %7s %7s %7s\n' dist read wheel fraction requests secs "RSS MB" "floor" >> "$log"
for dist in "${dists[@]}"; do
  wheel=$(ls /tmp/wheels/"$(echo "$dist" | tr - _)"-*.whl)
  copy_venv /tmp/r
  rm -rf /tmp/idx && mkdir -p /tmp/idx && ln "$wheel" /tmp/idx/
  /tmp/r/bin/python3 -m pip uninstall -y -q "$dist" >> "$log" 2>&1
  # The plan's peak RSS, first from an index that has no wheel (what planning holds before any
  # range is read: the floor), then from the one that has it.
  plan_from() {
    rm -f /tmp/port "$2"
    "$py" tests/e2e/index_server.py "$1" "$2" > /tmp/port 2>/dev/null &
    server=$!
    for _ in $(seq 50); do [ -s /tmp/port ] && break; sleep 0.1; done
    rm -rf /tmp/cfcache
    # shellcheck disable=SC2086 # WRAP is words
    CUDAFIX_CACHE_DIR=/tmp/cfcache timeout 300 "$py" -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, file=sys.stderr)' \
      ${WRAP:-} "$3" plan fix --json --venv /tmp/r --index-url "http://127.0.0.1:$(cat /tmp/port)/simple" > /tmp/plan.json 2> /tmp/rss
    kill $server
  }
  rm -rf /tmp/empty && mkdir -p /tmp/empty
  bins=("$C")
  [ -z "${BASELINE:-}" ] || { cp "$BASELINE" /tmp/cf/bin/cudafix-baseline && bins+=(/tmp/cf/bin/cudafix-baseline); }
  for bin in "${bins[@]}"; do
    plan_from /tmp/empty /tmp/empty.log "$bin"
    floor=$(tail -1 /tmp/rss)
    s=$EPOCHREALTIME
    plan_from /tmp/idx /tmp/idx.log "$bin"
    secs=$(secs_since "$s")
    row=$dist
    [ "$bin" = "$C" ] || row="$dist(base)"
    cp /tmp/idx.log "$OUT/$row.requests.jsonl"
    "$py" - /tmp/plan.json "$dist" "$(grep -c '"range": "' /tmp/idx.log)" "$secs" "$(tail -1 /tmp/rss)" "$floor" "$row" >> "$log" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for s in d["steps"]:
    r = (s["wheel"] or {}).get("read")
    if s["name"] == sys.argv[2] and r:
        print(f"{sys.argv[7]:<26} {r['bytes']:>12} {r['of']:>12} {100*r['bytes']/r['of']:>7.2f}% {sys.argv[3]:>9} {sys.argv[4]:>7} {sys.argv[5]:>7} {sys.argv[6]:>7}")
        break
else:
    print(sys.argv[7], "no ranged step:", [(s["action"], s["name"]) for s in d["steps"]], d.get("source_problems"))
PY
  done
  # Each object of the wheel, profiled (the members over 1 MiB: the ones read by range), unless
  # NO_PROFILE is set.
  [ -n "${NO_PROFILE:-}" ] || "$py" - "$wheel" "$OUT/$dist.profile.txt" <<'PY'
import os, subprocess, sys, tempfile, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "w") as out, tempfile.TemporaryDirectory() as tmp:
    for i in z.infolist():
        if ".so" in i.filename and i.file_size > (1 << 20):
            out.write(f"member {i.filename}: offset {i.header_offset} compressed {i.compress_size} size {i.file_size}\n")
            out.flush()
            path = z.extract(i, tmp)
            subprocess.run([sys.executable, "bench/elf_deflate_profile.py", path], stdout=out, check=False)
            os.unlink(path)
PY
done
