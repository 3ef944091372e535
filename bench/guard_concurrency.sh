#!/usr/bin/env bash
# Several writers on one venv at once, ROUNDS rounds each (issue 51), on real pip venvs made here:
#   A. two guards and a cudafix install started together: a guarded pip uninstall that breaks a
#      consumer (--allow-break), a guarded harmless pip uninstall of a leaf, and `cudafix install`
#      of another wheel;
#   B. a plain pip install of another wheel while a guarded breaking uninstall runs.
# Each round starts the writers in a seeded random order with seeded random delays (0-400 ms)
# and compares the venv's files (hashes; byte code and cudafix's own folder aside) with the one
# state every serial order gives (the breaking uninstall undone, the leaf's uninstall and the
# install kept), or counts a round where a guard refused to undo and named the paths (verdict
# overlap). Anything else is a failure, printed with the guards' verdicts.
#   [ROUNDS=20] [SEED=N] [BUILD=build] bash bench/guard_concurrency.sh
# Needs the tests' ELF fixtures (cmake -DCUDAFIX_TESTS=ON; cmake --build build --target elf_fixtures).
set -u
cd "$(dirname "$0")/.." || exit 1
ROUNDS=${ROUNDS:-20}
SEED=${SEED:-$(date +%s)}
BUILD=${BUILD:-build}
C=$(realpath "$BUILD/cudafix")
FIX=$(realpath "$BUILD/tests/fixtures/verify")
echo "guard_concurrency: ROUNDS=$ROUNDS SEED=$SEED ($C)"
RANDOM=$SEED
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
w=$work/wheels later=$work/later
mkdir -p "$w" "$later"
echo "X = 1" > "$work/empty.py"
mk() { python3 tests/e2e/make_wheel.py "$@" > /dev/null; }
mk "$w" nvidia-cudnn-cu12 9.10.2.21 "nvidia/cudnn/lib/libcudnn.so.9=$FIX/cudnn/v91400/libcudnn.so.9" "nvidia/cudnn/__init__.py=$work/empty.py"
mk "$w" nvidia-cudnn-cu13 9.19.0.56 "nvidia/cudnn/lib/libcudnn.so.9=$FIX/cudnn/v91900/libcudnn.so.9" "nvidia/cudnn/__init__.py=$work/empty.py"
mk "$w" nvidia-cuda-runtime 13.0.96 "nvidia/cu13/lib/libcudart.so.13=$FIX/cu13/libcudart.so.13"
mk "$w" torchlike 2.11.0 "torch/lib/libtorch_cuda.so=$FIX/libtorch_cuda.so" "torch/__init__.py=$work/empty.py" --requires "nvidia-cudnn-cu13==9.19.0.56"
mk "$w" leafpkg 1.0 "leafpkg/__init__.py=$work/empty.py" "leafpkg/data.txt=$work/empty.py"
mk "$later" extrapkg 1.0 "extrapkg/__init__.py=$work/empty.py" "extrapkg/data.txt=$work/empty.py"
extra=$(ls "$later"/extrapkg-*.whl)
base=$work/base
python3 -m venv "$base"
for f in nvidia_cudnn_cu12 nvidia_cudnn_cu13 nvidia_cuda_runtime torchlike leafpkg; do
  "$base/bin/python3" -m pip install -q --no-index --no-deps --no-compile "$w"/$f-*.whl
done
tree() { (cd "$1" && find . \( -path ./.cudafix -o -path ./.lock -o -name __pycache__ \) -prune -o -type f ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum); }
# The one state every serial order leaves.
expect=$work/expect
cp -a "$base" "$expect"
"$expect/bin/python3" -m pip uninstall -q -y leafpkg
"$expect/bin/python3" -m pip install -q --no-index --no-deps "$extra"
# pip's INSTALLER and cudafix's differ: the install's dist-info is compared by its files' names.
norm() { sed -E 's#^[0-9a-f]+  (\./lib/python[^/]+/site-packages/extrapkg-1.0.dist-info/)#-  \1#'; }
tree "$expect" | norm | grep -v 'extrapkg-1.0.dist-info/\(INSTALLER\|RECORD\|REQUESTED\|direct_url.json\)' > "$work/expect.txt"
expect_b=$work/expect_b
cp -a "$base" "$expect_b"
"$expect_b/bin/python3" -m pip install -q --no-index --no-deps "$extra"
tree "$expect_b" | norm | grep -v 'extrapkg-1.0.dist-info/\(INSTALLER\|RECORD\|REQUESTED\|direct_url.json\)' > "$work/expect_b.txt"
pause() { sleep "0.$(printf '%03d' $((RANDOM % 400)))"; }
verdict_of() { python3 -c 'import json,sys
try: print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["verdict"])
except Exception as e: print("no-document")' "$1"; }
run_round() { # run_round A|B N
  local kind=$1 n=$2 v=$work/v$1$2
  cp -a "$base" "$v"
  local g="env -u VIRTUAL_ENV $C guard --json --no-verify --no-cache --ld-so-cache /dev/null --venv $v"
  local writers=()
  writers+=("$g --allow-break -- $v/bin/python3 -m pip uninstall -y nvidia-cudnn-cu12 > $v.g1 2>/dev/null")
  if [ "$kind" = A ]; then
    writers+=("$g -- $v/bin/python3 -m pip uninstall -y leafpkg > $v.g2 2>/dev/null")
    writers+=("env -u VIRTUAL_ENV $C install -y --no-verify --no-cache --ld-so-cache /dev/null --venv $v $extra > $v.i 2>&1")
  else
    writers+=("$v/bin/python3 -m pip install -q --no-index --no-deps $extra > $v.i 2>&1")
  fi
  local order=() i
  for i in "${!writers[@]}"; do order+=("$RANDOM:$i"); done
  mapfile -t order < <(printf '%s\n' "${order[@]}" | sort -n)
  for i in "${order[@]}"; do
    pause
    bash -c "${writers[${i#*:}]}" &
  done
  wait
  local got=$work/got.txt want=$work/expect.txt
  [ "$kind" = B ] && want=$work/expect_b.txt
  tree "$v" | norm | grep -v 'extrapkg-1.0.dist-info/\(INSTALLER\|RECORD\|REQUESTED\|direct_url.json\)' > "$got"
  local v1 v2=""
  v1=$(verdict_of "$v.g1")
  [ "$kind" = A ] && v2=" $(verdict_of "$v.g2")"
  if diff -q "$got" "$want" > /dev/null; then
    echo "serial"
  elif [ "$v1" = overlap ] || [ "${v2# }" = overlap ]; then
    echo "refused-named ($v1$v2)"
  else
    echo "FAIL ($v1$v2): $(diff "$want" "$got" | grep '^[<>]' | head -3 | tr '\n' ' ')"
  fi
  rm -rf "$v" "$v".*
}
for kind in A B; do
  serial=0 named=0 failed=0
  for n in $(seq "$ROUNDS"); do
    r=$(run_round "$kind" "$n")
    case "$r" in
      serial) serial=$((serial + 1)) ;;
      refused-named*) named=$((named + 1)) ;;
      *) failed=$((failed + 1)); echo "  $kind round $n: $r" ;;
    esac
  done
  echo "$kind: $serial of $ROUNDS ended as the serial orders do, $named with an undo refused and named, $failed otherwise"
done
