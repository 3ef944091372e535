#!/usr/bin/env python3
"""Wheels whose shared objects attack the reading of a wheel by ranges (installer/wheel/ranged_read):
  fake_segment   a false dynamic segment (NEEDED libevil.so.1, a RUNPATH) planted 4 KB before the
                 real one, both 3 MiB deep in code-like bytes, so only a window mid-stream finds either;
  long_extra     an object whose local header carries an 8,000-byte extra field, past the slack the
                 reader allows a local header;
  unterminated   an object of 16 MiB whose deflate stream has no final block (its sizes and CRC
                 honest), its strings 4 MiB before its end;
  bomb           an object of 5 MiB (its segment 3 MiB deep) whose stream holds 256 MiB of zeros
                 after its first 100 KiB (deflated to 256 KiB): it inflates far past the size its
                 entry declares, and its segment's place holds zeros (a helper's attack: the plan
                 read no SONAME and no NEEDED).
usage: make_hostile_objects.py OUTDIR  -> a JSON list of {"case", "wheel", "member"}
       make_hostile_objects.py OUTDIR --planted-cudnn  -> the path of nvidia-cudnn-cu12 9.10.2.21's
                 wheel whose nvidia/cudnn/lib/libcudnn.so.9 is fake_segment's object (SONAME
                 libcudnn.so.9, NEEDED libc.so.6): what a test venv lacks, planned by range from an
                 index, whose plan then names the planted libevil.so.1 (apply must refuse it)
"""
import base64
import hashlib
import json
import os
import random
import struct
import sys
import zlib

DT_NULL, DT_NEEDED, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SONAME, DT_RUNPATH = 0, 1, 5, 6, 10, 14, 29


def code_like(n, seed):
    r = random.Random(seed)
    words = [bytes(r.choice(b"abcdefghijklmnop") for _ in range(r.randint(2, 9))) for _ in range(4096)]
    out, k = [], 0
    while k < n:
        w = r.choice(words)
        out.append(w)
        k += len(w) + 1
    return b" ".join(out)[:n]


class Strings:
    def __init__(self, names):
        self.bytes, self.at = b"\0", {}
        for s in names:
            self.at[s] = len(self.bytes)
            self.bytes += s.encode() + b"\0"


def dynamic(entries):
    return b"".join(struct.pack("<QQ", t, v) for t, v in entries)


def elf(parts, dynamic_part):
    """An ELF64 object of `parts` placed from 0x1000 (16-aligned), one PT_LOAD (vaddr == offset)
    and PT_DYNAMIC over parts[dynamic_part]; returns its bytes and each part's offset."""
    off, offsets, body = 0x1000, [], b""
    for p in parts:
        pad = (-off) % 16
        body += b"\0" * pad
        off += pad
        offsets.append(off)
        body += p
        off += len(p)
    size = 0x1000 + len(body)
    d = offsets[dynamic_part]
    phdrs = [(1, 5, 0, 0, 0, size, size, 0x1000), (2, 6, d, d, d, len(parts[dynamic_part]), len(parts[dynamic_part]), 8)]
    head = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    head += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 0, 0, 64, 56, len(phdrs), 64, 0, 0)
    head += b"".join(struct.pack("<IIQQQQQQ", *p) for p in phdrs)
    return head + b"\0" * (0x1000 - len(head)) + body, offsets


def deflated(data, finish=True):
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush(zlib.Z_FINISH if finish else zlib.Z_SYNC_FLUSH)


def wheel(outdir, name, member, data, raw=None, local_extra=b"", version="1.0"):
    """A wheel of `member` (deflated, or `raw` as its compressed bytes) with METADATA, WHEEL and RECORD."""
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    tag = b"Wheel-Version: 1.0\nGenerator: cudafix-tests\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"

    def row(n, d):
        digest = base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
        return f"{n},sha256={digest},{len(d)}"

    record = "\n".join([row(member, data), row(f"{info}/METADATA", metadata), row(f"{info}/WHEEL", tag),
                        f"{info}/RECORD,,"]) + "\n"
    members = [(member, data, raw, local_extra), (f"{info}/METADATA", metadata, None, b""),
               (f"{info}/WHEEL", tag, None, b""), (f"{info}/RECORD", record.encode(), None, b"")]
    out, central = bytearray(), bytearray()
    for n, d, r, extra in members:
        n = n.encode()
        r = deflated(d) if r is None else r
        at = len(out)
        crc = zlib.crc32(d)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x5C21, crc, len(r), len(d), len(n), len(extra))
        out += n + extra + r
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, 0, 8, 0, 0x5C21, crc, len(r), len(d), len(n),
                               0, 0, 0, 0, 0o100755 << 16, at) + n
    cd_at = len(out)
    out += central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), cd_at, 0)
    path = os.path.join(outdir, f"{name}-{version}-py3-none-linux_x86_64.whl")
    with open(path, "wb") as f:
        f.write(out)
    return path


