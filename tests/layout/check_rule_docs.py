#!/usr/bin/env python3
"""The rules' self-check, as rustc's tidy checks its error codes: every rule that `cudafix rules`
lists has a document with every section (`cudafix explain`), a row in README's rule table, and an
end-to-end test that makes it fire (a `fires(..., "RULE")` in tests/e2e/, which asserts it fired).
Prints each rule that lacks one and what it lacks; exits 1 if any does.

usage: check_rule_docs.py CUDAFIX SOURCE_DIR
"""
import json
import pathlib
import re
import subprocess
import sys

SECTIONS = ["## What it finds", "## Why it matters", "## Severity", "## How to fix it", "## Example"]


def run_json(binary, *args):
    out = subprocess.run([binary, *args, "--json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def lacks(binary, source):
    readme = (source / "README.md").read_text()
    e2e = "\n".join(p.read_text() for p in sorted((source / "tests" / "e2e").glob("*.cpp")))
    problems = []
    rules = run_json(binary, "rules")["rules"]
    if not rules:
        problems.append("`cudafix rules` lists no rule")
    for rule in rules:
        rid = rule["id"]
        doc = run_json(binary, "explain", rid)["document"]
        at = -1
        for section in SECTIONS:
            found = doc.find("\n" + section + "\n")
            if found < 0 or found < at:
                problems.append(f"{rid}: its document has no '{section}' section (or it is out of order)")
            else:
                body = doc[found + len(section) + 2:].split("\n## ", 1)[0]
                if not body.strip():
                    problems.append(f"{rid}: its '{section}' section is empty")
            at = max(at, found)
        if not rule["summary"].strip():
            problems.append(f"{rid}: no summary")
        if not re.search(r"^\| `" + re.escape(rid) + r"` \|", readme, re.M):
            problems.append(f"{rid}: no row in README's rule table (a line starting | `{rid}` |)")
        if not re.search(r"fires\([^;]*\"" + re.escape(rid) + r"\"\)", e2e):
            problems.append(f"{rid}: no end-to-end test makes it fire (fires(doc, \"{rid}\") in tests/e2e/)")
    return problems


def main():
    binary, source = sys.argv[1], pathlib.Path(sys.argv[2])
    problems = lacks(binary, source)
    for p in problems:
        print(p)
    print(f"{len(problems)} problems with the rules' documents, table rows and tests")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
