#!/usr/bin/env bash
# What `plan fix` reads by range of an index's wheel, for four layouts of its large object
# (tests/e2e/make_big_object.py: code-like .rodata, then PT_DYNAMIC, then .data): the segment near
# the end (CUDA libraries: a small .data), in the middle (gcc's layout with a large .data), early
# (a small .rodata), NCCL's (bytes that do not deflate before the segment) and cuDNN's (those, and
# 2 MB of padding between the last sections after it), one with 100 MB of zeros after its segment,
# cuDNN's runtime-compiled engines' (code before the segment, bytes that hardly deflate after it),
# six of those shapes in one wheel (cuDNN's seven large objects, read in the same rounds); then real objects
# gcc built, and a wheel of six Debian libraries. For each: the bytes read against the wheel's size, the requests the
# index saw for the plan, the seconds, the plan's peak RSS (/usr/bin/time -v), the largest range
# asked for, and what planning adds over the floor against twice that range (issue 54: at most 1). The venv is the
# e2e tests' broken one (pip's uninstall of the cu13 cuDNN deleted the cu12 dist's library).
#   [LAYOUTS="nccl gcc"] bench/range_layouts.sh [CUDAFIX (build/cudafix)]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-build/cudafix}")
fx=build/tests/fixtures/verify
tmp=$(mktemp -d)
trap 'kill "${server:-0}" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
mk() { python3 tests/e2e/make_wheel.py "$@"; }
mkdir -p "$tmp/base"
w1=$(mk "$tmp/base" nvidia-cuda-runtime-cu12 12.8.90 "nvidia/cuda_runtime/lib/libcudart.so.12=$fx/cu12/libcudart.so.12")
w2=$(mk "$tmp/base" nvidia-cudnn-cu12 9.10.2.21 "nvidia/cudnn/lib/libcudnn.so.9=$fx/cudnn/v91400/libcudnn.so.9")
w3=$(mk "$tmp/base" nvidia-cudnn-cu13 9.19.0.56 "nvidia/cudnn/lib/libcudnn.so.9=$fx/cudnn/v91900/libcudnn.so.9")
w4=$(mk "$tmp/base" torch12like 2.7.0 "torch/lib/libtorch_cuda.so=$fx/torch12/libtorch_cuda.so" \
  --requires 'nvidia-cudnn-cu12==9.10.2.21')
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/python3" -m pip install -q --no-index --no-deps "$w1" "$w2" "$w3" "$w4"
"$tmp/venv/bin/python3" -m pip uninstall -q -y nvidia-cudnn-cu13
# What planning holds before any range is read: the same plan from an index that has no wheel
# (libcurl and its TLS libraries loaded, nothing fetched), the floor the layouts' RSS is read against.
mkdir -p "$tmp/empty"
python3 tests/e2e/index_server.py "$tmp/empty" "$tmp/empty.log" >"$tmp/empty.port" 2>/dev/null &
server=$!
for _ in $(seq 50); do [ -s "$tmp/empty.port" ] && break; sleep 0.1; done
env -u VIRTUAL_ENV -u PIP_FIND_LINKS CUDAFIX_CACHE_DIR="$tmp/empty-cache" /usr/bin/time -v "$bin" plan fix --json \
  --venv "$tmp/venv" --ld-so-cache /dev/null --ld-library-path '' \
  --index-url "http://127.0.0.1:$(cat "$tmp/empty.port")/simple" >/dev/null 2>"$tmp/empty-time" || true
kill "$server"
echo "planning from an index that has no wheel (nothing read by range): peak RSS" \
  "$(($(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tmp/empty-time") / 1024)) MB"
