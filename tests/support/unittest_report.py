"""Runs the unittest tests of a test file and writes their outcomes as GoogleTest's XML report
does (testcase, failure, skipped with its message), to the file named by $CUDAFIX_TEST_REPORT,
so that .ci/test_summary.py counts each Python test and names each skip with its reason, as it
does for the C++ suites. The process exits 1 when a test failed, else 0.

Use: `unittest_report.main()` in place of `unittest.main()`.
"""
import os
import sys
import unittest
import xml.etree.ElementTree as ET


class _Result(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = []  # (classname, name, outcome, message)

    def _note(self, test, outcome, message=""):
        # A class whose setUpClass raised SkipTest or failed reports as "setUpClass (module.Class)".
        cls, _, name = test.id().rpartition(".")
        self.outcomes.append((cls.rpartition(".")[2] or cls, name, outcome, message))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._note(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._note(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._note(test, "failed", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._note(test, "skipped", reason)
        print(f"skipped: {test.id()}: {reason}", flush=True)


def _write(path, outcomes):
    root = ET.Element("testsuites")
    suites = {}
    for cls, name, outcome, message in outcomes:
        suite = suites.get(cls)
        if suite is None:
            suite = suites[cls] = ET.SubElement(root, "testsuite", name=cls)
        case = ET.SubElement(suite, "testcase", name=name, classname=cls, status="run",
                             result="skipped" if outcome == "skipped" else "completed")
        if outcome == "failed":
            ET.SubElement(case, "failure", message=message.splitlines()[-1] if message else "").text = message
        elif outcome == "skipped":
            # GoogleTest's skip message is "file:line\nreason"; the summary keeps what follows.
            ET.SubElement(case, "skipped", message="\n" + message)
    ET.ElementTree(root).write(path)


def main():
    report = os.environ.get("CUDAFIX_TEST_REPORT")
    if report and os.path.exists(report):
        os.remove(report)  # a run that dies early leaves no report of an earlier run behind
    tests = unittest.defaultTestLoader.loadTestsFromModule(sys.modules["__main__"])
    result = unittest.TextTestRunner(verbosity=2, resultclass=_Result).run(tests)
    if report:
        os.makedirs(os.path.dirname(report), exist_ok=True)
        _write(report, result.outcomes)
    sys.exit(0 if result.wasSuccessful() else 1)
