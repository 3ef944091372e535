#!/usr/bin/env python3
"""Writes wheels whose shared object lies about its own layout, for the remote planner's tests.

usage: make_hostile_elf.py OUTDIR
Each case is a folder OUTDIR/<case>/ holding one wheel, nvidia-cudnn-cu12 9.10.2.21 (the dist a
test venv lacks, so that `cudafix plan fix --index-url` reads it by range from an index serving
the folder), whose nvidia/cudnn/lib/libcudnn.so.9 is a 1.2 MiB ELF64 object (larger than the
planner reads whole, so that it reads the object's headers and then the ranges they name) with
one field crafted. Prints a JSON list of {"case", "dir", "wheel", "expect"}: `expect` is a
phrase cudafix's refusal must contain besides the member's name, or null where the object is
valid and planned from by range as from the whole wheel.

Cases:
  dynamic-wraps        stored; PT_DYNAMIC's offset is 2^64 - 61440, so that the member's data
                       offset plus it lands on a fake dynamic segment in the member's own local
                       header (its extra field), and offset + size wraps to 0
  dynamic-past-end     deflated; PT_DYNAMIC lies past the end of the object
  phdrs-wrap           stored; e_phoff is 2^64 - 56 with two entries: phoff + phnum * 56 wraps to 56
  strtab-wraps         stored; a PT_LOAD whose offset plus (DT_STRTAB - vaddr) wraps past 2^64
  strings-past-end     deflated; DT_STRTAB names strings that run past the end of the object
  dynamic-tiny         deflated; PT_DYNAMIC is 4 bytes, deep in the object (past its head), so
                       that the windows around where it should lie are scanned for it
"""
import base64
import hashlib
import json
import os
import random
import struct
import sys
import zipfile

OUT = sys.argv[1]
NAME, VERSION = "nvidia-cudnn-cu12", "9.10.2.21"
MEMBER = "nvidia/cudnn/lib/libcudnn.so.9"
SIZE = 1200 * 1024
DYN_AT, STR_AT = 0x800, 0x1000
STRINGS = b"\0libm.so.6\0libcudnn.so.9\0"
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14


def dynamic(strtab=STR_AT, strsz=len(STRINGS), pad_to=0):
    d = struct.pack("<QQ", DT_NEEDED, 1) + struct.pack("<QQ", DT_SONAME, 11)
    d += struct.pack("<QQ", DT_STRTAB, strtab) + struct.pack("<QQ", DT_STRSZ, strsz) + struct.pack("<QQ", DT_NULL, 0)
    return d + b"\0" * max(0, pad_to - len(d))


def elf(phdrs, phoff=64, dyn=None, seed=0):
    """An ELF64 ET_DYN x86-64 object of SIZE bytes: headers, a dynamic segment at DYN_AT and the
    strings at STR_AT (as the phdrs point at them, or not), then bytes that do not deflate."""
    body = bytearray(random.Random(seed).randbytes(SIZE))
    ehdr = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    ehdr += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, phoff, 0, 0, 64, 56, len(phdrs), 64, 0, 0)
    body[0:64] = ehdr
    table = b"".join(struct.pack("<IIQQQQQQ", t, 4, off, vaddr, vaddr, filesz, filesz, 8)
                     for t, off, vaddr, filesz in phdrs)
    body[64:64 + len(table)] = table
    body[64 + len(table):DYN_AT] = b"\0" * (DYN_AT - 64 - len(table))
    d = dyn if dyn is not None else dynamic()
    body[DYN_AT:DYN_AT + len(d)] = d
    body[STR_AT:STR_AT + len(STRINGS)] = STRINGS
    return bytes(body)


