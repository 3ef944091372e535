// Dists setuptools left instead of a wheel installer, made the way users get them: `pip install
// --no-use-pep517` of a small project in a real venv (pip 23.0's legacy `setup.py install`,
// which writes an .egg-info folder with installed-files.txt), `pip install -e` of it (an
// .egg-link), and Debian's system dist-packages (a tree laid out as Debian's is, and this
// machine's own /usr when it is Debian's). pip itself is the oracle: `pip list`, `pip show -f`,
// `pip check` and what a real `pip uninstall` removes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include "tests/e2e/cudafix_run.hpp"

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;

// A project with a setup.py only (no pyproject.toml), so pip takes setuptools' legacy path.
void write_project(const std::string& dir) {
  fs::create_directories(dir + "/eggpkg");
  test::write_file(dir + "/setup.py",
                   "from setuptools import setup\n"
                   "setup(name='egg-pkg', version='1.2', packages=['eggpkg'],\n"
                   "      install_requires=['six>=1.0', 'packaging; python_version>\"3\"'],\n"
                   "      extras_require={'fast': ['toml']},\n"
                   "      entry_points={'console_scripts': ['eggtool=eggpkg:main']})\n");
  test::write_file(dir + "/eggpkg/__init__.py", "def main():\n    pass\n");
}

const json* find_dist(const json& scan, const std::string& name) {
  for (const auto& d : scan["dists"])
    if (d["name"] == name) return &d;
  return nullptr;
}

std::set<std::string> lines_of(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.insert(line);
  return out;
}

class EggInfoVenv : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    project_ = tmp_->path() + "/proj";
    write_project(project_);
    venv_ = tmp_->path() + "/venv";
    ASSERT_NO_FATAL_FAILURE(test::make_venv(venv_, {}));
    const auto r = test::venv_pip(venv_, "install -q --no-index --no-deps --no-use-pep517 " + shell_quote(project_));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    site_ = test::site_packages(venv_);
    ASSERT_TRUE(fs::exists(site_ + "/egg_pkg-1.2.egg-info/installed-files.txt"))
        << "pip took the legacy path: " << r.out;
  }
  static void TearDownTestSuite() { delete tmp_; }
  static test::JsonRun run(const std::string& args, const std::string& venv = venv_) {
    return test::cudafix_json(args + " --venv " + shell_quote(venv) + test::k_no_cache);
  }
  static inline TempDir* tmp_ = nullptr;
  static inline std::string project_, venv_, site_;
};

TEST_F(EggInfoVenv, ScanListsWhatPipListsWithTheFilesPipShowNames) {
  const auto scan = run("scan");
  ASSERT_EQ(scan.exit_code, 0);
  const auto list = json::parse(test::venv_pip(venv_, "list --format json").out);
  std::set<std::string> pips, ours;
  for (const auto& d : list) pips.insert(d["name"].get<std::string>());
  for (const auto& d : scan.doc["dists"]) ours.insert(d["name"].get<std::string>());
  EXPECT_EQ(ours, pips);
  const json* egg = find_dist(scan.doc, "egg-pkg");
  ASSERT_TRUE(egg);
  EXPECT_EQ((*egg)["format"], "egg-info");
  EXPECT_EQ((*egg)["version"], "1.2");
  EXPECT_TRUE((*egg)["files_listed"]);
  EXPECT_TRUE((*egg)["missing"].empty()) << (*egg)["missing"];
  EXPECT_THAT((*egg)["requires_dist"].dump(), HasSubstr("toml; extra == \\\"fast\\\""));
  // Its rows are the files pip show -f names, and installed-files.txt itself (pip's uninstall
  // takes the egg-info folder whole).
  const auto show = test::venv_pip(venv_, "show -f egg-pkg");
  const auto files_at = show.out.find("Files:\n");
  ASSERT_NE(files_at, std::string::npos) << show.out;
  std::size_t listed = 0;
  for (auto line : lines_of(show.out.substr(files_at + 7))) ++listed;
  EXPECT_GE(listed, 8u);
  EXPECT_EQ((*egg)["files"].get<std::size_t>(), listed + 1);
}