def planted_cudnn(outdir):
    s = Strings(["libcudnn.so.9", "libc.so.6", "libevil.so.1", "/evil/runpath"])

    def segment(strtab, symtab, planted):  # both 8 entries: the planted one reads as the longer
        tables = [(DT_STRTAB, strtab), (DT_STRSZ, len(s.bytes)), (DT_SYMTAB, symtab)]
        if planted:
            return dynamic([(DT_NEEDED, s.at["libevil.so.1"]), (DT_NEEDED, s.at["libc.so.6"]),
                            (DT_SONAME, s.at["libcudnn.so.9"]), (DT_RUNPATH, s.at["/evil/runpath"])] + tables +
                           [(DT_NULL, 0)])
        return dynamic([(DT_NEEDED, s.at["libc.so.6"]), (DT_SONAME, s.at["libcudnn.so.9"])] + tables +
                       [(DT_NULL, 0)] * 3)

    a, small, b = code_like(3 << 20, 1), code_like(4000, 2), code_like(3 << 20, 3)
    offsets = [0, 0]
    for _ in range(2):
        data, found = elf([s.bytes, b"\0" * 24, a, segment(*offsets, True), small, segment(*offsets, False), b], 5)
        offsets = found[:2]
    print(wheel(outdir, "nvidia_cudnn_cu12", "nvidia/cudnn/lib/libcudnn.so.9", data, version="9.10.2.21"))


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    if sys.argv[2:] == ["--planted-cudnn"]:
        return planted_cudnn(outdir)
    made = []
    s = Strings(["libfake.so.1", "libc.so.6", "libevil.so.1", "/evil/runpath", "libcublasLt.so.13"])

    def real(strtab, symtab):
        return dynamic([(DT_NEEDED, s.at["libcublasLt.so.13"]), (DT_NEEDED, s.at["libc.so.6"]),
                        (DT_SONAME, s.at["libfake.so.1"]), (DT_STRTAB, strtab), (DT_STRSZ, len(s.bytes)),
                        (DT_SYMTAB, symtab), (DT_NULL, 0), (DT_NULL, 0)])

    def fake(strtab, symtab):
        return dynamic([(DT_NEEDED, s.at["libevil.so.1"]), (DT_NEEDED, s.at["libc.so.6"]),
                        (DT_SONAME, s.at["libfake.so.1"]), (DT_RUNPATH, s.at["/evil/runpath"]),
                        (DT_STRTAB, strtab), (DT_STRSZ, len(s.bytes)), (DT_SYMTAB, symtab), (DT_NULL, 0)])

    # fake_segment: [strings][the null symbol][3 MiB][fake][4 KB][real][3 MiB]
    a, small, b = code_like(3 << 20, 1), code_like(4000, 2), code_like(3 << 20, 3)
    offsets = [0, 0]
    for _ in range(2):
        data, found = elf([s.bytes, b"\0" * 24, a, fake(offsets[0], offsets[1]), small,
                           real(offsets[0], offsets[1]), b], 5)
        offsets = found[:2]
    made.append({"case": "fake_segment", "member": "lib/libfake.so.1",
                 "wheel": wheel(outdir, "fake_segment", "lib/libfake.so.1", data)})

    # long_extra: a small object read whole, its local header's extra field 8,000 bytes long.
    offsets = [0, 0]
    for _ in range(2):
        data, found = elf([s.bytes, b"\0" * 24, real(offsets[0], offsets[1])], 2)
        offsets = found[:2]
    extra = struct.pack("<HH", 0xCAFE, 8000 - 4) + b"\0" * (8000 - 4)
    made.append({"case": "long_extra", "member": "lib/libfake.so.1",
                 "wheel": wheel(outdir, "long_extra", "lib/libfake.so.1", data, local_extra=extra)})

    # unterminated: [2 MiB][real segment][10 MiB][strings][the null symbol][4 MiB], no final block.
    p, q, r = code_like(2 << 20, 4), code_like(10 << 20, 5), code_like(4 << 20, 6)
    offsets = [0, 0]
    for _ in range(2):
        data, found = elf([p, real(offsets[0], offsets[1]), q, s.bytes, b"\0" * 24, r], 1)
        offsets = found[3:5]
    made.append({"case": "unterminated", "member": "lib/libfake.so.1",
                 "wheel": wheel(outdir, "unterminated", "lib/libfake.so.1", data, raw=deflated(data, finish=False))})
    # bomb: [strings][the null symbol][3 MiB][real segment][2 MiB], 256 MiB of zeros inserted.
    a, b = code_like(3 << 20, 7), code_like(2 << 20, 8)
    offsets = [0, 0]
    for _ in range(2):
        data, found = elf([s.bytes, b"\0" * 24, a, real(offsets[0], offsets[1]), b], 3)
        offsets = found[:2]
    cut = 100 << 10

    def part(chunk, last):
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        return c.compress(chunk) + c.flush(zlib.Z_FINISH if last else zlib.Z_FULL_FLUSH)

    z = zlib.compressobj(6, zlib.DEFLATED, -15)
    zeros = b"".join(z.compress(bytes(1 << 20)) for _ in range(256)) + z.flush(zlib.Z_FULL_FLUSH)
    raw = part(data[:cut], False) + zeros + part(data[cut:], True)
    made.append({"case": "bomb", "member": "lib/libfake.so.1",
                 "wheel": wheel(outdir, "bomb", "lib/libfake.so.1", data, raw=raw)})
    print(json.dumps(made))


if __name__ == "__main__":
    main()
