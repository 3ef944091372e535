# Sourced (from the repository root) by the scripts that run on the GPU machine: the relocatable
# cudafix in $C (bench/make_relocatable.sh), results under $OUT, no venv active, and copy_venv
# DIR, a hardlink copy of the real venv. A hardlinked file is the original's file, so the copies
# are only ever changed by pip (which replaces and unlinks) or by rename, never written in place.
C=$PWD/.dev/cudafix-dist/cudafix
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
unset VIRTUAL_ENV
copy_venv() { rm -rf "$1" && cp -al /opt/torch/.venv "$1"; }
