#!/usr/bin/env python3
"""Regenerates cli/demo_env.json, the example environment `cudafix demo` builds, from the corpus.

Usage: python3 cli/make_demo_env.py tests/data/good_torch_cu130_venv.json.gz > cli/demo_env.json

The example is the real CUDA 13 torch venv cut down to torch's libraries and the NVIDIA wheels,
with the CUDA 12 leftovers users end up with after moving from torch 2.8's cu128 wheels:
nvidia-cudnn-cu12, nvidia-nccl-cu12 and nvidia-cusparselt-cu12 installed beside their CUDA 13
namesakes, each pair listing the same files (nvidia/cudnn/lib/libcudnn*.so.9,
nvidia/nccl/lib/libnccl.so.2, nvidia/cusparselt/lib/libcusparseLt.so.0). The demo then breaks it
as `pip uninstall nvidia-cudnn-cu12 nvidia-nccl-cu12 nvidia-cusparselt-cu12` does.
"""
import gzip
import json
import sys

corpus = json.load(gzip.open(sys.argv[1]))
keep_torch = lambda p: p.startswith("torch/lib/") or p.startswith("torch/_C.") or p in (
    "torch/__init__.py", "torch/version.py") or p.startswith("torch-2.11.0.dist-info/")
dists = []
for d in corpus["dists"]:
    name = d["dist_info"]
    if name.startswith("torch-2"):
        d = dict(d, record=[r for r in d["record"] if keep_torch(r[0])])
    elif not (name.startswith("nvidia_") or name.startswith("cuda_toolkit")) or name.startswith("nvidia_ml_py"):
        continue
    dists.append(d)
    # The versions torch 2.8.0+cu128 pins.
    for cu13, cu12_name, cu12_version in (("nvidia_nccl_cu13-2.28.9", "nccl", "2.27.3"),
                                          ("nvidia_cudnn_cu13-9.19.0.56", "cudnn", "9.10.2.21"),
                                          ("nvidia_cusparselt_cu13-0.8.0", "cusparselt", "0.7.1")):
        if not name.startswith(cu13):
            continue
        version13 = cu13.split("-")[1]
        cu12 = json.loads(json.dumps(d).replace(cu13, f"nvidia_{cu12_name}_cu12-{cu12_version}"))
        cu12["metadata_headers"] = [
            h.replace(f"nvidia-{cu12_name}-cu13", f"nvidia-{cu12_name}-cu12").replace(version13, cu12_version)
            for h in cu12["metadata_headers"] if not h.startswith("Requires-Dist")]
        cu12["REQUESTED"] = ""
        dists.append(cu12)
paths = {r[0] for d in dists for r in d["record"]}
elf = {p: e for p, e in corpus["elf"].items() if p in paths}
json.dump({"about": "cudafix demo: a cut-down CUDA 13 torch venv with nvidia-cudnn-cu12, nvidia-nccl-cu12 and "
                    "nvidia-cusparselt-cu12 installed beside their CUDA 13 namesakes, sharing their files",
           "python": corpus["python"], "site_packages": corpus["site_packages"],
           "dists": sorted(dists, key=lambda d: d["dist_info"]), "elf": elf},
          sys.stdout, indent=0, sort_keys=True)
