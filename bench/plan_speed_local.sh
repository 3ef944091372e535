#!/usr/bin/env bash
# plan_speed_gpu.sh's measures where there is no GPU machine: the e2e tests' CUDA 13 torch-like
# venv (tests/fixtures' verify/torch13multi, installed by pip), broken by `pip uninstall -y
# nvidia-cudnn-cu13`, and a folder of its six provider wheels in which cuDNN's is large: three of
# its sub-libraries rebuilt by the compiler with the same names and dynamic sections around
# MB_EACH MiB of code-like bytes (two before the dynamic section, as NVIDIA's; one both before
# and after it, its segment mid-object, which a map of its stream decoded on every core places),
# deflated as NVIDIA's wheels are. Then ROUNDS rounds, each on fresh copies of the broken venv:
#   plan fix --find-links W;  cudafix install CUDNN --no-verify -y;  cudafix fix --no-verify -y --find-links W
# and once `--timings plan fix`, which says what reading the wheels cost.
#   bench/plan_speed_local.sh [BUILD]     (BUILD: the build folder, default build; needs its tests' fixtures)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
C=${C:-$PWD/$BUILD/cudafix} # C=PATH: another cudafix, on the same input
F=$PWD/$BUILD/tests/fixtures/verify/torch13multi
ROUNDS=${ROUNDS:-3}
MB_EACH=${MB_EACH:-96}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
W=$T/wheels
mkdir -p "$W" "$T/big"
wheel() { python3 tests/e2e/make_wheel.py "$W" "$@" > /dev/null; }

# Code-like bytes: words of a small alphabet, deflating about 3:1 in dynamic-Huffman blocks.
python3 -c "
import random, sys
r = random.Random(7)
w = [bytes(r.choice(b'abcdefghijklmnop') for _ in range(r.randint(2, 9))) for _ in range(4096)]
out, n = [], 0
while n < $MB_EACH << 20:
    x = r.choice(w); out.append(x); n += len(x) + 1
sys.stdout.buffer.write(b' '.join(out)[:$MB_EACH << 20])" > "$T/big/code.bin"
big() { # big NAME "SECTION..." [SONAME]: a sub-library of cuDNN's, code.bin in each section
  local sec
  : > "$T/big/$1.c"
  for sec in $2; do
    printf '__asm__(".section %s\\n.incbin \\"%s\\"\\n.previous");\n' "$sec" "$T/big/code.bin" >> "$T/big/$1.c"
  done
  printf 'int f_%s(void) { return 1; }\n' "${1//[^a-z]/_}" >> "$T/big/$1.c"
  cc -shared -fPIC -o "$T/big/$1" "$T/big/$1.c" ${3:+-Wl,-soname,$3} -Wl,--enable-new-dtags,-rpath,'$ORIGIN:$ORIGIN/../../cu13/lib'
}
big libcudnn_engines_precompiled.so.9 .rodata libcudnn_engines_precompiled.so.9
big libcudnn_engines_runtime_compiled.so.9 .rodata
big libcudnn_adv.so.9 ".rodata .data"
args=("nvidia/cudnn/lib/libcudnn.so.9=$F/cudnn91900/libcudnn.so.9")
for sub in graph ops cnn adv heuristic engines_precompiled engines_runtime_compiled; do
  f=libcudnn_$sub.so.9
  src=$F/nvidia/cudnn/lib/$f
  [ -f "$T/big/$f" ] && src=$T/big/$f
  args+=("nvidia/cudnn/lib/$f=$src")
done
wheel nvidia-cudnn-cu13 9.19.0.56 "${args[@]}" --deflate
wheel nvidia-nccl-cu13 2.28.9 "nvidia/nccl/lib/libnccl.so.2=$F/nvidia/nccl/lib/libnccl.so.2" --deflate
wheel nvidia-cublas 13.1.0.3 "nvidia/cu13/lib/libcublas.so.13=$F/nvidia/cu13/lib/libcublas.so.13" \
  "nvidia/cu13/lib/libcublasLt.so.13=$F/nvidia/cu13/lib/libcublasLt.so.13" --deflate
wheel nvidia-cusparselt-cu13 0.8.0 "nvidia/cusparselt/lib/libcusparseLt.so.0=$F/nvidia/cusparselt/lib/libcusparseLt.so.0" --deflate
wheel nvidia-cuda-runtime 13.0.96 "nvidia/cu13/lib/libcudart.so.13=$F/nvidia/cu13/lib/libcudart.so.13" --deflate
wheel nvidia-cuda-nvrtc 13.0.88 "nvidia/cu13/lib/libnvrtc.so.13=$F/nvidia/cu13/lib/libnvrtc.so.13" --deflate
L='; platform_system == "Linux"'
python3 tests/e2e/make_wheel.py "$T" torch 2.11.0+cu130 "torch/lib/libtorch_cuda.so=$F/torch/lib/libtorch_cuda.so" \
  --requires "nvidia-cudnn-cu13==9.19.0.56$L" --requires "nvidia-nccl-cu13==2.28.9$L" \
  --requires "nvidia-cusparselt-cu13==0.8.0$L" --requires "nvidia-cublas==13.1.0.3.*$L" \
  --requires "nvidia-cuda-runtime==13.0.96.*$L" --requires "nvidia-cuda-nvrtc==13.0.88.*$L" > /dev/null
CUDNN=$(echo "$W"/nvidia_cudnn_cu13-*.whl)
python3 -m venv "$T/venv"
"$T/venv/bin/python3" -m pip install -q --no-index --find-links "$W" "$T"/torch-*.whl
"$T/venv/bin/python3" -m pip uninstall -q -y nvidia-cudnn-cu13
echo "cuDNN's wheel: $(stat -c %s "$CUDNN") bytes; the folder: $(du -sb "$W" | cut -f1) bytes in $(ls "$W" | wc -l) wheels; $(nproc) cores"
fresh() { rm -rf "$T/v" && cp -a "$T/venv" "$T/v"; }
t() { # t CMD...: wall seconds; the command's output in $T/out
  local s=$EPOCHREALTIME
  "$@" > "$T/out" 2>&1 || { echo "failed: $*" >&2; cat "$T/out" >&2; exit 1; }
  awk -v s="$s" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.3f", e - s }'
}
fresh
"$C" --timings plan fix --venv "$T/v" --find-links "$W" --ld-so-cache /dev/null > /dev/null 2> "$T/timings"
grep -E "find-links|plan|fingerprint" "$T/timings" | sed 's/^/  /'
for r in $(seq "$ROUNDS"); do
  fresh
  p=$(t "$C" plan fix --venv "$T/v" --find-links "$W" --ld-so-cache /dev/null)
  fresh
  i=$(t "$C" install "$CUDNN" --no-verify -y --venv "$T/v")
  fresh
  f=$(t "$C" fix --no-verify -y --find-links "$W" --venv "$T/v" --ld-so-cache /dev/null)
  echo "round $r: plan fix $p s; install cuDNN --no-verify $i s; fix --no-verify $f s; fix - install $(awk -v a="$f" -v b="$i" 'BEGIN { printf "%.3f", a - b }') s"
done
fresh
"$C" --timings fix --no-verify -y --find-links "$W" --venv "$T/v" --ld-so-cache /dev/null 2>&1 > /dev/null |
  grep -E "ms$" | grep -vE "walk|dist-info|ELF|owners|model|resolve" | tr -s ' ' | paste -sd';' | sed 's/^/  fix phases:/'
