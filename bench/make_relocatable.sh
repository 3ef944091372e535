#!/usr/bin/env bash
# Packs build/cudafix with the shared libraries it needs beyond glibc into OUT (default
# .dev/cudafix-dist), found at run time through its RUNPATH $ORIGIN/lib: a build made on
# Debian 12 that runs on another distribution (the GPU machine runs Ubuntu 24.04).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.dev/cudafix-dist}
build=${BUILD:-build}  # the build folder whose binaries are packed
rm -rf "$out"
mkdir -p "$out/lib"
cp "$build/cudafix" "$build/cudafix-probe" "$out/"
# Debug information stays here: the copy only has to run.
strip --strip-debug "$out/cudafix" "$out/cudafix-probe"
# Everything ldd resolves except glibc's own objects, which must come from the host; and the
# libraries cudafix dlopens (libarchive, libcrypto, libcurl) with what they need, found through the same
# RUNPATH.
{
  ldd "$build/cudafix"
  for soname in libarchive.so.13 libcrypto.so.3 libcurl.so.4; do
    # awk reads to the end: an early exit would make ldconfig die of SIGPIPE, failing the pipe.
    path=$(ldconfig -p | awk -v s="$soname" '$1 == s && /x86-64/ && !found {print $NF; found = 1}')
    echo "$soname => $path (0)"
    ldd "$path"
  done
} | awk '/=> \// {print $3}' | sort -u |
while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
du -sh "$out"
