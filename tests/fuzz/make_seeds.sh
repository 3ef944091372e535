#!/usr/bin/env bash
# Seeds for the fuzz targets, from real inputs: make_seeds.sh FIXTURES OUT
set -euo pipefail
FIX=$1 OUT=$2
mkdir -p "$OUT"/{record,metadata,elf,ld_cache,wheel,install,cache,index,remote_wheel,zip,plan,journal,pylock}
cp /etc/ld.so.cache "$OUT/ld_cache/host" 2>/dev/null || true
i=0
for f in $(find "$FIX" -name '*.so*' -type f | head -20); do cp "$f" "$OUT/elf/$((i++))"; done
printf 'torch/__init__.py,sha256=abc_-DEF,12\r\n"a,b.py",,\n../../../bin/x,,\n' > "$OUT/record/1"
printf 'Metadata-Version: 2.4\nName: torch\nVersion: 2.11.0\nRequires-Dist: cuda-toolkit[cublas]==13.0.2; platform_system == "Linux" and extra == "x"\nSummary: a\n b\n\nbody\n' > "$OUT/metadata/1"
# Wheels named as the target reads them: one with an ELF member and a requirement, one bare.
src=$(cd "$(dirname "$0")/../.." && pwd)
so=$(find "$FIX" -name 'libcudart.so.13' -type f | head -1)
w=$(python3 "$src/tests/e2e/make_wheel.py" "$OUT/wheel" fuzz 1.0 "fuzz/lib/libx.so=$so" --requires 'nvidia-cublas>=13')
mv "$w" "$OUT/wheel/1"
w=$(python3 "$src/tests/e2e/make_wheel.py" "$OUT/wheel" fuzz 1.0)
mv "$w" "$OUT/wheel/2"
# The installer's validation reads the same wheels, and one with a console script and .data.
cp "$OUT/wheel/1" "$OUT/wheel/2" "$OUT/install/"
w=$(python3 "$src/tests/e2e/make_wheel.py" "$OUT/install" fuzz 1.0 "fuzz-1.0.data/scripts/t=$so" \
  --console-script 'fz=fuzz:main')