floor_kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tmp/empty-time")
printf '%-8s %10s %10s %8s %9s %6s %8s %11s %9s\n' layout read wheel fraction requests secs "RSS MB" "largest KB" "over/2x"
sys=/usr/lib/x86_64-linux-gnu
lib=nvidia/cudnn/lib
# Each layout's members, ARCNAME=SOURCE (the big objects made here), of a wheel of
# nvidia-cudnn-cu12, which the venv wants.
members() {
  case "$1" in
  end | middle | early | nccl | cudnn | zeros | rtc)
    local sizes
    case "$1" in  # RODATA_MB DATA_MB [--random MB]
    end) sizes="24 0.5" ;;
    middle) sizes="12 12" ;;
    early) sizes="0.5 24" ;;
    # NCCL 2.28's shape, an eighth of its size: 24 MB that do not deflate (its fatbins) before
    # the segment, 3.5 MB that deflate to a third after it (its debug sections).
    nccl) sizes=${NCCL_SIZES:-"2 3.5 --random 24"} ;;
    # cuDNN 9.19's precompiled engines, an eighth of their size: fatbins that do not deflate
    # before the segment, and after it a small .data and 2 MB of zeros that belong to no section
    # before the last one (2.3 MB after the segment, 124 KB of it deflated).
    cudnn) sizes=${CUDNN_SIZES:-"7 0.02 --random 22 --padded 0.3"} ;;
    # cuDNN 9.19's runtime-compiled engines, about half their size: code before the segment (0.42
    # there), 9 MB that hardly deflate after it (its .lrodata, 0.88), a last section that does
    # (the window at the end measures it): both estimates lie late, as there (2.9 MB).
    rtc) sizes="8 0.02 --random-after 9 --padded 0.5" ;;
    # 100 MB of zeros after .data (a zero-initialized array kept in the file): each window at
    # the end inflates a thousand times over, which the decodes scan as they stream, never hold.
    zeros) sizes="4 0.1 --zeros 100" ;;
    esac
    # shellcheck disable=SC2086 # the sizes are words
    python3 tests/e2e/make_big_object.py "$dir/objects/libcudnn.so.9" libcudnn.so.9 $sizes >/dev/null
    echo "$lib/libcudnn.so.9=$dir/objects/libcudnn.so.9" ;;
  # cuDNN 9.19's wheel has seven large objects, each planned at once: six of the shapes above
  # with their segments at different depths, each read by its own windows in the same rounds.
  many)
    local i=0 sizes
    for sizes in "24 0.5" "12 12" "2 3.5 --random 24" "7 0.02 --random 22 --padded 0.3" "6 1 --random 10" "16 2"; do
      i=$((i + 1))
      # shellcheck disable=SC2086 # the sizes are words
      python3 tests/e2e/make_big_object.py "$dir/objects/libcudnn_$i.so.9" "libcudnn_$i.so.9" $sizes >/dev/null
      echo "$lib/libcudnn_$i.so.9=$dir/objects/libcudnn_$i.so.9"
    done
    echo "$lib/libcudnn.so.9=$fx/cudnn/v91400/libcudnn.so.9" ;;
  # Real objects gcc built, .dynamic after .text, .rodata and .eh_frame: z3 (23 MB, 19 MB of
  # code, .dynamic 14 KB before the end) and Python 3.11 (7.7 MB, 1.1 MB of .data after it).
  gcc) echo "$lib/libcudnn.so.9=$fx/cudnn/v91400/libcudnn.so.9 $lib/libz3.so.4=$sys/libz3.so.4" \
    "$lib/libpython3.11.so.1.0=$sys/libpython3.11.so.1.0" ;;
  # Common Debian libraries, 0.7 to 4.7 MB each (issue 54's test wheel read 74%, then 10%).
  debian)
    echo "$lib/libcudnn.so.9=$fx/cudnn/v91400/libcudnn.so.9"
    for l in libcurl.so.4 libarchive.so.13 libssl.so.3 libxml2.so.2 libcrypto.so.3 libstdc++.so.6; do
      echo "$lib/$l=$sys/$l"
    done ;;
  esac
}
for name in ${LAYOUTS:-end middle early nccl cudnn zeros rtc many gcc debian}; do
  dir="$tmp/$name"
  mkdir -p "$dir/objects"
  wheel=$(mk "$dir" nvidia-cudnn-cu12 9.10.2.21 $(members "$name") --deflate)
  rm -rf "$dir/objects"
  python3 tests/e2e/index_server.py "$dir" "$dir/log.jsonl" >"$dir/port" 2>/dev/null &
  server=$!
  for _ in $(seq 50); do [ -s "$dir/port" ] && break; sleep 0.1; done
  start=$(date +%s.%N)
  env -u VIRTUAL_ENV -u PIP_FIND_LINKS CUDAFIX_CACHE_DIR="$dir/cache" /usr/bin/time -v "$bin" plan fix --json \
    --venv "$tmp/venv" --ld-so-cache /dev/null --ld-library-path '' --index-url "http://127.0.0.1:$(cat "$dir/port")/simple" \
    >"$dir/plan.json" 2>"$dir/time" || true
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  kill "$server"
  python3 - "$name" "$dir/plan.json" "$dir/log.jsonl" "$dir/time" "$secs" "$floor_kb" <<'EOF'
import json, re, sys
name, plan, log, timing, secs, floor_kb = sys.argv[1:]
w = json.load(open(plan))["steps"][0]["wheel"] or {}
# No read by range: the wheel downloaded whole (its ranges would have fetched over half of it).
r = w.get("read") or {"bytes": 0, "of": 1}
requests = [json.loads(line) for line in open(log)]
requests = [q for q in requests if q["path"].startswith("/files/")]
# The largest range asked for (ranges of one round close together are one request): the largest
# window or more.
largest = max((int(b) - int(a) + 1 for a, b in (q["range"][6:].split("-") for q in requests if q["range"]) if a), default=0)
rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(timing).read()).group(1))
# The memory planning adds over the floor, against twice the largest window (issue 54's bound: at most 1).
over = (rss_kb - int(floor_kb)) / (2 * largest / 1024) if largest else float("nan")
fraction = f"{100 * r['bytes'] / r['of']:>7.2f}%" if w.get("read") else "   whole"
print(f"{name:<8} {r['bytes']:>10} {r['of']:>10} {fraction} {len(requests):>9} {float(secs):>6.1f} "
      f"{rss_kb // 1024:>8} {largest // 1024:>11} {over:>9.2f}")
EOF
done
