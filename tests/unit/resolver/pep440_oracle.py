#!/usr/bin/python3
"""The oracle for tests/unit/resolver/test_pep440.cpp: Debian's python3-packaging (23.x)
answers the same questions cudafix's resolver/pep440 and pep508 answer. Reads a JSON document
of cases (argv[1]) and writes the answers (argv[2])."""
import json
import operator
import sys

import packaging
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version

cases = json.load(open(sys.argv[1]))
out = {"packaging": packaging.__version__}


def version(text):
    try:
        v = Version(text)
    except InvalidVersion:
        return None
    return v


parsed = [version(t) for t in cases["versions"]]
out["versions"] = [
    None if v is None else {"str": str(v), "pre": v.is_prerelease, "post": v.is_postrelease, "public": v.public}
    for v in parsed
]
out["compare"] = [
    None if parsed[i] is None or parsed[j] is None else (parsed[i] > parsed[j]) - (parsed[i] < parsed[j])
    for i, j in cases["pairs"]
]

specs = []
for text in cases["specifiers"]:
    try:
        specs.append(Specifier(text))
    except InvalidSpecifier:
        specs.append(None)
out["specifiers"] = [s is not None for s in specs]
mode = {"none": None, "true": True, "false": False}
results = []
for s, v, m in cases["contains"]:
    if parsed[v] is None:
        results.append(None)
        continue
    try:
        results.append(SpecifierSet(cases["sets"][s]).contains(parsed[v], prereleases=mode[m]))
    except (InvalidSpecifier, InvalidVersion):
        results.append("error")
out["contains"] = results

ops = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">=": operator.ge, ">": operator.gt}
markers = []
for text, env in cases["markers"]:
    try:
        markers.append(Marker(text).evaluate(env))
    except InvalidVersion:
        markers.append("raises")
    except Exception as e:  # a syntax error, an undefined comparison
        markers.append("error: " + type(e).__name__)
out["markers"] = markers

reqs = []
for line, env in cases["requirements"]:
    try:
        r = Requirement(line)
    except Exception:
        reqs.append(None)
        continue
    try:
        m = None if r.marker is None else r.marker.evaluate(env)
    except InvalidVersion:
        m = "raises"
    reqs.append({"name": r.name, "extras": sorted(r.extras), "specifier": sorted(str(s) for s in r.specifier),
                 "url": r.url or "", "marker": m})
out["requirements"] = reqs
json.dump(out, open(sys.argv[2], "w"))
