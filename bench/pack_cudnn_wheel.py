#!/usr/bin/env python3
"""Packs the nvidia-cudnn-cu13 wheel back out of a venv: the dist's files as its RECORD lists
them, deflated as NVIDIA's are, with a RECORD of just those files.

  pack_cudnn_wheel.py SITE_PACKAGES OUTDIR [DIST_PREFIX]   (default nvidia_cudnn_cu13)
"""
import csv
import glob
import io
import os
import sys
import zipfile

site, out = sys.argv[1], sys.argv[2]
prefix = sys.argv[3] if len(sys.argv) > 3 else "nvidia_cudnn_cu13"
info = glob.glob(os.path.join(site, f"{prefix}-*.dist-info"))[0]
name = os.path.basename(info)
version = name[len(prefix) + 1:-len(".dist-info")]
path = os.path.join(out, f"{prefix}-{version}-py3-none-manylinux_2_27_x86_64.whl")
rows = []
with open(os.path.join(info, "RECORD"), newline="") as f:
    for row in csv.reader(f):
        p = os.path.normpath(os.path.join(site, row[0]))
        if (os.path.isfile(p) and "__pycache__" not in row[0] and row[0] != f"{name}/RECORD"
                and not row[0].endswith(("INSTALLER", "REQUESTED", "direct_url.json"))):
            rows.append(row)
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
    for row in rows:
        z.write(os.path.join(site, row[0]), row[0])
    text = io.StringIO()
    w = csv.writer(text, lineterminator="\n")
    for row in rows:
        w.writerow(row)
    w.writerow([f"{name}/RECORD", "", ""])
    z.writestr(f"{name}/RECORD", text.getvalue())
unpacked = sum(os.path.getsize(os.path.join(site, r[0])) for r in rows)
print(f"wheel: {path} {os.path.getsize(path) / 2**20:.0f} MiB, {len(rows)} files, {unpacked / 2**20:.0f} MiB unpacked")
