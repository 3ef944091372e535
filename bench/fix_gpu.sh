#!/usr/bin/env bash
# On the GPU machine (Ubuntu 24.04, no build dependencies): the release bundle and wheel, and
# `cudafix fix` on hardlink copies of the real CUDA 13 torch venv (#27's cases 1-4).
#   carry: .dev/release (contrib/release/make_bundle.sh .dev/release) and
#          build/tests/fixtures/verify (the fake cuDNN whose handle creation fails)
# Writes $OUT/fix_gpu.log. `bench/fix_gpu.sh release` runs only the bundle and wheel part.
set -u
part=${1:-all}
cd "$(dirname "$0")/.." || exit 1
source bench/gpu_lib.sh
log=$OUT/fix_gpu.log
: > "$log"

say "== the bundle, unpacked in /tmp/cf, run with env -i from /"
unpack_bundle
say "  $(cd / && env -i $C --version)"
say "  demo: $(cd / && t env -i $C demo /tmp/demo)"
grep -E "nothing to do|after:|^cudafix verify|cudafix: error" /tmp/t.out | head -5 | sed 's/^/    /' >> "$log"
(cd / && env -i LD_DEBUG=libs $C demo /tmp/demo-ld -q 2>&1) | sed -n 's/.*calling init: //p' | grep -v '^/tmp/cf/' | sort -u | sed 's/^/    from the host: /' >> "$log"
say "  verify of the real venv (read-only): $(cd / && t env -i $C verify --venv /opt/torch/.venv)"
head -1 /tmp/t.out | sed 's/^/    /' >> "$log"

say "== the wheel (contrib/release/make_wheel.py), installed by uv $(uv --version | cut -d' ' -f2) and pip"
W0=$(python3 contrib/release/make_wheel.py .dev/release/cudafix-*-linux-x86_64.tar.gz /tmp/cfwheel)
say "  $(basename "$W0")"
rm -rf /tmp/wv /tmp/uvtools
uv venv -q /tmp/wv --python /opt/torch/.venv/bin/python3 >> "$log" 2>&1
say "  uv pip install: $(t uv pip install --offline --no-deps --python /tmp/wv/bin/python3 "$W0")"
say "  demo from the venv's bin: $(cd / && t env -i /tmp/wv/bin/cudafix demo /tmp/demo-uv -q)"
say "  uv tool install: $(t env UV_TOOL_DIR=/tmp/uvtools/tools UV_TOOL_BIN_DIR=/tmp/uvtools/bin uv tool install --offline "$W0")"
tail -1 /tmp/t.out | sed 's/^/    /' >> "$log"
say "  demo from the tool's bin: $(cd / && t env -i /tmp/uvtools/bin/cudafix demo /tmp/demo-tool -q)"
/opt/torch/.venv/bin/python3 -m venv --without-pip /tmp/pv 2>/dev/null
say "  pip install (the torch venv's pip, into a copy): $(copy_venv /tmp/pw; t /tmp/pw/bin/python3 -m pip install -q --no-index --no-deps "$W0")"
say "  demo from that venv's bin: $(cd / && t env -i /tmp/pw/bin/cudafix demo /tmp/demo-pip -q)"

if [ "$part" = release ]; then cat "$log"; exit 0; fi

