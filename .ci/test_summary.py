#!/usr/bin/env python3
"""Sums up the JUnit files ctest wrote (--output-junit): every skipped test with the reason its
output gives (GTEST_SKIP's message), then one closing line "N passed, N failed, N skipped".

usage: test_summary.py LABEL=FILE.xml ...
"""
import re
import sys
import xml.etree.ElementTree as ET


def reason(case):
    out = case.findtext("system-out") or ""
    # GoogleTest prints the skip message between the file:line and "[  SKIPPED ]".
    m = re.search(r"^[^\n]*: Skipped\n(.*?)\n\[  SKIPPED \]", out, re.S | re.M)
    return " ".join(m.group(1).split()) if m else "no reason printed"


def main():
    passed = failed = skipped = 0
    for arg in sys.argv[1:]:
        label, path = arg.split("=", 1)
        for case in ET.parse(path).getroot().iter("testcase"):
            status = case.get("status")
            if status == "run" and case.find("failure") is None:
                passed += 1
            elif status in ("notrun", "disabled") or case.find("skipped") is not None:
                skipped += 1
                print(f"skipped ({label}): {case.get('name')}: {reason(case)}")
            else:
                failed += 1
                print(f"failed ({label}): {case.get('name')}")
    print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
