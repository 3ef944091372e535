#!/usr/bin/env python3
"""contrib/ansible/library/cudafix.py run by Debian's ansible-core (`ansible-playbook -c local`)
against real venvs: check mode changes nothing and says what would change; the real run repairs
and reports changed with doctor's before and after as its diff; a second run is ok (unchanged);
a wheel found nowhere fails with cudafix's message and exit code; the documented cleanup pattern
(Ansible's command module running `cudafix guard -- pip uninstall`) fails a breaking uninstall
before pip runs and changes nothing; `lock:` with `lock_mode: check` passes a venv that matches
its lock unchanged and fails one that drifted, naming the drift; `lock_mode: sync` runs `cudafix
sync LOCK -y` (`--dry-run` in check mode) and reports its steps.

usage: test_ansible_module.py CUDAFIX_BIN SOURCE_DIR FIXTURES_DIR
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import fleet_fixture as fx  # noqa: E402
import unittest_report  # noqa: E402

BIN, SOURCE, FIXTURES = sys.argv[1:4] if len(sys.argv) >= 4 else ("", "", "")

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: repair the venv
      cudafix:
        venv: "{{ venv }}"
        find_links: "{{ links }}"
        offline: true
        binary: "{{ cudafix }}"
      register: fixed
      ignore_errors: true
    - name: keep the result for the test
      copy:
        content: "{{ fixed | to_json }}"
        dest: "{{ result_file }}"
      check_mode: false
"""


# The module's EXAMPLES pattern: a cleanup under guard with Ansible's own command module.
GUARDED_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: remove the CUDA 13 cuDNN, guarded
      ansible.builtin.command:
        argv: ["{{ cudafix }}", guard, --json, --venv, "{{ venv }}", --,
               "{{ venv }}/bin/python", -m, pip, uninstall, -y, "{{ dist }}"]
      register: cleanup
      changed_when: "'Successfully uninstalled' in cleanup.stdout"
      ignore_errors: true
    - name: keep the result for the test
      copy:
        content: "{{ cleanup | to_json }}"
        dest: "{{ result_file }}"
      check_mode: false
"""


LOCK_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: the venv against its lock
      cudafix:
        venv: "{{ venv }}"
        lock: "{{ lock }}"
        lock_mode: "{{ lock_mode }}"
        binary: "{{ cudafix }}"
      register: locked
      ignore_errors: true
    - name: keep the result for the test
      copy:
        content: "{{ locked | to_json }}"
        dest: "{{ result_file }}"
      check_mode: false
"""

# A cudafix that logs its arguments and answers `sync` as the sync command's JSON does.
FAKE_SYNC = """#!/bin/sh
echo "$*" >> "$0.calls"
echo '{"schema":1,"command":"sync","venv":"/v","changed":true,"steps":["install beta 2.0"],"verified":true,"transaction":"t1"}'
"""


