// An interpreter prefix the system's package manager owns (PEP 668's EXTERNALLY-MANAGED), as
// Debian's /usr is: a system root made by the test, with a dpkg database that owns one dist and
// not the other. doctor's next commands are ones the system's owner accepts (apt for the system's
// own package, pip in a venv that sees the system's packages for the rest, never
// --break-system-packages), and every command that changes the
// environment refuses as pip and uv refuse, unless given --break-system-packages (or
// PIP_BREAK_SYSTEM_PACKAGES, as pip reads it); dry runs and read-only commands are no change.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "tests/e2e/cudafix_run.hpp"

namespace cudafix::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// <root>/usr with Python 3.11's layout: foo 1.0 (Debian's python3-foo) and bar 2.0 (pip's) in
// lib/python3/dist-packages, each with one listed file gone; the marker in lib/python3.11.
class ExternallyManaged : public ::testing::Test {
 protected:
  void SetUp() override {
    usr_ = dir_.path() + "/root/usr";
    site_ = usr_ + "/lib/python3/dist-packages";
    write_file(usr_ + "/lib/python3.11/EXTERNALLY-MANAGED",
               "[externally-managed]\nError=To install Python packages system-wide, try apt install python3-xyz\n");
    dist("foo", "1.0");
    dist("bar", "2.0");
    write_file(dir_.path() + "/root/var/lib/dpkg/info/python3-foo.list",
               "/.\n/usr\n/usr/lib/python3/dist-packages/foo-1.0.dist-info\n"
               "/usr/lib/python3/dist-packages/foo/__init__.py\n");
    // Names dpkg never writes, and a list whose package owns bar under another spelling: ignored.
    write_file(dir_.path() + "/root/var/lib/dpkg/info/Python3-Bar.list",
               "/usr/lib/python3/dist-packages/bar-2.0.dist-info\n");
    write_file(dir_.path() + "/root/var/lib/dpkg/info/python3-bar.md5sums",
               "/usr/lib/python3/dist-packages/bar-2.0.dist-info\n");
    ASSERT_EQ(::mkfifo((dir_.path() + "/root/var/lib/dpkg/info/hang.list").c_str(), 0644), 0);
  }

  void dist(const std::string& name, const std::string& version) {
    const std::string info = site_ + "/" + name + "-" + version + ".dist-info";
    write_file(info + "/METADATA", "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n");
    write_file(info + "/INSTALLER", "pip\n");
    write_file(site_ + "/" + name + "/kept.py", "x = 1\n");
    write_file(info + "/RECORD", name + "/__init__.py,,\n" + name + "/kept.py,,\n" + name + "-" + version +
                                     ".dist-info/METADATA,,\n" + name + "-" + version + ".dist-info/INSTALLER,,\n" +
                                     name + "-" + version + ".dist-info/RECORD,,\n");
  }

  [[nodiscard]] std::string remedy_of(const nlohmann::json& doc, const std::string& dist_info) const {
    for (const auto& f : fires(doc, "missing-files"))
      if (f["remedy"].is_object() && f["remedy"]["dists"] == nlohmann::json::array({dist_info}))
        return f["remedy"]["command"];
    return "";
  }

  TempDir dir_;
  std::string usr_, site_;
};

TEST_F(ExternallyManaged, DoctorsNextCommandsAreOnesThatRunThere) {
  const auto d = cudafix_json("doctor --venv " + shell_quote(usr_) + k_no_cache);
  ASSERT_EQ(d.exit_code, 0) << d.out;  // two warnings, no error
  EXPECT_EQ(d.doc["externally_managed"], usr_ + "/lib/python3.11/EXTERNALLY-MANAGED") << d.out;
  EXPECT_EQ(remedy_of(d.doc, "foo-1.0.dist-info"), "apt install --reinstall python3-foo") << d.out;
  EXPECT_EQ(remedy_of(d.doc, "bar-2.0.dist-info"),
            usr_ +
                "/bin/python3 -m venv --system-site-packages .venv && .venv/bin/pip install --force-reinstall "
                "--no-deps bar==2.0")
      << d.out;
  const auto text = run_shell(shell_quote(k_bin) + " doctor --color never --venv " + shell_quote(usr_) + k_no_cache);
  EXPECT_THAT(text.out, HasSubstr(usr_ + " is externally managed (" + usr_ +
                                  "/lib/python3.11/EXTERNALLY-MANAGED, PEP 668): the system's own packages are "
                                  "repaired by its package manager, the rest in a venv that sees them"));
  EXPECT_THAT(text.out, HasSubstr("next: apt install --reinstall python3-foo"));
  EXPECT_THAT(text.out, Not(HasSubstr("next: pip"))) << "pip would refuse it there";
}

