#!/usr/bin/env bash
# Installing several wheels at once, as fix installs the providers one cleanup removed: four
# wheels of code-like bytes (96, 48, 40 and 24 MiB objects, six small ones beside each, deflated),
# in ROUNDS rounds side by side on fresh venvs: one `cudafix install --no-verify` of the four,
# the same by `C=PATH` (another cudafix, an earlier commit's) where given, pip's
# `install --no-deps --no-index` of the four, and uv's (a cold cache) where uv is installed.
#   bench/install_several_local.sh [BUILD]     (BUILD: the build folder, default build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/w" "$T/src"
python3 - "$T/src" << 'PY'
import random, sys
r = random.Random(7)
words = [bytes(r.choice(b"abcdefghijklmnop") for _ in range(r.randint(2, 9))) for _ in range(4096)]
for k, mb in enumerate([96, 48, 40, 24]):
    out, n = [], 0
    while n < mb << 20:
        x = r.choice(words)
        out.append(x)
        n += len(x) + 1
    open(f"{sys.argv[1]}/big{k}", "wb").write(b" ".join(out)[: mb << 20])
    for j in range(6):
        open(f"{sys.argv[1]}/small{k}_{j}", "wb").write(b" ".join(out[j * 1000 : (j + 1) * 1000]) * 40)
PY
for k in 0 1 2 3; do
  args=("prov$k" 1.0 "prov$k/lib/libbig$k.so=$T/src/big$k")
  for j in 0 1 2 3 4 5; do args+=("prov$k/lib/libs$j.so=$T/src/small${k}_$j"); done
  python3 tests/e2e/make_wheel.py "$T/w" "${args[@]}" --deflate > /dev/null
done
echo "wheels: $(du -cb "$T"/w/*.whl | tail -1 | cut -f1) bytes, $(nproc) cores"
timed() { # timed LABEL CMD...: a fresh venv, then CMD's wall time
  rm -rf "$T/v" && python3 -m venv "$T/v" > /dev/null
  local s=$EPOCHREALTIME
  "${@:2}" > "$T/out" 2>&1 || { echo "$1 failed:"; cat "$T/out"; return 1; }
  awk -v l="$1" -v s="$s" -v e="$EPOCHREALTIME" 'BEGIN { printf "  %-22s %.3f s\n", l, e - s }'
}
for round in $(seq "$ROUNDS"); do
  echo "round $round"
  timed "cudafix install" "$BUILD/cudafix" install --venv "$T/v" -y --no-verify "$T"/w/*.whl
  [ -z "${C:-}" ] || timed "cudafix install (C)" "$C" install --venv "$T/v" -y --no-verify "$T"/w/*.whl
  timed "pip install" "$T/v/bin/python3" -m pip install -q --no-deps --no-index "$T"/w/*.whl
  if command -v uv > /dev/null; then
    timed "uv pip install (cold)" env UV_CACHE_DIR="$T/uvc$round" uv pip install -q --offline --no-deps --no-index \
      --python "$T/v/bin/python3" "$T"/w/*.whl
  fi
done
