// Finding the environment the user means with no --venv: the python3 on PATH as pyenv's, asdf's
// or mise's shim (a shell script, or a link to the mise binary, that cudafix follows by the
// manager's own rules without running it), and -p/--python. The trees are made by the tests as
// the managers lay them out; each interpreter prefix holds a dist of its own name, so the dists
// the scan lists say which one was chosen. Where this machine has a real pyenv, its shim is
// also asked for sys.prefix and cudafix must agree.
#include <sys/stat.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
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

// An interpreter prefix: bin/python3 (a link to the real one) and lib/pythonX.Y/site-packages
// with one dist named `marker`.
void make_prefix(const std::string& prefix, const std::string& python, const std::string& marker) {
  const std::string site = prefix + "/lib/python" + python + "/site-packages";
  fs::create_directories(prefix + "/bin");
  fs::create_directories(site + "/" + marker + "-1.0.dist-info");
  fs::create_symlink("/usr/bin/python3", prefix + "/bin/python3");
  test::write_file(site + "/" + marker + "-1.0.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: " + marker + "\nVersion: 1.0\n");
  test::write_file(site + "/" + marker + "-1.0.dist-info/RECORD", marker + "-1.0.dist-info/METADATA,,\n");
}

void write_script(const std::string& path, const std::string& body) {
  fs::create_directories(fs::path(path).parent_path());
  test::write_file(path, "#!/usr/bin/env bash\n" + body);
  fs::permissions(path, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
}

class Shims : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = tmp_.path() + "/home";
    pyenv_ = home_ + "/.pyenv";
    // pyenv's shim runs `pyenv exec`, which is not here: following it must not need it.
    write_script(pyenv_ + "/shims/python3", "exec pyenv exec \"${0##*/}\" \"$@\"\n");
    make_prefix(pyenv_ + "/versions/3.11.7", "3.11", "py3117");
    make_prefix(pyenv_ + "/versions/3.10.4", "3.10", "py3104");
    make_prefix(pyenv_ + "/versions/3.10.13", "3.10", "py31013");
    make_prefix(tmp_.path() + "/system", "3.11", "systempy");
    fs::create_directories(tmp_.path() + "/sysbin");
    fs::create_symlink(tmp_.path() + "/system/bin/python3", tmp_.path() + "/sysbin/python3");
    project_ = home_ + "/work/proj/sub";
    fs::create_directories(project_);
  }

  // `cudafix ARGS --json` run in `cwd` with only HOME, PATH and `env` in its environment.
  test::JsonRun run(const std::string& args, const std::string& path, const std::string& env = "",
                    const std::string& cwd = "") {
    const auto r = run_shell("cd " + shell_quote(cwd.empty() ? project_ : cwd) +
                             " && env -i HOME=" + shell_quote(home_) + " PATH=" + shell_quote(path) + " " + env + " " +
                             shell_quote(test::k_bin) + " " + args + test::k_no_cache + " --json 2>&1");
    test::JsonRun out;
    out.exit_code = r.exit_code;
    out.out = r.out;
    out.doc = json::parse(r.out, nullptr, false);
    return out;
  }
  static std::string dist_names(const json& scan) {
    std::string out;
    for (const auto& d : scan["dists"]) out += d["name"].get<std::string>() + " ";
    return out;
  }
  // mise's data folder, its shims' python3 a link to its binary (which fails: following the shim
  // must not need it).
  std::string mise_shims() const {
    const std::string mise = home_ + "/.local/share/mise";
    write_script(mise + "/bin/mise", "exit 1\n");
    fs::create_directories(mise + "/shims");
    fs::create_symlink(mise + "/bin/mise", mise + "/shims/python3");
    return mise;
  }
  std::string shim_path() const { return pyenv_ + "/shims:" + tmp_.path() + "/sysbin:/usr/bin:/bin"; }

  TempDir tmp_;
  std::string home_, pyenv_, project_;
};

TEST_F(Shims, PyenvsGlobalVersionFileChoosesTheInterpreterAndScanSaysSo) {
  test::write_file(pyenv_ + "/version", "3.11.7\n");
  const auto scan = run("scan", shim_path());
  ASSERT_EQ(scan.exit_code, 0) << scan.out;
  EXPECT_EQ(scan.doc["layout"]["python"], "3.11");
  EXPECT_EQ(dist_names(scan.doc), "py3117 ");
  const std::string by = scan.doc["layout"]["found_by"];
  EXPECT_THAT(by, HasSubstr("the pyenv shim " + pyenv_ + "/shims/python3"));
  EXPECT_THAT(by, HasSubstr(pyenv_ + "/version says 3.11.7"));
}

