#!/usr/bin/env python3
"""Fails when a file includes a header against the project's dependency order.

The order is docs/ARCHITECTURE.md's: the resolver's rooms lowest first, then rules/, installer/,
cli/. A file may include headers of its own folder and of the folders below it, never above.
Each offending include is printed with its file and line, and the exit status is 1.
"""
import pathlib
import re
import sys

ORDER = ["resolver/base", "resolver/pep", "resolver/elf", "resolver/loader", "resolver/env", "resolver/plan",
         "rules", "installer", "installer/apply", "cli"]
# installer/ and rules/ are siblings above the resolver: neither includes the other.
SIBLINGS = {("rules", "installer"), ("installer", "rules"), ("installer/apply", "rules")}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path: str):
    for i in reversed(range(len(ORDER))):
        if path == ORDER[i] or path.startswith(ORDER[i] + "/"):
            return i
    return None


def problems(root: pathlib.Path):
    found = []
    for folder in ("resolver", "rules", "installer", "cli"):
        for f in sorted((root / folder).rglob("*")):
            if f.suffix not in (".cpp", ".hpp", ".c", ".h"):
                continue
            rel = f.relative_to(root).as_posix()
            here = layer_of(rel)
            if here is None:
                found.append(f"{rel}: in no layer of the order (add its folder to ORDER and ARCHITECTURE.md)")
                continue
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                there = layer_of(m.group(1))
                if there is None:
                    continue
                if there > here or (ORDER[here], ORDER[there]) in SIBLINGS:
                    found.append(f"{rel}:{n}: includes {m.group(1)}, but {ORDER[there]}/ is not below {ORDER[here]}/")
    return found


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    found = problems(root)
    for p in found:
        print(p)
    print(f"{len(found)} includes against the layer order")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
