#!/usr/bin/env bash
# Memory of `cudafix install` on a wheel whose metadata members (WHEEL, METADATA, RECORD,
# entry_points.txt) are 128 MB each, deflated about 100:1 (tests/e2e/make_wheel_big_metadata.py):
# the zip reader refuses a metadata member over 16 MiB by name before inflating it
# (installer/wheel/zip_reader.hpp, k_max_metadata), so the peak RSS stays that of a small run. Also
# pip's own install of the same wheel, for comparison. Prints each command's exit status, its
# message and its maximum resident set size from /usr/bin/time -v.
#   bench/wheel_memory.sh [CUDAFIX (build/cudafix)] [SIZE_MB (128)]
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/cudafix}
size=${2:-128}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
wheel=$(python3 tests/e2e/make_wheel_big_metadata.py "$tmp" "$size")
echo "wheel: $(du -h "$wheel" | cut -f1) on disk, metadata members of $size MB each"
python3 -m venv "$tmp/venv"
measure() {
  local label=$1
  shift
  /usr/bin/time -v "$@" > "$tmp/out" 2> "$tmp/time"
  local rc=$?
  local rss
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tmp/time")
  printf '%-8s exit %-3s max RSS %6d MB   %s\n' "$label" "$rc" $((rss / 1024)) \
    "$(grep -v -e '^\s' -e '^Command' "$tmp/time" "$tmp/out" | cut -d: -f2- | head -1 | cut -c1-160)"
}
measure cudafix env -u VIRTUAL_ENV "$bin" install "$wheel" -y --no-verify --venv "$tmp/venv"
measure pip "$tmp/venv/bin/python3" -m pip install -q --no-index --no-deps "$wheel"
