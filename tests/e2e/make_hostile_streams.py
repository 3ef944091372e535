#!/usr/bin/env python3
"""Wheels whose deflate streams attack the windows that the reading by ranges inflates from a
guessed block boundary (installer/wheel/deflate_window):
  fake_headers   an object of 3 MiB, its stream honest, then 1.5 MB of bytes after the final block:
                 runs of crafted dynamic-Huffman block headers, each a complete code under which
                 any bits decode (no end-of-block code short of 15 ones), followed by zero bits
                 that decode to 258-byte matches: from each header zlib inflates 16 MiB before
                 it gives up (before, each window tried every one of them: minutes, hundreds of
                 gigabytes inflated);
  planted_final  an object whose stream holds, in a stored block's bytes where the last window
                 starts (256 KiB before the member's end), a complete stream of its own: stored
                 blocks, the last one final, holding the object's tail with a false dynamic
                 segment (NEEDED libevil.so.1, a RUNPATH). Its sizes and CRC are honest: pip
                 installs it (before, the plan read the planted segment).
Each is OUTDIR/<case>/ holding one wheel, nvidia-cudnn-cu12 9.10.2.21, whose
nvidia/cudnn/lib/libcudnn.so.9 is the object (SONAME libcudnn.so.9, NEEDED libc.so.6 alone).
usage: make_hostile_streams.py OUTDIR  -> a JSON list of {"case", "dir", "wheel", "member"}
"""
import json
import os
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_hostile_objects import (DT_NEEDED, DT_NULL, DT_RUNPATH, DT_SONAME, DT_STRSZ, DT_STRTAB,  # noqa: E402
                                  DT_SYMTAB, Strings, code_like, deflated, dynamic, elf, wheel)

MEMBER = "nvidia/cudnn/lib/libcudnn.so.9"
WINDOW_TAIL = 256 << 10  # the first window of an object whose segment lies near its end


class Bits:
    """Bits in deflate's order: values LSB first, Huffman codes MSB first."""

    def __init__(self):
        self.bits = []

    def put(self, value, n):
        self.bits += [(value >> i) & 1 for i in range(n)]

    def code(self, code, n):
        self.bits += [(code >> i) & 1 for i in reversed(range(n))]

    def bytes(self):
        b = self.bits + [0] * (-len(self.bits) % 8)
        return bytes(sum(b[i + j] << j for j in range(8)) for i in range(0, len(b), 8))


def canonical(lengths):
    """Deflate's canonical codes for code lengths: {symbol: (code, length)}."""
    count = [0] * 16
    for n in lengths:
        if n:
            count[n] += 1
    code, first = 0, [0] * 16
    for n in range(1, 16):
        code = (code + count[n - 1]) << 1
        first[n] = code
    out = {}
    for s, n in enumerate(lengths):
        if n:
            out[s] = (first[n], n)
            first[n] += 1
    return out


ORDER = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15]


def fake_header(w):
    """A dynamic-Huffman block header: length 258 is '0', literals 0..13 longer codes, the end
    of the block 15 ones; two distance codes of one bit. Any bits then decode, zeros fastest."""
    lit = [0] * 286
    for i in range(14):
        lit[i] = i + 2
    lit[256], lit[285] = 15, 1
    cl = [0] * 19
    for k, sym in enumerate(ORDER):
        cl[sym] = 4 if k < 13 else 5  # complete: 13/16 + 6/32
    codes = canonical(cl)
    w.put(0, 1)
    w.put(2, 2)
    w.put(29, 5)
    w.put(1, 5)
    w.put(15, 4)
    for sym in ORDER:
        w.put(cl[sym], 3)
    seq, i = lit + [1, 1], 0
    while i < len(seq):
        run = 1
        while seq[i] == 0 and i + run < len(seq) and seq[i + run] == 0 and run < 138:
            run += 1
        if seq[i] == 0 and run >= 11:
            w.code(*codes[18])
            w.put(run - 11, 7)
        elif seq[i] == 0 and run >= 3:
            w.code(*codes[17])
            w.put(run - 3, 3)
        else:
            run = 1
            w.code(*codes[seq[i]])
        i += run