TEST_F(EggInfoVenv, DoctorsRequirementVerdictsArePipChecks) {
  const auto check = test::venv_pip(venv_, "check");
  EXPECT_NE(check.exit_code, 0);
  EXPECT_THAT(check.out, HasSubstr("egg-pkg 1.2 requires six"));
  const auto doctor = run("doctor --select unsatisfied-requirement");
  EXPECT_EQ(doctor.exit_code, 1);
  std::set<std::string> wanted;
  for (const auto& f : doctor.doc["findings"]) wanted.insert(f["message"].get<std::string>());
  ASSERT_EQ(wanted.size(), 2u) << doctor.doc["findings"].dump(1);
  EXPECT_THAT(*wanted.begin(), HasSubstr("requires packaging"));
  EXPECT_THAT(*wanted.rbegin(), HasSubstr("requires six>=1.0"));
}

TEST_F(EggInfoVenv, PlanRemovePredictsExactlyWhatPipUninstallRemoves) {
  TempDir t;
  const std::string copy = t.path() + "/venv";
  ASSERT_EQ(run_shell("cp -a " + shell_quote(venv_) + " " + shell_quote(copy)).exit_code, 0);
  const auto plan = run("plan remove egg-pkg", copy);
  ASSERT_EQ(plan.exit_code, 0) << plan.out.substr(0, 2000);
  const std::string site = test::site_packages(copy);
  std::set<std::string> predicted;
  for (const auto& p : plan.doc["pip_would_delete"]) {
    std::string path = p.get<std::string>();
    if (path.ends_with("/")) path.pop_back();
    predicted.insert(path.starts_with("/") ? path : site + "/" + path);
  }
  const auto before = lines_of(run_shell("find " + shell_quote(copy) + " | sort").out);
  ASSERT_EQ(test::venv_pip(copy, "uninstall -y -q egg-pkg").exit_code, 0);
  const auto after = lines_of(run_shell("find " + shell_quote(copy) + " | sort").out);
  std::set<std::string> removed;
  for (const auto& p : before)
    if (!after.count(p)) removed.insert(p);
  EXPECT_EQ(predicted, removed);
  EXPECT_TRUE(removed.count(copy + "/bin/eggtool"));
}

TEST_F(EggInfoVenv, ADevelopmentInstallIsListedWithItsProjectAndOwnsNoFiles) {
  TempDir t;
  const std::string venv = t.path() + "/venv";
  const std::string project = t.path() + "/proj";
  write_project(project);
  ASSERT_NO_FATAL_FAILURE(test::make_venv(venv, {}));
  const auto r = test::venv_pip(venv, "install -q --no-index --no-deps --no-use-pep517 -e " + shell_quote(project));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto scan = run("scan", venv);
  const json* link = find_dist(scan.doc, "egg-pkg");
  ASSERT_TRUE(link) << scan.doc["dists"].dump(1);
  EXPECT_EQ((*link)["format"], "egg-link");
  EXPECT_EQ((*link)["develop_path"], project);
  EXPECT_EQ((*link)["version"], "1.2");
  EXPECT_EQ((*link)["files"], 0);
}

