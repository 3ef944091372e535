#!/usr/bin/env python3
"""Times `cudafix scan --json` against what users run instead, on the same environment in the
same run, and prints the ratios. Not run by CI: timings depend on the machine.

  bench/scan_bench.py --cudafix build/cudafix --corpus tests/data/good_torch_cu130_venv.json.gz --scales 1,4,16
  bench/scan_bench.py --cudafix DIR/cudafix --venv /tmp/v --uv /usr/local/bin/uv      (a real venv)

Each command runs once to warm the page cache (and cudafix's walk cache, in a folder of the
bench's own; "cudafix --no-cache" lists every folder), then --runs rounds in fresh processes, the
commands in turn (bench/timing.py); the median is reported. ldd runs once per shared object, one
after another, as `find | xargs -n1 ldd` would. Where a C compiler is found, bench/walk_floor.c also lists the same site-packages
with getdents64 alone on one thread per core: the part of the scan no tool can avoid.
"""
import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from timing import alternated, settle, with_walk_cache


def scan_json(cudafix, venv, env):
    out = subprocess.run([cudafix, "scan", "--json", "--venv", venv], capture_output=True, env=env, check=True).stdout
    return json.loads(out)


def ldd_all(paths):
    t = time.perf_counter()
    for p in paths:
        subprocess.run(["ldd", p], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


def build_walk_floor(tmp):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    exe = os.path.join(tmp, "walk_floor")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "walk_floor.c")
    subprocess.run([cc, "-O2", "-pthread", "-o", exe, src], check=True)
    return exe


def walk_floor(exe, site, runs):
    """Median milliseconds of the bare listing, from the program's own clock."""
    subprocess.run([exe, site, str(os.cpu_count())], stdout=subprocess.DEVNULL, check=True)
    times = []
    for _ in range(runs):
        out = subprocess.run([exe, site, str(os.cpu_count())], capture_output=True, check=True).stdout.decode()
        times.append(float(out.split()[-2]) / 1000)
    return statistics.median(times)


def bench_venv(args, venv, python, label, env):
    settle()
    doc = scan_json(args.cudafix, venv, env)  # also fills the walk cache, as any earlier scan would
    site = doc["layout"]["sites"][0]["path"]
    objects = [os.path.join(site, o["path"]) if isinstance(o["path"], str) else o["path"]["path"] for o in doc["objects"]]
    row = {"env": label, "dists": doc["summary"]["dists"], "files": doc["summary"]["files_walked"],
           "objects": len(objects)}
    cmds = {"cudafix": [args.cudafix, "scan", "--json", "--venv", venv],
            "cudafix --no-cache": [args.cudafix, "scan", "--json", "--venv", venv, "--no-cache"],
            "pip list": [python, "-m", "pip", "list", "--path", site, "--disable-pip-version-check"]}
    if args.uv:
        cmds["uv pip list"] = [args.uv, "pip", "list", "--python", os.path.join(venv, "bin", "python3")]
    row.update(alternated(cmds, args.runs, env, check=True)[0])
    if not args.skip_ldd:
        row["ldd every .so"] = ldd_all(objects)
    if args.floor_exe:
        row["getdents64 alone"] = walk_floor(args.floor_exe, site, args.runs)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cudafix", required=True)
    ap.add_argument("--corpus")
    ap.add_argument("--venv")
    ap.add_argument("--scales", default="1")
    ap.add_argument("--python", default="/usr/bin/python3", help="runs pip list (for --corpus)")
    ap.add_argument("--uv")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-ldd", action="store_true")
    args = ap.parse_args()
    floor_dir = tempfile.mkdtemp(prefix="cudafix-floor-")
    env = with_walk_cache({k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"},
                          os.path.join(floor_dir, "cache"))
    args.floor_exe = build_walk_floor(floor_dir)
    rows = []
    if args.venv:
        python = os.path.join(args.venv, "bin", "python3")
        rows.append(bench_venv(args, args.venv, python, args.venv, env))
    if args.corpus:
        tmp = tempfile.mkdtemp(prefix="cudafix-bench-")
        try:
            for scale in [int(s) for s in args.scales.split(",")]:
                venv = os.path.join(tmp, f"x{scale}")
                with gzip.open(args.corpus) as f:
                    description = f.read()
                subprocess.run([args.cudafix, "materialize", "-", venv, "--copies", str(scale)], input=description,
                               stdout=subprocess.DEVNULL, check=True)
                rows.append(bench_venv(args, venv, args.python, f"corpus x{scale}", env))
                shutil.rmtree(venv)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    for row in rows:
        print(f"\n{row['env']}: {row['dists']} dists, {row['files']} files, {row['objects']} ELF objects")
        for k in ("cudafix", "cudafix --no-cache", "pip list", "uv pip list", "ldd every .so", "getdents64 alone"):
            if k in row:
                ratio = "" if k == "cudafix" else f"   cudafix is {row[k] / row['cudafix']:.1f}x faster" if row[k] > row["cudafix"] else f"   cudafix is {row['cudafix'] / row[k]:.1f}x slower"
                print(f"  {k:18s} {row[k] * 1000:9.1f} ms{ratio}")
    print(json.dumps(rows))
    shutil.rmtree(floor_dir, ignore_errors=True)


main()
