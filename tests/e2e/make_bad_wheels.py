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
          skip_record_for=(), record_override=None, compression=zipfile.ZIP_DEFLATED, infos=None, zip64=False,
          metadata_name=None, tag="py3-none-any", metadata_extra="", file_version=None):
    """members: list of (arcname or ZipInfo, bytes); `tag` the file name's tags."""
    info = infos if infos is not None else [f"{name}-{version}.dist-info"]
    path = os.path.join(OUT, case, f"{name}-{file_version or version}-{tag}.whl")
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
            shown = name if metadata_name is None else metadata_name
            add(f"{i}/METADATA", (f"Metadata-Version: 2.1\n" + (f"Name: {shown}\n" if shown else "") +
                                  f"Version: {version}\n" + metadata_extra).encode())
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
# METADATA's Name is what pip list shows and what cudafix names the dist by: one naming another
# project than the folder's (the wheel of `bad` listed as torch) is refused, and so is none.
case("metadata_name", "its Name is torch, its folder's bad", build("metadata_name", ok, metadata_name="torch"))
case("metadata_no_name", "METADATA: no Name header", build("metadata_no_name", ok, metadata_name=""))
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
p = build("crc", [("bad/__init__.py", b"x = 1\n")], compression=zipfile.ZIP_STORED)
# The local header's CRC altered: the headers disagree.
d = bytearray(open(p, "rb").read())
crc = struct.pack("<I", zipfile.crc32(b"x = 1\n") & 0xffffffff)
at = d.find(crc)
d[at] ^= 0xff
open(p, "wb").write(bytes(d))
case("header_mismatch", "disagree on CRC or sizes", p)
def members_of(data):
    """{name: (central header offset, local header offset)} of a zip's bytes (no ZIP64)."""
    end = data.rfind(b"PK\x05\x06")
    count, _, cd = struct.unpack("<HII", data[end + 10:end + 20])
    out, at = {}, cd
    for _ in range(count):
        n, e, c = struct.unpack("<HHH", data[at + 28:at + 34])
        local = struct.unpack("<I", data[at + 42:at + 46])[0]
        out[data[at + 46:at + 46 + n].decode()] = (at, local)
        at += 46 + n + e + c
    return out


def patch_member(path, name, central=None, local=None):
    """Overwrites fields of one member's headers: {"csize"|"usize"|"crc"|"name": value}, in the
    central directory entry, the local header, or both (given the same dict twice)."""
    d = bytearray(open(path, "rb").read())
    c_at, l_at = members_of(bytes(d))[name]
    for fields, at, off in ((central, c_at, {"crc": 16, "csize": 20, "usize": 24, "name": 46}),
                            (local, l_at, {"crc": 14, "csize": 18, "usize": 22, "name": 30})):
        for k, v in (fields or {}).items():
            if k == "name":
                d[at + off[k]:at + off[k] + len(v)] = v
            else:
                d[at + off[k]:at + off[k] + 4] = struct.pack("<I", v)
    open(path, "wb").write(bytes(d))


# Class 3 of issue 35: the reader trusted sizes and names.
# A stored member of 1 MB whose headers both claim 303 MB (before: 303 MB written, the bytes past
# the member read from whatever followed it).
# RECORD's row gives no size (pip and pypa/installer take such rows), so only the zip can tell.
blob = os.urandom(1 << 20)
p = build("stored_size_lie", ok + [("bad/blob.bin", blob)], compression=zipfile.ZIP_STORED,
          skip_record_for=("bad/blob.bin",), extra_record=f"bad/blob.bin,sha256={digest(blob)},\n")
both = {"usize": 303 << 20}
patch_member(p, "bad/blob.bin", both, both)
case("stored_size_lie", "bad/blob.bin: stored, but its compressed size (1048576) is not its size (317718528)", p)
# A stored member whose sizes (agreeing) reach past the end of the file (before: SIGSEGV).
blob = os.urandom(4096)
p = build("stored_past_end", ok + [("bad/blob.bin", blob)], compression=zipfile.ZIP_STORED,
          skip_record_for=("bad/blob.bin",), extra_record=f"bad/blob.bin,sha256={digest(blob)},\n")