def digest(data):
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel(case, so, method, extra=b""):
    folder = os.path.join(OUT, case)
    os.makedirs(folder, exist_ok=True)
    dist = NAME.replace("-", "_")
    info = f"{dist}-{VERSION}.dist-info"
    path = os.path.join(folder, f"{dist}-{VERSION}-py3-none-linux_x86_64.whl")
    metadata = f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode()
    tags = b"Wheel-Version: 1.0\nGenerator: cudafix-tests\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"
    rows = []
    with zipfile.ZipFile(path, "w") as z:
        def add(arc, data, how, extra_field=b""):
            zi = zipfile.ZipInfo(arc, (2026, 1, 1, 0, 0, 0))
            zi.compress_type = how
            zi.extra = extra_field
            z.writestr(zi, data)
            rows.append(f"{arc},sha256={digest(data)},{len(data)}")
        add(MEMBER, so, method, extra)
        add(f"{info}/METADATA", metadata, zipfile.ZIP_DEFLATED)
        add(f"{info}/WHEEL", tags, zipfile.ZIP_DEFLATED)
        rows.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(rows) + "\n")
    return path


def data_offset(path, member):
    """Where the member's data starts: after its local header, name and extra field."""
    with zipfile.ZipFile(path) as z:
        zi = z.getinfo(member)
    with open(path, "rb") as f:
        f.seek(zi.header_offset)
        local = f.read(30)
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    return zi.header_offset + 30 + name_len + extra_len


STORED, DEFLATED = zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED
load = (PT_LOAD, 0, 0, 0x10000)
cases = []

# The fake segment fills the end of the local header's extra field (one block of an unknown
# id): the segment's 61440 bytes end where the member's data starts, so the object's PT_DYNAMIC
# offset 2^64 - 61440 names them, modulo 2^64, from the data's start.
WRAP = 61440
fake = dynamic(pad_to=WRAP)
extra = struct.pack("<HH", 0xCAFE, len(fake)) + fake
path = wheel("dynamic-wraps", elf([load, (PT_DYNAMIC, 2**64 - WRAP, 2**64 - WRAP, WRAP)], seed=1), STORED, extra)
assert data_offset(path, MEMBER) - WRAP == data_offset(path, MEMBER) - len(fake)
cases.append(("dynamic-wraps", path, "dynamic segment"))

path = wheel("dynamic-past-end", elf([load, (PT_DYNAMIC, SIZE + 4096, SIZE + 4096, 80)], seed=2), DEFLATED)
cases.append(("dynamic-past-end", path, "dynamic segment"))

path = wheel("phdrs-wrap", elf([load, (PT_DYNAMIC, DYN_AT, DYN_AT, 80)], phoff=2**64 - 56, seed=3), STORED)
cases.append(("phdrs-wrap", path, "program header table"))

# The load maps address 0 at file offset 2^64 - 0x100: DT_STRTAB 0x1000 is at offset 0xf00
# modulo 2^64, inside the object, where a reader that adds without a check finds strings.
path = wheel("strtab-wraps", elf([(PT_LOAD, 2**64 - 0x100, 0, 0x10000), (PT_DYNAMIC, DYN_AT, DYN_AT, 80)], seed=4),
             STORED)
cases.append(("strtab-wraps", path, "DT_STRTAB"))

path = wheel("strings-past-end", elf([(PT_LOAD, 0, 0, SIZE + 0x10000), (PT_DYNAMIC, DYN_AT, DYN_AT, 80)],
                                     dyn=dynamic(strtab=SIZE - 8), seed=5), DEFLATED)
cases.append(("strings-past-end", path, "string table"))

# Half way in, far past the head the planner reads first: found (or not) by the windows' scan,
# which must not read a segment's first tag past the bytes decoded.
path = wheel("dynamic-tiny", elf([(PT_LOAD, 0, 0, SIZE), (PT_DYNAMIC, SIZE // 2, SIZE // 2, 4)], seed=6), DEFLATED)
cases.append(("dynamic-tiny", path, None))

print(json.dumps([{"case": c, "dir": os.path.dirname(p), "wheel": p, "expect": e} for c, p, e in cases]))
