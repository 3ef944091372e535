#!/usr/bin/env python3
"""Wheels of a few megabytes whose object declares gigabytes (zeros, each deflate ratio under the
1000:1 cap), to measure what planning holds in memory while it reads them:
  segment_mid    1.5 GiB declared, 1.8 MB deflated: PT_DYNAMIC halfway, its strings near the start;
  headers_late   1.5 GiB declared: the program headers 64 KiB before the end (the first bytes do not
                 say where the segment lies: the object is read from its start), PT_DYNAMIC halfway;
  small_whole    900 MiB declared from under 1 MiB deflated (a member small enough to be read whole):
                 PT_DYNAMIC 1 MiB before its end;
  overrun        6 MiB declared, its stream inflating to 7 MiB (the CRC of the 6 MiB): the last
                 MiB repeats the tail with a false segment (NEEDED libevil.so.1), past the size
                 the entry declares (pip refuses the wheel); the real segment 1 MiB before the
                 declared end.
Each is OUTDIR/<case>/ holding one wheel, nvidia-cudnn-cu12 9.10.2.21, whose
nvidia/cudnn/lib/libcudnn.so.9 is the object (SONAME libcudnn.so.9, NEEDED libc.so.6 alone).
usage: make_huge_objects.py OUTDIR [CASE...]  -> a JSON list of {"case", "dir", "wheel", "member", "declared"}
(all cases where none is named)
"""
import base64
import hashlib
import json
import os
import random
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_hostile_objects import (DT_NEEDED, DT_NULL, DT_SONAME, DT_STRSZ, DT_STRTAB, DT_SYMTAB,  # noqa: E402
                                  Strings, dynamic)

MEMBER = "nvidia/cudnn/lib/libcudnn.so.9"
CHUNK = 16 << 20
S = Strings(["libcudnn.so.9", "libc.so.6", "libevil.so.1"])
STRTAB, SYMTAB = 0x1000, 0x1000 + 0x100  # the strings and the null symbol after the headers


def segment(needed="libc.so.6"):
    return dynamic([(DT_NEEDED, S.at[needed]), (DT_SONAME, S.at["libcudnn.so.9"]), (DT_STRTAB, STRTAB),
                    (DT_STRSZ, len(S.bytes)), (DT_SYMTAB, SYMTAB), (DT_NULL, 0), (DT_NULL, 0), (DT_NULL, 0)])


def headers(size, dyn_at, phoff=64):
    """The ELF header (program headers at `phoff`) and the program headers: one PT_LOAD over the
    file, PT_DYNAMIC at `dyn_at`."""
    phdrs = [(1, 5, 0, 0, 0, size, size, 0x1000), (2, 6, dyn_at, dyn_at, dyn_at, 128, 128, 8)]
    ehdr = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    ehdr += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, phoff, 0, 0, 64, 56, len(phdrs), 64, 0, 0)
    return ehdr, b"".join(struct.pack("<IIQQQQQQ", *p) for p in phdrs)


class Object:
    """An object of `size` bytes, zeros but for `parts` ({offset: bytes}), deflated a chunk at a
    time (a chunk of zeros deflated once and repeated) with its CRC and SHA-256; `extra`: bytes
    the stream inflates to past `size`."""

    def __init__(self, size, parts, random_bytes, extra=b""):
        self.size, self.raw, self.crc, sha = size, bytearray(), 0, hashlib.sha256()
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        zero_chunk = zlib.compressobj(9, zlib.DEFLATED, -15)
        zeros_raw = zero_chunk.compress(bytes(CHUNK)) + zero_chunk.flush(zlib.Z_FULL_FLUSH)
        # Random bytes after the strings: deflate data enough for the ratio cap.
        parts = dict(parts)
        parts[0x2000] = random.Random(7).randbytes(random_bytes)
        marks = sorted(parts)
        at = 0
        while at < size:
            end = min(size, at + CHUNK)
            touched = [k for k in marks if k < end and k + len(parts[k]) > at]
            if not touched and end - at == CHUNK and at > 0:
                self.raw += zeros_raw
                chunk = None
            else:
                b = bytearray(end - at)
                for k in touched:
                    p = parts[k]
                    lo, hi = max(at, k), min(end, k + len(p))
                    b[lo - at:hi - at] = p[lo - k:hi - k]
                chunk = bytes(b)
                self.raw += c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
            data = chunk if chunk is not None else bytes(CHUNK)
            self.crc = zlib.crc32(data, self.crc)
            sha.update(data)
            at = end
        self.raw += c.compress(extra) + c.flush(zlib.Z_FINISH)
        self.sha = base64.urlsafe_b64encode(sha.digest()).rstrip(b"=").decode()


