#!/usr/bin/env bash
# Seeds for the fuzz targets, from real inputs: make_seeds.sh FIXTURES OUT
set -euo pipefail
FIX=$1 OUT=$2
mkdir -p "$OUT"/{record,metadata,elf,ld_cache,wheel}
cp /etc/ld.so.cache "$OUT/ld_cache/host" 2>/dev/null || true
i=0
for f in $(find "$FIX" -name '*.so*' -type f | head -20); do cp "$f" "$OUT/elf/$((i++))"; done
printf 'torch/__init__.py,sha256=abc_-DEF,12\r\n"a,b.py",,\n../../../bin/x,,\n' > "$OUT/record/1"
printf 'Metadata-Version: 2.4\nName: torch\nVersion: 2.11.0\nRequires-Dist: cuda-toolkit[cublas]==13.0.2; platform_system == "Linux" and extra == "x"\nSummary: a\n b\n\nbody\n' > "$OUT/metadata/1"
# Wheels named as the target reads them: one with an ELF member and a requirement, one bare.
src=$(cd "$(dirname "$0")/../.." && pwd)
so=$(find "$FIX" -name 'libcudart.so.13' -type f | head -1)
w=$(python3 "$src/tests/e2e/make_wheel.py" "$OUT/wheel" fuzz 1.0 "fuzz/lib/libx.so=$so" --requires 'nvidia-cublas>=13')
mv "$w" "$OUT/wheel/1"
w=$(python3 "$src/tests/e2e/make_wheel.py" "$OUT/wheel" fuzz 1.0)
mv "$w" "$OUT/wheel/2"
