#!/usr/bin/env python3
"""contrib/slurm/cudafix-node-check with a fake scontrol that logs its calls and answers `show
node` from a file: a broken venv drains the node with a reason that starts "cudafix:" (the prolog
also exits 1), a repaired one resumes only a node cudafix drained, and a cudafix that cannot run
drains nothing; with --lock, a venv that drifted from its lock drains the node ("cudafix: drift:
...") and one that matches it resumes it.

usage: test_slurm_check.py CUDAFIX_BIN SOURCE_DIR FIXTURES_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import fleet_fixture as fx  # noqa: E402
import unittest_report  # noqa: E402

BIN, SOURCE, FIXTURES = sys.argv[1:4] if len(sys.argv) >= 4 else ("", "", "")

FAKE_SCONTROL = """#!/bin/sh
echo "$*" >> "$FAKE_SLURM/calls"
if [ "$1" = show ]; then
  echo "NodeName=$3 Arch=x86_64 State=$(cat "$FAKE_SLURM/state")"
  echo "   Reason=$(cat "$FAKE_SLURM/reason") [root@2026-12-02T05:00:00]"
fi
"""


class SlurmNodeCheck(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cudafix-slurm-")
        cls.links = os.path.join(cls.tmp, "wheels")
        wheels = fx.make_wheels(SOURCE, FIXTURES, cls.links)
        cls.broken = fx.broken_venv(os.path.join(cls.tmp, "broken"), wheels)
        cls.healthy = fx.broken_venv(os.path.join(cls.tmp, "healthy"), wheels)
        r = fx.run([BIN, "fix", "-y", "--no-verify", "--venv", cls.healthy, "--find-links", cls.links])
        assert r.returncode == 0, r.stdout + r.stderr
        cls.scontrol = os.path.join(cls.tmp, "scontrol")
        with open(cls.scontrol, "w") as f:
            f.write(FAKE_SCONTROL)
        os.chmod(cls.scontrol, 0o755)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def check(self, venv, mode="--healthcheck", reason="none", state="IDLE", binary=None, lock=None):
        slurm = tempfile.mkdtemp(dir=self.tmp)
        for name, text in (("state", state), ("reason", reason), ("calls", "")):
            with open(os.path.join(slurm, name), "w") as f:
                f.write(text)
        env = dict(os.environ, FAKE_SLURM=slurm, SCONTROL=self.scontrol, SLURMD_NODENAME="gpu-07",
                   CUDAFIX_BIN=binary or BIN, CUDAFIX_CHECK="doctor", CUDAFIX_VENV=venv)
        args = [os.path.join(SOURCE, "contrib/slurm/cudafix-node-check"), mode] + (["--lock", lock] if lock else [])
        r = subprocess.run(args, env=env, capture_output=True, text=True)
        with open(os.path.join(slurm, "calls")) as f:
            calls = [line.strip() for line in f if line.strip()]
        return r, [c for c in calls if not c.startswith("show ")]

    def test_a_broken_venv_drains_the_node_with_a_cudafix_reason(self):
        r, updates = self.check(self.broken)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(updates), 1, updates)
        self.assertTrue(updates[0].startswith("update nodename=gpu-07 state=drain reason=cudafix: " + self.broken),
                        updates[0])
        self.assertIn("error[metadata-only] nvidia-cudnn-cu12 9.10.2.21 is installed but", updates[0])
        self.assertIn("drained gpu-07", r.stderr)

    def test_as_a_prolog_a_broken_venv_also_fails_the_job_start(self):
        r, updates = self.check(self.broken, mode="--prolog")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(updates), 1)

    def test_a_healthy_venv_resumes_only_a_node_cudafix_drained(self):
        r, updates = self.check(self.healthy, reason="cudafix: /x: error[metadata-only] ...", state="IDLE+DRAIN")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(updates, ["update nodename=gpu-07 state=resume"])
        r, updates = self.check(self.healthy, reason="maintenance: swap PSU", state="IDLE+DRAIN")
        self.assertEqual(updates, [])
        r, updates = self.check(self.healthy)
        self.assertEqual(r.returncode, 0)
        self.assertEqual(updates, [])

    def test_a_cudafix_that_cannot_run_drains_nothing(self):
        r, updates = self.check(os.path.join(self.tmp, "no-such-venv"), mode="--prolog")
        self.assertEqual(r.returncode, 0)
        self.assertEqual(updates, [])
        self.assertIn("cudafix could not run (doctor exit 2), nothing drained", r.stderr)
        r, updates = self.check(self.broken, binary=os.path.join(self.tmp, "no-cudafix"))
        self.assertEqual(updates, [])
        self.assertIn("nothing drained", r.stderr)

    def test_with_a_lock_a_venv_that_drifted_drains_and_one_that_matches_resumes(self):
        venv = os.path.join(self.tmp, "locked")
        shutil.copytree(self.healthy, venv, symlinks=True, ignore=shutil.ignore_patterns(".cudafix"))
        lock = os.path.join(self.tmp, "pylock.toml")
        r = fx.run([BIN, "lock", "--no-index", "--venv", venv, "-o", lock])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r, updates = self.check(venv, lock=lock, reason="cudafix: drift: x", state="IDLE+DRAIN")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(updates, ["update nodename=gpu-07 state=resume"])
        r = fx.run([os.path.join(venv, "bin", "python"), "-m", "pip", "uninstall", "-y", "-q", "torch12like"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r, updates = self.check(venv, mode="--prolog", lock=lock)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(len(updates), 1, updates)
        self.assertTrue(updates[0].startswith("update nodename=gpu-07 state=drain reason=cudafix: drift: " + venv),
                        updates[0])
        self.assertIn("torch12like 2.7.0 is locked and not installed", updates[0])


if __name__ == "__main__":
    unittest_report.main()
