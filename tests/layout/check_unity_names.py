#!/usr/bin/env python3
"""Fails on a name that two source files of one target define at file scope, where README's
build (CUDAFIX_UNITY: CMake's unity build, batches of 8) can put both in one translation unit.

File by file (as CI builds) two files may each keep a helper of the same name and signature in
an anonymous namespace; in one unity batch they are one definition twice, and README's first
command stops compiling (resolver/plan/fix.cpp's and sync.cpp's install_site did, unseen by CI).
Which files share a batch moves as files are added, so every pair of a target's batched files
counts: the same file-local function (anonymous namespace or static) with the same signature in
the same namespace, or a class, struct, union, enum, typedef or variable of the same name at the
same namespace scope.

The targets and their batched files are CMake's own: ROOT configured in a temporary folder with
CUDAFIX_UNITY=ON (a second; nothing is compiled), each target's batches read from
[FOLDER/]CMakeFiles/<target>.dir/Unity/unity_*.cxx (files CMake builds alone are in none). Each file's
names come from universal-ctags. Each problem is printed, and the exit status is 1.

usage: check_unity_names.py [ROOT]
"""
import collections
import pathlib
import re
import subprocess
import sys
import tempfile

TYPE_KINDS = {"class", "struct", "union", "enum", "typedef", "variable"}


def batched_files(root: pathlib.Path, build: pathlib.Path):
    """target -> the source files (relative to root) its unity batches include."""
    subprocess.run(["cmake", "-S", str(root), "-B", str(build), "-DCUDAFIX_UNITY=ON"], check=True,
                   capture_output=True, text=True)
    out = collections.defaultdict(list)
    for batch in sorted(build.glob("**/CMakeFiles/*.dir/Unity/unity_*.cxx")):
        target = batch.parent.parent.name[: -len(".dir")]
        for m in re.finditer(r'#include "([^"]+)"', batch.read_text()):
            path = pathlib.Path(m.group(1))
            if path.is_relative_to(root):
                out[target].append(path.relative_to(root).as_posix())
    return out


def file_scope_names(root: pathlib.Path, files, tmp: pathlib.Path):
    """(path, key, line) for each name a file defines at file scope that a second definition in
    the same translation unit would clash with."""
    tmp.mkdir(parents=True, exist_ok=True)
    for f in files:
        copy = tmp / f
        copy.parent.mkdir(parents=True, exist_ok=True)
        # Universal-ctags 5.9 finds nothing inside `namespace a::b::inline c {`: a copy without
        # `::inline ` keeps every line where it was (tests/layout/check_function_length.py).
        copy.write_text((root / f).read_text(errors="replace").replace("::inline ", "::"))
    run = subprocess.run(["ctags", "--languages=C++", "--kinds-C++=fcsugtv", "--fields=+nsSKZ", "-o", "-"] + list(files),
                         cwd=tmp, capture_output=True, text=True, check=True)
    for line in run.stdout.splitlines():
        cols = line.split("\t")
        if len(cols) < 4 or cols[0].startswith("__anon"):  # a lambda
            continue
        kind = cols[3]  # its long name (--fields=+K), then NAME:VALUE fields
        fields = dict(c.split(":", 1) for c in cols[4:] if ":" in c)
        scope_kind, _, scope = fields.get("scope", "namespace:").partition(":")
        if scope_kind != "namespace":  # a member: its class is the name that clashes
            continue
        # Anonymous namespaces are one in one translation unit, whatever ctags calls each.
        scope = re.sub(r"__anon[0-9a-f]+", "(anonymous)", scope)
        local = "file" in fields or "(anonymous)" in scope
        if kind == "function" and local:
            yield cols[1], (scope, cols[0], fields.get("signature", "")), fields.get("line", "?")
        elif kind in TYPE_KINDS:
            yield cols[1], (scope, cols[0], ""), fields.get("line", "?")


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[2]).resolve()
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        targets = batched_files(root, pathlib.Path(tmp) / "build")
        for target, files in sorted(targets.items()):
            where = collections.defaultdict(list)
            for path, key, line in file_scope_names(root, files, pathlib.Path(tmp) / "src" / target):
                where[key].append(f"{path}:{line}")
            for (scope, name, signature), places in sorted(where.items()):
                if len({p.rsplit(':', 1)[0] for p in places}) > 1:
                    problems.append(f"{target}: {scope or '(global)'}::{name}{signature} is defined in "
                                    f"{' and '.join(places)}: one unity batch would hold both; keep one "
                                    "(a shared header) or name them apart")
    for p in problems:
        print(p)
    if not targets:
        print(f"no unity batches found configuring {root}")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
