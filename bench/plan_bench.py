#!/usr/bin/env python3
"""`cudafix plan fix` and `plan remove` against `cudafix doctor` on the same broken venv, same run.

The corpus venv (or --venv, a copy to break) is broken the way users break theirs:
  - nvidia-cudnn-cu12 installed over nvidia-cudnn-cu13's files (a dist-info listing the same paths);
  - nvidia-cublas left metadata-only (its libraries deleted).
Then, alternated, medians of --runs: doctor; plan fix (reinstall cuBLAS, remove the cu12 cuDNN,
each step simulated); plan remove nvidia-cudnn-cu12. Prints the ratios and one JSON line.

  bench/plan_bench.py --cudafix build/cudafix --corpus tests/data/good_torch_cu130_venv.json.gz
  bench/plan_bench.py --cudafix .dev/cudafix-dist/cudafix --venv /tmp/v      (GPU machine: a copy)
"""
import argparse
import glob
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from doctor_bench import add_venv_arguments, bench_venv  # noqa: E402
from timing import alternated  # noqa: E402


def break_venv(site):
    cu13 = glob.glob(os.path.join(site, "nvidia_cudnn_cu13-*.dist-info"))[0]
    version = cu13.split("-")[-1][: -len(".dist-info")]
    cu12 = os.path.join(site, f"nvidia_cudnn_cu12-{version}.dist-info")
    os.makedirs(cu12, exist_ok=True)
    with open(os.path.join(cu12, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: nvidia-cudnn-cu12\nVersion: {version}\n")
    with open(os.path.join(cu13, "RECORD")) as src, open(os.path.join(cu12, "RECORD"), "w") as dst:
        for line in src:
            if not line.startswith(os.path.basename(cu13)):
                dst.write(line.split(",")[0] + ",,\n")
    cublas = glob.glob(os.path.join(site, "nvidia_cublas-*.dist-info"))[0]
    with open(os.path.join(cublas, "RECORD")) as f:
        for line in f:
            path = os.path.join(site, line.split(",")[0])
            if ".so" in os.path.basename(path) and os.path.exists(path):
                os.unlink(path)  # unlink: in a hardlink copy the original's file stays


def main():
    ap = argparse.ArgumentParser()
    add_venv_arguments(ap, runs=7)
    args = ap.parse_args()
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    work = tempfile.mkdtemp(prefix="plan-bench-")
    try:
        venv, site = bench_venv(args, work)
        break_venv(site)
        cmds = {
            "doctor": [args.cudafix, "doctor", "--venv", venv, "--json"],
            "plan fix": [args.cudafix, "plan", "fix", "--venv", venv, "--json"],
            "plan remove": [args.cudafix, "plan", "remove", "nvidia-cudnn-cu12", "--venv", venv, "--json"],
        }
        med, out = alternated(cmds, args.runs, env)
        plan = json.loads(out["plan fix"].stdout)
        steps = [f'{s["action"]} {s["name"]}' for s in plan["steps"]]
        for name in cmds:
            print(f"{name:12s} {med[name] * 1000:8.1f} ms  (exit {out[name].returncode})")
        print(f"plan fix steps: {steps}; ok: {plan['ok']}")
        print(f"plan fix / doctor: {med['plan fix'] / med['doctor']:.2f}x (target: under 2x)")
        print(json.dumps({"doctor_ms": med["doctor"] * 1000, "plan_fix_ms": med["plan fix"] * 1000,
                          "plan_remove_ms": med["plan remove"] * 1000,
                          "plan_fix_over_doctor": med["plan fix"] / med["doctor"], "steps": steps}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