say "== case 1: pip uninstall -y nvidia-cudnn-cu13, then fix --find-links W"
copy_venv /tmp/v
site=$(ls -d /tmp/v/lib/python3*/site-packages)
rm -rf /tmp/wheels && mkdir -p /tmp/wheels
/opt/torch/.venv/bin/python3 bench/pack_cudnn_wheel.py "$site" /tmp/wheels >> "$log" 2>&1
W=$(ls /tmp/wheels/*.whl)
say "  W: $(basename "$W") ($(stat -c %s "$W") bytes), packed from the venv's own files"
say "  before: $(torch_cudnn /tmp/v)"
/tmp/v/bin/python3 -m pip uninstall -y -q nvidia-cudnn-cu13 >> "$log" 2>&1
say "  after pip uninstall: $(torch_cudnn /tmp/v)"
listing /tmp/v > /tmp/broken.txt
say "  doctor: $(t $C doctor --venv /tmp/v --color never)"
grep -E "^error|^warning" /tmp/t.out | cut -c1-160 | head -4 | sed 's/^/    /' >> "$log"
say "  fix --dry-run: $(t $C fix --dry-run --find-links /tmp/wheels --venv /tmp/v --color never)"
say "  fix -y: $(t $C fix -y --find-links /tmp/wheels --venv /tmp/v --color never)"
grep -E "reinstall|verified|before:|after:|took|cuDNN" /tmp/t.out | sed 's/^/    /' >> "$log"
say "  torch: $(torch_cudnn /tmp/v)"
say "  fix again: $(t $C fix -y --find-links /tmp/wheels --venv /tmp/v --color never)"
tail -1 /tmp/t.out | sed 's/^/    /' >> "$log"
say "  rollback: $(t $C rollback -y --venv /tmp/v)"
listing /tmp/v > /tmp/rolled.txt
say "  after rollback: $(same /tmp/broken.txt /tmp/rolled.txt); torch: $(torch_cudnn /tmp/v)"

say "  -- the same from uv's cache, offline (cache filled by uv from a local index serving W)"
rm -f /tmp/port.txt
python3 tests/e2e/index_server.py /tmp/wheels /tmp/idx.log > /tmp/port.txt 2>/tmp/server.err &
SERVER=$!
for _ in $(seq 50); do [ -s /tmp/port.txt ] && break; sleep 0.1; done
uv venv -q /tmp/u --python /opt/torch/.venv/bin/python3 >> "$log" 2>&1
UV_CACHE_DIR=/tmp/uvc uv pip install -q --no-deps --python /tmp/u/bin/python3 --index-url "http://127.0.0.1:$(cat /tmp/port.txt)/simple" nvidia-cudnn-cu13 >> "$log" 2>&1
kill $SERVER
say "  fix -y --offline (server stopped): $(t env PIP_CACHE_DIR=/nonexistent UV_CACHE_DIR=/tmp/uvc CUDAFIX_CACHE_DIR=/tmp/cfc1 $C fix -y --offline --venv /tmp/v --color never)"
grep -E "reinstall|verified|after:|took" /tmp/t.out | sed 's/^/    /' >> "$log"
say "  torch: $(torch_cudnn /tmp/v)"
say "  rollback: $(t $C rollback -y --venv /tmp/v); $(listing /tmp/v > /tmp/rolled2.txt; same /tmp/broken.txt /tmp/rolled2.txt)"

say "== case 2: a CUDA 12 leftover dist-info listing the same nvidia/cudnn/lib files"
copy_venv /tmp/v2
site2=$(ls -d /tmp/v2/lib/python3*/site-packages)
cu13=$(ls -d "$site2"/nvidia_cudnn_cu13-*.dist-info)
left="$site2/nvidia_cudnn_cu12-9.10.2.21.dist-info"
mkdir "$left"
printf 'Metadata-Version: 2.1\nName: nvidia-cudnn-cu12\nVersion: 9.10.2.21\n' > "$left/METADATA"
echo pip > "$left/INSTALLER"
{ grep '^nvidia/cudnn/lib/' "$cu13/RECORD"; echo "nvidia_cudnn_cu12-9.10.2.21.dist-info/METADATA,,"; echo "nvidia_cudnn_cu12-9.10.2.21.dist-info/INSTALLER,,"; echo "nvidia_cudnn_cu12-9.10.2.21.dist-info/RECORD,,"; } > "$left/RECORD"
(cd "$site2" && find nvidia/cudnn -type f -printf '%p %i %s\n' | sort) > /tmp/cu13_files.txt
say "  doctor: $(t $C doctor --venv /tmp/v2 --color never)"
grep -E "^error|^warning" /tmp/t.out | cut -c1-170 | head -4 | sed 's/^/    /' >> "$log"
say "  fix -y: $(t $C fix -y --venv /tmp/v2 --color never)"
grep -E "remove|verified|before:|after:|took|cuDNN" /tmp/t.out | sed 's/^/    /' >> "$log"
(cd "$site2" && find nvidia/cudnn -type f -printf '%p %i %s\n' | sort) > /tmp/cu13_after.txt
say "  nvidia/cudnn files: $(same /tmp/cu13_files.txt /tmp/cu13_after.txt); leftover dist-info: $([ -e "$left" ] && echo still there || echo gone)"
say "  verify: $(t $C verify --venv /tmp/v2)"
head -1 /tmp/t.out | sed 's/^/    /' >> "$log"
say "  torch: $(torch_cudnn /tmp/v2)"

