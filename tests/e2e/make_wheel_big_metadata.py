#!/usr/bin/env python3
"""Writes a wheel whose metadata members (WHEEL, METADATA, RECORD, entry_points.txt) are each
about SIZE_MB megabytes of text that deflates by about 100:1, below the zip reader's ratio limit
(1000:1), so that only the metadata cap (installer/wheel/zip_reader.hpp: k_max_metadata) stops them.

usage: make_wheel_big_metadata.py OUTDIR SIZE_MB      prints the wheel's path
"""
import os
import sys
import zipfile


def padded_text(prefix, n):
    """`prefix`, then lines to about n bytes: two random hex digits in every 300 bytes. One MiB of
    them repeated: deflate's window (32 KiB) cannot see the repeats, and it is quick to make."""
    pad = b" = m:f  #" + b"-" * 287 + b"\n"
    tokens = os.urandom(3500).hex().encode()
    block = b"".join(b"s" + tokens[2 * i:2 * i + 2] + pad for i in range(3500))
    return prefix + block * (n // len(block) + 1)


def main():
    out, size = sys.argv[1], int(sys.argv[2]) << 20
    info = "big_meta-1.0.dist-info"
    path = os.path.join(out, "big_meta-1.0-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("big_meta/__init__.py", b"")
        z.writestr(f"{info}/METADATA", padded_text(b"Metadata-Version: 2.1\nName: big-meta\nVersion: 1.0\n\n", size))
        z.writestr(f"{info}/WHEEL",
                   padded_text(b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\nX-Pad: ", size))
        z.writestr(f"{info}/entry_points.txt", padded_text(b"[console_scripts]\n", size))
        z.writestr(f"{info}/RECORD", padded_text(b"", size))
    print(path)


if __name__ == "__main__":
    main()