mv "$w" "$OUT/install/3"
# The zip reader's: the same wheels, and the wheels pip accepts that once were refused (ZIP64 end
# and local headers, bytes after the archive; tests/e2e/make_accepted_wheels.py).
cp "$OUT/wheel/1" "$OUT/wheel/2" "$OUT/install/3" "$OUT/zip/"
mkdir -p "$OUT/zip-made"
python3 "$src/tests/e2e/make_accepted_wheels.py" "$OUT/zip-made" > /dev/null
for w in zip64_local zip64_end trailing_bytes dot_slash_rows; do mv "$OUT/zip-made/ok_$w-1.0-py3-none-any.whl" "$OUT/zip/$w"; done
rm -rf "$OUT/zip-made"
# Cache payloads as resolver/env/walk_cache.hpp and elf_store.hpp lay them out, after fuzz_cache's
# first byte (0: walk cache, 1: ELF store): a folder /s/ with two entries; one object /s/libx.so.
python3 - "$OUT/cache" <<'PY'
import struct, sys
stamp = struct.pack("<QQQqqII", 2049, 42, 4096, 1700000000, 1700000000, 5, 6)
names = b"/s/" + b"a.py" + b"libx.so"
walk = struct.pack("<IIQQ", 1, 3, 2, len(names)) + stamp + struct.pack("<QIIII", 7, 0, 3, 0, 2)
walk += struct.pack("<IHBB", 3, 4, 0, 0) + struct.pack("<IHBB", 7, 7, 0, 1) + names
def s(b): return struct.pack("<I", len(b)) + b
answer = struct.pack("<BBHHQ", 0, 2, 62, 3, 0) + b"\x01" + s(b"libx.so") + b"\x00" + b"\x01" + s(b"$ORIGIN")
answer += struct.pack("<I", 1) + s(b"libc.so.6") + b"\x00" + s(b"")
elf = struct.pack("<II", 1, 0) + stamp + s(b"/s/libx.so") + s(answer)
open(sys.argv[1] + "/walk", "wb").write(b"\x00" + walk)
open(sys.argv[1] + "/elf", "wb").write(b"\x01" + elf)
PY
# Index pages (the first byte: 0 JSON, 1 HTML) and a pip 23.0 cache entry (2) holding a wheel.
printf '\0{"meta":{"api-version":"1.1"},"files":[{"filename":"fuzz-1.0-py3-none-any.whl","url":"../f/fuzz-1.0-py3-none-any.whl","hashes":{"sha256":"00"},"yanked":"x","requires-python":">=3"}]}' > "$OUT/index/1"
printf '\1<html><base href="/x/"><a href="f/fuzz-1.0-py3-none-any.whl#sha256=00" data-requires-python="&gt;=3" data-yanked>a</a></html>' > "$OUT/index/2"
python3 - "$OUT/wheel/2" "$OUT/index/3" <<'PY'
import struct, sys
body = open(sys.argv[1], "rb").read()
def s(x): return bytes([0xa0 | len(x)]) + x
entry = b"\x02cc=4," + b"\x82" + s(b"response") + b"\x83" + s(b"body") + b"\xc6" + struct.pack(">I", len(body)) + body
entry += s(b"status") + b"\xcc\xc8" + s(b"headers") + b"\x81" + s(b"Content-Type") + s(b"application/zip")
entry += s(b"vary") + b"\x80"
open(sys.argv[2], "wb").write(entry)
PY
# A JSON page whose fields are of the wrong kind (nlohmann's type_error escaped the reader), and a
# pip cache entry nesting 100,000 arrays (the msgpack walker recursed off its stack).
printf '\0{"meta":{"api-version":1},"files":[{"filename":42,"url":"a.whl","hashes":"x","yanked":[1]}]}' > "$OUT/index/4"
python3 -c 'import sys; open(sys.argv[1], "wb").write(b"\x02cc=4,\x81\xa4vary" + b"\x91" * 100000 + b"\xc0")' "$OUT/index/5"

# The remote planner's (fuzz_remote_wheel): a byte for the canned server (0: it honours Range; 1:
# it ignores it), then a wheel whose object is larger than the target's small limits, stored
# and deflated, so that it is read by its headers and a window.
for how in stored deflate; do
  w=$(python3 "$src/tests/e2e/make_wheel.py" "$OUT/remote_wheel" fuzz 1.0 "fuzz/lib/libx.so=$so" \
    --requires 'nvidia-cublas>=13' $([ $how = deflate ] && echo --deflate))
  { printf '\0'; cat "$w"; } >"$OUT/remote_wheel/$how"
  rm "$w"
done
{ printf '\1'; tail -c +2 "$OUT/remote_wheel/stored"; } >"$OUT/remote_wheel/no-range"
# A plan document of every shape resolver/plan/plan_file.hpp reads, and journals as
# installer/txn/journal.hpp writes them (after fuzz_journal's first byte: 0, the file as it is;
# 1, lines the target checksums itself).
python3 - "$OUT/plan" "$OUT/journal" <<'PY'
import hashlib, json, sys
brk = {"consumer": "torch/lib/libtorch_cuda.so", "consumer_dist": "torch-2.11.0.dist-info", "soname": "libcudnn.so.9",
       "kind": "needed", "before": "nvidia/cudnn/lib/libcudnn.so.9", "after": None, "after_version": None, "why": "w"}
wheel = {"file": "/w/x-1.0-py3-none-any.whl", "sha256": "a" * 64, "source": "/w", "url": None,
         "objects": [{"path": "x/libx.so", "soname": "libx.so", "needed": ["libc.so.6"], "rpath": None, "runpath": "$ORIGIN"}],
         "read": {"bytes": 10, "of": 20}}