say "== case 3: fix from a wheel whose cuDNN cannot create a handle"
copy_venv /tmp/v3
/tmp/v3/bin/python3 -m pip uninstall -y -q nvidia-cudnn-cu13 >> "$log" 2>&1
listing /tmp/v3 > /tmp/broken3.txt
rm -rf /tmp/badw && mkdir -p /tmp/badw
python3 tests/e2e/make_wheel.py /tmp/badw nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=build/tests/fixtures/verify/cudnn/create_fails/libcudnn.so.9 >> "$log" 2>&1
say "  fix -y --find-links (the bad wheel): $(t $C fix -y --find-links /tmp/badw --venv /tmp/v3 --color never)"
grep -E "verification|undone|error" /tmp/t.out | head -3 | cut -c1-220 | sed 's/^/    /' >> "$log"
listing /tmp/v3 > /tmp/after3.txt
say "  the venv after: $(same /tmp/broken3.txt /tmp/after3.txt)"

say "== case 5: pip writes over what fix installed; rollback refuses by path, --force takes pip's files aside, undoing that puts them back"
copy_venv /tmp/v5
/tmp/v5/bin/python3 -m pip uninstall -y -q nvidia-cudnn-cu13 >> "$log" 2>&1
listing /tmp/v5 > /tmp/broken5.txt
say "  fix -y: $(t $C fix -y --find-links /tmp/wheels --venv /tmp/v5 --color never)"
/tmp/v5/bin/python3 -m pip install -q --no-deps --force-reinstall /tmp/badw/*.whl >> "$log" 2>&1
listing /tmp/v5 > /tmp/pip5.txt
say "  rollback -y once pip reinstalled nvidia-cudnn-cu13 from another wheel: $(t $C rollback -y --venv /tmp/v5 --color never)"
say "    $(grep -c 'after transaction' /tmp/t.out) paths named; $(grep -m1 'libcudnn.so.9 ' /tmp/t.out | cut -c1-200)"
grep -E "^refused|nothing was changed" /tmp/t.out | cut -c1-200 | sed 's/^/    /' >> "$log"
listing /tmp/v5 > /tmp/still5.txt
say "  the venv after the refusal: $(same /tmp/pip5.txt /tmp/still5.txt)"
say "  rollback -y --force: $(t $C rollback -y --force --json --venv /tmp/v5)"
R5=$(python3 -c "import json; print(json.load(open('/tmp/t.out'))['transaction'])" 2>/dev/null)
listing /tmp/v5 > /tmp/forced5.txt
say "  after --force, against the venv before fix: $(same /tmp/broken5.txt /tmp/forced5.txt)"
say "  rollback $R5 (the forced rollback undone): $(t $C rollback "$R5" -y --venv /tmp/v5)"
listing /tmp/v5 > /tmp/redo5.txt
say "  pip's files back: $(same /tmp/pip5.txt /tmp/redo5.txt)"
say "  history: $($C history --venv /tmp/v5 | tail -1)"

say "== case 4: fix against what a person runs by hand (pip, uv), fresh broken copies, 3 rounds"
for i in 1 2 3; do
  copy_venv /tmp/v4; /tmp/v4/bin/python3 -m pip uninstall -y -q nvidia-cudnn-cu13 >/dev/null 2>&1
  a=$(t $C fix -y --find-links /tmp/wheels --venv /tmp/v4)
  copy_venv /tmp/v4; /tmp/v4/bin/python3 -m pip uninstall -y -q nvidia-cudnn-cu13 >/dev/null 2>&1
  b=$(t bash -c "/tmp/v4/bin/python3 -m pip install -q --force-reinstall --no-deps '$W' && cd /tmp && /tmp/v4/bin/python3 -c 'import torch; torch.backends.cudnn.version()'")
  copy_venv /tmp/v4; /tmp/v4/bin/python3 -m pip uninstall -y -q nvidia-cudnn-cu13 >/dev/null 2>&1
  c=$(t bash -c "uv pip install -q --offline --reinstall --no-deps --python /tmp/v4/bin/python3 '$W' && cd /tmp && /tmp/v4/bin/python3 -c 'import torch; torch.backends.cudnn.version()'")
  say "  round $i: cudafix fix (plan, install, live verify) $a | pip --force-reinstall + torch import $b | uv --reinstall + torch import $c"
done
copy_venv /tmp/v4; /tmp/v4/bin/python3 -m pip uninstall -y -q nvidia-cudnn-cu13 >/dev/null 2>&1
say "  phases of one fix --timings:"
$C fix -y --find-links /tmp/wheels --venv /tmp/v4 --timings > /tmp/t.out 2>&1
grep -E "ms$|verified|took" /tmp/t.out | head -30 | sed 's/^/    /' >> "$log"
cat "$log"
