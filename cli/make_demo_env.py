#!/usr/bin/env python3
"""Regenerates cli/demo_env.json, the example environment `cudafix demo` builds, from the corpus.

Usage: python3 cli/make_demo_env.py tests/data/good_torch_cu130_venv.json.gz > cli/demo_env.json

The example is the real CUDA 13 torch venv cut down to torch's libraries and the NVIDIA wheels,
then broken the way users break it: nvidia-nccl-cu12 was installed beside nvidia-nccl-cu13 (both
list nvidia/nccl/lib/libnccl.so.2), and nvidia-cudnn-cu12, which shared nvidia/cudnn/lib with
nvidia-cudnn-cu13, was uninstalled: pip deleted the shared files, so nvidia-cudnn-cu13 is still
"installed" with its libraries gone ("absent").
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
    if name.startswith("nvidia_nccl_cu13"):
        cu12 = json.loads(json.dumps(d).replace("nvidia_nccl_cu13-2.28.9", "nvidia_nccl_cu12-2.27.3"))
        cu12["metadata_headers"] = [h.replace("nvidia-nccl-cu13", "nvidia-nccl-cu12").replace("2.28.9", "2.27.3")
                                    for h in cu12["metadata_headers"]]
        cu12["REQUESTED"] = ""
        dists.append(cu12)
paths = {r[0] for d in dists for r in d["record"]}
elf = {p: e for p, e in corpus["elf"].items() if p in paths}
absent = sorted(p for p in paths if p.startswith("nvidia/cudnn/lib/"))
json.dump({"about": "cudafix demo: a cut-down CUDA 13 torch venv with nvidia-cudnn-cu13's files deleted by "
                    "the uninstall of nvidia-cudnn-cu12, and nvidia-nccl-cu12 sharing libnccl.so.2",
           "python": corpus["python"], "site_packages": corpus["site_packages"],
           "dists": sorted(dists, key=lambda d: d["dist_info"]), "elf": elf, "absent": absent},
          sys.stdout, indent=0, sort_keys=True)
