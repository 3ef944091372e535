// Issue 35's classes 5 and 7 on real venvs (python3 -m venv, wheels installed by real pip): RECORD
// rows and console scripts that name a scheme folder, a folder, cudafix's state or the venv's
// core; a RECORD that is binary garbage; and the bounds on what the environment can make cudafix
// print or spend (--threads, a 20 MB RECORD line, control bytes). Each hostile input is judged by
// the message (naming the dist, the file and the row), by the venv's tree (unchanged on a
// refusal), by the canaries outside it, and by the exit code (no signal).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "resolver/base/text.hpp"
#include "tests/e2e/cudafix_run.hpp"

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using test::tree_diff;
using test::tree_of;
using ::testing::HasSubstr;
using ::testing::Not;

#define EXPECT_SAME_TREE(now, expected) EXPECT_TRUE((now) == (expected)) << tree_diff(expected, now)

std::vector<json> of_rule(const json& doc, const std::string& rule) {
  std::vector<json> out;
  for (const auto& f : doc["findings"])
    if (f["rule"] == rule) out.push_back(f);
  return out;
}

// The findings of `rule`, which must have fired (tests/layout/check_rule_docs.py looks for one
// fires() per rule).
std::vector<json> fires(const json& doc, const std::string& rule) {
  auto found = of_rule(doc, rule);
  EXPECT_FALSE(found.empty()) << rule << " did not fire: " << doc["findings"].dump(1).substr(0, 2000);
  return found;
}

class RemovalRefusals : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    const std::string src = tmp_->path() + "/src", w = tmp_->path() + "/wheels";
    fs::create_directories(src);
    fs::create_directories(w);
    test::write_file(src + "/a.py", "def main():\n    return 0\n");
    test::write_file(src + "/b.py", "B = 1\n");
    alpha_ = test::make_wheel(w, "alpha 1.0 alpha/__init__.py=" + src + "/a.py --console-script alpha=alpha:main");
    beta_ = test::make_wheel(w, "beta 2.0 beta/__init__.py=" + src + "/b.py");
    base_ = tmp_->path() + "/base";
    ASSERT_NO_FATAL_FAILURE(test::make_venv(base_, {alpha_, beta_}));
  }
  static void TearDownTestSuite() { delete tmp_; }

  static std::string copy(const TempDir& t) {
    const std::string v = t.path() + "/venv";
    EXPECT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(v)).exit_code, 0);
    return v;
  }
  // `cudafix ARGS --venv VENV`, text output and standard error together.
  static test::RunResult cudafix(const std::string& args, const std::string& venv) {
    return run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " " + args + " --venv " + shell_quote(venv) +
                     test::k_no_cache + " --color never 2>&1");
  }
  static std::string record_of(const std::string& venv) {
    return test::site_packages(venv) + "/alpha-1.0.dist-info/RECORD";
  }
  // Appends `row` to alpha's RECORD; returns its line number.
  static std::size_t add_row(const std::string& venv, const std::string& row) {
    const std::string text = resolver::try_read_file(record_of(venv)).value_or("");
    test::write_file(record_of(venv), text + row + "\n");
    return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  }

  // plan remove judges the removal unsafe and lists the refusal; remove (with --force too)
  // refuses it naming `says`, and leaves the venv and the canaries as they were.
  static void expect_refused(const TempDir& t, const std::string& v, const std::string& says) {
    const test::Canaries canaries(t.path() + "/canaries");
    const std::string before = tree_of(v);
    const auto plan = test::cudafix_json("plan remove alpha --venv " + shell_quote(v) + test::k_no_cache);
    EXPECT_EQ(plan.doc["safe"], false) << plan.out.substr(0, 2000);
    EXPECT_EQ(plan.doc["safe_with_cudafix"], false);
    ASSERT_FALSE(plan.doc["refused"].empty()) << plan.out.substr(0, 2000);
    EXPECT_EQ(plan.doc["refused"][0]["dist"], "alpha-1.0.dist-info");
    const auto text = cudafix("plan remove alpha", v);
    EXPECT_LT(text.exit_code, 128);
    EXPECT_THAT(text.out, HasSubstr(says));
    EXPECT_THAT(text.out, HasSubstr("unsafe"));
    for (const std::string force : {"", " --force"}) {
      const auto r = cudafix("remove alpha -y" + force, v);
      EXPECT_EQ(r.exit_code, 2) << r.out;
      EXPECT_THAT(r.out, HasSubstr("refusing to remove alpha"));
      EXPECT_THAT(r.out, HasSubstr("alpha 1.0: "));
      EXPECT_THAT(r.out, HasSubstr(says));
      EXPECT_THAT(r.out, HasSubstr("nothing was changed"));
      EXPECT_SAME_TREE(tree_of(v), before);
    }
    EXPECT_EQ(canaries.changes(), "");
    // pip still sees both dists.
    EXPECT_THAT(test::venv_pip(v, "list").out, HasSubstr("alpha"));
  }

  static inline TempDir* tmp_ = nullptr;
  static inline std::string alpha_, beta_, base_;
};

