#!/usr/bin/env python3
"""Writes hostile and broken wheels for the installer's tests, one per way a wheel can be wrong.

usage: make_bad_wheels.py OUTDIR
Prints a JSON list of {"file", "expect"}: the wheel's path and a phrase cudafix's refusal must
contain. Every wheel is otherwise valid (a dist-info with METADATA, WHEEL and a RECORD that
matches), so that each is refused for its one fault.
"""
import base64
import hashlib
import json
import os
import struct
import sys
import zipfile

OUT = sys.argv[1]


def digest(data):
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(case, members, name="bad", version="1.0", wheel_version="1.0", record=True, extra_record="",
          skip_record_for=(), record_override=None, compression=zipfile.ZIP_DEFLATED, infos=None, zip64=False):
    """members: list of (arcname or ZipInfo, bytes)."""
    info = infos if infos is not None else [f"{name}-{version}.dist-info"]
    path = os.path.join(OUT, case, f"{name}-{version}-py3-none-any.whl")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rows = []
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        def add(arc, data):
            zi = arc if isinstance(arc, zipfile.ZipInfo) else zipfile.ZipInfo(arc, (2026, 1, 1, 0, 0, 0))
            zi.compress_type = compression
            if zip64:
                with z.open(zi, "w", force_zip64=True) as f:
                    f.write(data)
            else:
                z.writestr(zi, data)
            if zi.filename not in skip_record_for:
                rows.append(f"{zi.filename},sha256={digest(data)},{len(data)}")
        for arc, data in members:
            add(arc, data)
        for i in info:
            add(f"{i}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode())
            add(f"{i}/WHEEL", f"Wheel-Version: {wheel_version}\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n".encode())
        if record:
            text = record_override if record_override is not None else "\n".join(rows) + "\n" + extra_record
            z.writestr(f"{info[0]}/RECORD", (text + f"{info[0]}/RECORD,,\n").encode())
    return path


def patch(path, old, new):
    data = open(path, "rb").read()
    assert old in data, (path, old)
    open(path, "wb").write(data.replace(old, new))


cases = []


def case(name, expect, path):
    cases.append({"case": name, "file": path, "expect": expect})


ok = [("bad/__init__.py", b"x = 1\n")]
case("traversal", "'..' component", build("traversal", ok + [("bad/../../evil.py", b"evil")]))
case("absolute", "an absolute path", build("absolute", ok + [("/etc/evil", b"evil")]))
case("backslash", "a backslash", build("backslash", ok + [("bad\\..\\evil.py", b"evil")]))
case("drive", "a drive letter", build("drive", ok + [("C:/evil.py", b"evil")]))
case("control", "bad/ev\\x01il.py: refused for a NUL or control character", build("control", ok + [("bad/ev\x01il.py", b"evil")]))
link = zipfile.ZipInfo("bad/link", (2026, 1, 1, 0, 0, 0))
link.create_system = 3
link.external_attr = (0o120777 << 16)
case("symlink", "a symbolic link", build("symlink", ok + [(link, b"/etc/passwd")]))
fifo = zipfile.ZipInfo("bad/fifo", (2026, 1, 1, 0, 0, 0))
fifo.create_system = 3
fifo.external_attr = (0o010644 << 16)
case("fifo", "a device, FIFO or socket", build("fifo", ok + [(fifo, b"")]))
import warnings
warnings.simplefilter("ignore")
case("duplicate", "a second member of this name", build("duplicate", ok + [("bad/__init__.py", b"x = 2\n")]))
case("bzip2", "compression method 12", build("bzip2", ok, compression=zipfile.ZIP_BZIP2))
case("no_dist_info", "no .dist-info folder", build("no_dist_info", ok, infos=[], record=False))
case("two_dist_info", "2 .dist-info folders", build("two_dist_info", ok, infos=["bad-1.0.dist-info", "other-1.0.dist-info"]))
p = build("name_mismatch", ok)
os.rename(p, p.replace("bad-1.0-py3", "good-1.0-py3"))
case("name_mismatch", "the file name says good", p.replace("bad-1.0-py3", "good-1.0-py3"))
case("wheel_version", "Wheel-Version 2.0", build("wheel_version", ok, wheel_version="2.0"))
case("data_scheme", "unknown .data scheme 'lib'", build("data_scheme", ok + [("bad-1.0.data/lib/x.so", b"x")]))
ep = [("bad-1.0.dist-info/entry_points.txt", b"[console_scripts]\n../../evil = bad:main\n")]
case("entry_point", "a script named '../../evil'", build("entry_point", ok + ep))
case("not_in_record", "not listed in RECORD",
     build("not_in_record", ok + [("bad/hidden.py", b"hidden")], skip_record_for=("bad/hidden.py",)))
case("record_extra", "listed in RECORD but not in the archive",
     build("record_extra", ok, extra_record="bad/ghost.py,sha256=" + digest(b"g") + ",1\n"))
good_hash = digest(b"x = 1\n")
# The member's bytes altered after RECORD was written: same size, other bytes, CRC fixed up by
# rewriting the member (stored), so that only RECORD's hash disagrees.
# The member holds other bytes of the same size than RECORD hashes: only the hash disagrees.
meta = b"Metadata-Version: 2.1\nName: bad\nVersion: 1.0\n"
wheel = b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
record_rows = (f"bad/__init__.py,sha256={digest(b'x = 1' + bytes([10]))},6\n"
               f"bad-1.0.dist-info/METADATA,sha256={digest(meta)},{len(meta)}\n"
               f"bad-1.0.dist-info/WHEEL,sha256={digest(wheel)},{len(wheel)}\n")
p = build("record_hash", [("bad/__init__.py", b"x = 9\n")], record_override=record_rows)
case("record_hash", "bad/__init__.py: its bytes do not match RECORD's sha256", p)
p = build("record_size", ok, record_override=f"bad/__init__.py,sha256={good_hash},99\n"
          "bad-1.0.dist-info/METADATA,sha256=" + digest(b"Metadata-Version: 2.1\nName: bad\nVersion: 1.0\n") + ",47\n"
          "bad-1.0.dist-info/WHEEL,sha256=" + digest(b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n") + ",72\n")
case("record_size", "RECORD says 99 bytes", p)
p = build("truncated", ok + [("bad/big.py", os.urandom(200000))])
data = open(p, "rb").read()
open(p, "wb").write(data[: len(data) // 2])
case("truncated", "no end of central directory record", p)
p = build("bomb", ok + [("bad/zeros.bin", b"\0" * (64 << 20))])
case("bomb", "a compression ratio over 1000:1", p)
case("zip64", "ZIP64 sizes or extra field", build("zip64", ok, zip64=True))
p = build("crc", [("bad/__init__.py", b"x = 1\n")], compression=zipfile.ZIP_STORED)
# The local header's CRC altered: the headers disagree.
d = bytearray(open(p, "rb").read())
crc = struct.pack("<I", zipfile.crc32(b"x = 1\n") & 0xffffffff)
at = d.find(crc)
d[at] ^= 0xff
open(p, "wb").write(bytes(d))
case("header_mismatch", "disagree on CRC or sizes", p)
json.dump(cases, sys.stdout)