TEST_F(Shims, TheNearestPythonVersionFileUpwardWinsAndAPrefixMeansTheNewestInstalled) {
  test::write_file(pyenv_ + "/version", "3.11.7\n");
  test::write_file(home_ + "/work/.python-version", "3.11.7\n");
  test::write_file(home_ + "/work/proj/.python-version", "# pinned for the project\n3.10\n");
  const auto scan = run("scan", shim_path());
  ASSERT_EQ(scan.exit_code, 0) << scan.out;
  EXPECT_EQ(dist_names(scan.doc), "py31013 ") << "3.10.13 is newer than 3.10.4";
  EXPECT_THAT(scan.doc["layout"]["found_by"].get<std::string>(),
              HasSubstr(home_ + "/work/proj/.python-version says 3.10 (the newest installed: 3.10.13)"));
  // doctor works the same way with no --venv.
  const auto doctor = run("doctor", shim_path());
  EXPECT_EQ(doctor.exit_code, 0) << doctor.out;
}

TEST_F(Shims, PyenvVersionOverridesTheFilesAndSystemIsTheNextPython3OnPath) {
  test::write_file(home_ + "/work/proj/.python-version", "3.10.4\n");
  const auto chosen = run("scan", shim_path(), "PYENV_VERSION=3.11.7");
  ASSERT_EQ(chosen.exit_code, 0) << chosen.out;
  EXPECT_EQ(dist_names(chosen.doc), "py3117 ");
  EXPECT_THAT(chosen.doc["layout"]["found_by"].get<std::string>(), HasSubstr("PYENV_VERSION says 3.11.7"));
  const auto system = run("scan", shim_path(), "PYENV_VERSION=system");
  ASSERT_EQ(system.exit_code, 0) << system.out;
  EXPECT_EQ(dist_names(system.doc), "systempy ");
  EXPECT_THAT(system.doc["layout"]["found_by"].get<std::string>(),
              HasSubstr("says system, the next python3 on PATH (" + tmp_.path() + "/sysbin/python3)"));
}

TEST_F(Shims, AShimWhoseRuleLeadsNowhereIsAskedOnceAndTheAnswerSaysSo) {
  // The version file names a version that is not installed; this shim answers -c itself.
  test::write_file(pyenv_ + "/version", "3.9.1\n");
  write_script(pyenv_ + "/shims/python3", "[ \"$1\" = -c ] && echo " + shell_quote(pyenv_ + "/versions/3.10.4") + "\n");
  const auto scan = run("scan", shim_path());
  ASSERT_EQ(scan.exit_code, 0) << scan.out;
  EXPECT_EQ(dist_names(scan.doc), "py3104 ");
  EXPECT_THAT(scan.doc["layout"]["found_by"].get<std::string>(), HasSubstr("running the shim"));
  // One that fails says what to do instead.
  write_script(pyenv_ + "/shims/python3", "exit 3\n");
  const auto failed = run("scan", shim_path());
  EXPECT_EQ(failed.exit_code, 2);
  EXPECT_THAT(failed.out, HasSubstr("give --venv DIR or -p PYTHON"));
}

TEST_F(Shims, AsdfsToolVersionsChoosesItsInstall) {
  const std::string asdf = home_ + "/.asdf";
  write_script(asdf + "/shims/python3", "exec asdf exec python3 \"$@\"\n");
  make_prefix(asdf + "/installs/python/3.12.1", "3.12", "asdf3121");
  test::write_file(home_ + "/work/proj/.tool-versions", "nodejs 20.1.0\npython 3.12.1\n");
  const auto scan = run("scan", asdf + "/shims:/usr/bin:/bin");
  ASSERT_EQ(scan.exit_code, 0) << scan.out;
  EXPECT_EQ(dist_names(scan.doc), "asdf3121 ");
  EXPECT_THAT(
      scan.doc["layout"]["found_by"].get<std::string>(),
      HasSubstr("the asdf shim " + asdf + "/shims/python3: " + home_ + "/work/proj/.tool-versions says 3.12.1"));
}

TEST_F(Shims, MisesTomlChoosesTheNewestInstallItPrefixes) {
  const std::string mise = mise_shims();
  make_prefix(mise + "/installs/python/3.12.3", "3.12", "mise3123");
  make_prefix(mise + "/installs/python/3.12.10", "3.12", "mise31210");
  test::write_file(home_ + "/work/mise.toml", "[tools]\npython = \"3.12\"\nnode = \"22\"\n");
  const auto scan = run("scan", mise + "/shims:/usr/bin:/bin");
  ASSERT_EQ(scan.exit_code, 0) << scan.out;
  EXPECT_EQ(dist_names(scan.doc), "mise31210 ");
  EXPECT_THAT(scan.doc["layout"]["found_by"].get<std::string>(),
              HasSubstr(home_ + "/work/mise.toml says 3.12 (the newest installed: 3.12.10)"));
}