// Debian's system layout, built as Debian lays it out: /usr/lib/python3/dist-packages holding
// a dist-info whose RECORD names the package build's ../scripts/ (dh-python moved them to
// /usr/bin) and scripts-3.N/ (not shipped), and an egg-info with no installed-files.txt beside a
// dist-info of the same project (python3-cryptography's pair).
TEST(DebianSystemPython, MovedScriptsAreSaidNotMissingAndAnEggInfoBesideADistInfoIsNoError) {
  TempDir t;
  const std::string usr = t.path() + "/usr";
  const std::string site = usr + "/lib/python3/dist-packages";
  fs::create_directories(usr + "/lib/python3.11");
  fs::create_directories(usr + "/bin");
  fs::create_directories(site + "/tool-1.0.dist-info");
  fs::create_directories(site + "/tool");
  test::write_file(site + "/tool/__init__.py", "");
  test::write_file(usr + "/bin/tool", "#!/usr/bin/python3\n");
  test::write_file(site + "/tool-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tool\nVersion: 1.0\n");
  test::write_file(site + "/tool-1.0.dist-info/RECORD",
                   "../scripts/tool,,\nscripts-3.10/tool-extra,,\ntool/__init__.py,,\ntool-1.0.dist-info/METADATA,,\n"
                   "tool-1.0.dist-info/RECORD,,\n");
  fs::create_directories(site + "/tool.egg-info");
  test::write_file(site + "/tool.egg-info/PKG-INFO", "Metadata-Version: 2.1\nName: tool\nVersion: 1.0\n");
  fs::create_directories(site + "/six-1.16.0.egg-info");
  test::write_file(site + "/six-1.16.0.egg-info/PKG-INFO", "Metadata-Version: 2.1\nName: six\nVersion: 1.16.0\n");
  test::write_file(site + "/distutils_pkg-0.5.egg-info", "Metadata-Version: 1.0\nName: distutils-pkg\nVersion: 0.5\n");

  const auto scan = test::cudafix_json("scan --venv " + shell_quote(usr) + test::k_no_cache);
  ASSERT_EQ(scan.exit_code, 0) << scan.out.substr(0, 2000);
  const json* six = find_dist(scan.doc, "six");
  ASSERT_TRUE(six);
  EXPECT_EQ((*six)["format"], "egg-info");
  EXPECT_FALSE((*six)["files_listed"]);
  const json* old = find_dist(scan.doc, "distutils-pkg");
  ASSERT_TRUE(old);
  EXPECT_EQ((*old)["format"], "egg-info file");
  EXPECT_EQ((*old)["version"], "0.5");

  const auto doctor = test::cudafix_json("doctor --venv " + shell_quote(usr) + test::k_no_cache + " -v");
  EXPECT_EQ(doctor.exit_code, 0) << doctor.doc["findings"].dump(1);
  EXPECT_EQ(doctor.doc["summary"]["warnings"], 0) << doctor.doc["findings"].dump(1);
  bool said_moved = false, said_twice = false;
  for (const auto& f : doctor.doc["findings"]) {
    const std::string m = f["message"];
    if (f["rule"] == "missing-files") {
      EXPECT_EQ(f["severity"], "info");
      said_moved = true;
      EXPECT_THAT(f["evidence"].dump(), HasSubstr("is " + usr + "/bin/tool"));
      EXPECT_THAT(f["evidence"].dump(), HasSubstr("scripts-3.10/tool-extra: not installed by the package"));
    }
    if (f["rule"] == "duplicate-dist") {
      EXPECT_EQ(f["severity"], "info");
      said_twice = true;
    }
  }
  EXPECT_TRUE(said_moved);
  EXPECT_TRUE(said_twice);
}

// This machine's own system Python, where it is Debian's: cudafix lists what its pip lists.
TEST(DebianSystemPython, ScanOfUsrListsWhatPipListShowsThere) {
  if (!fs::exists("/usr/lib/python3/dist-packages") || !fs::exists("/usr/lib/python3/dist-packages/pip"))
    GTEST_SKIP() << "no Debian system Python with pip here";
  const auto list = run_shell("env -u VIRTUAL_ENV /usr/bin/python3 -m pip list --format json 2>/dev/null");
  ASSERT_EQ(list.exit_code, 0) << list.out;
  std::set<std::string> pips, ours;
  for (const auto& d : json::parse(list.out)) pips.insert(d["name"].get<std::string>());
  const auto scan = test::cudafix_json("scan --venv /usr" + test::k_no_cache);
  ASSERT_EQ(scan.exit_code, 0);
  for (const auto& d : scan.doc["dists"]) ours.insert(d["name"].get<std::string>());
  // pip prints names as their metadata spells them; cudafix's JSON holds PEP 503 names.
  std::set<std::string> pips_normal;
  for (auto n : pips) {
    std::string out;
    for (char c : n)
      out += (c == '_' || c == '.') ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    pips_normal.insert(out);
  }
  EXPECT_EQ(ours, pips_normal);
  EXPECT_GT(ours.size(), 20u) << "Debian 12's python3 packages leave mostly egg-info dists";
}

}  // namespace
}  // namespace cudafix