// A requirement of the system's own package that is not installed (Debian's PyGObject needs
// pycairo, which apt's python3-cairo gives): the package is named, with the way to the
// distribution's, and the step shown is pip in a venv that sees the system's packages, never
// pip with --break-system-packages.
TEST_F(ExternallyManaged, AMissingRequirementOfTheSystemsPackageNamesItAndAVenv) {
  const std::string metadata = site_ + "/foo-1.0.dist-info/METADATA";
  write_file(metadata, "Metadata-Version: 2.1\nName: foo\nVersion: 1.0\nRequires-Dist: baz>=1.16\n");
  const auto d = cudafix_json("doctor --venv " + shell_quote(usr_) + k_no_cache);
  EXPECT_EQ(d.exit_code, 1) << d.out;
  const auto unmet = fires(d.doc, "unsatisfied-requirement");
  ASSERT_EQ(unmet.size(), 1u) << d.out;
  EXPECT_EQ(unmet[0]["remedy"]["command"],
            usr_ + "/bin/python3 -m venv --system-site-packages .venv && .venv/bin/pip install 'baz>=1.16'");
  EXPECT_THAT(unmet[0]["evidence"].dump(),
              HasSubstr("foo 1.0 is the system's (dpkg: python3-foo): the distribution's package of baz"));
  EXPECT_THAT(d.out, Not(HasSubstr("--break-system-packages ")));
  // bar is pip's: nothing names a system package for what it requires.
  write_file(metadata, "Metadata-Version: 2.1\nName: foo\nVersion: 1.0\n");
  write_file(site_ + "/bar-2.0.dist-info/METADATA",
             "Metadata-Version: 2.1\nName: bar\nVersion: 2.0\nRequires-Dist: baz\n");
  const auto b = cudafix_json("doctor --venv " + shell_quote(usr_) + k_no_cache);
  const auto of_bar = fires(b.doc, "unsatisfied-requirement");
  ASSERT_EQ(of_bar.size(), 1u) << b.out;
  EXPECT_THAT(of_bar[0]["evidence"].dump(), Not(HasSubstr("dpkg"))) << b.out;
  EXPECT_THAT(of_bar[0]["remedy"]["command"].get<std::string>(), HasSubstr(".venv/bin/pip install 'baz'")) << b.out;
}

// This machine's own /usr, read only: where it is externally managed, no next step doctor gives
// there is pip's with --break-system-packages.
TEST(ExternallyManagedHost, NoRemedyOnTheHostsUsrBreaksTheSystemsPackages) {
  bool marked = false;
  for (const auto& e : std::filesystem::directory_iterator("/usr/lib"))
    if (e.path().filename().string().starts_with("python3.") &&
        std::filesystem::exists(e.path() / "EXTERNALLY-MANAGED"))
      marked = true;
  if (!marked) GTEST_SKIP() << "/usr is not externally managed here";
  const auto d = cudafix_json("doctor --venv /usr" + std::string(k_no_cache));
  ASSERT_FALSE(d.doc.is_discarded()) << d.out;
  for (const auto& f : d.doc["findings"])
    if (f["remedy"].is_object()) {
      EXPECT_THAT(f["remedy"]["command"].get<std::string>(), Not(HasSubstr("--break-system-packages"))) << f.dump();
    }
}

TEST_F(ExternallyManaged, AVenvAndAPrefixWithoutTheMarkerKeepPipsPlainCommand) {
  std::filesystem::remove(usr_ + "/lib/python3.11/EXTERNALLY-MANAGED");
  const auto d = cudafix_json("doctor --venv " + shell_quote(usr_) + k_no_cache);
  EXPECT_TRUE(d.doc["externally_managed"].is_null()) << d.out;
  EXPECT_EQ(remedy_of(d.doc, "foo-1.0.dist-info"), "pip install --force-reinstall --no-deps foo==1.0") << d.out;
}

TEST_F(ExternallyManaged, ChangesAreRefusedAsPipRefusesThemUnlessToldAsPipIsTold) {
  const std::string before = tree_of(usr_);
  const std::string venv = " --venv " + shell_quote(usr_) + k_no_cache + " --color never";
  for (const std::string& command : {std::string("remove bar -y"), std::string("snapshot -y"),
                                     std::string("fix -y --no-index"), std::string("rollback -y")}) {
    const auto r = run_shell("env -u PIP_BREAK_SYSTEM_PACKAGES " + shell_quote(k_bin) + " " + command + venv + " 2>&1");
    EXPECT_NE(r.exit_code, 0) << command << ": " << r.out;
    EXPECT_THAT(r.out,
                HasSubstr(usr_ + " is externally managed (" + usr_ + "/lib/python3.11/EXTERNALLY-MANAGED, PEP 668)"))
        << command;
    EXPECT_THAT(r.out, HasSubstr("or pass --break-system-packages to change it all the same")) << command;
    const auto j = cudafix_json(command + venv, "-u PIP_BREAK_SYSTEM_PACKAGES");
    EXPECT_THAT(j.doc.value("error", ""), HasSubstr("is externally managed")) << command << ": " << j.out;
  }
  EXPECT_EQ(tree_of(usr_), before) << "a refused change wrote into the environment";
  EXPECT_FALSE(std::filesystem::exists(usr_ + "/.cudafix"));

  // A dry run and a read are no change.
  const auto dry = run_shell(shell_quote(k_bin) + " remove bar --dry-run" + venv + " 2>&1");
  EXPECT_EQ(dry.exit_code, 0) << dry.out;
  EXPECT_THAT(dry.out, HasSubstr("Would remove bar"));
  EXPECT_EQ(run_shell(shell_quote(k_bin) + " snapshot --list" + venv).exit_code, 0);

  const auto told = run_shell(shell_quote(k_bin) + " remove bar -y --break-system-packages" + venv + " 2>&1");
  EXPECT_EQ(told.exit_code, 0) << told.out;
  EXPECT_FALSE(std::filesystem::exists(site_ + "/bar-2.0.dist-info")) << told.out;
  const auto by_env =
      run_shell("PIP_BREAK_SYSTEM_PACKAGES=1 " + shell_quote(k_bin) + " remove foo -y" + venv + " 2>&1");
  EXPECT_EQ(by_env.exit_code, 0) << by_env.out;
  EXPECT_FALSE(std::filesystem::exists(site_ + "/foo-1.0.dist-info")) << by_env.out;
}

}  // namespace
}  // namespace cudafix::test
