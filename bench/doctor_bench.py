#!/usr/bin/env python3
"""`cudafix doctor` against what users run instead, on the same venv in the same run:
  doctor (every rule)                     vs  <venv>/bin/python3 -m pip check
  doctor --select unsatisfied-requirement  vs  uv pip check (where uv is installed)
  doctor --verify-hashes                   vs  sha256sum over the same files, xargs -P$(nproc)
                                              (on the corpus, once RECORD holds the hashes of the
                                              placeholder files it materialises)
Each pair runs alternately (bench/timing.py), after the venv is written back to disk; medians
of --runs rounds; prints ratios and one JSON line.

  bench/doctor_bench.py --cudafix build/cudafix --corpus tests/data/good_torch_cu130_venv.json.gz
  bench/doctor_bench.py --cudafix .dev/cudafix-dist/cudafix --venv /tmp/v        (GPU machine)
"""
import argparse
import base64
import csv
import glob
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

from timing import alternated, settle, with_walk_cache


def corpus_venv(cudafix, corpus, python, workdir):
    """The corpus in a real venv made by `python -m venv`, whose own pip runs `pip check`."""
    venv = os.path.join(workdir, "venv")
    subprocess.run([python, "-m", "venv", venv], check=True)
    site = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0]
    with gzip.open(corpus) as f:
        desc = json.load(f)
    desc["site_packages"] = os.path.relpath(site, venv)
    # The venv's own pip and setuptools stay real: the corpus' copies would be placeholders.
    desc["dists"] = [d for d in desc["dists"]
                     if d["dist_info"].split("-")[0].lower() not in ("pip", "setuptools", "wheel", "_distutils_hack")]
    desc_path = os.path.join(workdir, "corpus.json")
    with open(desc_path, "w") as f:
        json.dump(desc, f)
    staged = os.path.join(workdir, "staged")
    subprocess.run([cudafix, "materialize", desc_path, staged], check=True, stdout=subprocess.DEVNULL)
    shutil.copytree(os.path.join(staged, desc["site_packages"]), site, dirs_exist_ok=True)
    shutil.rmtree(staged)
    settle()
    return venv, site


def add_venv_arguments(ap, runs):
    """The arguments every bench that runs on a venv takes."""
    ap.add_argument("--cudafix", required=True)
    ap.add_argument("--corpus")
    ap.add_argument("--venv")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--runs", type=int, default=runs)


def bench_venv(args, workdir):
    """(venv, site-packages): the corpus materialised into a new venv (--corpus), or --venv."""
    if args.corpus:
        return corpus_venv(args.cudafix, args.corpus, args.python, workdir)
    return args.venv, glob.glob(os.path.join(args.venv, "lib", "python3*", "site-packages"))[0]


def sha256_rows(site):
    """(RECORD file, its rows, [(row, path on disk)] for rows with a sha256 whose file is
    present), for each RECORD in the site: the files doctor --verify-hashes hashes."""
    for record in glob.glob(os.path.join(site, "*.dist-info", "RECORD")):
        with open(record, newline="") as f:
            rows = list(csv.reader(f))
        hashed = []
        for row in rows:
            if len(row) >= 2 and row[1].startswith("sha256="):
                p = os.path.normpath(os.path.join(site, row[0]))
                if os.path.isfile(p):
                    hashed.append((row, p))
        yield record, rows, hashed


def hashed_files(site):
    """The files doctor --verify-hashes hashes: RECORD rows with a sha256, present on disk."""
    return [p for _, _, hashed in sha256_rows(site) for _, p in hashed]


