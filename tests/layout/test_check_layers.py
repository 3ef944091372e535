#!/usr/bin/env python3
"""check_layers.py against tiny trees written for it: each way of breaking the layer order must be
reported, and a tree that keeps it must pass. The checker itself is what runs on the real tree
(layout.IncludesFollowTheLayerOrder); a checker that reports nothing would pass there too.

usage: test_check_layers.py
"""
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "support"))
import unittest_report  # noqa: E402

CHECKER = HERE / "check_layers.py"


def run_checker(files):
    """Writes `files` (path -> text) under a fresh folder and runs the checker there."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for path, text in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        run = subprocess.run([sys.executable, str(CHECKER), str(root)], capture_output=True, text=True)
        return run.returncode, run.stdout


class CheckLayers(unittest.TestCase):
    def test_a_tree_in_order_passes(self):
        rc, out = run_checker({
            "installer/wheel/zip_reader.hpp": "#pragma once\n",
            "installer/source/index.cpp": '#include "installer/wheel/zip_reader.hpp"\n#include "resolver/base/text.hpp"\n',
            "installer/apply/apply.cpp": '#include "installer/probe/runner.hpp"\n#include "installer/txn/journal.hpp"\n',
            "cli/main.cpp": '#include "installer/apply/apply.hpp"\n#include "rules/doctor.hpp"\n',
        })
        self.assertEqual(rc, 0, out)

    def test_an_upward_include_and_a_loose_file_are_both_reported(self):
        rc, out = run_checker({
            "installer/wheel/zip_reader.hpp": "#pragma once\n",
            "installer/txn/x.cpp": '#include <string>\n\n#include "installer/wheel/zip_reader.hpp"\n',
            "installer/foo.cpp": "int foo() { return 0; }\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("installer/txn/x.cpp:3: includes installer/wheel/zip_reader.hpp, but installer/wheel/ is not "
                      "below installer/txn/", out)
        self.assertIn("installer/foo.cpp: a source file at installer/'s root", out)
        self.assertIn("2 problems", out)

    def test_each_layer_below_apply_is_refused_what_sits_above_it(self):
        layers = ["txn", "wheel", "source", "probe", "apply"]
        for i, low in enumerate(layers[:-1]):
            for high in layers[i + 1:]:
                with self.subTest(low=low, high=high):
                    rc, out = run_checker({f"installer/{low}/a.cpp": f'#include "installer/{high}/b.hpp"\n'})
                    self.assertEqual(rc, 1, out)
                    self.assertIn(f"installer/{high}/ is not below installer/{low}/", out)

    def test_rules_and_the_installer_layers_include_neither_the_other(self):
        rc, out = run_checker({
            "rules/doctor.cpp": '#include "installer/txn/journal.hpp"\n',
            "installer/apply/apply.cpp": '#include "rules/rule.hpp"\n',
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("rules/doctor.cpp:1: includes installer/txn/journal.hpp", out)
        self.assertIn("installer/apply/apply.cpp:1: includes rules/rule.hpp", out)

    def test_an_include_of_a_header_at_installers_root_is_reported(self):
        rc, out = run_checker({"cli/main.cpp": '#include "installer/zip_reader.hpp"\n'})
        self.assertEqual(rc, 1, out)
        self.assertIn("cli/main.cpp:1: includes installer/zip_reader.hpp, which is in no layer of installer/", out)

    def test_a_layer_above_the_resolver_is_refused_to_the_resolver(self):
        rc, out = run_checker({"resolver/plan/fix.cpp": '#include "installer/wheel/read.hpp"\n'})
        self.assertEqual(rc, 1, out)
        self.assertIn("installer/wheel/ is not below resolver/plan/", out)


if __name__ == "__main__":
    unittest_report.main()
