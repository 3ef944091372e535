#!/usr/bin/env python3
"""Fails on a function over 100 lines in resolver/, rules/, installer/ or cli/ (tests aside).

Functions are found and measured by universal-ctags (a definition's first line to its last, both
counted), as docs/ARCHITECTURE.md's standard counts them. A function still over the limit may be
named in tests/layout/long_functions.txt ("COUNT PATH NAME" a line, '#' comments), each with its
line count now: a function over 100 lines that is not listed, or listed with another count, fails,
and so does a listed one that no longer is over (split, renamed or gone), so that the list can only
shrink and cannot go stale. Each problem is printed, and the exit status is 1.

usage: check_function_length.py [ROOT [ALLOW_LIST]]
"""
import collections
import pathlib
import shutil
import subprocess
import sys
import tempfile

LIMIT = 100
FOLDERS = ["resolver", "rules", "installer", "cli"]


def long_functions(root: pathlib.Path):
    """(path, name) -> the line counts of the functions of that name in that file over LIMIT."""
    folders = [f for f in FOLDERS if (root / f).is_dir()]
    found = collections.defaultdict(list)
    if not folders:
        return found
    # Universal-ctags 5.9 (Debian 12's) finds no function inside a C++20 nested inline namespace
    # (`namespace cudafix::resolver::inline base {`, every file of resolver/): it reads a copy of
    # the sources with `::inline ` taken out, which keeps every line where it was.
    with tempfile.TemporaryDirectory() as tmp:
        for folder in folders:
            for source in (root / folder).rglob("*"):
                if source.is_file() and source.suffix in (".c", ".h", ".cpp", ".hpp"):
                    copy = pathlib.Path(tmp) / source.relative_to(root)
                    copy.parent.mkdir(parents=True, exist_ok=True)
                    copy.write_text(source.read_text(errors="replace").replace("::inline ", "::"))
        run = subprocess.run(["ctags", "-R", "--languages=C,C++", "--kinds-C++=f", "--kinds-C=f", "--fields=+ne",
                              "-o", "-"] + folders, cwd=tmp, capture_output=True, text=True, check=True)
    for line in run.stdout.splitlines():
        cols = line.split("\t")
        if len(cols) < 4:
            continue
        fields = dict(c.split(":", 1) for c in cols[3:] if ":" in c)
        if "line" not in fields or "end" not in fields:
            continue
        path = cols[1]
        if "tests" in pathlib.PurePosixPath(path).parts:
            continue
        count = int(fields["end"]) - int(fields["line"]) + 1
        if count > LIMIT:
            found[(path, cols[0])].append(count)
    return found


def allowed(list_path: pathlib.Path):
    """(path, name) -> the counts the allow-list names, and the problems of its own lines."""
    listed = collections.defaultdict(list)
    problems = []
    if not list_path.exists():
        return listed, problems
    for number, line in enumerate(list_path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if len(words) != 3 or not words[0].isdigit():
            problems.append(f"{list_path.name}:{number}: not COUNT PATH NAME: {line}")
            continue
        listed[(words[1], words[2])].append(int(words[0]))
    return listed, problems


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    list_path = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else root / "tests/layout/long_functions.txt"
    if not shutil.which("ctags"):
        print("ctags not found: install universal-ctags (.ci/install-deps --test)")
        return 1
    found = long_functions(root)
    listed, problems = allowed(list_path)
    for key in sorted(set(found) | set(listed)):
        path, name = key
        now, said = sorted(found.get(key, [])), sorted(listed.get(key, []))
        if now == said:
            continue
        if not said:
            for count in now:
                problems.append(f"{path}: {name} is {count} lines, over {LIMIT}: split it along the ideas it holds")
        elif not now:
            problems.append(f"{path}: {name} is listed in {list_path.name} ({', '.join(map(str, said))} lines) but "
                            f"is no longer over {LIMIT}: take it off the list")
        else:
            problems.append(f"{path}: {name} is {', '.join(map(str, now))} lines, listed in {list_path.name} as "
                            f"{', '.join(map(str, said))}: give its count now (the list only shrinks)")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} {'problem' if len(problems) == 1 else 'problems'}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
