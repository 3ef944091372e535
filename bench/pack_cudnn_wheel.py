#!/usr/bin/env python3
"""Packs the nvidia-cudnn-cu13 wheel back out of a venv (pack_dist_wheel.py, which packs any
dist the same way): the dist's files as its RECORD lists them, deflated as NVIDIA's are.

  pack_cudnn_wheel.py SITE_PACKAGES OUTDIR [DIST_PREFIX]   (default nvidia_cudnn_cu13)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pack_dist_wheel  # noqa: E402

if len(sys.argv) not in (3, 4):
    sys.exit(__doc__)
site, out = sys.argv[1:3]
dist = sys.argv[3] if len(sys.argv) > 3 else "nvidia_cudnn_cu13"
sys.exit(pack_dist_wheel.main([site, dist, out]))
