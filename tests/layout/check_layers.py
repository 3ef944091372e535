#!/usr/bin/env python3
"""Fails when a file includes a header against the project's dependency order.

The order is docs/ARCHITECTURE.md's: the resolver's rooms lowest first, then rules/ and
installer/'s layers, cli/. A file may include headers of its own folder and of the folders below
it, never above. installer/ holds its layers' folders only: a source file at its root is in no
layer. Each offending file or include is printed with its file (and line), and the exit status is 1.
"""
import pathlib
import re
import sys

INSTALLER = ["installer/txn", "installer/wheel", "installer/source", "installer/probe", "installer/apply",
             "installer/guard"]
ORDER = ["resolver/base", "resolver/pep", "resolver/elf", "resolver/loader", "resolver/env", "resolver/plan",
         "rules"] + INSTALLER + ["cli"]
# installer/'s layers and rules/ are siblings above the resolver: neither includes the other.
SIBLINGS = {(a, b) for layer in INSTALLER for a, b in (("rules", layer), (layer, "rules"))}
# installer/guard/ sits beside installer/apply/: a guarded command is no plan, and neither includes the other.
SIBLINGS |= {("installer/apply", "installer/guard"), ("installer/guard", "installer/apply")}
SOURCES = (".cpp", ".hpp", ".c", ".h")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path: str):
    for i in reversed(range(len(ORDER))):
        if path == ORDER[i] or path.startswith(ORDER[i] + "/"):
            return i
    return None


def loose_installer_files(root: pathlib.Path):
    folder = root / "installer"
    if not folder.is_dir():
        return []
    return [f"{f.relative_to(root).as_posix()}: a source file at installer/'s root (it belongs in its layer's folder)"
            for f in sorted(folder.iterdir()) if f.is_file() and f.suffix in SOURCES]


def include_problems(rel: str, here: int, text: str):
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        header = m.group(1)
        there = layer_of(header)
        if there is None:
            if header.startswith("installer/"):
                found.append(f"{rel}:{n}: includes {header}, which is in no layer of installer/")
            continue
        if there > here or (ORDER[here], ORDER[there]) in SIBLINGS:
            found.append(f"{rel}:{n}: includes {header}, but {ORDER[there]}/ is not below {ORDER[here]}/")
    return found


def problems(root: pathlib.Path):
    found = loose_installer_files(root)
    for folder in ("resolver", "rules", "installer", "cli"):
        for f in sorted((root / folder).rglob("*")):
            if f.suffix not in SOURCES or not f.is_file():
                continue
            rel = f.relative_to(root).as_posix()
            here = layer_of(rel)
            if here is None:
                if f.parent != root / "installer":  # reported above
                    found.append(f"{rel}: in no layer of the order (add its folder to ORDER and ARCHITECTURE.md)")
                continue
            found += include_problems(rel, here, f.read_text(errors="replace"))
    return found


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    found = problems(root)
    for p in found:
        print(p)
    print(f"{len(found)} problems with the layer order")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
