#!/usr/bin/env bash
# On the GPU machine: issue 37's proof. After ONE real `pip uninstall -y` of 1, 2, 3 and 4 of the
# real CUDA 13 torch venv's providers (cuDNN, NCCL, cuSPARSELt, NVSHMEM, in that order), on
# hardlink copies: `cudafix fix -y --find-links W --json` (W: the four wheels packed once from the
# pristine venv's own files), timed, with each step's verification from its JSON, doctor, torch
# running a cuDNN convolution, and `rollback` back to the broken listing; side by side, uv's and
# pip's install of the same wheels into the same broken copy, each followed by the same
# convolution. Then the 4-provider uninstall fixed from W2, W with a cuDNN wheel of the wrong
# release (cuDNN 9.14's bytes from /usr/lib/x86_64-linux-gnu named nvidia-cudnn-cu13 9.19.0.56):
# fix must exit 1 naming both versions, the venv as it was.
#   carry: .dev/release (contrib/release/make_bundle.sh .dev/release)
#   OUT=/tmp/out bash bench/fix_multi_gpu.sh   writes $OUT/fix_multi_gpu.log and each fix's JSON
#   CASES="4" WRONG=0: only the 4-provider case, no wrong-release case
set -u
cd "$(dirname "$0")/.." || exit 1
source bench/gpu_lib.sh
log=$OUT/fix_multi_gpu.log
: > "$log"
T0=$EPOCHREALTIME
clock() { awk -v s="$T0" -v e="$EPOCHREALTIME" 'BEGIN { printf "at %.0f s", e - s }'; }
PY=/opt/torch/.venv/bin/python3
SITE=$(echo /opt/torch/.venv/lib/python3*/site-packages)
SYS=/usr/lib/x86_64-linux-gnu
W=/tmp/mw   # the four wheels, packed from the pristine venv
W2=/tmp/mw2 # the same, the cuDNN wheel of the wrong release
dists=(nvidia-cudnn-cu13 nvidia-nccl-cu13 nvidia-cusparselt-cu13 nvidia-nvshmem-cu13)
wheel_of() { local f; for f in "$1/${2//-/_}"-*.whl; do [ -f "$f" ] && echo "$f"; done; }
secs() { echo "${1%% s rc=*}"; } # of t's "1.234 s rc=0"
rc_of() { echo "${1##*rc=}"; }
doctor_line() { # the doctor's counts and first errors, for venv $1
  local r
  r=$(t "$C" doctor --venv "$1" --color never)
  echo "$r; $(head -1 /tmp/t.out | sed 's/^cudafix doctor [^:]*: //')"
  grep -E "^error" /tmp/t.out | cut -c1-160 | head -3 | sed 's/^/      /'
}
# shellcheck disable=SC2317 # run through t
uv_then_torch() { # uv_then_torch VENV WHEEL...: uv's install (a cold cache) and the convolution
  local v=$1
  shift
  UV_CACHE_DIR=/tmp/muvc uv pip install -q --offline --no-deps --no-index --python "$v/bin/python3" "$@" &&
    (cd /tmp && "$v/bin/python3" -c "$torch_conv")
}
# shellcheck disable=SC2317 # run through t
pip_then_torch() { # pip_then_torch VENV WHEEL...: the venv's pip and the convolution
  local v=$1
  shift
  "$v/bin/python3" -m pip install -q --no-index --no-deps "$@" && (cd /tmp && "$v/bin/python3" -c "$torch_conv")
}
show_fix() { # show_fix FILE: what fix --json said, from whichever keys its document has
  "$PY" - "$1" << 'EOF'
import json, sys

lines = open(sys.argv[1], errors="replace").read().splitlines()
doc, other = None, []
for line in lines:
    d = None
    if line.lstrip().startswith("{"):
        try:
            d = json.loads(line)
        except ValueError:
            pass
    if isinstance(d, dict):
        doc = d
    elif line.strip():
        other.append(line)
text = "\n".join(lines)
if doc is None and "{" in text:  # a document over several lines
    try:
        first, last = text.index("{"), text.rindex("}") + 1
        d = json.loads(text[first:last])
        if isinstance(d, dict):
            doc, other = d, [line for line in (text[:first] + text[last:]).splitlines() if line.strip()]
    except ValueError:
        pass


def short(v, n=240):
    s = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return s if len(s) <= n else s[:n] + f"... ({len(s)} chars)"


for line in other[:6]:
    print("    output: " + short(line, 400))
if doc is None:
    print("    no JSON document in the output")
    sys.exit(0)
steps = doc.get("steps")
if isinstance(steps, list):
    print(f"    steps ({len(steps)}): " + "; ".join(s if isinstance(s, str) else short(s, 100) for s in steps))
for k in ("changed", "verified", "undone", "transaction", "cudnn", "before", "after", "seconds", "phases"):
    if k in doc:
        print(f"    {k}: {short(doc[k])}")
if "error" in doc:
    print(f"    error: {short(doc['error'], 1200)}")
ver = doc.get("verification")
if ver is None:
    print("    verification: not in the JSON (keys: " + ", ".join(sorted(doc)) + ")")
elif not isinstance(ver, dict):
    print(f"    verification: {short(ver, 600)}")
else:
    if "baseline" in ver:
        print(f"    verification baseline: {short(ver['baseline'], 600)}")
    vsteps = ver.get("steps")
    for s in vsteps if isinstance(vsteps, list) else []:
        if isinstance(s, dict):
            rest = {k: v for k, v in s.items() if k not in ("step", "label", "ok")}
            print(f"    verification step {s.get('step', '?')} ({s.get('label', '?')}): ok={s.get('ok', '?')}"
                  + (f" {short(rest, 600)}" if rest else ""))
        else:
            print(f"    verification step: {short(s, 600)}")
    rest = {k: v for k, v in ver.items() if k not in ("baseline", "steps")}
    if rest or not isinstance(vsteps, list):
        print(f"    verification, other keys: {short(rest, 400)}" + ("" if isinstance(vsteps, list) else "; no steps list"))
EOF
}
fail=0
verdict() { # verdict WHAT OK?: one line of the verdicts at the end
  if [ "$2" = yes ]; then verdicts+=("  PASS $1"); else
    verdicts+=("  FAIL $1")
    fail=1
  fi
}
verdicts=()
summary=()