both = {"usize": 64 << 20, "csize": 64 << 20}
patch_member(p, "bad/blob.bin", both, both)
case("stored_past_end", "bad/blob.bin: its data (67108864 bytes at", p)
# Two members that name one target (before: both written into one staged file at once, SIGBUS).
case("dup_dot", "bad/./mod.py: a second member of this name once normalised",
     build("dup_dot", ok + [("bad/mod.py", b"a = 1\n"), ("bad/./mod.py", b"a = 2\n")]))
case("dup_slash", "bad//mod.py: a second member of this name once normalised",
     build("dup_slash", ok + [("bad/mod.py", b"a = 1\n"), ("bad//mod.py", b"a = 2\n")]))
case("dup_purelib", "bad-1.0.data/purelib/bad/mod.py: it would write the file bad/mod.py writes too",
     build("dup_purelib", ok + [("bad/mod.py", b"a = 1\n"), ("bad-1.0.data/purelib/bad/mod.py", b"a = 2\n")]))
case("dup_platlib", "bad-1.0.data/platlib/bad/mod.py: it would write the file bad/mod.py writes too",
     build("dup_platlib", ok + [("bad/mod.py", b"a = 1\n"), ("bad-1.0.data/platlib/bad/mod.py", b"a = 2\n")]))
case("file_is_folder", "bad/mod.py/x.py: its folder bad/mod.py is a file of the archive too",
     build("file_is_folder", ok + [("bad/mod.py", b"a = 1\n"), ("bad/mod.py/x.py", b"a = 2\n")]))


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_wheel_big_metadata import padded_text  # noqa: E402

big = padded_text(b"", 17 << 20)
for member in ("entry_points.txt", "RECORD", "WHEEL", "METADATA"):
    # The member itself replaced by 17 MB (RECORD: rows RECORD does not parse; WHEEL, METADATA:
    # headers after the real ones), refused by name before it is inflated.
    arc = f"bad-1.0.dist-info/{member}"
    if member == "entry_points.txt":
        p = build("huge_" + member, ok + [(arc, b"[console_scripts]\n" + big)])
    elif member == "RECORD":
        p = build("huge_RECORD", ok, extra_record=big.decode())
    else:
        p = build("huge_" + member, ok)
        # Rewritten with the member grown: zipfile cannot replace a member in place.
        src = zipfile.ZipFile(p)
        items = [(i, src.read(i)) for i in src.infolist()]
        src.close()
        with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z:
            for i, data in items:
                z.writestr(i, data + (b"X-Pad: " + big if i.filename == arc else b""))
    case("huge_" + member, f"bad-1.0.dist-info/{member}: 17", p)
# A zip bomb by ratio in a metadata member (before: a 245 KB wheel took 2.5 GB).
case("bomb_entry_points", "bad-1.0.dist-info/entry_points.txt: a compression ratio over 1000:1",
     build("bomb_entry_points", ok + [("bad-1.0.dist-info/entry_points.txt", b"[console_scripts]\n" + b"\n" * (300 << 20))]))
# The local header names another file than the central directory.
p = build("local_name", ok + [("bad/aaa.py", b"a = 1\n")])
patch_member(p, "bad/aaa.py", local={"name": b"bad/bbb.py"})
case("local_name", "bad/aaa.py: its local header names another file", p)
# The local header gives another size than the central directory.
p = build("local_size", ok + [("bad/aaa.py", b"a = 1\n")], compression=zipfile.ZIP_STORED)
patch_member(p, "bad/aaa.py", local={"usize": 7, "csize": 7})
case("local_size", "bad/aaa.py: its local header and the central directory disagree on CRC or sizes", p)
# Two members' data overlap: the first's (agreeing) sizes stretched over the second member.
p = build("overlap", [("bad/a.bin", b"A" * 1000), ("bad/b.bin", b"B" * 1000)] + ok, compression=zipfile.ZIP_STORED)
d = open(p, "rb").read()
m = members_of(d)
span = m["bad/b.bin"][1] + 30 + len("bad/b.bin") + 1000 - (m["bad/a.bin"][1] + 30 + len("bad/a.bin"))
patch_member(p, "bad/a.bin", {"usize": span, "csize": span}, {"usize": span, "csize": span})
case("overlap", "bad/b.bin: its data overlaps bad/a.bin's", p)

