#!/usr/bin/env python3
"""The calls cudafix-probe makes, made from Python with ctypes: the baseline `verify` is timed
against. Usage: verify_ctypes.py CONSUMER (e.g. torch/lib/libtorch_cuda.so under site-packages)."""
import ctypes
import os
import sys

cuda = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOW | os.RTLD_LOCAL)
version = ctypes.c_int()
assert cuda.cuDriverGetVersion(ctypes.byref(version)) == 0
rc = cuda.cuInit(0)
assert rc == 0, rc
count = ctypes.c_int()
assert cuda.cuDeviceGetCount(ctypes.byref(count)) == 0
contexts = []
for d in range(count.value):
    dev = ctypes.c_int()
    assert cuda.cuDeviceGet(ctypes.byref(dev), d) == 0
    name = ctypes.create_string_buffer(256)
    cuda.cuDeviceGetName(name, 256, dev)
    major, minor = ctypes.c_int(), ctypes.c_int()
    cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)
    cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
    uuid = ctypes.create_string_buffer(16)
    cuda.cuDeviceGetUuid_v2(uuid, dev)
    ctx = ctypes.c_void_p()
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    contexts.append(ctx)
ctypes.CDLL(sys.argv[1], mode=os.RTLD_LAZY | os.RTLD_LOCAL)
cudnn = ctypes.CDLL("libcudnn.so.9", mode=os.RTLD_LAZY | os.RTLD_NOLOAD)
cudnn.cudnnGetVersion.restype = ctypes.c_size_t
cudnn_version = cudnn.cudnnGetVersion()
for ctx in contexts:
    cuda.cuCtxSetCurrent(ctx)
    handle = ctypes.c_void_p()
    assert cudnn.cudnnCreate(ctypes.byref(handle)) == 0
    assert cudnn.cudnnDestroy(handle) == 0
print(f"driver {version.value} devices {count.value} name {name.value.decode()} cudnn {cudnn_version}")
