#!/usr/bin/env python3
"""Builds a large shared object, as CUDA libraries are large, with the compiler.

  make_big_object.py OUT SONAME RODATA_MB DATA_MB [--random MB] [--random-after MB] [--padded MB] [--zeros MB]
                     [cc flags...]

Its .rodata holds RODATA_MB and its .data DATA_MB of bytes that deflate about as a CUDA
library does (a few thousand distinct words, drawn at random), so that PT_DYNAMIC (in the
writable segment, after .rodata and before .data) lies deep in the file, at a place set by the
two sizes. --random MB adds that many bytes that do not deflate (as NVIDIA's fatbins: 190 MB of
NCCL's, before its segment) after .rodata's; --random-after MB adds them after .data's (as the
9.3 MB of .lrodata, deflating to 0.88, after the segment of cuDNN 9.19's runtime-compiled
engines, whose code before it deflates to 0.42). --padded MB adds that many after .data in a section
of its own that starts at a 2 MiB boundary, so that up to 2 MiB of zeros that belong to no section
lie between (as cuDNN 9.19's precompiled engines keep 2 MB of such gaps in the 2.3 MB after their
segment). --zeros MB adds a writable section of that many zero bytes after .data (a zero-initialized
array kept in the file: a window of its deflate stream inflates about a thousand times over). Extra
arguments go to cc (-Wl,--no-as-needed -lm, -Wl,-rpath,...).
"""
import os
import random
import subprocess
import sys
import tempfile

out, soname, rodata_mb, data_mb = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
cc_args = sys.argv[5:]
extra_mb = {"--random": 0.0, "--random-after": 0.0, "--padded": 0.0, "--zeros": 0.0}
while cc_args[:1] and cc_args[0] in extra_mb:
    extra_mb[cc_args[0]] = float(cc_args[1])
    cc_args = cc_args[2:]
random_mb, padded_mb, zeros_mb = extra_mb["--random"], extra_mb["--padded"], extra_mb["--zeros"]
random_after_mb = extra_mb["--random-after"]
rng = random.Random(soname)
words = [bytes(rng.randrange(256) for _ in range(rng.randrange(4, 24))) for _ in range(1500)]


def blob(path, size):
    buf = bytearray()
    while len(buf) < size:
        buf += rng.choice(words)
    with open(path, "wb") as f:
        f.write(buf[:size])


with tempfile.TemporaryDirectory() as tmp:
    blob(os.path.join(tmp, "ro.bin"), int(rodata_mb * (1 << 20)))
    with open(os.path.join(tmp, "ro.bin"), "ab") as f:
        f.write(rng.randbytes(int(random_mb * (1 << 20))))
    blob(os.path.join(tmp, "rw.bin"), int(data_mb * (1 << 20)))
    with open(os.path.join(tmp, "rw.bin"), "ab") as f:
        f.write(rng.randbytes(int(random_after_mb * (1 << 20))))
    blob(os.path.join(tmp, "padded.bin"), int(padded_mb * (1 << 20)))
    with open(os.path.join(tmp, "zeros.bin"), "wb") as f:
        f.truncate(int(zeros_mb * (1 << 20)))
    src = os.path.join(tmp, "big.c")
    with open(src, "w") as f:
        f.write('__asm__(".section .rodata.blob,\\"a\\"\\n.incbin \\"ro.bin\\"\\n.previous\\n");\n')
        f.write('__asm__(".section .data.blob,\\"aw\\"\\n.incbin \\"rw.bin\\"\\n.previous\\n");\n')
        if padded_mb:
            f.write('__asm__(".section cudafix_padded,\\"aw\\"\\n.p2align 21\\n.incbin \\"padded.bin\\"\\n.previous\\n");\n')
        if zeros_mb:
            f.write('__asm__(".section cudafix_zeros,\\"aw\\"\\n.incbin \\"zeros.bin\\"\\n.previous\\n");\n')
        f.write("int cudafix_big_object(void) { return 1; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", os.path.abspath(out), f"-Wl,-soname,{soname}", "big.c"]
                   + cc_args, cwd=tmp, check=True)
print(os.path.abspath(out))
