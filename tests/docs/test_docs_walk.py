"""The documentation as a walk: every `$ ` line of README.md and then of docs/*.md (by name) is
run as written, in order, and what it prints is compared with what the document shows under it.

What a document holds (the rules this test reads it by):
  - the commands are the lines starting `$ ` in its ```console blocks; the lines after one, up to
    the next command or the block's end, are what it prints (stdout and stderr together);
  - a line `...` alone is a cut: any number of lines, none included;
  - a line `(exit N)` is the exit code it must end with; with none shown it must exit 0;
  - blank lines at the start and end of what a command prints, and blanks at a line's end, are
    not compared.
Each document's commands run in one bash, in order, as a reader types them into one terminal
(`cd`, `source bin/activate` and variables carry to the next command), starting in /tmp. The
state one document leaves (the demo's folders under /tmp) is where the next starts; a block
that needs another starting state says how in its first command.

Where it runs: a private mount namespace (`unshare --mount --propagation private`) with a tmpfs
on /tmp, so that the reader's /tmp/demo is the test's own and nothing of the machine's /tmp is
seen or changed; this build's cudafix and cudafix-probe copied to a folder there, first on PATH
(the build folder may itself be under /tmp); CUDAFIX_CACHE_DIR and TMPDIR on that tmpfs; no
VIRTUAL_ENV, no PIP_* or CUDAFIX_* variable of the caller's. /etc/ld.so.cache is replaced by one
`ldconfig` builds from Debian 12's own configuration (libc.conf and x86_64-linux-gnu.conf), so
that a CUDA toolkit this machine's cache lists (/usr/local/cuda-*) does not show, as on the fresh
machine README describes.

What varies between runs is normalised, the same way in the document and in the output, and
nothing else: a transaction's id (20261207T093248.748-32158-0) reads <id>; a time in seconds
after "took" reads "took <t> s"; a guard's snapshot's name reads 'guard-<id>'; the host
interpreter's folder and version (python3.11, /usr/bin/python3 3.11.2, pip 23.0.1) read
python3.X, <python> and pip <v>; and the counts of files a snapshot holds or leaves unchanged,
which include the venv's own pip (its files vary with the interpreter), read <n> files.

CUDAFIX_DOCS_WALK_TRANSCRIPT=FILE writes every command and what it printed to FILE.

A drift fails the test naming the document, the block's line, the command and a diff of what
the document shows against what it printed.

Use: test_docs_walk.py CUDAFIX_BINARY SOURCE_DIR
"""
import difflib
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import unittest_report  # noqa: E402

CUT = "..."
EXIT = re.compile(r"^\(exit (\d+)\)$")
# A block's commands are bounded: a document with more is a mistake, not a walk.
MAX_COMMANDS = 200
SENTINEL = "__cudafix_docs_walk_rc__"


def documents(source):
    docs = os.path.join(source, "docs")
    names = sorted(n for n in os.listdir(docs) if n.endswith(".md"))
    return ["README.md"] + ["docs/" + n for n in names]


def commands_of(text):
    """[(line number, command, [shown lines], exit code)] of a document's ```console blocks."""
    found = []
    inside = False
    current = None  # the command whose output the block's next lines are
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            inside = not inside and stripped == "```console"
            current = None
            continue
        if not inside:
            continue
        if line.startswith("$ "):
            current = [number, line[2:], [], 0]
            found.append(current)
        elif current and EXIT.match(stripped):
            current[3] = int(EXIT.match(stripped).group(1))
        elif current:
            current[2].append(line.rstrip())
    return [tuple(c) for c in found]


NORMAL = [
    (re.compile(r"\b\d{8}T\d{6}\.\d{3}-\d+-\d+\b"), "<id>"),
    (re.compile(r"\btook \d+(\.\d+)? s\b"), "took <t> s"),
    (re.compile(r"python3\.\d+"), "python3.X"),
    (re.compile(r"(/[\w.+-]+)+/python3(\.\d+)? 3\.\d+\.\d+"), "<python>"),
    (re.compile(r"\bpip \d+(\.\d+)+"), "pip <v>"),
    (re.compile(r"'guard-\d{8}T\d{6}Z-\d+'"), "'guard-<id>'"),
    (re.compile(r"\(\d+ files\)|\d+ files \(\d+(\.\d+)? [kMG]?B\)|, \d+ unchanged"), "<n> files"),
]


def normal(line):
    line = line.rstrip()  # a document's lines carry no trailing blanks
    for pattern, replacement in NORMAL:
        line = pattern.sub(replacement, line)
    return line


def trimmed(lines):
    lines = list(lines)
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def matches(shown, printed):
    """Whether `printed` is `shown` with each cut standing for any run of lines."""
    shown = [normal(line) for line in trimmed(shown)]
    printed = [normal(line) for line in trimmed(printed)]
    # possible[j]: the shown lines so far can end just before printed[j].
    possible = [True] + [False] * len(printed)
    for line in shown:
        if line == CUT:
            for j in range(1, len(printed) + 1):
                possible[j] = possible[j] or possible[j - 1]
            continue
        possible = [False] + [possible[j] and printed[j] == line for j in range(len(printed))]
    return possible[-1]


# --- inside the namespace ------------------------------------------------------------------------

def fresh_machine_ld_cache(where):
    """An ld.so.cache of Debian 12's own configuration, bound over /etc/ld.so.cache."""
    conf = os.path.join(where, "ld.so.conf")
    with open(conf, "w") as f:
        for name in ("libc.conf", "x86_64-linux-gnu.conf"):
            path = "/etc/ld.so.conf.d/" + name
            if os.path.exists(path):
                f.write(f"include {path}\n")
    cache = os.path.join(where, "ld.so.cache")
    subprocess.run(["ldconfig", "-X", "-C", cache, "-f", conf], check=True)
    subprocess.run(["mount", "--bind", cache, "/etc/ld.so.cache"], check=True)