// Before: `remove alpha -y` moved all of site-packages aside (and lib/python3.X with it) while it
// printed "1 files moved aside", and plan remove called it safe.
TEST_F(RemovalRefusals, ARecordRowDotIsRefusedNamingTheDistTheFileAndTheRow) {
  TempDir t;
  const std::string v = copy(t);
  const auto line = add_row(v, ".,,");
  ASSERT_NO_FATAL_FAILURE(expect_refused(t, v, fmt::format("RECORD line {} ('.') is ", line)));
  EXPECT_THAT(cudafix("remove alpha -y", v).out, HasSubstr("site-packages/, a scheme folder"));
}

TEST_F(RemovalRefusals, RowsNamingASchemeFolderAFolderOrTheVenvsCoreAreRefused) {
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"../../../bin", "is bin/, a scheme folder"},
      {"../../../include", "is include/, a scheme folder"},
      {"..", "holds the scheme folder lib/python3"},
      {"../../..", "is the environment's root"},
      {"beta", "is a folder (a row names a file or a symlink)"},
      {"alpha/", "is a folder"},
      {"../../../pyvenv.cfg", "is the venv's pyvenv.cfg"},
      {"../../../.cudafix/x", "is cudafix's own state"},
      {"../../../cudafix.toml", "is cudafix's settings"},
      {"../../../bin/python3", "is the environment's interpreter (bin/python3)"},
  };
  for (const auto& [row, why] : rows) {
    SCOPED_TRACE(row);
    TempDir t;
    const std::string v = copy(t);
    const auto line = add_row(v, row + ",,");
    ASSERT_NO_FATAL_FAILURE(expect_refused(t, v, fmt::format("RECORD line {} ('{}') {}", line, row, why)));
  }
}

// A console script named `.` is bin/ itself: before, remove moved the whole of bin/ aside.
TEST_F(RemovalRefusals, AConsoleScriptNamedDotIsRefused) {
  TempDir t;
  const std::string v = copy(t);
  const std::string ep = test::site_packages(v) + "/alpha-1.0.dist-info/entry_points.txt";
  test::write_file(ep, resolver::try_read_file(ep).value_or("") + ". = alpha:main\n");
  ASSERT_NO_FATAL_FAILURE(expect_refused(t, v, "entry_points.txt ('console script .') is "));
}

// Before: `remove -y` said "removed alpha 1.0: 1 files moved aside" and exited 0 with the
// package still there; plan remove called it safe; doctor gave a warning.
TEST_F(RemovalRefusals, AGarbageRecordIsRefusedJudgedUnsafeAndAnErrorOfDoctor) {
  TempDir t;
  const std::string v = copy(t);
  std::string garbage;
  for (int i = 0; i < 3000; ++i) garbage += static_cast<char>((i * 7919 + 13) % 256);
  test::write_file(record_of(v), garbage);
  ASSERT_NO_FATAL_FAILURE(expect_refused(t, v, "alpha-1.0.dist-info/RECORD cannot be read: it is not UTF-8"));
  const auto d = test::cudafix_json("doctor --venv " + shell_quote(v) + test::k_no_cache);
  EXPECT_LT(d.exit_code, 128);
  const auto found = fires(d.doc, "unreadable-record");
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0]["severity"], "error");
  EXPECT_EQ(found[0]["dists"], json({"alpha-1.0.dist-info"}));
  EXPECT_THAT(found[0]["message"].get<std::string>(), HasSubstr("alpha 1.0: its RECORD cannot be read"));
  // A NUL byte, and text of which no row parses, are unreadable too; the clean venv is not.
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {std::string("alpha/__init__.py,,\n\0\0\0,,\n", 24), "holds a NUL byte"},
           {"no rows here\njust words\n", "no row of it parses"}}) {
    test::write_file(record_of(v), text);
    const auto again = test::cudafix_json("doctor --venv " + shell_quote(v) + test::k_no_cache);
    const auto f = fires(again.doc, "unreadable-record");
    ASSERT_EQ(f.size(), 1U);
    EXPECT_THAT(f[0]["message"].get<std::string>(), HasSubstr(says));
  }
  EXPECT_TRUE(
      of_rule(test::cudafix_json("doctor --venv " + shell_quote(base_) + test::k_no_cache).doc, "unreadable-record")
          .empty());
}

