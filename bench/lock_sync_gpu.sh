#!/usr/bin/env bash
# On the GPU machine: issue 56's proof, on
# hardlink copies of the real CUDA 13 torch venv.
# 1. every dist of the venv packed back into a wheel (bench/pack_dist_wheel.py, 16 at a time,
#    deflated as NVIDIA's wheels are);
# 2. (range planning of the real wheels is bench/range_real_gpu.sh's);
# 3. uv writes a pylock.toml from that folder (uv pip compile --no-index --find-links);
# 4. two copies broken alike by pip (nvidia-cudnn-cu13 uninstalled): `cudafix sync` of one, with the
#    live verification, and `uv pip sync` of the other, timed side by side; each compared with the
#    healthy venv (every path, size and mode but the installers' own files) and torch runs a
#    convolution;
# 5. `cudafix lock` of the healthy venv twice (the same bytes?), then `doctor --lock` on a copy after
#    one pip uninstall names the drift.
#   carry: .dev/release (BUILD=build-gpu contrib/release/make_bundle.sh .dev/release)
#   OUT=/tmp/out bash bench/lock_sync_gpu.sh   writes $OUT/lock_sync_gpu.log
set -u
cd "$(dirname "$0")/.." || exit 1
source bench/gpu_lib.sh
gpu_start lock_sync_gpu
say "== $("$C" --version 2>&1 | head -1); uv $(uv --version | cut -d' ' -f2); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
copy_venv /tmp/v
site=$(ls -d /tmp/v/lib/python3*/site-packages)
rel=${site#/tmp/v/}
rm -rf /tmp/wheels && mkdir -p /tmp/wheels
s=$EPOCHREALTIME
ls "$site" | sed -n 's/-[^-]*\.dist-info$//p' > /tmp/names.txt
xargs -P 16 -I{} "$py" bench/pack_dist_wheel.py "$site" {} /tmp/wheels < /tmp/names.txt > /tmp/pack.log 2>&1
say "  packed $(ls /tmp/wheels | wc -l) wheels of $(wc -l < /tmp/names.txt) dists ($(du -sh /tmp/wheels | cut -f1)) in $(secs_since "$s" "%.1f s")"
grep -v '^wheel:' /tmp/pack.log | head -5 >> "$log"

say "== uv writes the lock"
ls "$site" | sed -n 's/\(.*\)-\([^-]*\)\.dist-info$/\1==\2/p' > /tmp/req.in
(cd /tmp && say "  uv pip compile --no-index --find-links: $(t uv pip compile --no-index --find-links /tmp/wheels /tmp/req.in -o /tmp/pylock.toml --python /tmp/v/bin/python3)")
grep -v "^warning: The .*deprecated" /tmp/t.out | tail -3 >> "$log"
say "  pylock.toml: $(grep -c '^\[\[packages\]\]' /tmp/pylock.toml) packages; e.g. $(grep -m1 'wheels = ' /tmp/pylock.toml | cut -c1-150)"
cp /tmp/pylock.toml "$OUT/uv_pylock.toml"

say "== two copies broken alike: pip uninstall -y nvidia-cudnn-cu13"
for x in b u; do copy_venv /tmp/$x; /tmp/$x/bin/python3 -m pip uninstall -y -q nvidia-cudnn-cu13 >> "$log" 2>&1; done
say "  torch in a broken copy: $(torch_cudnn /tmp/b)"
say "  cudafix sync --dry-run: $(t timeout 300 "$C" sync /tmp/pylock.toml --dry-run --venv /tmp/b)"
tail -4 /tmp/t.out >> "$log"
say "  cudafix sync -y:        $(t timeout 300 "$C" sync /tmp/pylock.toml -y --venv /tmp/b)"
tail -6 /tmp/t.out >> "$log"
say "  uv pip sync --offline:  $(t timeout 300 env UV_CACHE_DIR=/tmp/uvc uv pip sync --offline --python /tmp/u/bin/python3 /tmp/pylock.toml)"
grep -v "^warning: The .*deprecated" /tmp/t.out | tail -4 >> "$log"
files() { (cd "$1" && find . -path ./.cudafix -prune -o -path ./.lock -prune -o -name __pycache__ -prune -o -name '*.pyc' -o -printf '%p %s %m\n' | grep -v -e '/INSTALLER ' -e '/REQUESTED ' -e '/direct_url.json ' -e '/RECORD ' -e '/uv_cache.json ' | sort); }
files /tmp/v > /tmp/f_v.txt
for x in b u; do
  files /tmp/$x > /tmp/f_$x.txt
  say "  /tmp/$x against the healthy venv (path size mode): $(same /tmp/f_v.txt /tmp/f_$x.txt)"
  say "  torch in /tmp/$x: $(torch_cudnn /tmp/$x)"
done
say "  cuDNN bytes after cudafix sync: $(cd "$site/nvidia/cudnn/lib" && for f in *; do cmp -s "$f" "/tmp/b/$rel/nvidia/cudnn/lib/$f" || echo "DIFF $f"; done | head -3 | tr '\n' ' ')(nothing listed: every file identical)"
say "  doctor after cudafix sync: $("$C" doctor --venv /tmp/b 2>&1 | head -1)"
say "  sync again (nothing to do): $(t timeout 300 "$C" sync /tmp/pylock.toml -y --venv /tmp/b)"; tail -1 /tmp/t.out >> "$log"

say "== cudafix lock twice, doctor --lock after a pip uninstall"
say "  lock 1: $(t timeout 300 "$C" lock --venv /tmp/v -o /tmp/l1.toml)"; tail -2 /tmp/t.out >> "$log"
say "  lock 2: $(t timeout 300 "$C" lock --venv /tmp/v -o /tmp/l2.toml)"
if cmp -s /tmp/l1.toml /tmp/l2.toml; then say "  the two locks: same bytes ($(wc -c < /tmp/l1.toml) bytes)"; else say "  the two locks DIFFER"; fi
cp /tmp/l1.toml "$OUT/cudafix_lock.toml"
say "  doctor --lock, healthy venv: $(t timeout 300 "$C" doctor --lock /tmp/l1.toml --venv /tmp/v)"; head -1 /tmp/t.out >> "$log"
copy_venv /tmp/d; /tmp/d/bin/python3 -m pip uninstall -y -q nvidia-nccl-cu13 >> "$log" 2>&1
say "  doctor --lock after pip uninstall nvidia-nccl-cu13: $(t timeout 300 "$C" doctor --lock /tmp/l1.toml --venv /tmp/d)"
grep -E "lock-|drift|nccl" /tmp/t.out | head -8 >> "$log"
say "  lock --verified: $(t timeout 300 "$C" lock --verified --venv /tmp/v -o /tmp/l3.toml)"; tail -2 /tmp/t.out >> "$log"
grep -A6 "verified" /tmp/l3.toml | head -10 >> "$log"
cat "$log"