unpack_bundle
# Nothing runs pip from the pristine venv: what it compiled would land in every copy after.
say "== $("$C" --version 2>&1 | head -1); uv $(uv --version | cut -d' ' -f2); $(cd "$SITE" && echo pip-*.dist-info | sed 's/-\([^-]*\)\.dist-info$/ \1/')"
command -v nvidia-smi > /dev/null && say "   $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"

say "== the wheels, packed at once from the pristine venv's own files ($(clock))"
rm -rf "$W" "$W2" /tmp/mpack && mkdir -p "$W" "$W2" /tmp/mpack
pids=()
for d in "${dists[@]}"; do
  { "$PY" bench/pack_dist_wheel.py "$SITE" "$d" "$W" && "$PY" bench/pack_dist_wheel.py --check "$W/${d//-/_}"-*.whl; } > "/tmp/mpack/$d.txt" 2>&1 &
  pids+=($!)
done
# The wrong release: each nvidia/cudnn/lib/libcudnn*.so.9 the system's cuDNN has, its bytes.
sysver=$(basename "$(readlink -f "$SYS/libcudnn.so.9")") # libcudnn.so.9.14.0
suffix=${sysver#libcudnn.so.9}          # .14.0
replace=() kept=()
for f in "$SITE"/nvidia/cudnn/lib/libcudnn*.so.9; do
  b=${f##*/}
  if [ -n "$suffix" ] && [ -f "$SYS/$b$suffix" ]; then replace+=(--replace "nvidia/cudnn/lib/$b=$SYS/$b$suffix"); else kept+=("$b"); fi
done
if [ ${#replace[@]} -gt 0 ]; then
  { "$PY" bench/pack_dist_wheel.py "$SITE" nvidia-cudnn-cu13 "$W2" "${replace[@]}" && "$PY" bench/pack_dist_wheel.py --check "$W2"/*.whl; } > /tmp/mpack/wrong.txt 2>&1 &
  pids+=($!)
fi
packed=yes
for p in "${pids[@]}"; do wait "$p" || packed=no; done
for d in "${dists[@]}"; do [ -n "$(wheel_of "$W" "$d")" ] || packed=no; done
for d in "${dists[@]}"; do sed 's/^/  /' "/tmp/mpack/$d.txt" >> "$log"; done
say "  W2: the system's $sysver as the venv's cuDNN: $((${#replace[@]} / 2)) libraries replaced; the venv's kept: ${kept[*]:-none}"
[ -f /tmp/mpack/wrong.txt ] && sed 's/^/  /' /tmp/mpack/wrong.txt >> "$log"
for d in "${dists[@]:1}"; do
  f=$(wheel_of "$W" "$d")
  [ -n "$f" ] && ln "$f" "$W2/"
done
verdict "the wheels packed and read back against their RECORD" "$packed"
if [ "$packed" != yes ]; then
  say "packing failed (above); stopping"
  cat "$log"
  exit 1
fi

fix_case() { # fix_case N: the first N providers removed by one pip uninstall, then fixed three ways
  local n=$1 d fx u p tc sm
  local removed=("${dists[@]:0:$n}") wheels=()
  for d in "${removed[@]}"; do wheels+=("$(wheel_of "$W" "$d")"); done
  say "== $n of 4: pip uninstall -y ${removed[*]} ($(clock))"
  copy_venv /tmp/mb
  say "  pip uninstall: $(t /tmp/mb/bin/python3 -m pip uninstall -y "${removed[@]}"); $(grep -c '^ *Successfully uninstalled' /tmp/t.out) uninstalled"
  # Each run below on its own hardlink copy of this broken venv.
  rm -rf /tmp/mf && cp -al /tmp/mb /tmp/mf
  listing /tmp/mf > /tmp/mbroken.txt
  say "  doctor: $(doctor_line /tmp/mf)"
  fx=$(t "$C" fix -y --find-links "$W" --venv /tmp/mf --json)
  cp /tmp/t.out "$OUT/fix_multi_$n.json"
  say "  cudafix fix -y --find-links W --json: $fx"
  show_fix /tmp/t.out >> "$log"
  say "  doctor after: $(doctor_line /tmp/mf)"
  tc=$(torch_cudnn /tmp/mf)
  say "  torch conv2d: $tc"
  say "  rollback -y: $(t "$C" rollback -y --venv /tmp/mf)"
  tail -1 /tmp/t.out | cut -c1-200 | sed 's/^/    /' >> "$log"
  listing /tmp/mf > /tmp/mrolled.txt
  sm=$(same /tmp/mbroken.txt /tmp/mrolled.txt)
  say "  after rollback, against the broken listing: $sm"
  rm -rf /tmp/mf && cp -al /tmp/mb /tmp/mf
  rm -rf /tmp/muvc
  u=$(t uv_then_torch /tmp/mf "${wheels[@]}")
  say "  uv pip install --offline --no-deps --no-index (cold cache) + torch conv2d: $u; $(tail -1 /tmp/t.out | cut -c1-160)"
  rm -rf /tmp/mf && cp -al /tmp/mb /tmp/mf
  p=$(t pip_then_torch /tmp/mf "${wheels[@]}")
  say "  pip install --no-index --no-deps + torch conv2d: $p; $(tail -1 /tmp/t.out | cut -c1-160)"
  local providers="$n providers"
  [ "$n" = 1 ] && providers="1 provider"
  summary+=("$providers: cudafix fix $(secs "$fx") s ($(rc_of "$fx")) | uv install + torch $(secs "$u") s | pip install + torch $(secs "$p") s")
  verdict "$providers: fix exits 0 ($(rc_of "$fx")), torch runs cuDNN 91900 ($tc), rollback gives the broken listing back" \
    "$([ "$(rc_of "$fx")" = 0 ] && [ "$tc" = "cudnn 91900" ] && [ "${sm%% *}" = IDENTICAL ] && echo yes)"
}
for n in ${CASES:-1 2 3 4}; do fix_case "$n"; done

wrong_case() { # the 4-provider uninstall (still /tmp/mb), fixed from W2: refused, the venv as it was
  local wr wj named sw swj
  say "== the wrong release: 4 of 4 removed, fix from W2 ($(clock))"
  rm -rf /tmp/mf && cp -al /tmp/mb /tmp/mf
  listing /tmp/mf > /tmp/mbroken.txt
  wr=$(t "$C" fix -y --find-links "$W2" --venv /tmp/mf --color never)
  say "  cudafix fix -y --find-links W2: $wr (1 expected)"
  grep -E "verification|91400|91900|undone" /tmp/t.out | cut -c1-600 | sed 's/^/    /' >> "$log"
  named=$(grep -q 91400 /tmp/t.out && grep -q 91900 /tmp/t.out && echo yes)
  listing /tmp/mf > /tmp/mafter.txt
  sw=$(same /tmp/mbroken.txt /tmp/mafter.txt)
  say "  the venv against its broken listing: $sw"
  wj=$(t "$C" fix -y --find-links "$W2" --venv /tmp/mf --json)
  cp /tmp/t.out "$OUT/fix_multi_wrong.json"
  say "  the same with --json: $wj"
  show_fix /tmp/t.out >> "$log"
  listing /tmp/mf > /tmp/mafter.txt
  swj=$(same /tmp/mbroken.txt /tmp/mafter.txt)
  say "  the venv against its broken listing: $swj"
  verdict "wrong release: fix exits 1 ($(rc_of "$wr"), --json $(rc_of "$wj")), its output names 91400 and 91900 (${named:-no}), the venv as it was after each" \
    "$([ "$(rc_of "$wr")" = 1 ] && [ "$(rc_of "$wj")" = 1 ] && [ "$named" = yes ] && [ "${sw%% *}" = IDENTICAL ] && [ "${swj%% *}" = IDENTICAL ] && echo yes)"
}

if [ "${WRONG:-1}" = 0 ]; then
  say "== the wrong release: not run (WRONG=0)"
elif [ ${#replace[@]} -eq 0 ]; then
  say "== the wrong release: skipped, no system cuDNN in $SYS (libcudnn.so.9: '$sysver')"
  verdict "wrong release: a system cuDNN to pack it from" no
else
  wrong_case
fi
rm -rf /tmp/mb /tmp/mf /tmp/muvc # the copies and uv's cache; the wheels stay in $W and $W2
say "== summary ($(clock))"
for s in "${summary[@]}"; do say "  $s"; done
for v in "${verdicts[@]}"; do say "$v"; done
say "$([ "$fail" = 0 ] && echo "every case passed" || echo "SOME CASES FAILED (above)")"
cat "$log"
exit "$fail"