def record_the_bytes_on_disk(site):
    """Rewrites each RECORD's sha256 values to those of the files on disk. The corpus's
    materialised files are placeholders, not the bytes their RECORDs hash, so without this every
    file is a hash mismatch and --verify-hashes would be timed writing 47,000 findings (27 MB of
    JSON) rather than hashing a healthy venv, as it is on the GPU machine's real one."""
    for record, rows, hashed in sha256_rows(site):
        for row, p in hashed:
            with open(p, "rb") as data:
                digest = hashlib.sha256(data.read()).digest()
            row[1] = "sha256=" + base64.urlsafe_b64encode(digest).decode().rstrip("=")
        with open(record + ".new", "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(rows)
        os.replace(record + ".new", record)
    settle()


def main():
    ap = argparse.ArgumentParser()
    add_venv_arguments(ap, runs=5)
    ap.add_argument("--uv", default=shutil.which("uv") or "/usr/local/bin/uv")
    args = ap.parse_args()
    args.cudafix = os.path.abspath(args.cudafix)  # pip check runs in the work folder
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    work = tempfile.mkdtemp(prefix="doctor-bench-")
    env = with_walk_cache(env, os.path.join(work, "cache"))
    try:
        venv, site = bench_venv(args, work)
        settle()
        py = os.path.join(venv, "bin", "python3")
        row = {"venv": venv, "cores": os.cpu_count()}
        med, out = alternated({"doctor": [args.cudafix, "doctor", "--venv", venv, "--json"],
                               "doctor --no-cache": [args.cudafix, "doctor", "--venv", venv, "--json", "--no-cache"],
                               "pip check": [py, "-m", "pip", "check", "--disable-pip-version-check"]},
                              args.runs, env, cwd=work)
        doc, pip = med["doctor"], med["pip check"]
        summary = json.loads(out["doctor"].stdout)["summary"]
        row.update({"doctor": doc, "doctor summary": summary, "pip check": pip,
                    "pip check says": out["pip check"].stdout.decode().strip().splitlines()[:3]})
        print(f"doctor (every rule)       {doc*1000:8.1f} ms   {summary}")
        row["doctor --no-cache"] = med["doctor --no-cache"]
        print(f"doctor --no-cache         {med['doctor --no-cache']*1000:8.1f} ms   (every folder listed)")
        print(f"pip check                 {pip*1000:8.1f} ms   doctor is {pip/doc:.1f}x faster")
        cmds = {"select": [args.cudafix, "doctor", "--venv", venv, "--select", "unsatisfied-requirement", "--json"]}
        if os.path.exists(args.uv):
            cmds["uv"] = [args.uv, "pip", "check", "--python", py]
        med, out = alternated(cmds, args.runs, env)
        sel = med["select"]
        row["doctor --select unsatisfied-requirement"] = sel
        verdicts = sorted(f["message"] for f in json.loads(out["select"].stdout)["findings"])
        print(f"doctor --select unsatisfied-requirement {sel*1000:8.1f} ms   {len(verdicts)} findings")
        if "uv" in med:
            uv = med["uv"]
            row["uv pip check"] = uv
            row["uv pip check says"] = (out["uv"].stdout + out["uv"].stderr).decode().strip().splitlines()[-3:]
            print(f"uv pip check              {uv*1000:8.1f} ms   full doctor is {doc/uv:.1f}x uv's time; "
                  f"the requirement rule alone {sel/uv:.2f}x")
        if args.corpus:
            record_the_bytes_on_disk(site)
        files = hashed_files(site)
        listing = os.path.join(work, "files.txt")
        with open(listing, "wb") as f:
            f.write(b"\0".join(p.encode() for p in files))
        med, out = alternated(
            {"hashes": [args.cudafix, "doctor", "--venv", venv, "--verify-hashes", "--select", "hash-mismatch", "--json"],
             "sha256sum": ["sh", "-c", f"xargs -0 -P{os.cpu_count()} -n 64 sha256sum < {listing} > /dev/null"]},
            args.runs, env)
        hashes, sha = med["hashes"], med["sha256sum"]
        row["doctor --verify-hashes"] = hashes
        row["hashed files"] = json.loads(out["hashes"].stdout).get("hashed", {})
        row["sha256sum"] = sha
        print(f"doctor --verify-hashes    {hashes*1000:8.1f} ms   {row['hashed files']}")
        print(f"xargs -P{os.cpu_count()} sha256sum     {sha*1000:8.1f} ms   ({len(files)} files) doctor takes "
              f"{hashes/sha:.2f}x its time")
        print(json.dumps(row))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
