#!/usr/bin/env python3
"""Writes an ELF64 shared object whose dynamic strings lie last, after a long run of zeros.

  make_tail_strings_object.py OUT [WORDS_MB ZEROS_MB]

NVIDIA's post-link step moves .dynstr, .dynsym and .gnu.hash to an object's end: cuDNN 9.19's
heuristic library keeps them in its last 4.6 KB, after its section header table and 1.59 MB of
zeros. A deflate block that starts among the zeros copies them from before itself, so its decode
knows none of them, nor the first NUL of the strings that follows. This object has that shape,
larger: its dynamic segment in its first page, WORDS_MB (default 6) of bytes that deflate as code
does, ZEROS_MB (default 24) of zeros (so that the last window of its deflate stream starts among
them), then its strings: SONAME libcudnn.so.9, NEEDED libm.so.6 and libc.so.6.
"""
import random
import struct
import sys

out = sys.argv[1]
words_mb, zeros_mb = (float(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) > 3 else (6.0, 24.0)
DYN_AT = 0x800
STRINGS = b"\0libm.so.6\0libc.so.6\0libcudnn.so.9\0"
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14

rng = random.Random("tail-strings")
vocabulary = [bytes(rng.randrange(256) for _ in range(rng.randrange(4, 24))) for _ in range(1500)]
words = bytearray()
while len(words) < int(words_mb * (1 << 20)):
    words += rng.choice(vocabulary)
body = bytearray(0x1000) + words[:int(words_mb * (1 << 20))] + bytes(int(zeros_mb * (1 << 20)))
strtab = len(body)
body += STRINGS
size = len(body)

dyn = b"".join(struct.pack("<QQ", tag, value) for tag, value in (
    (DT_NEEDED, STRINGS.index(b"libm.so.6")), (DT_NEEDED, STRINGS.index(b"libc.so.6")),
    (DT_SONAME, STRINGS.index(b"libcudnn.so.9")), (DT_STRTAB, strtab), (DT_STRSZ, len(STRINGS)), (DT_NULL, 0)))
phdrs = [(PT_LOAD, 0, size), (PT_DYNAMIC, DYN_AT, len(dyn))]
ehdr = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
ehdr += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 0, 0, 64, 56, len(phdrs), 64, 0, 0)
body[0:64] = ehdr
table = b"".join(struct.pack("<IIQQQQQQ", kind, 4, off, off, off, length, length, 8) for kind, off, length in phdrs)
body[64:64 + len(table)] = table
body[DYN_AT:DYN_AT + len(dyn)] = dyn
with open(out, "wb") as f:
    f.write(body)
print(out)