def wheel(folder, obj):
    name, version = "nvidia_cudnn_cu12", "9.10.2.21"
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    tag = b"Wheel-Version: 1.0\nGenerator: cudafix-tests\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"

    def row(n, d):
        return f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"

    record = "\n".join([f"{MEMBER},sha256={obj.sha},{obj.size}", row(f"{info}/METADATA", metadata),
                        row(f"{info}/WHEEL", tag), f"{info}/RECORD,,"]) + "\n"
    members = [(MEMBER, obj.raw, obj.crc, obj.size)]
    for n, d in [(f"{info}/METADATA", metadata), (f"{info}/WHEEL", tag), (f"{info}/RECORD", record.encode())]:
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        members.append((n, c.compress(d) + c.flush(), zlib.crc32(d), len(d)))
    out, central = bytearray(), bytearray()
    for n, raw, crc, size in members:
        n = n.encode()
        at = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x5C21, crc, len(raw), size, len(n), 0) + n + raw
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, 0, 8, 0, 0x5C21, crc, len(raw), size,
                               len(n), 0, 0, 0, 0, 0o100755 << 16, at) + n
    cd_at = len(out)
    out += central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), cd_at, 0)
    path = os.path.join(folder, f"{name}-{version}-py3-none-linux_x86_64.whl")
    with open(path, "wb") as f:
        f.write(out)
    return path


def main():
    outdir, only = sys.argv[1], set(sys.argv[2:])
    made = []

    def add(case, make):
        if only and case not in only:
            return
        obj = make()
        folder = os.path.join(outdir, case)
        os.makedirs(folder, exist_ok=True)
        made.append({"case": case, "dir": folder, "wheel": wheel(folder, obj), "member": MEMBER,
                     "declared": obj.size})

    common = {STRTAB: S.bytes, SYMTAB: bytes(24)}
    size = 3 << 29  # 1.5 GiB: planning that kept what it inflated held 2.25 GB
    dyn_at = size // 2
    ehdr, phdrs = headers(size, dyn_at)
    add("segment_mid", lambda: Object(size, {**common, 0: ehdr + phdrs, dyn_at: segment()}, 256 << 10))
    late = size - (64 << 10)
    ehdr2, phdrs2 = headers(size, dyn_at, phoff=late)
    add("headers_late", lambda: Object(size, {**common, 0: ehdr2, late: phdrs2, dyn_at: segment()}, 256 << 10))
    small, small_dyn = 900 << 20, (900 << 20) - (1 << 20)
    ehdr3, phdrs3 = headers(small, small_dyn)
    add("small_whole", lambda: Object(small, {**common, 0: ehdr3 + phdrs3, small_dyn: segment()}, 64 << 10))
    over, over_dyn = 6 << 20, (6 << 20) - (1 << 20)
    ehdr4, phdrs4 = headers(over, over_dyn)
    # What the stream holds past the declared size: the last MiB again, its segment false.
    tail = bytearray(1 << 20)
    tail[0:128] = segment("libevil.so.1")
    add("overrun", lambda: Object(over, {**common, 0: ehdr4 + phdrs4, over_dyn: segment()}, 1 << 20,
                                  extra=bytes(tail)))
    print(json.dumps(made))


if __name__ == "__main__":
    main()
