#!/usr/bin/env python3
"""An object whose .dynstr holds, a few KB before its real DT_NEEDED/DT_SONAME names, a planted copy
of them: the same offsets' shape (each name where the real one lies, less DISTANCE; a NUL before
each, ".so" in each) but other names (each one's part before ".so" in capitals: LIBM.so.6). The
bytes planted over are symbol names, which the loader never reads for NEEDED or SONAME: readelf -d
and the loader still give the real names. A window of the deflate stream around the names holds
both (installer/wheel/strings_window must take neither by fingerprint alone).
usage: make_planted_names.py SOURCE OUT  -> OUT, the object, and a JSON line of the planted names
"""
import json
import struct
import sys

DISTANCE = 8192  # bytes before the real names where the copy is planted


def names_block(data):
    """The file offsets [first, end) of the real names' block (the NUL before the first name to the
    last one's NUL) and the table's file offset."""
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phnum, = struct.unpack_from("<H", data, 0x38)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, offset, vaddr, _, filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * 56)
        if p_type == 1:
            loads.append((offset, vaddr, filesz))
        if p_type == 2:
            dynamic = (offset, filesz)
    strtab, offsets = None, []
    for k in range(dynamic[1] // 16):
        tag, value = struct.unpack_from("<QQ", data, dynamic[0] + 16 * k)
        if tag == 0:
            break
        if tag == 5:
            strtab = next(o + value - v for o, v, n in loads if v <= value < v + n)
        if tag in (1, 14):
            offsets.append(value)
    first = strtab + min(offsets) - 1
    end = data.index(b"\0", strtab + max(offsets)) + 1
    return first, end, strtab


def main():
    source, out = sys.argv[1:3]
    data = bytearray(open(source, "rb").read())
    first, end, strtab = names_block(data)
    if first - DISTANCE < strtab:
        sys.exit("the string table is too short to plant the names in")
    planted = []
    for name in bytes(data[first + 1:end - 1]).split(b"\0"):
        head, dot, tail = name.partition(b".so")
        planted.append(head.upper() + dot + tail)
    block = b"\0" + b"\0".join(planted) + b"\0"
    assert len(block) == end - first
    data[first - DISTANCE:end - DISTANCE] = block
    open(out, "wb").write(data)
    print(json.dumps([n.decode() for n in planted]))


main()
