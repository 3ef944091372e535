#!/usr/bin/env bash
# On the GPU machine: issue 40's proof, `cudafix guard` around real pip on hardlink copies of the
# real CUDA 13 torch venv (pip only as /tmp/v/bin/python3 -m pip, VIRTUAL_ENV unset):
#   1. guard -- /tmp/v/bin/python3 -m pip uninstall -y nvidia-cudnn-cu13 is refused (exit 1):
#      pip does not run, the listing (inode and size of every file and symlink) is unchanged;
#   2. the same with --allow-break: pip runs, the probe after it finds torch's cuDNN fallen to the
#      system's (9.14), guard undoes it (exit 1), the listing is back and torch runs cuDNN 91900;
#   3. the overhead of guard around a harmless pip uninstall of a leaf (a one-file wheel installed
#      before each round), beside the bare command, ROUNDS rounds interleaved: the baseline probe
#      runs while the snapshot is taken, and no probe after (the consumer's tree is untouched).
#   carry: .dev/release (contrib/release/make_bundle.sh .dev/release)
#   OUT=/tmp/out [ROUNDS=7] bash bench/guard_gpu.sh   writes $OUT/guard_gpu.log and each guard's JSON
set -u
cd "$(dirname "$0")/.." || exit 1
source bench/gpu_lib.sh
log=$OUT/guard_gpu.log
: > "$log"
ROUNDS=${ROUNDS:-7}
PY=/opt/torch/.venv/bin/python3
V=/tmp/v
fail=0
verdicts=()
verdict() { # verdict WHAT OK?
  if [ "$2" = yes ]; then verdicts+=("  PASS $1"); else
    verdicts+=("  FAIL $1")
    fail=1
  fi
}
secs() { echo "${1%% s rc=*}"; }
# Every file and symlink with its inode and size (the snapshot restores files as hardlinks of the
# very inodes, so equal inodes are equal bytes); folders pip removed come back as new folders.
files() { (cd "$1" && find . \( -path ./.cudafix -o -path ./.lock \) -prune -o \( -type f -o -type l \) -printf '%p %i %s %m %l\n' | sort); }
rc_of() { echo "${1##*rc=}"; }
# The last line of guard's standard output that is a JSON document, as one key's value.
field() { # field FILE KEY[.KEY...]
  "$PY" - "$1" "$2" << 'EOF'
import json, sys
doc = None
for line in open(sys.argv[1], errors="replace"):
    line = line.strip()
    if line.startswith("{"):
        try:
            doc = json.loads(line)
        except ValueError:
            pass
v = doc
for k in sys.argv[2].split("."):
    v = v.get(k) if isinstance(v, dict) else None
print(json.dumps(v) if not isinstance(v, str) else v)
EOF
}

unpack_bundle
say "== $("$C" --version 2>&1 | head -1); $(cd /opt/torch/.venv/lib/python3*/site-packages && echo pip-*.dist-info | sed 's/-\([^-]*\)\.dist-info$/ \1/')"
command -v nvidia-smi > /dev/null && say "   $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"

say "== 1. guard -- pip uninstall -y nvidia-cudnn-cu13 (no --allow-break)"
copy_venv "$V"
files "$V" > /tmp/g_before.txt
r=$(t "$C" guard --venv "$V" -- "$V/bin/python3" -m pip uninstall -y nvidia-cudnn-cu13)
cp /tmp/t.out "$OUT/guard_refused.txt"
say "  $r"
grep -E "NEEDs|metadata-only|refused" /tmp/t.out | cut -c1-220 | head -6 | sed 's/^/    /' >> "$log"
files "$V" > /tmp/g_after.txt
sm=$(same /tmp/g_before.txt /tmp/g_after.txt)
say "  listing against before: $sm"
ran=$(grep -c "Uninstalling" /tmp/t.out)
verdict "refused (exit $(rc_of "$r")), pip did not run ($ran 'Uninstalling' lines), the listing unchanged" \
  "$([ "$(rc_of "$r")" = 1 ] && [ "$ran" = 0 ] && [ "${sm%% *}" = IDENTICAL ] && echo yes)"