class AnsibleModule(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not shutil.which("ansible-playbook"):
            raise unittest.SkipTest("ansible-playbook is not installed (Debian's ansible-core)")
        cls.tmp = tempfile.mkdtemp(prefix="cudafix-ansible-")
        cls.links = os.path.join(cls.tmp, "wheels")
        cls.wheels = fx.make_wheels(SOURCE, FIXTURES, cls.links)
        cls.playbook = os.path.join(cls.tmp, "play.yml")
        with open(cls.playbook, "w") as f:
            f.write(PLAYBOOK)
        cls.lock_play = os.path.join(cls.tmp, "lock.yml")
        with open(cls.lock_play, "w") as f:
            f.write(LOCK_PLAYBOOK)
        cls.guarded = os.path.join(cls.tmp, "guarded.yml")
        with open(cls.guarded, "w") as f:
            f.write(GUARDED_PLAYBOOK)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def play(self, venv, links, check=False, playbook=None, extra_vars=None):
        result = os.path.join(self.tmp, "result.json")
        if os.path.exists(result):
            os.remove(result)
        env = dict(os.environ, ANSIBLE_LIBRARY=os.path.join(SOURCE, "contrib/ansible/library"),
                   ANSIBLE_LOCAL_TEMP=os.path.join(self.tmp, "ansible-local"),
                   ANSIBLE_REMOTE_TEMP=os.path.join(self.tmp, "ansible-remote"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_PYTHON_INTERPRETER=fx.PYTHON, ANSIBLE_RETRY_FILES_ENABLED="0")
        env.pop("PIP_FIND_LINKS", None)
        env.pop("VIRTUAL_ENV", None)
        # A home and caches of the test's own: --offline reads the user's pip and uv caches, and a
        # developer's would change what this test sees.
        home = os.path.join(self.tmp, "home")
        os.makedirs(home, exist_ok=True)
        for var in ("PIP_CACHE_DIR", "UV_CACHE_DIR", "XDG_CONFIG_HOME", "CUDAFIX_CACHE_DIR"):
            env.pop(var, None)
        env.update(HOME=home, XDG_CACHE_HOME=os.path.join(home, ".cache"))
        extra = json.dumps(dict({"venv": venv, "links": links, "cudafix": BIN, "result_file": result},
                                **(extra_vars or {})))
        args = ["ansible-playbook", "-i", "localhost,", "-c", "local", "-e", extra, playbook or self.playbook]
        if check:
            args += ["--check", "--diff"]
        r = fx.run(args, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(result) as f:
            return json.load(f), r.stdout

    def test_check_mode_then_the_repair_then_nothing_to_do(self):
        venv = fx.broken_venv(os.path.join(self.tmp, "venv"), self.wheels)
        broken = fx.tree_hash(venv)
        checked, out = self.play(venv, [self.links], check=True)
        self.assertTrue(checked["changed"], checked)
        self.assertEqual(checked["steps"], ["reinstall nvidia-cudnn-cu12 9.10.2.21"])
        self.assertIn("metadata-only", checked["diff"]["before"])
        self.assertIn("would carry out: reinstall nvidia-cudnn-cu12", out)  # --diff shows it
        self.assertEqual(fx.tree_hash(venv), broken, "check mode changed the venv")

        fixed, _ = self.play(venv, [self.links])
        self.assertTrue(fixed["changed"], fixed)
        self.assertFalse(fixed.get("failed", False), fixed)
        self.assertIn(fixed["exit_code"], (0, 4))  # 4: no GPU driver here to verify with
        self.assertEqual(fixed["steps"], ["reinstall nvidia-cudnn-cu12 9.10.2.21"])
        self.assertIn("metadata-only", fixed["before"]["error_rules"])
        self.assertNotIn("metadata-only", fixed["after"]["error_rules"])
        self.assertIn("metadata-only", fixed["diff"]["before"])
        self.assertNotIn("metadata-only", fixed["diff"]["after"])
        self.assertTrue(fixed["transaction"])
        site = [os.path.join(venv, "lib", d, "site-packages") for d in os.listdir(os.path.join(venv, "lib"))][0]
        self.assertTrue(os.path.exists(os.path.join(site, "nvidia/cudnn/lib/libcudnn.so.9")))
        pip_check = fx.run([os.path.join(venv, "bin", "python"), "-m", "pip", "check"])
        self.assertEqual(pip_check.returncode, 0, pip_check.stdout)

        repaired = fx.tree_hash(venv)
        again, _ = self.play(venv, [self.links])
        self.assertFalse(again["changed"], again)
        self.assertEqual(again["steps"], [])
        checked_again, _ = self.play(venv, [self.links], check=True)
        self.assertFalse(checked_again["changed"], checked_again)
        self.assertEqual(fx.tree_hash(venv), repaired, "the second run changed the venv")

    def test_a_wheel_found_nowhere_fails_with_cudafix_message_and_exit_code(self):
        venv = fx.broken_venv(os.path.join(self.tmp, "venv-nowheel"), self.wheels)
        broken = fx.tree_hash(venv)
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty, exist_ok=True)
        failed, _ = self.play(venv, [empty])
        self.assertTrue(failed["failed"], failed)
        self.assertEqual(failed["rc"], 2)
        self.assertEqual(failed["msg"], "cudafix: no wheel for nvidia-cudnn-cu12 9.10.2.21")
        self.assertEqual(fx.tree_hash(venv), broken)

    def test_a_guarded_cleanup_that_would_break_a_library_fails_before_pip_runs(self):
        venv = os.path.join(self.tmp, "venv-guarded")
        r = fx.run([fx.PYTHON, "-m", "venv", venv])
        self.assertEqual(r.returncode, 0, r.stderr)
        for w in self.wheels:  # the CUDA 13 cuDNN last: its bytes are the shared file's
            r = fx.run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps", w])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        before = fx.tree_hash(venv)
        cleanup, _ = self.play(venv, [], playbook=self.guarded, extra_vars={"dist": "nvidia-cudnn-cu13"})
        self.assertTrue(cleanup["failed"], cleanup)
        self.assertEqual(cleanup["rc"], 1)
        self.assertFalse(cleanup["changed"], cleanup)
        self.assertIn("it was not run", cleanup["stderr"] + json.loads(cleanup["stdout"].splitlines()[-1])["refused"])
        self.assertEqual(fx.tree_hash(venv), before, "the refused cleanup changed the venv")

    def test_lock_check_passes_a_matching_venv_unchanged_and_fails_one_that_drifted(self):
        venv = os.path.join(self.tmp, "venv-lock")
        r = fx.run([fx.PYTHON, "-m", "venv", venv])
        self.assertEqual(r.returncode, 0, r.stderr)
        for w in self.wheels:  # all but the CUDA 13 cuDNN: a healthy CUDA 12 venv
            if "cudnn_cu13" in w:
                continue
            r = fx.run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps", w])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lock = os.path.join(self.tmp, "pylock.toml")
        r = fx.run([BIN, "lock", "--no-index", "--venv", venv, "-o", lock])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        before = fx.tree_hash(venv)
        matched, _ = self.play(venv, [], playbook=self.lock_play, extra_vars={"lock": lock, "lock_mode": "check"})
        self.assertFalse(matched.get("failed", False), matched)
        self.assertFalse(matched["changed"], matched)
        self.assertEqual(matched["drift"], [])
        r = fx.run([os.path.join(venv, "bin", "python"), "-m", "pip", "uninstall", "-y", "-q", "torch12like"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        drifted, _ = self.play(venv, [], playbook=self.lock_play, extra_vars={"lock": lock, "lock_mode": "check"})
        self.assertTrue(drifted["failed"], drifted)
        self.assertFalse(drifted["changed"], drifted)
        self.assertIn("lock-package-drift: torch12like 2.7.0 is locked and not installed", drifted["drift"])
        self.assertIn("drifted from " + lock, drifted["msg"])
        self.assertNotEqual(fx.tree_hash(venv), before)  # pip's uninstall, not the module, changed it

    def test_lock_sync_runs_cudafix_sync_with_yes_and_dry_run_in_check_mode(self):
        fake = os.path.join(self.tmp, "fake-cudafix")
        with open(fake, "w") as f:
            f.write(FAKE_SYNC)
        os.chmod(fake, 0o755)
        lock = os.path.join(self.tmp, "some-pylock.toml")
        open(lock, "w").close()
        venv = os.path.join(self.tmp, "venv-sync")
        extra = {"lock": lock, "lock_mode": "sync", "cudafix": fake}
        synced, _ = self.play(venv, [], playbook=self.lock_play, extra_vars=extra)
        self.assertFalse(synced.get("failed", False), synced)
        self.assertTrue(synced["changed"], synced)
        self.assertEqual(synced["steps"], ["install beta 2.0"])
        checked, _ = self.play(venv, [], playbook=self.lock_play, extra_vars=extra, check=True)
        self.assertTrue(checked["changed"], checked)
        with open(fake + ".calls") as f:
            calls = f.read().splitlines()
        self.assertEqual(calls, ["sync %s --json --venv %s -y" % (lock, venv),
                                 "sync %s --json --venv %s --dry-run" % (lock, venv)])


if __name__ == "__main__":
    unittest_report.main()
