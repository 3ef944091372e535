#!/usr/bin/env bash
# On the GPU machine: cudafix's write half on the real CUDA 13 torch venv (hardlink copies only).
# A deflated wheel of nvidia-cudnn-cu13 packed from the venv's own files; then, side by side in
# one run, its reinstall by pip, uv (cold and warm cache) and cudafix (with and without the
# batch sync, without verify), cudafix's rollback of it, one core inflating the whole wheel with
# zlib, and `cudafix snapshot` of the whole venv. Then the proof: cudafix install with the live
# verification, torch's cuDNN, rollback, and every path's inode, size, mode and link target
# against the listing before. Results under $OUT.
#   bench/make_relocatable.sh && (device, carrying .dev/cudafix-dist) bash bench/txn_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
log=$OUT/txn.txt
: > "$log"
copy_venv /tmp/v
site=$(echo /tmp/v/lib/python3*/site-packages)
rm -rf /tmp/wheels && mkdir -p /tmp/wheels
/tmp/v/bin/python3 bench/pack_cudnn_wheel.py "$site" /tmp/wheels >> "$log" 2>&1
W=$(ls /tmp/wheels/*.whl)
t() {
  local s=$EPOCHREALTIME
  "$@" > /tmp/t.out 2>&1
  local rc=$? e=$EPOCHREALTIME
  awk -v s="$s" -v e="$e" -v rc="$rc" 'BEGIN { printf "%.3f rc=%d", e - s, rc }'
}
echo "== side by side, 3 rounds (seconds)" >> "$log"
for round in 1 2 3; do
  rm -rf /tmp/uvcache
  echo "round $round" >> "$log"
  echo "  pip reinstall:            $(t /tmp/v/bin/python3 -m pip install -q --no-deps --force-reinstall --no-index "$W")" >> "$log"
  echo "  uv reinstall, cold cache: $(t env UV_CACHE_DIR=/tmp/uvcache uv pip install -q --reinstall --no-deps --no-index --python /tmp/v/bin/python3 "$W")" >> "$log"
  echo "  uv reinstall, warm cache: $(t env UV_CACHE_DIR=/tmp/uvcache uv pip install -q --reinstall --no-deps --no-index --python /tmp/v/bin/python3 "$W")" >> "$log"
  echo "  cudafix install:          $(t "$C" install "$W" -y --no-verify --venv /tmp/v)" >> "$log"
  echo "  cudafix rollback:         $(t "$C" rollback -y --venv /tmp/v)" >> "$log"
  echo "  cudafix install, no sync: $(t env CUDAFIX_BENCH_NO_SYNC=1 "$C" install "$W" -y --no-verify --venv /tmp/v)" >> "$log"
  echo "  cudafix rollback:         $(t "$C" rollback -y --venv /tmp/v)" >> "$log"
  echo "  zlib, one core, inflate:  $(t /tmp/v/bin/python3 -c "import zipfile,sys; z=zipfile.ZipFile(sys.argv[1]); [z.read(n) for n in z.namelist()]" "$W")" >> "$log"
done
echo "== snapshot of the whole venv" >> "$log"
copy_venv /tmp/s
for round in 1 2 3; do
  echo "  cudafix snapshot:         $(t "$C" snapshot "s$round" --venv /tmp/s) $(tail -c 200 /tmp/t.out)" >> "$log"
done
echo "  files in the venv: $(find /tmp/s -path /tmp/s/.cudafix -prune -o -type f -print | wc -l)" >> "$log"

echo "== proof: install with verify, torch, rollback, inode listing" >> "$log"
copy_venv /tmp/p
listing() { (cd /tmp/p && find . -path ./.cudafix -prune -o -path ./.lock -prune -o -printf '%p %i %s %m %l\n' | sort); }
torch_cudnn() { (cd /tmp && /tmp/p/bin/python3 -c "import torch; x=torch.randn(1,3,16,16,device='cuda'); y=torch.nn.functional.conv2d(x, torch.randn(4,3,3,3,device='cuda')); torch.cuda.synchronize(); print('cudnn', torch.backends.cudnn.version(), 'conv', tuple(y.shape))"); }
listing > /tmp/before.txt
echo "torch before: $(torch_cudnn 2>&1 | tail -1)" >> "$log"
"$C" install "$W" -y --venv /tmp/p >> "$log" 2>&1
echo "install rc=$?" >> "$log"
echo "torch after install: $(torch_cudnn 2>&1 | tail -1)" >> "$log"
"$C" doctor --venv /tmp/p --color never 2>&1 | head -3 >> "$log"
"$C" rollback -y --venv /tmp/p >> "$log" 2>&1
echo "rollback rc=$?" >> "$log"
listing > /tmp/after.txt
if diff /tmp/before.txt /tmp/after.txt > /tmp/diff.txt; then
  echo "listing after rollback: IDENTICAL ($(wc -l < /tmp/before.txt) paths, same inodes, sizes, modes, link targets)" >> "$log"
else
  echo "listing after rollback: DIFFERS" >> "$log"; head -20 /tmp/diff.txt >> "$log"
fi
echo "torch after rollback: $(torch_cudnn 2>&1 | tail -1)" >> "$log"
"$C" history --venv /tmp/p >> "$log" 2>&1
cat "$log"