def fake_headers(groups, headers, body):
    w = Bits()
    for _ in range(groups):
        for _ in range(headers):
            fake_header(w)
        w.put(0, body * 8)
    return w.bytes()


def stored(payload, final=False):
    """Stored blocks of `payload` (byte-aligned), the last one final where asked."""
    out, parts = b"", [payload[i:i + 65535] for i in range(0, len(payload), 65535)] or [b""]
    for k, p in enumerate(parts):
        last = final and k == len(parts) - 1
        out += bytes([1 if last else 0]) + struct.pack("<HH", len(p), len(p) ^ 0xFFFF) + p
    return out


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    made = []
    s = Strings(["libcudnn.so.9", "libc.so.6", "libevil.so.1", "/evil/runpath"])

    def real(strtab, symtab):
        return dynamic([(DT_NEEDED, s.at["libc.so.6"]), (DT_SONAME, s.at["libcudnn.so.9"]), (DT_STRTAB, strtab),
                        (DT_STRSZ, len(s.bytes)), (DT_SYMTAB, symtab), (DT_NULL, 0), (DT_NULL, 0),
                        (DT_NULL, 0)])

    def fake(strtab, symtab):
        return dynamic([(DT_NEEDED, s.at["libevil.so.1"]), (DT_NEEDED, s.at["libc.so.6"]),
                        (DT_SONAME, s.at["libcudnn.so.9"]), (DT_RUNPATH, s.at["/evil/runpath"]),
                        (DT_STRTAB, strtab), (DT_STRSZ, len(s.bytes)), (DT_SYMTAB, symtab), (DT_NULL, 0)])

    def cudnn(case, data, raw):
        folder = os.path.join(outdir, case)
        os.makedirs(folder, exist_ok=True)
        path = wheel(folder, "nvidia_cudnn_cu12", MEMBER, data, raw=raw, version="9.10.2.21")
        made.append({"case": case, "dir": folder, "wheel": path, "member": MEMBER})

    # fake_headers: [strings][the null symbol][3 MiB][real segment][16 KiB], then the crafted bytes.
    a, c = code_like(3 << 20, 11), code_like(16 << 10, 12)
    offsets = [0, 0]
    for _ in range(2):
        data, found = elf([s.bytes, b"\0" * 24, a, real(offsets[0], offsets[1]), c], 3)
        offsets = found[:2]
    raw = deflated(data) + fake_headers(40, 1000, 17 << 10)
    cudnn("fake_headers", data, raw)

    # planted_final: [strings][the null symbol][3 MiB][P][B][real segment][16 KiB], where P
    # (one stored block) ends with a stream of its own that starts where the last window does.
    a, c = code_like(3 << 20, 13), code_like(16 << 10, 14)
    b_size = 600 << 10
    while True:
        b = code_like(b_size, 15)
        offsets, p_len = [0, 0], 0
        for _ in range(3):
            parts = [s.bytes, b"\0" * 24, a, b"\0" * p_len, b, real(offsets[0], offsets[1]), c]
            data, found = elf(parts, 5)
            offsets = found[:2]
            dyn_at, p_at = found[5], found[3]
            # The tail a planted stream says the object ends with: the real one, its segment false.
            tail = bytearray(data[dyn_at - 4096:])
            tail[4096:4096 + len(parts[5])] = fake(offsets[0], offsets[1])
            planted = stored(b"\x01") + stored(b"\x02") + stored(bytes(tail), final=True)
            d2 = deflated(data[p_at + p_len:])
            filler = WINDOW_TAIL - len(d2) - len(planted)
            p_len = filler + len(planted)
        if 0 < filler and p_len <= 65535:
            break
        b_size += (64 << 10) if len(d2) + len(planted) < WINDOW_TAIL - 65535 else -(64 << 10)
    payload = b"\0" * filler + planted
    data = data[:p_at] + payload + data[p_at + p_len:]
    c1 = zlib.compressobj(6, zlib.DEFLATED, -15)
    d1 = c1.compress(data[:p_at]) + c1.flush(zlib.Z_FULL_FLUSH)
    raw = d1 + stored(payload) + deflated(data[p_at + p_len:])
    assert zlib.decompress(raw, -15) == data
    cudnn("planted_final", data, raw)
    print(json.dumps(made))


main()
