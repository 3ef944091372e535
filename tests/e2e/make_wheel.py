#!/usr/bin/env python3
"""Builds a real wheel for the end-to-end tests, from files on disk (no network, no build backend).

usage: make_wheel.py OUTDIR NAME VERSION [ARCNAME=SOURCE ...] [--requires REQ ...] [--extra NAME ...]
                     [--console-script NAME=MODULE:FUNCTION ...] [--deflate] [--unix-mode OCTAL] [--tag TAG]
Members are stored, or deflated (as NVIDIA's wheels are) with --deflate. The files' Unix mode is
0755 without a file type, which cudafix, like pip, does not take as executable; --unix-mode 100755 makes them
executable regular files. --tag gives the wheel's tag (default py3-none-linux_x86_64), in its WHEEL and its name.
"""
import base64
import hashlib
import os
import sys
import zipfile


def main():
    out, name, version = sys.argv[1:4]
    files, requires, extras, scripts = [], [], [], []
    method = zipfile.ZIP_STORED
    unix_mode = 0o755
    tag = "py3-none-linux_x86_64"
    args = iter(sys.argv[4:])
    for a in args:
        if a == "--deflate":
            method = zipfile.ZIP_DEFLATED
        elif a == "--requires":
            requires.append(next(args))
        elif a == "--extra":
            extras.append(next(args))
        elif a == "--console-script":
            scripts.append(next(args))
        elif a == "--tag":
            tag = next(args)
        elif a == "--unix-mode":
            unix_mode = int(next(args), 8)
        else:
            arc, src = a.split("=", 1)
            files.append((arc, src))
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Provides-Extra: {e}\n" for e in extras)
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    py, abi, plats = tag.split("-")
    wheel = "Wheel-Version: 1.0\nGenerator: cudafix-tests\nRoot-Is-Purelib: false\n"
    wheel += "".join(f"Tag: {py}-{abi}-{p}\n" for p in plats.split("."))
    path = os.path.join(out, f"{dist}-{version}-{tag}.whl")
    record = []
    with zipfile.ZipFile(path, "w") as z:
        def add(arc, data):
            info_ = zipfile.ZipInfo(arc, (2026, 1, 1, 0, 0, 0))
            info_.compress_type = method
            z.writestr(info_, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arc},sha256={digest},{len(data)}")
        for arc, src in files:
            with open(src, "rb") as f:
                add(arc, f.read())
            z.getinfo(arc).external_attr = unix_mode << 16
        add(f"{info}/METADATA", metadata.encode())
        add(f"{info}/WHEEL", wheel.encode())
        if scripts:
            add(f"{info}/entry_points.txt", ("[console_scripts]\n" + "".join(s + "\n" for s in scripts)).encode())
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    print(path)


main()