say "== 2. the same with --allow-break --json"
r=$(t "$C" guard --allow-break --json --venv "$V" -- "$V/bin/python3" -m pip uninstall -y nvidia-cudnn-cu13)
cp /tmp/t.out "$OUT/guard_allow_break.json"
say "  $r"
for k in exit_code before.probe.outcome before.probe.cudnn_version probed_after after_probe.outcome \
  after_probe.cudnn_version after_probe.message undone seconds; do
  say "    $k: $(field /tmp/t.out "$k" | cut -c1-300)"
done
"$PY" - /tmp/t.out >> "$log" << 'EOF'
import json, sys
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("{"):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        for w in doc.get("worse", []):
            print(f"    worse: {w.get('kind')}[{w.get('what')}]: {str(w.get('message'))[:220]}")
EOF
after_cudnn=$(field /tmp/t.out after_probe.cudnn_version)
undone=$(field /tmp/t.out undone)
probe_worse=$(grep -c '"kind":"probe"' /tmp/t.out)
files "$V" > /tmp/g_after.txt
sm=$(same /tmp/g_before.txt /tmp/g_after.txt)
say "  listing against before: $sm"
tc=$(torch_cudnn "$V")
say "  torch conv2d after: $tc"
verdict "--allow-break: pip ran, the probe saw cuDNN $after_cudnn (the system's 9.14), undone (exit $(rc_of "$r"), undone=$undone), listing back, torch $tc" \
  "$([ "$(rc_of "$r")" = 1 ] && [ "$undone" = true ] && [ "${after_cudnn:0:3}" = 914 ] && [ "$probe_worse" -ge 1 ] &&
    [ "${sm%% *}" = IDENTICAL ] && [ "$tc" = "cudnn 91900" ] && echo yes)"

say "== 3. overhead around a harmless pip uninstall of a leaf, $ROUNDS rounds interleaved"
rm -rf /tmp/gleaf && mkdir -p /tmp/gleaf
echo "X = 1" > /tmp/gleaf/x.py
leaf=$("$PY" tests/e2e/make_wheel.py /tmp/gleaf guardleaf 1.0 guardleaf/__init__.py=/tmp/gleaf/x.py)
copy_venv "$V"
bare=() guarded=() probed=()
install_leaf() { "$V/bin/python3" -m pip install -q --no-index --no-deps "$leaf" > /dev/null 2>&1; }
for i in $(seq "$ROUNDS"); do
  install_leaf
  b=$(t "$V/bin/python3" -m pip uninstall -y guardleaf)
  install_leaf
  g=$(t "$C" guard --json --venv "$V" -- "$V/bin/python3" -m pip uninstall -y guardleaf)
  cp /tmp/t.out "$OUT/guard_leaf_$i.json"
  bare+=("$(secs "$b")")
  guarded+=("$(secs "$g")")
  probed+=("$(field /tmp/t.out probed_after)/$(field /tmp/t.out before.probe.ran)/rc$(rc_of "$g")")
  say "  round $i: bare $b | guard $g (probed after/before, rc: ${probed[-1]}; guard's own $(field /tmp/t.out seconds) s)"
  say "    phases: $(field /tmp/t.out phases)"
done
stats=$("$PY" - "${bare[*]}" "${guarded[*]}" << 'EOF'
import statistics, sys
b = [float(x) for x in sys.argv[1].split()]
g = [float(x) for x in sys.argv[2].split()]
d = [y - x for x, y in zip(b, g)]
print(f"bare median {statistics.median(b):.3f} s (min {min(b):.3f}); guard median {statistics.median(g):.3f} s "
      f"(min {min(g):.3f}); overhead median {statistics.median(d):.3f} s, max {max(d):.3f} s")
print("ok" if statistics.median(d) <= 1.0 else "over")
EOF
)
say "  ${stats%$'\n'*}"
snaps=$(find "$V/.cudafix/snapshots" -mindepth 1 -maxdepth 1 2> /dev/null | wc -l)
say "  snapshots left: $snaps"
no_after=yes
for p in "${probed[@]}"; do [ "${p%%/*}" = false ] && [ "${p##*/}" = rc0 ] || no_after=no; done
verdict "leaf uninstall under guard: exit 0 each round, no probe after, no snapshot left ($snaps), overhead median at most 1 s (${stats##*$'\n'})" \
  "$([ "$no_after" = yes ] && [ "$snaps" = 0 ] && [ "${stats##*$'\n'}" = ok ] && echo yes)"

say "== verdicts"
for v in "${verdicts[@]}"; do say "$v"; done
cat "$log"
exit $fail
