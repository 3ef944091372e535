#!/usr/bin/env python3
"""Writes wheels that pip and pypa/installer install and cudafix once refused (issue 35, class 9),
one per way, each otherwise plain.

usage: make_accepted_wheels.py OUTDIR
Prints a JSON list of {"case", "file", "dist", "script"}: the wheel, the dist pip lists, and a
console script it makes that prints "ok CASE" (or null).
"""
import base64
import hashlib
import json
import os
import sys
import zipfile

OUT = sys.argv[1]
cases = []


def digest(data, algo="sha256"):
    return base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode()


def build(case, extra=(), row=None, record_prefix="", record_suffix="", write=None, after=None, scripts=(),
          script_case=None):
    """A wheel named ok_CASE; `row(arc, data)` writes a RECORD row, `write(z, zinfo, data)` a
    member; `after(path)` alters the file; `scripts` are console-script names."""
    dist = "ok_" + case
    info = f"{dist}-1.0.dist-info"
    path = os.path.join(OUT, f"{dist}-1.0-py3-none-any.whl")
    row = row or (lambda arc, data: f"{arc},sha256={digest(data)},{len(data)}")
    rows = []
    members = [(f"{dist}/__init__.py", f"def main():\n    print('ok {case}')\n".encode())] + list(extra)
    members.append((f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n".encode()))
    members.append((f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))
    if scripts:
        members.append((f"{info}/entry_points.txt",
                        ("[console_scripts]\n" + "".join(f"{s} = {dist}:main\n" for s in scripts)).encode()))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in members:
            zi = zipfile.ZipInfo(arc, (2026, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = 0o644 << 16
            (write or (lambda z, zi, d: z.writestr(zi, d)))(z, zi, data)
            rows.append(row(arc, data))
        z.writestr(f"{info}/RECORD", record_prefix + "\n".join(rows) + f"\n{info}/RECORD,,\n" + record_suffix)
    if after:
        after(path)
    cases.append({"case": case, "file": path, "dist": dist,
                  "script": scripts[0] if scripts else None})
    return path


def forced_zip64(z, zi, data):
    with z.open(zi, "w", force_zip64=True) as f:
        f.write(data)


# ZIP64 local headers (zipfile's force_zip64: what any member over 2 GiB gets).
build("zip64_local", write=forced_zip64)
# A ZIP64 end record and locator, and ZIP64 sizes and offsets in the central directory: what
# zipfile writes for an archive over 4 GiB or 65,535 members, made here by lowering its limits.
saved = zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT
zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = 0, 0
build("zip64_end")
zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = saved
build("sha384", row=lambda arc, d: f"{arc},sha384={digest(d, 'sha384')},{len(d)}")
build("sha512", row=lambda arc, d: f"{arc},sha512={digest(d, 'sha512')},{len(d)}")
build("no_size", row=lambda arc, d: f"{arc},sha256={digest(d)},")
build("bom", record_prefix="\ufeff")
build("duplicate_rows", row=lambda arc, d: f"{arc},sha256={digest(d)},{len(d)}\n{arc},sha256={digest(d)},{len(d)}")
build("dot_slash_rows", row=lambda arc, d: f"./{arc},sha256={digest(d)},{len(d)}")
build("trailing_bytes", after=lambda p: open(p, "ab").write(b"\0trailing bytes after the archive\n" * 100))
build("dot_tool", scripts=[".tool-ok-dot-tool"])
build("dots_inside", scripts=["a..b-ok"])
build("colon_name", extra=[("ok_colon_name/a:b", b"colon\n")])
# A .data/scripts/ script whose `#!python` line is 3 MB long (before: the line's tail was kept
# after the new shebang, "#!.../bin/python6268...").
long_line = b"#!python " + os.urandom(3 << 19).hex().encode() + b"\nprint('ok long_shebang')\n"
build("long_shebang", extra=[("ok_long_shebang-1.0.data/scripts/long-shebang-ok", long_line)])
json.dump(cases, sys.stdout)
