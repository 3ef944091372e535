"""What the fleet integration tests share: a real venv broken as pip breaks it.

A CUDA 12 consumer (torch12like) and two cuDNN wheels that list the same nvidia/cudnn/lib file,
installed by the venv's own pip; `pip uninstall nvidia-cudnn-cu13` then takes the file the
CUDA 12 one lists, leaving nvidia-cudnn-cu12 metadata-only. The wheels are made by
tests/e2e/make_wheel.py from the fake libraries the build compiles (tests/fixtures/).
"""
import hashlib
import os
import subprocess

PYTHON = "/usr/bin/python3"


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def make_wheels(source, fixtures, folder):
    os.makedirs(folder, exist_ok=True)
    v = os.path.join(fixtures, "verify")
    specs = [
        "nvidia-cuda-runtime-cu12 12.8.90 nvidia/cuda_runtime/lib/libcudart.so.12=%s/cu12/libcudart.so.12" % v,
        "nvidia-cudnn-cu12 9.10.2.21 nvidia/cudnn/lib/libcudnn.so.9=%s/cudnn/v91400/libcudnn.so.9" % v,
        "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=%s/cudnn/v91900/libcudnn.so.9" % v,
        "torch12like 2.7.0 torch/lib/libtorch_cuda.so=%s/torch12/libtorch_cuda.so --requires "
        "nvidia-cudnn-cu12==9.10.2.21" % v,
    ]
    wheels = []
    for spec in specs:
        r = run([PYTHON, os.path.join(source, "tests/e2e/make_wheel.py"), folder] + spec.split(" "))
        assert r.returncode == 0, r.stdout + r.stderr
        wheels.append(r.stdout.strip().splitlines()[-1])
    return wheels


def broken_venv(path, wheels):
    """A venv with the wheels installed in order, then the CUDA 13 cuDNN uninstalled by pip."""
    r = run([PYTHON, "-m", "venv", path])
    assert r.returncode == 0, r.stderr
    pip = [os.path.join(path, "bin", "python"), "-m", "pip"]
    for w in wheels:
        r = run(pip + ["install", "-q", "--no-index", "--no-deps", w])
        assert r.returncode == 0, r.stdout + r.stderr
    r = run(pip + ["uninstall", "-y", "-q", "nvidia-cudnn-cu13"])
    assert r.returncode == 0, r.stderr
    return path


def tree_hash(path):
    """Every file's SHA-256 under `path`, cudafix's own folder and the lock aside."""
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(path)):
        dirs[:] = sorted(d for d in dirs if d != ".cudafix")
        for f in sorted(files):
            if f == ".lock":
                continue
            p = os.path.join(root, f)
            h.update(p.encode())
            if os.path.islink(p):
                h.update(os.readlink(p).encode())
            else:
                with open(p, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()
