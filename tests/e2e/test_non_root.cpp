// cudafix run by a user who does not own the environment: a user made by the test (CI runs as
// root), environments owned by root (the demo's, and one made by `python3 -m venv`), the commands
// run as that user through setpriv. Read-only commands work; write commands refuse with
// "permission denied", naming the path and whom to run as; no message calls a permission
// failure a missing file or "not a Python environment".
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "tests/e2e/cudafix_run.hpp"

namespace cudafix::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class NonRoot : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) return;  // each test skips, saying why
    user_ = "cfx-nr-" + std::to_string(::getpid());
    const auto made = run_shell("useradd --system --no-create-home --shell /usr/sbin/nologin " + user_ + " 2>&1");
    ASSERT_EQ(made.exit_code, 0) << made.out;
    // A folder every user may walk into (a test's TempDir is 0700), on a tmpfs where there is one.
    std::string tmpl = std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/cudafix-nonroot-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    ASSERT_EQ(::chmod(root_.c_str(), 0755), 0);
    // The user's own cache, so that only the environment is another's.
    const auto cache = run_shell("mkdir -p " + shell_quote(root_ + "/cache") + " && chown " + user_ + " " +
                                 shell_quote(root_ + "/cache") + " 2>&1");
    ASSERT_EQ(cache.exit_code, 0) << cache.out;
    // umask 022, as a root shell has it: what the files' modes below are checked against.
    const auto demo = run_shell("umask 022 && " + shell_quote(k_bin) + " demo -q " + shell_quote(root_ + "/demo"));
    ASSERT_EQ(demo.exit_code, 0) << demo.out;
    make_venv(root_ + "/venv", {});
  }

  static void TearDownTestSuite() {
    if (!root_.empty()) (void)run_shell("rm -rf " + shell_quote(root_));
    if (!user_.empty()) (void)run_shell("userdel " + user_ + " 2>&1");
  }

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "not root: making a user for the test needs root (CI runs as root)";
  }

  // cudafix ARGS as the test's user, standard error with standard output.
  static RunResult as_user(const std::string& args) {
    return run_shell("cd / && setpriv --reuid=" + user_ + " --regid=" + user_ + " --clear-groups env -i PATH=" +
                     shell_quote(std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin") +
                     " HOME=/nonexistent CUDAFIX_CACHE_DIR=" + shell_quote(root_ + "/cache") + " " +
                     shell_quote(k_bin) + " " + args + " --color never 2>&1");
  }

  // What no message may call a permission failure.
  static void expect_no_misnaming(const RunResult& r) {
    EXPECT_THAT(r.out, Not(HasSubstr("no such file"))) << r.out;
    EXPECT_THAT(r.out, Not(HasSubstr("No such file"))) << r.out;
    EXPECT_THAT(r.out, Not(HasSubstr("not a Python environment"))) << r.out;
    EXPECT_THAT(r.out, Not(HasSubstr("Directory does not exist"))) << r.out;
  }

  static std::string broken() { return root_ + "/demo-broken"; }

  static inline std::string user_;
  static inline std::string root_;
};

TEST_F(NonRoot, TheDemosFilesAreReadableByOthersAsPipWouldWriteThem) {
  // pip writes files 0666 less the umask; cudafix.toml was 0600, so no other user could run doctor.
  for (const std::string& dir : {root_ + "/demo", broken()}) {
    struct stat st {};
    ASSERT_EQ(::stat((dir + "/cudafix.toml").c_str(), &st), 0) << dir;
    EXPECT_EQ(st.st_mode & 07777, 0644u) << dir;
  }
}

TEST_F(NonRoot, ReadOnlyCommandsWorkOnAnEnvironmentRootOwns) {
  auto r = as_user("doctor --venv " + shell_quote(broken()));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("error[shared-path]"));
  expect_no_misnaming(r);
  r = as_user("scan --venv " + shell_quote(broken()));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  expect_no_misnaming(r);
  r = as_user("plan remove nvidia-cudnn-cu12 --venv " + shell_quote(broken()));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("nvidia-cudnn-cu13 9.19.0.56 would be left metadata-only"));
  expect_no_misnaming(r);
  // A venv made by python3 -m venv, and found through its interpreter.
  r = as_user("doctor -p " + shell_quote(root_ + "/venv/bin/python3"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  expect_no_misnaming(r);
}

TEST_F(NonRoot, WriteCommandsRefuseWithPermissionDeniedNamingThePathAndTheOwner) {
  const std::string lock = broken() + "/.lock";
  for (const std::string& command :
       {std::string("remove -y nvidia-cudnn-cu12"), std::string("snapshot before-cleanup"), std::string("rollback -y"),
        "fix -y --no-verify --find-links " + shell_quote(root_ + "/demo/demo-wheels")}) {
    const auto r = as_user(command + " --venv " + shell_quote(broken()));
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr(lock + ": permission denied")) << command;
    EXPECT_THAT(r.out, HasSubstr("run cudafix as root, its owner")) << command;
    expect_no_misnaming(r);
  }
  // The demo's walk left transactions in root's 0700 .cudafix: not "no transactions".
  const auto h = as_user("history --venv " + shell_quote(root_ + "/demo"));
  EXPECT_EQ(h.exit_code, 2) << h.out;
  EXPECT_THAT(h.out, HasSubstr("cannot list the transactions in " + root_ + "/demo/.cudafix/tx: permission denied"));
  EXPECT_THAT(h.out, Not(HasSubstr("no transactions")));
}

TEST_F(NonRoot, FoldersTheUserMayNotReadArePermissionDeniedNotMissing) {
  // A venv inside a folder of mode 0700: given by --venv, by -p and by $VIRTUAL_ENV.
  const std::string hidden = root_ + "/private";
  ASSERT_EQ(run_shell("mkdir -p " + shell_quote(hidden) + " && cp -a " + shell_quote(root_ + "/venv") + " " +
                      shell_quote(hidden + "/v") + " && chmod 700 " + shell_quote(hidden))
                .exit_code,
            0);
  for (const std::string& how :
       {"--venv " + shell_quote(hidden + "/v"), "-p " + shell_quote(hidden + "/v/bin/python3")}) {
    const auto r = as_user("doctor " + how);
    EXPECT_EQ(r.exit_code, 2) << how << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("permission denied (" + hidden + " belongs to root, mode 0700")) << how;
    expect_no_misnaming(r);
  }
  // An unlistable site-packages: an error, not an environment of no dists that doctor passes.
  const std::string venv = root_ + "/closed";
  ASSERT_EQ(run_shell("cp -a " + shell_quote(root_ + "/venv") + " " + shell_quote(venv)).exit_code, 0);
  const std::string site = site_packages(venv);
  ASSERT_EQ(::chmod(site.c_str(), 0700), 0);
  const auto r = as_user("doctor --venv " + shell_quote(venv));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("cannot list " + site + ": permission denied"));
  expect_no_misnaming(r);
  // A RECORD only its owner may read says so.
  ASSERT_EQ(::chmod(site.c_str(), 0755), 0);
  const auto record = run_shell("ls -d " + shell_quote(site) + "/pip-*.dist-info/RECORD");
  std::string record_path = record.out.substr(0, record.out.find('\n'));
  ASSERT_EQ(::chmod(record_path.c_str(), 0600), 0) << record_path;
  const auto d = as_user("doctor --venv " + shell_quote(venv));
  EXPECT_THAT(d.out, HasSubstr(record_path + ": permission denied"));
  expect_no_misnaming(d);
}

}  // namespace
}  // namespace cudafix::test