step = {"action": "reinstall", "dist": "x-1.0.dist-info", "name": "x", "version": "1.0", "wheel": wheel, "why": "w",
        "simulated": True, "deletes": ["x-1.0.dist-info/", {"root": "platlib", "path": "x/a.py"}], "keeps": [],
        "writes": ["x/libx.so"], "after_step": {"ok": True, "worse": [brk]}, "lossy": True}
plan = {"schema": 1, "command": "plan fix", "venv": "/v", "ok": True, "problem": None,
        "fingerprint": {"digest": "0" * 64, "records": [{"dist": "x-1.0.dist-info", "sha256": "1" * 64}],
                        "files": [{"path": "x/libx.so", "exists": True, "dev": 2049, "ino": 12, "size": 100,
                                   "mtime_ns": 1700000000000000000}]},
        "target": {"cuda_major": 12, "given": False, "evidence": [{"dist": None, "cuda_major": 12, "why": "w"}]},
        "steps": [step, dict(step, action="remove", wheel=None)],
        "needs": [{"name": "n", "version": "1", "tags": ["py3-none-any"], "why": "w"}], "remaining": ["r"],
        "conflict": [{"action": "remove", "name": "n", "version": "1", "why": "w", "worse": [brk]}], "source_problems": []}
open(sys.argv[1] + "/1", "w").write(json.dumps(plan))
records = [{"record": "begin", "id": "20260101T000000Z-1", "time": 1700000000, "command": "remove x", "root": "/v"},
           {"record": "op", "n": 0, "op": "move", "from": "/v/a", "to": "/v/.cudafix/tx/1/old/a"},
           {"record": "op", "n": 1, "op": "rmdir", "path": "/v/d", "mode": 493},
           {"record": "op", "n": 2, "op": "mkdir", "path": "/v/e", "mode": 493},
           {"record": "intent_end", "ops": 3},
           {"record": "left", "path": "/v/a", "type": "none"},
           {"record": "left", "path": "/v/e", "type": "file", "dev": 2049, "ino": 77, "size": 12,
            "mtime_ns": 1700000000000000000, "ctime_ns": 1700000000000000001, "sha256": "abc"},
           {"record": "commit", "undoes": "20260101T000000.000-1-0"}, {"record": "rolled_back_by", "id": "20260101T000001.000-2-0"}]
lines = [json.dumps(r, separators=(",", ":")) for r in records]
def line(t): return hashlib.sha256(t.encode()).hexdigest()[:16] + " " + t + "\n"
open(sys.argv[2] + "/1", "w").write("\0" + "".join(line(t) for t in lines))
open(sys.argv[2] + "/2", "w").write("\1" + "".join(t + "\n" for t in lines[:4]) + '{"record":"aborted","why":"x"}\n')
PY
# A lock of every table resolver/pep/pylock.hpp reads: uv's shape (a wheel by URL, an sdist, another
# tool's table, an unknown key) and cudafix's own tables.
h=$(printf '%064d' 0)
cat > "$OUT/pylock/1" <<TOML
lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.12"
[[packages]]
name = "torch"
version = "2.5.1+cu121"
marker = "sys_platform == 'linux'"
wheels = [{ url = "https://x/torch-2.5.1%2Bcu121-cp312-cp312-linux_x86_64.whl", upload-time = 2025-01-01T00:00:00Z, size = 1, hashes = { sha256 = "$h" } }]
sdist = { path = "torch-2.5.1.tar.gz", hashes = {} }
future = { a = [1, 2.5, true] }
[packages.tool.uv]
x = 1
[packages.tool.cudafix]
libraries = [{ path = "torch/lib/libtorch_cuda.so", soname = "libtorch_cuda.so", sha256 = "$h" }]
resolutions = [{ consumer = "torch/lib/libtorch_cuda.so", soname = "libcudnn.so.9", provider = "nvidia/cudnn/lib/libcudnn.so.9" }]
[tool.cudafix]
verified = [{ device = "GPU-1", driver = "550.54.15", cuda = 12040, cudnn = "9.1.0", consumer = "torch/lib/libtorch_cuda.so", at = 2026-01-01T00:00:00Z }]
TOML