TEST_F(Shims, MisesFilesThatAreNoTomlOrNoFileChooseNothing) {
  // Nearer the working folder than the real one: a FIFO (which blocked the lookup for good, no
  // writer ever opening it) and a file that broke toml++'s parse_key assertion (`[[:`); each
  // chooses nothing, as mise's own reading of a broken file does, and the lookup goes on upward.
  const std::string mise = mise_shims();
  make_prefix(mise + "/installs/python/3.12.10", "3.12", "mise31210");
  test::write_file(home_ + "/work/mise.toml", "[tools]\npython = \"3.12\"\n");
  ASSERT_EQ(::mkfifo((home_ + "/work/proj/mise.toml").c_str(), 0644), 0);
  test::write_file(project_ + "/mise.toml", "[[:tools]]\npython = \"3.11\"\n");
  const auto scan = run("scan", mise + "/shims:/usr/bin:/bin", "timeout 60");
  ASSERT_EQ(scan.exit_code, 0) << scan.out;
  EXPECT_EQ(dist_names(scan.doc), "mise31210 ");
  EXPECT_THAT(scan.doc["layout"]["found_by"].get<std::string>(), HasSubstr(home_ + "/work/mise.toml says 3.12"));
}

TEST_F(Shims, DashPTakesAnInterpreterAVersionOrAFolder) {
  TempDir t;
  const std::string venv = t.path() + "/venv";
  ASSERT_EQ(run_shell(test::k_python + " -m venv --without-pip " + shell_quote(venv)).exit_code, 0);
  const auto by_exe = run("scan -p " + shell_quote(venv + "/bin/python"), "/usr/bin:/bin");
  ASSERT_EQ(by_exe.exit_code, 0) << by_exe.out;
  EXPECT_EQ(by_exe.doc["venv"], venv);
  const auto by_version = run("scan -p 3.10", "/usr/bin:/bin", "PYENV_ROOT=" + shell_quote(pyenv_));
  ASSERT_EQ(by_version.exit_code, 0) << by_version.out;
  EXPECT_EQ(dist_names(by_version.doc), "py31013 ");
  EXPECT_THAT(by_version.doc["layout"]["found_by"].get<std::string>(), HasSubstr("pyenv's"));
  // uv's managed interpreters, as uv names their folders.
  const std::string uv = home_ + "/.local/share/uv/python";
  make_prefix(uv + "/cpython-3.13.1-linux-x86_64-gnu", "3.13", "uv3131");
  const auto by_uv = run("scan -p python3.13", "/usr/bin:/bin");
  ASSERT_EQ(by_uv.exit_code, 0) << by_uv.out;
  EXPECT_EQ(dist_names(by_uv.doc), "uv3131 ");
  const auto by_shim =
      run("scan -p " + shell_quote(pyenv_ + "/shims/python3"), "/usr/bin:/bin", "PYENV_VERSION=3.10.4");
  ASSERT_EQ(by_shim.exit_code, 0) << by_shim.out;
  EXPECT_EQ(dist_names(by_shim.doc), "py3104 ");
  const auto missing = run("scan -p 3.99", "/usr/bin:/bin");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.out, HasSubstr("no Python 3.99 found (looked in " + pyenv_ + "/versions"));
}

// This machine's own pyenv, where it has one: cudafix's answer is the one the shim gives when run.
TEST(RealPyenv, TheShimsPrefixIsTheOneCudafixFollowsItTo) {
  const char* home = std::getenv("HOME");
  const std::string shims = std::string(home ? home : "") + "/.pyenv/shims";
  if (!home || !fs::exists(shims + "/python3") || !fs::exists(std::string(home) + "/.pyenv/libexec/pyenv"))
    GTEST_SKIP() << "no pyenv installed in " << shims;
  TempDir t;
  const std::string path = shims + ":" + std::string(home) + "/.pyenv/bin:/usr/bin:/bin";
  const auto asked =
      run_shell("cd " + shell_quote(t.path()) + " && env -u PYENV_VERSION -u VIRTUAL_ENV PATH=" + shell_quote(path) +
                " python3 -c 'import sys; print(sys.prefix)'");
  ASSERT_EQ(asked.exit_code, 0) << asked.out;
  const auto scan =
      run_shell("cd " + shell_quote(t.path()) + " && env -u PYENV_VERSION -u VIRTUAL_ENV PATH=" + shell_quote(path) +
                " " + shell_quote(test::k_bin) + " scan --json" + test::k_no_cache);
  ASSERT_EQ(scan.exit_code, 0) << scan.out.substr(0, 400);
  const auto doc = json::parse(scan.out);
  EXPECT_EQ(fs::canonical(doc["venv"].get<std::string>()), fs::canonical(asked.out.substr(0, asked.out.find('\n'))));
  EXPECT_THAT(doc["layout"]["found_by"].get<std::string>(), HasSubstr("the pyenv shim"));
  EXPECT_THAT(doc["layout"]["found_by"].get<std::string>(), ::testing::Not(HasSubstr("running the shim")));
}

}  // namespace
}  // namespace cudafix
