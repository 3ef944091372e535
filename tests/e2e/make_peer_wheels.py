#!/usr/bin/env python3
"""Writes wheels at the edges of the binary distribution format that pip and pypa/installer both
install (issue 53), one per edge, each otherwise plain.

usage: make_peer_wheels.py OUTDIR
Prints a JSON list of {"case", "file", "dist"}: the wheel and the dist pip lists.
"""
import base64
import hashlib
import json
import os
import sys
import zipfile

OUT = sys.argv[1]
cases = []


def digest(data):
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def info_of(arc, mode=0o644, system=3):
    zi = zipfile.ZipInfo(arc, (2026, 1, 1, 0, 0, 0))
    zi.compress_type = zipfile.ZIP_DEFLATED
    zi.create_system = system
    zi.external_attr = (0o100000 | mode) << 16 if mode else 0
    return zi


def build(case, extra=(), folders=(), record_extra="", version="1.0", scripts=""):
    """A wheel named peer_CASE: `extra` members (ZipInfo or name, bytes), `folders` entries (with
    their RECORD rows), `record_extra` rows added to RECORD as they are."""
    dist = "peer_" + case
    info = f"{dist}-{version}.dist-info"
    path = os.path.join(OUT, f"{dist}-{version}-py3-none-any.whl")
    members = [(f"{dist}/__init__.py", b"def main():\n    print('ok')\n")] + list(extra)
    members.append((f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode()))
    members.append((f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))
    if scripts:
        members.append((f"{info}/entry_points.txt", scripts.encode()))
    rows = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in folders:
            zi = zipfile.ZipInfo(f, (2026, 1, 1, 0, 0, 0))
            zi.external_attr = (0o40755 << 16) | 0x10
            z.writestr(zi, b"")
            rows.append(f"{f},,")
        for arc, data in members:
            zi = arc if isinstance(arc, zipfile.ZipInfo) else info_of(arc)
            z.writestr(zi, data)
            if not zi.filename.endswith((".jws", ".p7s")):
                rows.append(f"{zi.filename},sha256={digest(data)},{len(data)}")
        z.writestr(f"{info}/RECORD", "\n".join(rows) + "\n" + record_extra + f"{info}/RECORD,,\n")
    cases.append({"case": case, "file": path, "dist": dist})


# Signature files: the binary distribution format keeps them out of the wheel's RECORD, which they
# sign; pypa/installer 0.6 wants a row for every member, so they are listed without a hash, as
# wheel's own `wheel sign` listed them.
info = "peer_signed-1.0.dist-info"
build("signed", extra=[(f"{info}/RECORD.jws", b'{"signatures": []}\n'), (f"{info}/RECORD.p7s", b"\x30\x03\x02\x01\x00")],
      record_extra=f"{info}/RECORD.jws,,\n{info}/RECORD.p7s,,\n")
# Folder entries, with RECORD rows of their own (`pkg/`, as some zip tools and old bdist_wheel wrote).
build("folders", folders=["peer_folders/", "peer_folders/sub/"],
      extra=[("peer_folders/sub/mod.py", b"X = 1\n")])
# Executable bits in the external attributes of an archive made on another system (create_system
# 0, MS-DOS; 19, OS X): pip and pypa/installer take the mode whatever system made the zip.
build("modes", extra=[(info_of("peer_modes/run_dos.sh", 0o755, 0), b"#!/bin/sh\necho dos\n"),
                      (info_of("peer_modes/run_osx.sh", 0o755, 19), b"#!/bin/sh\necho osx\n"),
                      (info_of("peer_modes/plain.txt", 0o644, 0), b"plain\n")])
# A version that is not PEP 440 (pytz's 2010i) but the same in the file name and the dist-info.
build("legacy", version="2010i")
# An entry point with extras, which pip and pypa/installer drop from the script.
build("entry", scripts="[console_scripts]\npeer-entry = peer_entry:main [extra]\n")
json.dump(cases, sys.stdout)
