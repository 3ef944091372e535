#!/usr/bin/env python3
"""The cudafix wheel, made from the release bundle, as ruff and uv ship their binaries: the
binaries under cudafix-<version>.data/scripts/ (pip puts them in the environment's bin/), the
libraries beside them under .data/data/lib/cudafix/ (<prefix>/lib/cudafix, which the binary's
DT_RPATH $ORIGIN/../lib/cudafix names), the man page and completions under .data/data/share/,
and a small `cudafix` package so that `python -m cudafix` runs the binary.

usage: make_wheel.py BUNDLE.tar.gz OUTDIR    (prints the wheel's path)

The platform tag is manylinux_2_N_<arch> with N the newest glibc symbol version the binaries and
libraries ask for: what a Debian 12 build needs (2.36) is what the tag promises, no less.
"""
import base64
import hashlib
import io
import os
import re
import sys
import tarfile
import zipfile

PACKAGE_INIT = '''"""cudafix: finds and repairs broken CUDA libraries in Python environments.

The work is done by the cudafix binary this wheel installed into the environment's scripts
folder; `python -m cudafix ARGS` runs it.
"""
import os
import sysconfig

__version__ = "{version}"


def binary():
    """The path of the cudafix binary installed with this package."""
    return os.path.join(sysconfig.get_path("scripts"), "cudafix")
'''

PACKAGE_MAIN = '''import os
import sys

from cudafix import binary

if __name__ == "__main__":
    os.execv(binary(), [binary()] + sys.argv[1:])
'''


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def glibc_minor(data):
    versions = [int(m) for m in re.findall(rb"GLIBC_2\.(\d+)", data)]
    return max(versions, default=17)


def main():
    bundle, out = sys.argv[1:3]
    members = {}  # path in the bundle (without its top folder) -> (bytes, mode)
    with tarfile.open(bundle) as tar:
        for m in tar.getmembers():
            if m.isfile():
                rel = m.name.split("/", 1)[1]
                members[rel] = (tar.extractfile(m).read(), m.mode)
    top = os.path.basename(bundle)
    version = re.match(r"cudafix-([^-]+)-linux-", top).group(1)
    arch = re.search(r"-linux-([^.]+)\.tar\.gz$", top).group(1)
    minor = max(glibc_minor(data) for rel, (data, _) in members.items() if rel.startswith(("bin/", "lib/")))
    tag = "py3-none-manylinux_2_%d_%s" % (minor, arch)
    data_dir = "cudafix-%s.data" % version
    info = "cudafix-%s.dist-info" % version
    files = []  # (arcname, bytes, mode)
    files.append(("cudafix/__init__.py", PACKAGE_INIT.format(version=version).encode(), 0o644))
    files.append(("cudafix/__main__.py", PACKAGE_MAIN.encode(), 0o644))
    for rel, (data, mode) in sorted(members.items()):
        if rel.startswith("bin/"):
            files.append(("%s/scripts/%s" % (data_dir, rel[4:]), data, 0o755))
        elif rel.startswith(("lib/", "share/")):
            files.append(("%s/data/%s" % (data_dir, rel), data, mode & 0o777))
    readme = members.get("share/doc/cudafix/README.md", (b"", 0))[0].decode()
    metadata = (
        "Metadata-Version: 2.1\nName: cudafix\nVersion: %s\n"
        "Summary: finds and repairs broken CUDA libraries in Python GPU environments\n"
        "Requires-Python: >=3.8\nDescription-Content-Type: text/markdown\n\n%s" % (version, readme))
    wheel = "Wheel-Version: 1.0\nGenerator: cudafix make_wheel.py\nRoot-Is-Purelib: false\nTag: %s\n" % tag
    files.append(("%s/METADATA" % info, metadata.encode(), 0o644))
    files.append(("%s/WHEEL" % info, wheel.encode(), 0o644))
    record = io.StringIO()
    for arc, data, _ in files:
        record.write("%s,%s,%d\n" % (arc, record_hash(data), len(data)))
    record.write("%s/RECORD,,\n" % info)
    files.append(("%s/RECORD" % info, record.getvalue().encode(), 0o644))
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "cudafix-%s-%s.whl" % (version, tag))
    with zipfile.ZipFile(path + ".part", "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data, mode in files:
            zi = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(path + ".part", path)
    print(path)


if __name__ == "__main__":
    main()
