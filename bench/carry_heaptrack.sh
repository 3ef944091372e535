#!/usr/bin/env bash
# Debian's heaptrack, made to run where it is not installed (the GPU machine, Ubuntu 24.04): its
# script, heaptrack_print, the preload library and interpreter it finds by relative paths, and the
# libraries they load beyond glibc and libstdc++ (libunwind, boost, bzip2, zstd) in lib/extra,
# under OUT (default .dev/heaptrack). Carry OUT and run a plan under it through range_real_gpu.sh:
#   WRAP="env LD_LIBRARY_PATH=$OUT/lib/extra $OUT/bin/heaptrack -o /tmp/ht" bash bench/range_real_gpu.sh DIST
#   env LD_LIBRARY_PATH=$OUT/lib/extra $OUT/bin/heaptrack_print /tmp/ht.*
# (apt-get install heaptrack first, here.)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.dev/heaptrack}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/heaptrack/libexec" "$out/lib/extra"
cp /usr/bin/heaptrack /usr/bin/heaptrack_print "$out/bin/"
cp /usr/lib/heaptrack/*.so "$out/lib/heaptrack/"
cp /usr/lib/heaptrack/libexec/* "$out/lib/heaptrack/libexec/"
for lib in libunwind.so.8 libboost_iostreams.so.1.74.0 libboost_program_options.so.1.74.0 \
  libboost_filesystem.so.1.74.0 libbz2.so.1.0 libzstd.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$lib" "$out/lib/extra/"
done
echo "$out"
