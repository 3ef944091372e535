#!/usr/bin/env python3
"""Packs an installed dist back into a wheel from the venv's own files, as its dist-info's RECORD
lists them: deflated as NVIDIA's wheels are, the dist-info's METADATA and WHEEL, and a RECORD of
what the wheel holds (each member's SHA-256 and size, computed from the bytes written, not taken
from the installed RECORD). What an installer wrote (INSTALLER, REQUESTED, direct_url.json, the
bytecode it compiled, the console scripts it made from entry_points.txt) is left out, so pip and
uv install it as they would the original.

  pack_dist_wheel.py SITE_PACKAGES DIST OUTDIR [--replace ARCNAME=FILE ...]
  pack_dist_wheel.py --check WHEEL ...

DIST is the name as pip shows it (nvidia-cudnn-cu13) or as the dist-info spells it. --replace
puts FILE's bytes in the wheel as member ARCNAME, which the dist must list (a wheel of another
release under the dist's name and version). --check reads wheels back: every member listed in
RECORD with its hash and size, every row a member, METADATA and WHEEL present.
"""
import base64
import csv
import hashlib
import io
import os
import re
import sys
import time
import zipfile

CHUNK = 1 << 20
INSTALLER_FILES = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")


class PackError(Exception):
    pass


def normalized(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def b64_digest(h):
    return "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def find_dist_info(site, dist):
    want = normalized(dist)
    found = []
    for entry in sorted(os.listdir(site)):
        if entry.endswith(".dist-info") and "-" in entry:
            name, version = entry[: -len(".dist-info")].rsplit("-", 1)
            if normalized(name) == want:
                found.append((entry, name, version))
    if len(found) != 1:
        raise PackError(f"{site}: {len(found)} dist-info folders for {dist} ({', '.join(f[0] for f in found) or 'none'})")
    return found[0]


def metadata_field(text, field):
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first blank line; the description follows
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == field.lower():
            return value.strip()
    return None


def wheel_tag(wheel_text):
    """The file name's tag from WHEEL's Tag lines (py3-none-manylinux_2_27_x86_64), each part's
    values joined by dots as a compressed tag set is."""
    parts = [[], [], []]
    for line in wheel_text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "Tag" and value.strip().count("-") == 2:
            for i, p in enumerate(value.strip().split("-")):
                if p not in parts[i]:
                    parts[i].append(p)
    if not parts[0]:
        return "py3-none-linux_x86_64"
    return "-".join(".".join(p) for p in parts)


def entry_point_scripts(info_dir):
    """The names pip and uv generate a script for from entry_points.txt."""
    path = os.path.join(info_dir, "entry_points.txt")
    names, section = set(), None
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("["):
                    section = line.strip("[]").strip()
                elif "=" in line and section in ("console_scripts", "gui_scripts"):
                    names.add(line.split("=", 1)[0].strip())
    return names


def members_outside(site_real, info, arc, path, members, skipped):
    """A file the dist installed beside site-packages, under the prefix (bin/ninja,
    share/man/man1/ttx.1), packed where a wheel carries it: {name}-{version}.data/scripts/ for
    bin/, {name}-{version}.data/data/ for the rest, as the wheel spec's install schemes map them."""
    prefix = os.path.normpath(os.path.join(site_real, "..", "..", ".."))
    if not path.startswith(prefix + os.sep):
        raise PackError(f"{info}/RECORD: {arc} is outside the environment's prefix")
    rel = os.path.relpath(path, prefix)
    data = info[: -len(".dist-info")] + ".data"
    target = f"{data}/scripts/{rel[4:]}" if rel.startswith("bin/") else f"{data}/data/{rel}"
    if os.path.isfile(path):
        members.append((target, path))
    else:
        skipped.append(arc)


def members_of(site, info, record_rows, scripts):
    """(arcname, source path) for each file of the dist that belongs in the wheel."""
    site_real = os.path.realpath(site)
    members, skipped = [], []
    for row in record_rows:
        if not row or not row[0]:
            continue
        arc = row[0]
        path = os.path.normpath(os.path.join(site_real, arc))
        inside = path.startswith(site_real + os.sep)
        if not inside:
            if os.path.basename(path) in scripts:
                continue  # the installer makes it again from entry_points.txt
            members_outside(site_real, info, arc, path, members, skipped)
            continue
        if os.path.isabs(arc) or ".." in arc.split("/"):
            raise PackError(f"{info}/RECORD: {arc} is not a plain relative path")
        if "__pycache__" in arc.split("/") or arc.endswith(".pyc"):
            continue  # bytecode the installer compiled
        if arc.startswith(info + "/") and arc[len(info) + 1 :] in INSTALLER_FILES:
            continue
        if not os.path.isfile(path):
            skipped.append(arc)
            continue
        members.append((arc, path))
    return members, skipped


def add_member(z, arc, source, like):
    """Writes SOURCE's bytes as ARC, deflated, in one read, with the mode and time of the venv's
    file LIKE; returns its RECORD row."""
    st = os.stat(like)
    when = time.localtime(st.st_mtime)[:6]
    zi = zipfile.ZipInfo(arc, when if when[0] >= 1980 else (1980, 1, 1, 0, 0, 0))
    zi.external_attr = (st.st_mode & 0xFFFF) << 16
    zi.file_size = os.path.getsize(source)  # decides zip64 before the bytes are written
    zi.compress_type = zipfile.ZIP_DEFLATED
    h, size = hashlib.sha256(), 0
    with open(source, "rb") as src, z.open(zi, "w") as dst:
        while chunk := src.read(CHUNK):
            h.update(chunk)
            dst.write(chunk)
            size += len(chunk)
    return [arc, b64_digest(h), str(size)]


def add_bytes(z, arc, data):
    zi = zipfile.ZipInfo(arc, (2026, 1, 1, 0, 0, 0))
    zi.compress_type = zipfile.ZIP_DEFLATED
    zi.external_attr = 0o644 << 16
    z.writestr(zi, data)
    return [arc, b64_digest(hashlib.sha256(data)), str(len(data))]


def pack(site, dist, out, replace=None):
    """Packs DIST from SITE into OUT; returns (wheel path, lines saying what it did)."""
    replace = dict(replace or {})
    info, name, version = find_dist_info(site, dist)
    info_dir = os.path.join(site, info)
    with open(os.path.join(info_dir, "METADATA"), "rb") as f:
        metadata = f.read()
    meta_text = metadata.decode("utf-8", "replace")
    meta_version = metadata_field(meta_text, "Version")
    if meta_version != version:
        raise PackError(f"{info}/METADATA: Version {meta_version!r}, the folder says {version!r}")
    wheel_path = os.path.join(info_dir, "WHEEL")
    if os.path.isfile(wheel_path):
        with open(wheel_path, "rb") as f:
            wheel = f.read()
    else:
        wheel = b"Wheel-Version: 1.0\nGenerator: cudafix-bench\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"
    with open(os.path.join(info_dir, "RECORD"), newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    members, skipped = members_of(site, info, rows, entry_point_scripts(info_dir))
    listed = {arc for arc, _ in members}
    unknown = sorted(set(replace) - listed)
    if unknown:
        raise PackError(f"--replace: {', '.join(unknown)} not among {info}/RECORD's files")
    for arc in replace:
        if not os.path.isfile(replace[arc]):
            raise PackError(f"--replace {arc}={replace[arc]}: no such file")
    said = [f"  warning: {info}/RECORD lists {arc}, not in {site}; left out" for arc in skipped]
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{name}-{version}-{wheel_tag(wheel.decode('utf-8', 'replace'))}.whl")
    part = path + ".part"
    record, unpacked = [], 0
    special = {f"{info}/METADATA": metadata, f"{info}/WHEEL": wheel}
    # The dist's own files first, its dist-info last, as wheel builders write them.
    members.sort(key=lambda m: (m[0].startswith(info + "/"), m[0]))
    with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, source in members:
            if arc in special:
                continue
            like = source
            if arc in replace:
                source = replace[arc]
                said.append(f"  {arc}: the bytes of {source} ({os.path.getsize(source)} bytes, "
                            f"the venv's {os.path.getsize(like)})")
            record.append(add_member(z, arc, source, like))
            unpacked += int(record[-1][2])
        for arc, data in special.items():
            record.append(add_bytes(z, arc, data))
        text = io.StringIO()
        w = csv.writer(text, lineterminator="\n")
        w.writerows(record)
        w.writerow([f"{info}/RECORD", "", ""])
        add_bytes(z, f"{info}/RECORD", text.getvalue().encode())
    os.replace(part, path)
    said.insert(0, f"wheel: {path} {os.path.getsize(path) / 2**20:.0f} MiB, {len(record)} files, "
                   f"{unpacked / 2**20:.0f} MiB unpacked")
    return path, said


def check(path):
    """Problems with the wheel at PATH as pip and uv would judge its RECORD; empty when none."""
    problems = []
    base = os.path.basename(path)
    parts = base[: -len(".whl")].split("-") if base.endswith(".whl") else []
    if len(parts) not in (5, 6):
        return [f"{base}: not a wheel's file name"]
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        tops = {n.split("/", 1)[0] for n in names}
        want = [normalized(parts[0]), normalized(parts[1])]
        infos = [i for i in tops if i.endswith(".dist-info") and
                 [normalized(x) for x in i[: -len(".dist-info")].split("-")] == want]
        if len(infos) != 1 or f"{infos[0]}/RECORD" not in names:
            return [f"{base}: no {parts[0]}-{parts[1]}.dist-info/RECORD"]
        info = infos[0]
        for need in ("METADATA", "WHEEL"):
            if f"{info}/{need}" not in names:
                problems.append(f"{base}: no {info}/{need}")
        if len(set(names)) != len(names):
            problems.append(f"{base}: a member name repeats")
        rows = {r[0]: r for r in csv.reader(io.StringIO(z.read(f"{info}/RECORD").decode())) if r}
        for n in names:
            if n == f"{info}/RECORD" or n.endswith("/"):
                continue
            row = rows.pop(n, None)
            if row is None or len(row) != 3:
                problems.append(f"{base}: {n} is not in RECORD")
                continue
            h, size = hashlib.sha256(), 0
            with z.open(n) as f:
                while chunk := f.read(CHUNK):
                    h.update(chunk)
                    size += len(chunk)
            if b64_digest(h) != row[1] or str(size) != row[2]:
                problems.append(f"{base}: {n} is {b64_digest(h)},{size}; RECORD says {row[1]},{row[2]}")
        rows.pop(f"{info}/RECORD", None)
        problems += [f"{base}: RECORD lists {n}, not in the wheel" for n in rows]
        meta = z.read(f"{info}/METADATA").decode("utf-8", "replace") if f"{info}/METADATA" in names else ""
        if meta and (normalized(metadata_field(meta, "Name") or "") != normalized(parts[0])
                     or metadata_field(meta, "Version") != parts[1]):
            problems.append(f"{base}: METADATA names {metadata_field(meta, 'Name')} {metadata_field(meta, 'Version')}")
    return problems


def main(argv):
    if argv[:1] == ["--check"] and len(argv) > 1:
        problems = []
        for w in argv[1:]:
            found = check(w)
            problems += found
            if not found:
                print(f"ok: {os.path.basename(w)}: every member's hash and size as RECORD says")
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    site, dist, out = argv[:3]
    replace, rest = {}, iter(argv[3:])
    for a in rest:
        if a != "--replace":
            print(f"pack_dist_wheel.py: unknown argument {a}", file=sys.stderr)
            return 2
        arc, sep, src = next(rest, "").partition("=")
        if not sep:
            print("pack_dist_wheel.py: --replace needs ARCNAME=FILE", file=sys.stderr)
            return 2
        replace[arc] = src
    try:
        _, said = pack(site, dist, out, replace)
    except (PackError, OSError) as e:
        print(f"pack_dist_wheel.py: {e}", file=sys.stderr)
        return 1
    print("\n".join(said))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
