#!/usr/bin/env python3
"""Sums up a test run: every test of every GoogleTest suite (from the XML report each suite's
process writes under BUILD/tests/gtest-xml/), and every other ctest test (from the JUnit file
ctest wrote, BUILD/ctest.xml). Prints each failed and each skipped test, a skip with the reason
its output gives, then one closing line "tests: N passed, N failed, N skipped".

A suite whose process failed without a failed test in its report (a crash, a sanitizer report at
exit, a time-out) counts as one failed test. With --expected-skips FILE, a skip whose
"label: name" matches none of the file's regular expressions (one a line, # comments) also fails
the run when CI is set: a test that cannot run where CI runs is a gap, not a pass.

usage: test_summary.py [--expected-skips FILE] LABEL=BUILD_DIR ...
"""
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET


def ctest_skip_reason(case):
    out = case.findtext("system-out") or ""
    # A Python test prints "skipped: REASON"; ctest's own notrun cases say why in the output.
    m = re.search(r"^skipped: (.*)$", out, re.M)
    return m.group(1).strip() if m else (out.strip().splitlines() or ["no reason printed"])[-1]


def gtest_cases(xml_file):
    """(name, outcome, reason) for every test in one GoogleTest XML report."""
    for case in ET.parse(xml_file).getroot().iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        if case.find("failure") is not None:
            yield name, "failed", case.find("failure").get("message", "").splitlines()[0:1]
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            skipped = case.find("skipped")
            message = skipped.get("message", "") if skipped is not None else ""
            # GoogleTest's message is "file:line\nREASON"; the reason is what matters.
            reason = " ".join(message.split("\n", 1)[-1].split()) or "no reason printed"
            yield name, "skipped", reason
        elif case.get("status") == "notrun":
            yield name, "skipped", "disabled"
        else:
            yield name, "passed", None


def read_expected(path):
    if not path:
        return []
    patterns = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                patterns.append(re.compile(line))
    return patterns


def main(argv):
    expected_file = None
    if len(argv) >= 2 and argv[0] == "--expected-skips":
        expected_file, argv = argv[1], argv[2:]
    expected = read_expected(expected_file)
    enforce = bool(os.environ.get("CI"))
    passed = failed = skipped = 0
    unexpected = []

    def skip(label, name, reason):
        nonlocal skipped
        skipped += 1
        print(f"skipped ({label}): {name}: {reason}")
        if expected_file and not any(p.search(f"{label}: {name}") for p in expected):
            unexpected.append(f"{label}: {name}")

    for arg in argv:
        label, build = arg.split("=", 1)
        reports = {}
        for xml_file in glob.glob(os.path.join(build, "tests", "gtest-xml", "*", "*.xml")):
            reports[os.path.basename(xml_file)[: -len(".xml")]] = xml_file
        junit = os.path.join(build, "ctest.xml")
        for case in ET.parse(junit).getroot().iter("testcase") if os.path.exists(junit) else []:
            name, status = case.get("name"), case.get("status")
            process_failed = status == "fail" or case.find("failure") is not None
            report = reports.pop(name.replace("/", "_"), None)
            if report is not None:
                failures_listed = 0
                for test, outcome, reason in gtest_cases(report):
                    if outcome == "passed":
                        passed += 1
                    elif outcome == "skipped":
                        skip(label, test, reason)
                    else:
                        failed += 1
                        failures_listed += 1
                        print(f"failed ({label}): {test}")
                if process_failed and failures_listed == 0:
                    failed += 1
                    print(f"failed ({label}): {name}: its process failed after its tests passed (see its output)")
            elif status in ("notrun", "disabled") or case.find("skipped") is not None:
                skip(label, name, ctest_skip_reason(case))
            elif status == "run" and not process_failed:
                passed += 1
            else:
                failed += 1
                print(f"failed ({label}): {name}")
    if unexpected:
        word = "fail the run" if enforce else "would fail the run under CI"
        print(f"{len(unexpected)} skips that {expected_file} does not expect here {word}: " + ", ".join(unexpected))
    print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or (unexpected and enforce) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