// The refusals do not stop an honest removal: beta goes, its files and nothing else.
TEST_F(RemovalRefusals, AnHonestRemovalStillLands) {
  TempDir t;
  const std::string v = copy(t);
  const auto r = cudafix("remove beta -y", v);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(fs::exists(test::site_packages(v) + "/beta"));
  EXPECT_TRUE(fs::exists(test::site_packages(v) + "/alpha/__init__.py"));
  EXPECT_TRUE(fs::exists(v + "/pyvenv.cfg"));
}

class Bounds : public RemovalRefusals {};

// Max RSS of the command (kB), as getrusage(RUSAGE_CHILDREN) gives it, and its exit code.
std::pair<long, int> max_rss_kb(const std::string& command) {
  const auto r = run_shell(test::k_python +
                           " -c 'import resource, subprocess, sys; rc = subprocess.run(sys.argv[1], shell=True, "
                           "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode; "
                           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)' " +
                           shell_quote(command));
  long rss = -1;
  int rc = -1;
  std::sscanf(r.out.c_str(), "%ld %d", &rss, &rc);
  return {rss, rc};
}

// Before: `--threads 100000` grew to 22 GB and the kernel's OOM killer ended it.
TEST_F(Bounds, ThreadsAreCappedAtTheCoresAvailableAndSaidUnderVerbose) {
  TempDir t;
  const std::string v = copy(t);
  const std::string run = "env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " doctor --venv " + shell_quote(v) +
                          test::k_no_cache + " --threads 100000";
  const auto [rss, rc] = max_rss_kb(run);
  EXPECT_EQ(rc, 0);
  EXPECT_GT(rss, 0);
  EXPECT_LT(rss, 1024 * 1024) << "kB: more than 1 GB";
  const auto said = run_shell(run + " -v 2>&1 >/dev/null");
  EXPECT_THAT(said.out, HasSubstr("--threads 100000 capped at "));
  EXPECT_THAT(said.out, HasSubstr("the cores this process may run on"));
}

// Before: scan and doctor echoed a 200 MB RECORD line whole.
TEST_F(Bounds, AHugeRecordLineIsCutInScanAndDoctorWithACountOfWhatWasLeftOut) {
  TempDir t;
  const std::string v = copy(t);
  add_row(v, "alpha/huge.py," + std::string(20'000'000, 'x') + ",1");
  for (const std::string cmd : {"doctor", "scan"}) {
    SCOPED_TRACE(cmd);
    const auto r = cudafix(cmd, v);
    EXPECT_LT(r.exit_code, 128);
    EXPECT_LT(r.out.size(), 200'000U) << "the line was echoed";
    EXPECT_THAT(r.out, HasSubstr("malformed hash 'xxxx"));
    EXPECT_THAT(r.out, HasSubstr("\u2026 (20.0 MB more)"));
  }
}

// Before: the bytes of a RECORD row reached the terminal raw (an escape sequence could rewrite
// what doctor said).
TEST_F(Bounds, ControlBytesFromTheEnvironmentAreEscapedInTextAndKeptInJson) {
  TempDir t;
  const std::string v = copy(t);
  add_row(v, "alpha/evil\x1b[2J\x1b[31mred\x07\xff.py,,");
  const auto r = cudafix("doctor -v", v);
  EXPECT_LT(r.exit_code, 128);
  EXPECT_THAT(r.out, Not(HasSubstr("\x1b"))) << "an escape byte reached the terminal";
  EXPECT_THAT(r.out, Not(HasSubstr("\x07")));
  EXPECT_THAT(r.out, HasSubstr("alpha/evil\\x1b[2J\\x1b[31mred\\x07\\xff.py"));
  // JSON escapes by itself: the path is there, whole.
  const auto j = test::cudafix_json("doctor --venv " + shell_quote(v) + test::k_no_cache);
  EXPECT_THAT(j.out, Not(HasSubstr("\x1b")));
  EXPECT_THAT(j.out, HasSubstr("evil\\u001b[2J"));
}

}  // namespace
}  // namespace cudafix
