#!/usr/bin/env python3
"""Where an ELF object's pieces lie in its deflate stream, as range planning must guess them.

  elf_deflate_profile.py OBJECT [--json]

For each section in file order: its name, type, file offset and size, where it starts in the
object deflated whole at zipfile's level (the place a wheel's member has it), and the ratio its
own bytes deflate to there. Also PT_DYNAMIC's place and the section header table's. Read by
hand when a layout reads more than it should (NCCL's: 126 MB of __nv_relfatbin before .dynamic).
"""
import json
import struct
import sys
import zlib


def sections_of(data):
    if data[:4] != b"\x7fELF" or data[4] != 2:
        sys.exit("not a 64-bit ELF object")
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", data, 0x36)
    dynamic = None
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 2:
            dynamic = (p_offset, p_filesz)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = heads[shstrndx][4] if shnum else 0

    def name(off):
        end = data.index(b"\0", names_at + off)
        return data[names_at + off:end].decode("latin-1")

    secs = [{"name": name(h[0]), "type": h[1], "offset": h[4], "size": h[5] if h[1] != 8 else 0}
            for h in heads[1:]]
    secs.sort(key=lambda s: s["offset"])
    return secs, dynamic, (shoff, shnum * shentsize)


def main():
    path = sys.argv[1]
    data = open(path, "rb").read()
    secs, dynamic, table = sections_of(data)
    z = zlib.compressobj(6, zlib.DEFLATED, -15)
    produced, at = 0, 0
    rows = []
    for s in secs + [{"name": "(section header table)", "type": 0, "offset": table[0], "size": table[1]}]:
        if s["offset"] < at or s["size"] == 0:
            continue
        produced += len(z.compress(data[at:s["offset"]]))
        start = produced
        produced += len(z.compress(data[s["offset"]:s["offset"] + s["size"]]))
        at = s["offset"] + s["size"]
        rows.append(dict(s, deflated_at=start, ratio=round((produced - start) / s["size"], 3)))
    produced += len(z.compress(data[at:])) + len(z.flush())
    summary = {"object": path, "size": len(data), "deflated": produced, "dynamic": dynamic,
               "section_table": table, "sections": rows}
    if "--json" in sys.argv:
        json.dump(summary, sys.stdout, indent=1)
        return
    print(f"{path}: {len(data)} bytes, deflated {produced}; PT_DYNAMIC {dynamic}; section table {table}")
    print(f"{'section':<28} {'offset':>11} {'size':>11} {'deflated at':>12} {'ratio':>6}")
    for r in rows:
        print(f"{r['name'][:28]:<28} {r['offset']:>11} {r['size']:>11} {r['deflated_at']:>12} {r['ratio']:>6}")


main()
