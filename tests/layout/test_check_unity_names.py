#!/usr/bin/env python3
"""check_unity_names.py against tiny CMake projects written for it: two files of one target that
each define the same file-local function (or type, or variable) in the same namespace must be
reported, as README's unity build would fail on them; overloads, other namespaces, other targets
and files CMake builds alone must not. The checker itself is what runs on the real tree
(layout.NoNameTwiceInAUnityBatch); a checker that reports nothing would pass there too.

usage: test_check_unity_names.py
"""
import pathlib
import subprocess
import sys
import tempfile
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "support"))
import unittest_report  # noqa: E402

CHECKER = HERE / "check_unity_names.py"


def project(targets, alone=()):
    """A CMakeLists.txt with one static library per target (name -> its files), unity batches of
    8 where CUDAFIX_UNITY is on, `alone` built outside any batch."""
    text = "cmake_minimum_required(VERSION 3.20)\nproject(t CXX)\n"
    text += "if(CUDAFIX_UNITY)\n  set(CMAKE_UNITY_BUILD ON)\n  set(CMAKE_UNITY_BUILD_BATCH_SIZE 8)\nendif()\n"
    for f in alone:
        text += f"set_source_files_properties({f} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)\n"
    for name, files in targets.items():
        text += f"add_library({name} STATIC {' '.join(files)})\n"
    return text


def run_checker(files, targets, alone=()):
    """Writes `files` (path -> text) and the project under a fresh folder and runs the checker."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for path, text in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        (root / "CMakeLists.txt").write_text(project(targets, alone))
        run = subprocess.run([sys.executable, str(CHECKER), str(root)], capture_output=True, text=True)
        return run.returncode, run.stdout + run.stderr


def in_anonymous(namespace, body):
    return f"namespace {namespace} {{\nnamespace {{\n{body}\n}}  // namespace\n}}\n"


HELPER = "bool same_version(const char* a, const char* b) { return a == b; }"


class CheckUnityNames(unittest.TestCase):
    def test_one_helper_in_two_files_of_a_target_is_reported_with_both_places(self):
        # resolver/plan's fix.cpp and sync.cpp each kept install_site(): README's build failed.
        rc, out = run_checker({"a/fix.cpp": in_anonymous("p", HELPER), "a/sync.cpp": in_anonymous("p", HELPER)},
                              {"plan": ["a/fix.cpp", "a/sync.cpp"]})
        self.assertEqual(rc, 1, out)
        self.assertIn("plan: p::(anonymous)::same_version(const char * a,const char * b) is defined in", out)
        self.assertIn("a/fix.cpp:3", out)
        self.assertIn("a/sync.cpp:3", out)

    def test_a_static_helper_and_a_type_and_a_constant_twice_are_reported(self):
        twice = "static int helper(int x) { return x; }\nstruct Row { int n; };\nconstexpr int k_most = 8;\n"
        rc, out = run_checker({"a.cpp": f"namespace q {{\n{twice}}}\n", "b.cpp": f"namespace q {{\n{twice}}}\n"},
                              {"lib": ["a.cpp", "b.cpp"]})
        self.assertEqual(rc, 1, out)
        self.assertIn("q::helper(int x)", out)
        self.assertIn("q::Row is defined", out)
        self.assertIn("q::k_most is defined", out)

    def test_a_helper_in_a_nested_inline_namespace_is_seen(self):
        body = "namespace cudafix::resolver::inline plan {\nnamespace {\n" + HELPER + "\n}\n}\n"
        rc, out = run_checker({"a.cpp": body, "b.cpp": body}, {"lib": ["a.cpp", "b.cpp"]})
        self.assertEqual(rc, 1, out)
        self.assertIn("same_version", out)

    def test_overloads_other_namespaces_and_members_pass(self):
        other = "bool same_version(int a, int b) { return a == b; }"
        member = "struct S { int run(int x) { return x; } };"
        rc, out = run_checker({"a.cpp": in_anonymous("p", HELPER) + in_anonymous("r", member),
                               "b.cpp": in_anonymous("p", other) + in_anonymous("q", HELPER) +
                               in_anonymous("r2", member)},
                              {"lib": ["a.cpp", "b.cpp"]})
        self.assertEqual(rc, 0, out)

    def test_files_of_other_targets_or_built_alone_pass(self):
        rc, out = run_checker({"a.cpp": in_anonymous("p", HELPER), "b.cpp": in_anonymous("p", HELPER),
                               "c.cpp": in_anonymous("p", HELPER), "d.cpp": "int d() { return 0; }\n"},
                              {"one": ["a.cpp", "d.cpp"], "two": ["b.cpp", "c.cpp"]}, alone=["c.cpp"])
        self.assertEqual(rc, 0, out)


if __name__ == "__main__":
    unittest_report.main()