# Targets that are cudafix's state or the environment's own files, through .data/data/ and
# .data/scripts/ (pip installs these as readily: they would plant a journal, a setting, or
# replace the interpreter).
for case_name, arc, says in (
        ("plant_active", "bad-1.0.data/data/.cudafix/active", "cudafix's own state"),
        ("plant_journal", "bad-1.0.data/data/.cudafix/tx/x/journal", "cudafix's own state"),
        ("plant_toml", "bad-1.0.data/data/cudafix.toml", "cudafix's settings"),
        ("plant_pyvenv", "bad-1.0.data/data/pyvenv.cfg", "the venv's pyvenv.cfg"),
        ("plant_lock", "bad-1.0.data/data/.lock", "the environment's lock"),
        ("plant_python_data", "bad-1.0.data/data/bin/python3", "the environment's interpreter"),
        ("plant_python_scripts", "bad-1.0.data/scripts/python", "the environment's interpreter")):
    case(case_name, f"{arc}: it would write {says}", build(case_name, ok + [(arc, b"planted\n")]))
case("script_python", "a script named 'python3' would replace the environment's interpreter",
     build("script_python", ok + [("bad-1.0.dist-info/entry_points.txt", b"[console_scripts]\npython3 = bad:main\n")]))
case("script_dot", "a script named '..' (not a file name)",
     build("script_dot", ok + [("bad-1.0.dist-info/entry_points.txt", b"[console_scripts]\n.. = bad:main\n")]))
case("record_md5", "RECORD hashes it with md5",
     build("record_md5", ok, record_override="bad/__init__.py,md5=" + base64.urlsafe_b64encode(hashlib.md5(b"x = 1\n").digest()).rstrip(b"=").decode() + ",6\n"))
case("record_conflict", "listed twice in RECORD, with different hashes or sizes",
     build("record_conflict", ok, extra_record=f"bad/__init__.py,sha256={digest(b'x = 1' + bytes([10]))},7\n"))

# Issue 53: wheels the environment cannot use (pip and uv refuse them) and wheel-spec edges
# pypa/installer refuses.
case("machine", "(py3-none-manylinux_2_17_aarch64) is none this environment accepts (its best: cp3",
     build("machine", ok, tag="py3-none-manylinux_2_17_aarch64"))
case("python_tag", "(cp399-cp399-manylinux_2_17_x86_64) is none this environment accepts",
     build("python_tag", ok, tag="cp399-cp399-manylinux_2_17_x86_64"))
case("requires_python", "its Requires-Python is <3, and this environment's Python is 3.",
     build("requires_python", ok, metadata_extra="Requires-Python: <3\n"))
for n, line in (("ep_no_colon", "hello = bad"), ("ep_empty_callable", "hello = bad:")):
    case(n, f"the entry point '{line}' names no callable (MODULE:CALLABLE)",
         build(n, ok + [("bad-1.0.dist-info/entry_points.txt", f"[console_scripts]\n{line}\n".encode())]))
case("ep_bad_module", "the entry point 'hello = bad-x:main' names no module",
     build("ep_bad_module", ok + [("bad-1.0.dist-info/entry_points.txt", b"[console_scripts]\nhello = bad-x:main\n")]))
case("script_folder_clash", "a script named 'tool', which the wheel's .data/scripts/ holds too (bad-1.0.data/scripts/tool/x)",
     build("script_folder_clash", ok + [("bad-1.0.data/scripts/tool/x", b"x"),
                                        ("bad-1.0.dist-info/entry_points.txt", b"[console_scripts]\ntool = bad:main\n")]))
case("version_mismatch", "has version 2010i, but the file name says 2010j",
     build("version_mismatch", ok, version="2010i", file_version="2010j"))

json.dump(cases, sys.stdout)
