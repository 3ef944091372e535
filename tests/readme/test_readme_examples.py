"""README's examples, run as written: every ```console block that README marks with
`<!-- example: demo -->` (run on a fresh `cudafix demo`, whose broken copy is /tmp/demo-broken)
or `<!-- example: venv -->` (a fresh `python3 -m venv` with its pip) is split into its `$ `
commands, each run by bash in turn with this build's cudafix first on PATH; each must exit as the
block's `(exit N)` line says, and print every other line README shows under it (`...` marks a
cut). README's folders (/tmp/demo, /tmp/venv) are replaced by the test's own. A line README
shows that the tool does not print, or another exit code, fails the test.

Use: test_readme_examples.py CUDAFIX_BINARY SOURCE_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import unittest_report  # noqa: E402

BINARY = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "cudafix"
SOURCE = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else "."
del sys.argv[1:]

MARK = re.compile(r"^<!-- example: (demo|venv) -->$")
EXIT = re.compile(r"^\(exit (\d+)\)$")


def examples(readme_text):
    """[(kind, line number, [(command, expected exit, [expected lines])])] of README's marked blocks."""
    lines = readme_text.split("\n")
    found = []
    for i, line in enumerate(lines):
        m = MARK.match(line.strip())
        if not m:
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```console":
            raise AssertionError(f"README.md:{i + 1}: an example mark not followed by a ```console block")
        steps = []
        for body in lines[i + 2:]:
            if body.strip() == "```":
                break
            if body.startswith("$ "):
                steps.append([body[2:], None, []])
            elif steps and EXIT.match(body.strip()):
                steps[-1][1] = int(EXIT.match(body.strip()).group(1))
            elif steps and body.strip() and body.strip() != "...":
                steps[-1][2].append(body.rstrip())
        found.append((m.group(1), i + 1, [tuple(s) for s in steps]))
    return found


class ReadmeExamples(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(SOURCE, "README.md"), encoding="utf-8") as f:
            cls.blocks = examples(f.read())

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cudafix-readme-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PIP_FIND_LINKS")}
        self.env["PATH"] = os.path.dirname(BINARY) + os.pathsep + self.env.get("PATH", "")
        self.env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"

    def place(self, text):
        return text.replace("/tmp/demo", self.tmp + "/demo").replace("/tmp/venv", self.tmp + "/venv")

    def fixture(self, kind):
        if kind == "demo":
            r = subprocess.run([BINARY, "demo", "-q", self.tmp + "/demo"], capture_output=True, text=True, env=self.env)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertTrue(os.path.isdir(self.tmp + "/demo-broken"), "the demo left no broken copy")

    def run_block(self, kind, where, steps):
        self.fixture(kind)
        for command, exit_code, shown in steps:
            command = self.place(command)
            r = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=self.env, cwd=self.tmp)
            printed = set(line.rstrip() for line in (r.stdout + r.stderr).split("\n"))
            said = f"README.md:{where}: `{command}` printed:\n{r.stdout}{r.stderr}"
            if exit_code is not None:
                self.assertEqual(r.returncode, exit_code, said)
            for line in shown:
                self.assertIn(self.place(line), printed, f"{said}\nREADME shows a line it did not print:\n{line}")

    def test_readme_marks_its_runnable_examples(self):
        # The demo's tour and the snapshot-then-pip example, and one on a real venv with pip.
        kinds = [k for k, _, _ in self.blocks]
        self.assertGreaterEqual(kinds.count("demo"), 2, kinds)
        self.assertGreaterEqual(kinds.count("venv"), 1, kinds)
        for _, where, steps in self.blocks:
            self.assertTrue(steps, f"README.md:{where}: an example with no command")
            for command, exit_code, _ in steps:
                self.assertIsNotNone(exit_code, f"README.md:{where}: `{command}` says no (exit N)")

    def test_the_demo_examples_run_as_written(self):
        for kind, where, steps in self.blocks:
            if kind == "demo":
                with self.subTest(line=where):
                    self.run_block(kind, where, steps)
                    shutil.rmtree(self.tmp + "/demo", True)
                    shutil.rmtree(self.tmp + "/demo-broken", True)

    def test_the_venv_examples_run_as_written_with_real_pip(self):
        for kind, where, steps in self.blocks:
            if kind == "venv":
                with self.subTest(line=where):
                    self.run_block(kind, where, steps)
                    shutil.rmtree(self.tmp + "/venv", True)


if __name__ == "__main__":
    unittest_report.main()
