#!/usr/bin/env bash
# The release bundle: cudafix-<version>-linux-x86_64.tar.gz in OUT (default dist/), made from a
# build (BUILD, default build/). It holds
#   bin/cudafix, bin/cudafix-probe      found their libraries through DT_RPATH $ORIGIN/../lib/cudafix
#   lib/cudafix/                        every shared library they load or dlopen beyond glibc
#                                       (bench/make_relocatable.sh collects them)
#   share/cudafix/knowledge.toml        the built-in knowledge, for reference
#   share/man/man1/cudafix.1, share/bash-completion/completions/cudafix,
#   share/zsh/site-functions/_cudafix, share/doc/cudafix/ (README and docs/),
#   share/cudafix/cudafix-node-check (Slurm), share/cudafix/ansible/library/cudafix.py
# It runs from any folder, with an empty environment (env -i), on a machine with none of the
# build dependencies; unpack it anywhere (or into /usr/local with --strip-components=1).
# Prints the tarball's path.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-dist}
build=${BUILD:-build}
version=$("$build/cudafix" --version | awk '{print $2}')
name="cudafix-$version-linux-$(uname -m)"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/$name"
BUILD="$build" bench/make_relocatable.sh "$root/bin" >/dev/null
mkdir -p "$root/lib" "$root/share/cudafix" "$root/share/man/man1" "$root/share/bash-completion/completions" \
  "$root/share/zsh/site-functions" "$root/share/doc/cudafix"
mv "$root/bin/lib" "$root/lib/cudafix"
cp rules/data/knowledge.toml "$root/share/cudafix/"
cp docs/cudafix.1 "$root/share/man/man1/"
cp contrib/completions/cudafix.bash "$root/share/bash-completion/completions/cudafix"
cp contrib/completions/_cudafix "$root/share/zsh/site-functions/"
cp README.md docs/transactions.md docs/rules.md docs/json.md docs/cli.md "$root/share/doc/cudafix/"
mkdir -p "$root/share/cudafix/ansible/library"
cp contrib/slurm/cudafix-node-check "$root/share/cudafix/"
cp contrib/ansible/library/cudafix.py "$root/share/cudafix/ansible/library/"
mkdir -p "$out"
tar -C "$stage" --owner=0 --group=0 --numeric-owner -czf "$out/$name.tar.gz" "$name"
echo "$out/$name.tar.gz"
