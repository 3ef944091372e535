#!/usr/bin/env python3
"""The ways cudafix reaches a machine, each installed for real and run:
- the release bundle (contrib/release/make_bundle.sh), unpacked elsewhere and run under `env -i`
  from another folder, its libraries loaded from the bundle;
- the wheel made from it (contrib/release/make_wheel.py), installed by real pip into a fresh venv
  (and by pipx where it is installed), `cudafix demo` run from that venv's bin, then uninstalled;
- `cmake --install` into a prefix;
- the completions and the man page, which must name every command and option `--help` lists.

usage: test_release.py BUILD_DIR SOURCE_DIR
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

BUILD, SOURCE = (os.path.abspath(a) for a in sys.argv[1:3]) if len(sys.argv) >= 3 else ("", "")
PYTHON = "/usr/bin/python3"


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def loaded_from(binary, args, cwd):
    """The libraries glibc initialised for a run under `env -i` (LD_DEBUG=libs), by path."""
    r = run(["env", "-i", "LD_DEBUG=libs", binary] + args, cwd=cwd)
    return r, re.findall(r"calling init: (\S+)", r.stderr)


class Release(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cudafix-release-")
        r = run([os.path.join(SOURCE, "contrib/release/make_bundle.sh"), os.path.join(cls.tmp, "dist")],
                env=dict(os.environ, BUILD=BUILD))
        assert r.returncode == 0, r.stdout + r.stderr
        cls.bundle = r.stdout.strip().splitlines()[-1]
        r = run([PYTHON, os.path.join(SOURCE, "contrib/release/make_wheel.py"), cls.bundle,
                 os.path.join(cls.tmp, "dist")])
        assert r.returncode == 0, r.stdout + r.stderr
        cls.wheel = r.stdout.strip().splitlines()[-1]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def expect_demo_repairs(self, binary, where):
        demo = os.path.join(self.tmp, "demo-" + where)
        r, libs = loaded_from(binary, ["demo", demo, "--color", "never"], cwd="/")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr[-2000:])
        self.assertIn("nothing to do: %s needs no step" % demo, r.stdout)
        return libs

    def test_the_bundle_runs_under_env_i_from_anywhere_with_its_own_libraries(self):
        self.assertRegex(os.path.basename(self.bundle), r"^cudafix-\d+\.\d+\.\d+-linux-x86_64\.tar\.gz$")
        unpacked = os.path.join(self.tmp, "opt")
        os.makedirs(unpacked)
        r = run(["tar", "-xzf", self.bundle, "-C", unpacked])
        self.assertEqual(r.returncode, 0, r.stderr)
        (top,) = os.listdir(unpacked)
        root = os.path.join(unpacked, top)
        for f in ("bin/cudafix", "bin/cudafix-probe", "share/man/man1/cudafix.1", "share/cudafix/knowledge.toml",
                  "share/bash-completion/completions/cudafix", "share/zsh/site-functions/_cudafix",
                  "share/cudafix/cudafix-node-check", "share/cudafix/ansible/library/cudafix.py"):
            self.assertTrue(os.path.exists(os.path.join(root, f)), f)
        libs = self.expect_demo_repairs(os.path.join(root, "bin/cudafix"), "bundle")
        archive = [p for p in libs if "libarchive.so" in p]
        self.assertTrue(archive and archive[0].startswith(os.path.join(root, "bin/../lib/cudafix/")), libs)
        # Nothing but glibc comes from the host.
        for p in libs:
            if not p.startswith(root):
                self.assertRegex(os.path.basename(p), r"^(libc|libm|ld-linux-x86-64|libdl|libpthread|librt)\.so", p)

    def test_the_wheel_installs_with_pip_runs_from_the_venv_and_uninstalls(self):
        self.assertRegex(os.path.basename(self.wheel), r"^cudafix-\d+\.\d+\.\d+-py3-none-manylinux_2_\d+_x86_64\.whl$")
        venv = os.path.join(self.tmp, "venv")
        self.assertEqual(run([PYTHON, "-m", "venv", venv]).returncode, 0)
        py = os.path.join(venv, "bin", "python")
        env = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "VIRTUAL_ENV")}
        r = run([py, "-m", "pip", "install", "-q", "--no-index", self.wheel], env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        libs = self.expect_demo_repairs(os.path.join(venv, "bin", "cudafix"), "wheel")
        self.assertTrue(any(p.startswith(os.path.join(venv, "bin/../lib/cudafix/")) for p in libs), libs)
        r = run(["env", "-i", py, "-m", "cudafix", "--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^cudafix \d+\.\d+\.\d+")
        self.assertEqual(run([py, "-m", "pip", "check"], env=env).returncode, 0)
        r = run([py, "-m", "pip", "uninstall", "-y", "-q", "cudafix"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        for gone in ("bin/cudafix", "bin/cudafix-probe", "lib/cudafix/libarchive.so.13"):
            self.assertFalse(os.path.exists(os.path.join(venv, gone)), gone)

    def test_pipx_installs_the_wheel_as_a_tool(self):
        if not shutil.which("pipx"):
            self.skipTest("pipx is not installed")
        home = os.path.join(self.tmp, "pipx")
        env = dict(os.environ, PIPX_HOME=home + "/home", PIPX_BIN_DIR=home + "/bin", PIPX_MAN_DIR=home + "/man")
        env.pop("PIP_FIND_LINKS", None)
        r = run(["pipx", "install", "--pip-args=--no-index", self.wheel], env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.expect_demo_repairs(os.path.join(home, "bin", "cudafix"), "pipx")

    def test_cmake_install_puts_the_binaries_man_page_and_completions_in_the_prefix(self):
        prefix = os.path.join(self.tmp, "prefix")
        r = run(["cmake", "--install", BUILD, "--prefix", prefix])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for f in ("bin/cudafix", "bin/cudafix-probe", "share/man/man1/cudafix.1", "share/cudafix/knowledge.toml",
                  "share/bash-completion/completions/cudafix", "share/zsh/site-functions/_cudafix"):
            self.assertTrue(os.path.exists(os.path.join(prefix, f)), f)
        r = run([os.path.join(prefix, "bin/cudafix"), "--version"])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_the_completions_and_man_page_name_every_command_and_option(self):
        binary = os.path.join(BUILD, "cudafix")
        help_text = run([binary, "--help"]).stdout
        commands = re.findall(r"^  ([a-z]+) {2,}", help_text.split("Subcommands:")[1], re.M)
        self.assertIn("fix", commands)
        def text(rel):
            with open(os.path.join(SOURCE, rel)) as f:
                return f.read()

        bash, zsh, man = text("contrib/completions/cudafix.bash"), text("contrib/completions/_cudafix"), text("docs/cudafix.1")
        for c in commands:
            self.assertRegex(bash, r"\b%s\b" % c, "bash completion lacks " + c)
            self.assertIn("'%s:" % c, zsh, "zsh completion lacks " + c)
            self.assertRegex(man, r"\.B[IR]? \"?%s\b" % c, "the man page lacks " + c)
        options = set(re.findall(r"(--[a-z][a-z-]+)", help_text))
        for c in commands + ["plan remove", "plan fix"]:
            options |= set(re.findall(r"(--[a-z][a-z-]+)", run([binary] + c.split() + ["--help"]).stdout))
        man_text = man.replace("\\-", "-")  # roff writes a hyphen as \-
        for o in sorted(options):
            self.assertIn(o, bash, "bash completion lacks " + o)
            self.assertIn(o, zsh, "zsh completion lacks " + o)
            self.assertRegex(man_text, r"(?<![a-z-])%s(?![a-z-])" % re.escape(o), "the man page lacks " + o)


if __name__ == "__main__":
    unittest_report.main()
