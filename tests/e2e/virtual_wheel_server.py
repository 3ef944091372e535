#!/usr/bin/env python3
"""A wheel of gigabytes served by range from a few pieces, never written: nvidia-cudnn-cu12
9.10.2.21 (zip64) whose libcudnn.so.9 is a deflate stream of 1 MiB chunks, each deflated alone
and repeated: its ELF head, NB chunks of text before PT_DYNAMIC (deflating to 0.38), the segment,
NA chunks of random bytes after it (1.0), a last chunk of text. A Simple index at /simple/,
each request logged as index_server.py logs them; prints its port.

  virtual_wheel_server.py NB:NA LOG [--strings-in-head] [--short N]

--strings-in-head: the segment's DT_STRTAB points into the head (no strings read deep).
--short N: a 206 answer over N bytes sends its headers, 1 KiB, then closes.
"""
import http.server
import json
import random
import struct
import sys
import threading
import zlib

NB, NA = (int(n) for n in sys.argv[1].split(":"))
log_path = sys.argv[2]
short = int(sys.argv[sys.argv.index("--short") + 1]) if "--short" in sys.argv else None
MiB = 1 << 20
rng = random.Random(7)
words = [bytes(rng.randrange(256) for _ in range(rng.randrange(4, 24))) for _ in range(1500)]


def text(n):
    b = bytearray()
    while len(b) < n:
        b += rng.choice(words)
    return bytes(b[:n])


def z(raw, final=False):
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(raw) + c.flush(zlib.Z_FINISH if final else zlib.Z_FULL_FLUSH)


raw_size = (1 + NB + 1 + NA + 1) * MiB
s = (1 + NB) * MiB  # PT_DYNAMIC
# ELF64 header + 2 phdrs (PT_LOAD whole file, PT_DYNAMIC at s)
eh = bytearray(64)
eh[0:4] = b"\x7fELF"; eh[4] = 2; eh[5] = 1; eh[6] = 1
struct.pack_into("<HHIQQQIHHHHHH", eh, 16, 3, 62, 1, 0, 64, 0, 0, 64, 56, 2, 64, 0, 0)
ph = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, raw_size, raw_size, 0x1000)
ph += struct.pack("<IIQQQQQQ", 2, 6, s, s, s, 0x200, 0x200, 8)
head = bytes(eh) + ph
head += b"\0" * (0x400 - len(head)) + b"\0libfoo.so\0"
head += text(MiB - len(head))
HEADSTR = "--strings-in-head" in sys.argv
dyn = struct.pack("<QQQQQQQQ", 1, 1, 5, (0x400 if HEADSTR else s + 0x200), 10, 64, 0, 0) + b"\0" * (0x200 - 64)
seg = dyn + b"\0libfoo.so\0" + text(MiB - len(dyn) - 11)
pieces = [(z(head), 1), (z(text(MiB)), NB), (z(seg), 1), (z(rng.randbytes(MiB)), NA), (z(text(MiB), True), 1)]
C = sum(len(p) * n for p, n in pieces)
print(f"raw {raw_size} compressed {C}; segment raw {s}, compressed {len(pieces[0][0]) + NB * len(pieces[1][0])}; "
      f"ratios {[round(len(p) / MiB, 4) for p, _ in pieces]}", file=sys.stderr)

name = "nvidia/cudnn/lib/libcudnn.so.9"
info = "nvidia_cudnn_cu12-9.10.2.21.dist-info"
small = [(f"{info}/METADATA", b"Metadata-Version: 2.1\nName: nvidia-cudnn-cu12\nVersion: 9.10.2.21\n"),
         (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: x\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n")]
small.append((f"{info}/RECORD", (f"{name},sha256=AAAA,{raw_size}\n" + "".join(f"{n},," + "\n" for n, _ in small)
                                 + f"{info}/RECORD,,\n").encode()))
front = bytearray()
cd = bytearray()
for n, data in small:
    off = len(front)
    crc = zlib.crc32(data)
    front += struct.pack("<IHHHHHIIIHH", 0x04034b50, 20, 0, 0, 0, 0, crc, len(data), len(data), len(n), 0) + n.encode() + data
    cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 0x31e, 20, 0, 0, 0, 0, crc, len(data), len(data), len(n), 0, 0, 0, 0,
                      0o100644 << 16, off) + n.encode()
lib_off = len(front)
extra = struct.pack("<HHQQ", 1, 16, raw_size, C)
front += struct.pack("<IHHHHHIIIHH", 0x04034b50, 45, 0, 8, 0, 0, 0, 0xffffffff, 0xffffffff, len(name), len(extra)) + name.encode() + extra
data_at = len(front)
cextra = struct.pack("<HHQQQ", 1, 24, raw_size, C, lib_off)
cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 0x32d, 45, 0, 8, 0, 0, 0, 0xffffffff, 0xffffffff, len(name), len(cextra),
                  0, 0, 0, 0o100755 << 16, 0xffffffff) + name.encode() + cextra
cd_off = data_at + C
e64_off = cd_off + len(cd)
end = struct.pack("<IQHHIIQQQQ", 0x06064b50, 44, 45, 45, 0, 0, 4, 4, len(cd), cd_off)
end += struct.pack("<IIQI", 0x07064b50, 0, e64_off, 1)
end += struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 0xffff, 0xffff, 0xffffffff, 0xffffffff, 0)
back = bytes(cd) + end
size = cd_off + len(back)
print(f"wheel {size} bytes, lib data at {data_at}", file=sys.stderr)
# the file as pieces: (start, bytes, repeat)
layout = []
at = 0
layout.append((at, bytes(front), 1)); at += len(front)
for p, n in pieces:
    layout.append((at, p, n)); at += len(p) * n
layout.append((at, back, 1)); at += len(back)
assert at == size


def read(a, b):  # bytes [a, b]
    out = bytearray()
    for start, p, n in layout:
        L = len(p) * n
        if b < start or a >= start + L:
            continue
        lo, hi = max(a, start) - start, min(b, start + L - 1) - start
        while lo <= hi:
            k = lo % len(p)
            take = min(len(p) - k, hi - lo + 1)
            out += p[k:k + take]
            lo += take
    return bytes(out)


wheel_name = "nvidia_cudnn_cu12-9.10.2.21-py3-none-linux_x86_64.whl"
lock = threading.Lock()


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        rng_h = self.headers.get("Range")
        with lock, open(log_path, "a") as f:
            f.write(json.dumps({"path": self.path, "range": rng_h}) + "\n")
        if self.path.startswith("/simple/"):
            proj = self.path[len("/simple/"):].strip("/")
            if proj != "nvidia-cudnn-cu12":
                return self.send_error(404)
            body = f'<html><body><a href="/files/{wheel_name}#sha256={"0" * 64}">{wheel_name}</a></body></html>'.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if not rng_h:
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            try:
                for a in range(0, size, 4 * MiB):
                    self.wfile.write(read(a, min(size, a + 4 * MiB) - 1))
            except Exception:
                pass
            return
        a, b = rng_h[6:].split("-")
        if a:
            a, b = int(a), min(int(b), size - 1)
        else:
            a, b = size - int(b), size - 1
        n = b - a + 1
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {a}-{b}/{size}")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        try:
            if short is not None and n > short:
                self.wfile.write(read(a, a + 1023))
                self.wfile.flush()
                self.close_connection = True
                return
            for x in range(a, b + 1, 4 * MiB):
                self.wfile.write(read(x, min(b, x + 4 * MiB - 1)))
        except Exception:
            self.close_connection = True


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
print(srv.server_address[1], flush=True)
srv.serve_forever()