def walk_inside(binaries, docs):
    """Runs every document's commands; returns [(document, line, command, exit code, output)]."""
    kept = {name: open(path, "rb").read() for name, path in binaries.items()}
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", "/tmp"], check=True)
    walk = "/tmp/.docs-walk"
    os.makedirs(walk + "/bin")
    os.makedirs(walk + "/cache")
    for name, data in kept.items():
        with open(f"{walk}/bin/{name}", "wb") as f:
            f.write(data)
        os.chmod(f"{walk}/bin/{name}", 0o755)
    if os.path.exists("/var/cache/ldconfig"):
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/var/cache/ldconfig"], check=True)
    fresh_machine_ld_cache(walk)
    env = {k: v for k, v in os.environ.items()
           if k != "VIRTUAL_ENV" and not k.startswith(("PIP_", "CUDAFIX_", "UV_", "LD_"))}
    env.update(PATH=f"{walk}/bin:" + env.get("PATH", "/usr/bin:/bin"), TMPDIR="/tmp",
               CUDAFIX_CACHE_DIR=f"{walk}/cache", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    ran = []
    for name, commands in docs:
        shell = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, cwd="/tmp", env=env, text=True)
        for line, command, _, _ in commands:
            shell.stdin.write(f"{{ {command}\n}} 2>&1 </dev/null; printf '\\n{SENTINEL} %d\\n' $?\n")
            shell.stdin.flush()
            output = []
            while True:
                said = shell.stdout.readline()
                if not said:
                    output.append("(the shell ended)")
                    rc = -1
                    break
                if said.startswith(SENTINEL):
                    rc = int(said.split()[1])
                    break
                output.append(said.rstrip("\n"))
            if output and output[-1] == "":
                output.pop()  # the newline the sentinel's printf starts with
            ran.append((name, line, command, rc, output))
            if rc == -1:
                break
        shell.stdin.close()
        shell.wait()
    return ran


# --- the test ------------------------------------------------------------------------------------

BINARY = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "cudafix"
SOURCE = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else "."


def walk():
    """The walk, run once in its own namespace; [(document, line, command, shown, exit, rc, output)]."""
    docs = []
    for name in documents(SOURCE):
        with open(os.path.join(SOURCE, name), encoding="utf-8") as f:
            docs.append((name, commands_of(f.read())))
    binaries = {"cudafix": BINARY}
    probe = os.path.join(os.path.dirname(BINARY), "cudafix-probe")
    if os.path.exists(probe):
        binaries["cudafix-probe"] = probe
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare[1:1] = ["--user", "--map-root-user"]
    request = json.dumps({"binaries": binaries, "docs": docs})
    r = subprocess.run(unshare + [sys.executable, os.path.abspath(__file__), "--inside"], input=request,
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise AssertionError(f"the walk could not run ({' '.join(unshare)}): exit {r.returncode}\n{r.stderr}")
    ran = json.loads(r.stdout)
    shown = {(name, c[0]): c for name, commands in docs for c in commands}
    return [(name, line, command, shown[(name, line)][2], shown[(name, line)][3], rc, output)
            for name, line, command, rc, output in ran]


class DocsWalk(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ran = walk()
        # For whoever writes the docs: every command and what it printed, to copy from.
        if os.environ.get("CUDAFIX_DOCS_WALK_TRANSCRIPT"):
            with open(os.environ["CUDAFIX_DOCS_WALK_TRANSCRIPT"], "w", encoding="utf-8") as f:
                for name, line, command, _, _, rc, output in cls.ran:
                    f.write(f"== {name}:{line}\n$ {command}\n" + "".join(o + "\n" for o in output) + f"(exit {rc})\n")

    def test_the_docs_hold_a_walk(self):
        # README's tour at least: the demo, doctor, pip's cleanup, the repair, a rollback.
        readme = [command for name, _, command, *_ in self.ran if name == "README.md"]
        for word in ("cudafix demo", "cudafix doctor", "-m pip uninstall", "cudafix fix", "cudafix rollback",
                     "cudafix guard", "cudafix snapshot"):
            self.assertTrue(any(word in c for c in readme), f"README's walk runs no `{word}`")
        self.assertLessEqual(len(self.ran), MAX_COMMANDS)
        # A `$ ` line in a block of another kind (```sh, ```text) would be skipped unseen.
        walked = {(name, line) for name, line, *_ in self.ran}
        for name in documents(SOURCE):
            with open(os.path.join(SOURCE, name), encoding="utf-8") as f:
                for number, line in enumerate(f.read().split("\n"), 1):
                    if line.startswith("$ "):
                        self.assertIn((name, number), walked, f"{name}:{number}: a $ line outside a ```console block")

    def test_every_command_prints_what_its_document_shows(self):
        drifts = []
        for name, line, command, shown, exit_code, rc, output in self.ran:
            if rc == exit_code and matches(shown, output):
                continue
            diff = "\n".join(difflib.unified_diff([normal(s) for s in trimmed(shown)],
                                                  [normal(s) for s in trimmed(output)],
                                                  f"{name}:{line} shows", "printed", lineterm="", n=2))
            drifts.append(f"{name}:{line}: $ {command}\n  exit {rc}, the document says {exit_code}\n{diff}")
        if drifts:
            self.fail("the docs drifted from what the commands print:\n\n" + "\n\n".join(drifts))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--inside":
        request = json.loads(sys.stdin.read())
        ran = walk_inside(request["binaries"], request["docs"])
        sys.stdout.write(json.dumps(ran))
        return
    del sys.argv[1:]
    unittest_report.main()


if __name__ == "__main__":
    main()
