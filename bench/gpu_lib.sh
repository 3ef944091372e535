# shellcheck shell=bash
# Sourced (from the repository root) by the GPU scripts on the GPU machine, which set $log (the
# file say appends to) before, or call gpu_start after. Results under $OUT, no venv or package index from the
# caller's environment, and the helpers both scripts print with. The copies of the real venv are
# hardlink copies: a hardlinked file is the original's file, so they are only ever changed by pip
# (which replaces and unlinks), uv or cudafix (by rename), never written in place.
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
unset VIRTUAL_ENV PIP_FIND_LINKS PIP_INDEX_URL UV_INDEX_URL
# shellcheck disable=SC2154 # $log is the sourcing script's
say() { echo "$@" >> "$log"; }
t() { # t CMD...: its wall time and exit code; its output in /tmp/t.out
  local s=$EPOCHREALTIME
  "$@" > /tmp/t.out 2>&1
  local rc=$? e=$EPOCHREALTIME
  awk -v s="$s" -v e="$e" -v rc="$rc" 'BEGIN { printf "%.3f s rc=%d", e - s, rc }'
}
torch_conv='import torch; x=torch.randn(1,3,16,16,device="cuda"); y=torch.nn.functional.conv2d(x, torch.randn(4,3,3,3,device="cuda")); torch.cuda.synchronize(); print("cudnn", torch.backends.cudnn.version())'
torch_cudnn() { (cd /tmp && "$1/bin/python3" -c "$torch_conv" 2>&1 | tail -1); }
listing() { (cd "$1" && find . -path ./.cudafix -prune -o -path ./.lock -prune -o -printf '%p %i %s %m %l\n' | sort); }
same() { if diff -q "$1" "$2" > /dev/null; then echo "IDENTICAL ($(wc -l < "$1") paths, inode and size each)"; else echo "DIFFERS:"; diff "$1" "$2" | head -5; fi; }
copy_venv() { rm -rf "$1" && cp -al /opt/torch/.venv "$1"; }
# The start of a script that sets no $log before sourcing this: its log, $OUT/NAME.log, emptied,
# the release bundle unpacked ($C) and the real venv's interpreter ($py).
gpu_start() {
  log=$OUT/$1.log
  : > "$log"
  unpack_bundle
  # shellcheck disable=SC2034 # $py is for the sourcing script
  py=/opt/torch/.venv/bin/python3
}
# The seconds since $EPOCHREALTIME was `$1`, printed with the awk format `$2` (default "%.2f").
secs_since() { awk -v s="$1" -v e="$EPOCHREALTIME" -v f="${2:-%.2f}" 'BEGIN { printf f, e - s }'; }
# The release bundle (contrib/release/make_bundle.sh .dev/release) unpacked in /tmp/cf; $C runs it.
unpack_bundle() {
  rm -rf /tmp/cf && mkdir -p /tmp/cf && tar -xzf .dev/release/cudafix-*-linux-x86_64.tar.gz -C /tmp/cf --strip-components=1
  # shellcheck disable=SC2034 # $C is for the sourcing script
  C=/tmp/cf/bin/cudafix
}
