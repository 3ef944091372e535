// End-to-end: `cudafix guard -- COMMAND` around real pip in real venvs (issue 40). The venv holds
// a CUDA 12 and a CUDA 13 cuDNN sharing nvidia/cudnn/lib/libcudnn.so.9 (the 13 installed last,
// so its bytes are there), a runtime, a torch-like consumer whose libtorch_cuda.so NEEDs both
// libraries, and a leaf package nothing needs. `pip uninstall nvidia-cudnn-cu12` deletes the
// shared file (pip counts no owners): torch's cuDNN resolves nowhere and cu13 is left
// metadata-only. With the fake driver (tests/fixtures/fake_cuda.c) the probe runs too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "resolver/base/text.hpp"
#include "tests/e2e/cudafix_run.hpp"
#include "tests/support/process.hpp"

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string k_verify = test::k_fixtures + "/verify";

class Guard : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    const std::string w = tmp_->path() + "/wheels", py = tmp_->path() + "/empty.py";
    fs::create_directories(w);
    test::write_file(py, "X = 1\n");
    std::vector<std::string> wheels;
    const auto build = [&](const std::string& args) { wheels.push_back(test::make_wheel(w, args)); };
    build("nvidia-cudnn-cu12 9.10.2.21 nvidia/cudnn/lib/libcudnn.so.9=" + k_verify +
          "/cudnn/v91400/libcudnn.so.9 nvidia/cudnn/__init__.py=" + py);
    build("nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + k_verify +
          "/cudnn/v91900/libcudnn.so.9 nvidia/cudnn/__init__.py=" + py);
    build("nvidia-cuda-runtime 13.0.96 nvidia/cu13/lib/libcudart.so.13=" + k_verify + "/cu13/libcudart.so.13");
    build("torchlike 2.11.0 torch/lib/libtorch_cuda.so=" + k_verify + "/libtorch_cuda.so torch/__init__.py=" + py +
          " --requires nvidia-cudnn-cu13==9.19.0.56");
    build("leafpkg 1.0 leafpkg/__init__.py=" + py + " leafpkg/data.txt=" + py);
    base_ = tmp_->path() + "/base";
    ASSERT_NO_FATAL_FAILURE(test::make_venv(base_, wheels));
    // Not installed: what other writers install while a guarded command runs.
    const std::string later = tmp_->path() + "/later";
    fs::create_directories(later);
    extra_wheel_ = test::make_wheel(later, "extrapkg 1.0 extrapkg/__init__.py=" + py + " extrapkg/data.txt=" + py);
    shadow_wheel_ = test::make_wheel(
        later, "cudnnshadow 1.0 nvidia/cudnn/lib/libcudnn.so.9=" + k_verify + "/cudnn/v91400/libcudnn.so.9");
  }
  static void TearDownTestSuite() { delete tmp_; }

  static std::string copy(const TempDir& t) {
    const std::string v = t.path() + "/venv";
    EXPECT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(v)).exit_code, 0);
    return v;
  }
  static std::string site(const std::string& venv) {
    for (const auto& e : fs::directory_iterator(venv + "/lib"))
      if (fs::exists(e.path() / "site-packages")) return (e.path() / "site-packages").string();
    return "";
  }
  static std::string pip(const std::string& venv) { return shell_quote(venv + "/bin/python3") + " -m pip"; }
  // `cudafix guard ARGS -- COMMAND` on `venv`, its output and standard error together.
  static test::RunResult guard(const std::string& venv, const std::string& args, const std::string& command,
                               const std::string& options = test::k_no_cache) {
    return run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " guard --venv " + shell_quote(venv) + options +
                     " " + args + " -- " + command + " 2>&1");
  }
  // The same with --json: the document is guard's last line of standard output.
  static std::pair<int, json> guard_json(const std::string& venv, const std::string& args, const std::string& command,
                                         const std::string& options = test::k_no_cache) {
    const auto r = run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " guard --json --venv " +
                             shell_quote(venv) + options + " " + args + " -- " + command + " 2>/dev/null");
    std::string last = r.out;
    while (!last.empty() && last.back() == '\n') last.pop_back();
    last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
    auto doc = json::parse(last, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << r.out;
    return {r.exit_code, doc};
  }
  // Every file's SHA-256 under the venv, cudafix's own folder and the lock aside.
  static std::string hashes_of(const std::string& root) {
    return run_shell("cd " + shell_quote(root) +
                     " && find . -path ./.cudafix -prune -o -path ./.lock -prune -o -type f -print0 | sort -z | "
                     "xargs -0 sha256sum")
        .out;
  }
  // `cudafix ARGS --venv VENV`, standard error with the output.
  static test::RunResult cudafix(const std::string& args, const std::string& venv) {
    return run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " " + args + " --venv " + shell_quote(venv) +
                     test::k_no_cache + " 2>&1");
  }
  static json manifest(const std::string& venv, const std::string& name) {
    return json::parse(resolver::read_file(venv + "/.cudafix/snapshots/" + name + "/manifest.json"));
  }
  // The files a dist's RECORD lists, relative to the venv, and those of its dist-info folder.
  static std::set<std::string> files_of(const std::string& venv, const std::string& dist_info) {
    std::set<std::string> out;
    const std::string s = site(venv), prefix = fs::relative(s, venv).string() + "/";
    const std::string record = resolver::read_file(s + "/" + dist_info + "/RECORD");
    for (const auto& line : resolver::split(record, '\n'))
      if (!line.empty()) out.insert(prefix + std::string(line.substr(0, line.find(','))));
    for (const auto& e : fs::recursive_directory_iterator(s + "/" + dist_info))
      if (e.is_regular_file()) out.insert(fs::relative(e.path(), venv).string());
    return out;
  }
  static std::set<std::string> entries_of(const json& manifest) {
    std::set<std::string> out;
    for (const auto& e : manifest["entries"]) out.insert(e["path"].get<std::string>());
    return out;
  }
  static std::vector<std::string> snapshots(const std::string& venv) {
    std::vector<std::string> out;
    std::error_code ec;
    for (fs::directory_iterator it(venv + "/.cudafix/snapshots", ec), end; !ec && it != end; it.increment(ec))
      out.push_back(it->path().filename().string());
    return out;
  }

  // `cudafix guard --json --no-verify ARGS -- COMMAND` started in the background with `env` (VAR=VALUE ...)
  // before it; its document goes to `out`, its exit code to `out`.rc.
  static void guard_in_background(const std::string& venv, const std::string& env, const std::string& args,
                                  const std::string& command, const std::string& out) {
    ASSERT_EQ(run_shell("(env -u VIRTUAL_ENV " + env + " " + shell_quote(test::k_bin) +
                        " guard --json --no-verify --venv " + shell_quote(venv) + test::k_no_cache + " " + args +
                        " -- " + command + " >" + shell_quote(out) + " 2>" + shell_quote(out + ".err") + "; echo $? >" +
                        shell_quote(out + ".rc") + ") </dev/null >/dev/null 2>&1 &")
                  .exit_code,
              0);
  }
  // Waits (up to 60 s) until `file` exists and holds `text`.
  static bool wait_for(const std::string& file, const std::string& text) {
    for (int i = 0; i < 1200; ++i) {
      if (fs::exists(file) && resolver::read_file(file).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // A background guard's exit code and document, once it ended.
  static std::pair<int, json> finished(const std::string& out) {
    if (!wait_for(out + ".rc", "\n")) return {-1, json()};
    const int rc = std::stoi(resolver::read_file(out + ".rc"));
    std::string text = resolver::read_file(out);
    while (!text.empty() && text.back() == '\n') text.pop_back();
    text = text.substr(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
    return {rc, json::parse(text, nullptr, false)};
  }
  // `command` (a shell line) run with a minute's limit; its output, exit code and peak RSS (its
  // own rusage: a limit on address space would stop the sanitizer build, which reserves terabytes).
  struct Bounded {
    std::string out;
    int rc = -1;
    long peak_kb = -1;
  };
  static Bounded bounded(const std::string& command) {
    const auto r = run_shell(test::k_python + " -c " +
                             shell_quote("import resource, subprocess, sys\n"
                                         "p = subprocess.run(['timeout', '60', 'sh', '-c', sys.argv[1]], "
                                         "capture_output=True, text=True, errors='replace')\n"
                                         "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
                                         "print(p.stdout + p.stderr)\n") +
                             " " + shell_quote(command));
    Bounded b;
    std::istringstream in(r.out);
    in >> b.rc >> b.peak_kb;
    b.out = r.out.substr(std::min(r.out.size(), r.out.find('\n') + 1));
    return b;
  }
  // guard started in the background on `venv` with a command that deletes `lib`, then waits
  // (up to 30 s) for the file `go`; returns once guard's snapshot is taken and its window open.
  static void guard_deleting_until(const TempDir& t, const std::string& venv, const std::string& lib,
                                   const std::string& go, const std::string& out) {
    const std::string command = "sh -c " + shell_quote("rm " + shell_quote(lib) + "; for i in $(seq 600); do [ -e " +
                                                       shell_quote(go) + " ] && break; sleep 0.05; done");
    guard_in_background(
        venv, "CUDAFIX_TEST_PAUSE_AT=guard-snapshotted:1 CUDAFIX_TEST_FAULT_TRACE=" + shell_quote(t.path() + "/trace"),
        "", command, out);
    ASSERT_TRUE(wait_for(t.path() + "/trace", "mark guard-snapshotted"));
  }
  // A file beside the venv, outside it: whatever guard restores, moves aside or cleans up, this
  // keeps its bytes and its mode.
  class Canary {
   public:
    explicit Canary(const std::string& dir) : path_(dir + "/outside/canary.txt") {
      fs::create_directories(dir + "/outside");
      test::write_file(path_, "outside the venv\n");
      fs::permissions(path_, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
    }
    ~Canary() {
      EXPECT_EQ(resolver::read_file(path_), "outside the venv\n") << path_;
      EXPECT_EQ(fs::status(path_).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write)
          << path_;
    }
    Canary(const Canary&) = delete;
    Canary& operator=(const Canary&) = delete;

   private:
    std::string path_;
  };
  static std::set<std::string> paths_in(const json& list) {
    std::set<std::string> out;
    for (const auto& e : list) out.insert(e["path"].get<std::string>());
    return out;
  }

  static inline TempDir* tmp_ = nullptr;
  static inline std::string base_, extra_wheel_, shadow_wheel_;
};

TEST_F(Guard, APipUninstallThatBreaksAConsumersLibraryIsRefusedBeforeItRunsAndChangesNothing) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = hashes_of(v);
  const auto r = guard(v, "", pip(v) + " uninstall -y nvidia-cudnn-cu12");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("torch/lib/libtorch_cuda.so (torchlike) NEEDs libcudnn.so.9"));
  EXPECT_THAT(r.out, HasSubstr("nvidia-cudnn-cu13 9.19.0.56 would be left metadata-only"));
  EXPECT_THAT(r.out, HasSubstr("it was not run"));
  EXPECT_THAT(r.out, HasSubstr("`cudafix remove nvidia-cudnn-cu12` removes them counting owners"));
  EXPECT_THAT(r.out, Not(HasSubstr("Uninstalling"))) << "pip must not have run";
  EXPECT_EQ(hashes_of(v), before);
  EXPECT_TRUE(snapshots(v).empty());
  // The same refusal from a requirements file, a specifier and pip's own spelling of the name.
  test::write_file(t.path() + "/req.txt", "# cleanup\nNVIDIA_cudnn.CU12 >= 9  # the old one\n");
  const auto [rc, doc] = guard_json(v, "", pip(v) + " uninstall --yes -r " + shell_quote(t.path() + "/req.txt"));
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(doc["command"], "guard");
  EXPECT_EQ(doc["uninstall"]["dists"], json::array({"nvidia-cudnn-cu12"}));
  EXPECT_EQ(doc["uninstall"]["safe"], false);
  // plan remove's own document for it, whole: what it removes and what pip's removal would break.
  EXPECT_EQ(doc["uninstall"]["plan"]["command"], "plan remove") << doc["uninstall"];
  EXPECT_EQ(doc["uninstall"]["plan"]["safe"], false);
  EXPECT_FALSE(doc["uninstall"]["plan"]["breaks"].empty()) << doc["uninstall"]["plan"];
  EXPECT_TRUE(doc["refused"].is_string());
  EXPECT_TRUE(doc["exit_code"].is_null());
  EXPECT_EQ(hashes_of(v), before);
}

TEST_F(Guard, WithAllowBreakPipRunsTheBreakIsFoundAndTheVenvIsBackHashForHash) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = hashes_of(v);
  const auto [rc, doc] = guard_json(v, "--allow-break", pip(v) + " uninstall -y nvidia-cudnn-cu12");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(doc["exit_code"], 0) << "pip ran and succeeded";
  EXPECT_EQ(doc["undone"], true);
  std::set<std::string> rules;
  for (const auto& w : doc["worse"]) rules.insert(w["what"].get<std::string>());
  EXPECT_TRUE(rules.count("metadata-only")) << doc["worse"].dump();
  EXPECT_TRUE(rules.count("unresolved-library")) << doc["worse"].dump();
  EXPECT_EQ(hashes_of(v), before);
  EXPECT_TRUE(snapshots(v).empty()) << "the snapshot is deleted once restored";
  const auto listed = test::venv_pip(v, "list --format json");
  EXPECT_THAT(listed.out, HasSubstr("nvidia-cudnn-cu12"));
}

TEST_F(Guard, AHarmlessPipUninstallOfALeafRunsDeletesTheSnapshotAndReturnsPipsExitCode) {
  TempDir t;
  const std::string v = copy(t);
  const auto r = guard(v, "", pip(v) + " uninstall -y leafpkg");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Successfully uninstalled leafpkg-1.0"));
  EXPECT_THAT(r.out, HasSubstr("nothing got worse"));
  EXPECT_FALSE(fs::exists(site(v) + "/leafpkg"));
  EXPECT_TRUE(snapshots(v).empty());
  EXPECT_FALSE(fs::exists(v + "/.cudafix/guards") && !fs::is_empty(v + "/.cudafix/guards"));
  // pip's own failure is guard's exit code: an unknown option exits 2 and changes nothing.
  const auto failed = guard(v, "", pip(v) + " uninstall -y --no-such-option leafpkg");
  EXPECT_EQ(failed.exit_code, 2) << failed.out;
  EXPECT_TRUE(snapshots(v).empty());
}

TEST_F(Guard, ACommandThatDeletesARequiredLibraryIsUndoneAndExits1) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = hashes_of(v);
  const std::string lib = site(v) + "/nvidia/cu13/lib/libcudart.so.13";
  const auto r = guard(v, "", "sh -c " + shell_quote("rm " + shell_quote(lib) + "; exit 3"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("exited 3 and broke"));
  EXPECT_THAT(r.out, HasSubstr("libcudart.so.13 resolves nowhere"));
  EXPECT_THAT(r.out, HasSubstr("undone"));
  EXPECT_TRUE(fs::exists(lib));
  EXPECT_EQ(hashes_of(v), before);
}

TEST_F(Guard, TheSameCommandDeletingNothingRequiredExitsWithItsCodeAndTheChangeIsKept) {
  TempDir t;
  const std::string v = copy(t);
  const std::string file = site(v) + "/leafpkg/data.txt";
  const auto [rc, doc] = guard_json(v, "", "sh -c " + shell_quote("rm " + shell_quote(file) + "; exit 3"));
  EXPECT_EQ(rc, 3);
  EXPECT_EQ(doc["exit_code"], 3);
  EXPECT_EQ(doc["worse"], json::array());
  EXPECT_EQ(doc["undone"], false);
  EXPECT_FALSE(fs::exists(file));
  EXPECT_TRUE(snapshots(v).empty());
  // --keep keeps the snapshot and says how to restore it.
  const auto kept = guard(v, "--keep", "true");
  EXPECT_EQ(kept.exit_code, 0);
  ASSERT_EQ(snapshots(v).size(), 1u);
  EXPECT_THAT(kept.out, HasSubstr("cudafix rollback --snapshot " + snapshots(v)[0]));
}

TEST_F(Guard, TheCommandRunsWithTheLockReleasedAndTheCallersFolderAndStreams) {
  TempDir t;
  const std::string v = copy(t);
  // flock(1) takes <venv>/.lock as uv does: guard holding it would make this wait and fail.
  const auto r =
      run_shell("cd " + shell_quote(t.path()) + " && echo hello | env -u VIRTUAL_ENV GUARD_TEST=yes " +
                shell_quote(test::k_bin) + " guard --venv " + shell_quote(v) + test::k_no_cache + " -q -- sh -c " +
                shell_quote("flock -n -x " + shell_quote(v + "/.lock") +
                            " true || exit 9; read l; echo \"$l $GUARD_TEST $(pwd)\"") +
                " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "hello yes " + fs::canonical(t.path()).string() + "\n");
}

// Issue 51, item 2: `pip uninstall -y -r r.txt` where r.txt is twelve lines of `-r r.txt`. Guard
// reads the file once, says its cycle by name in its judgement, and runs pip (which refuses the
// file) within 1 GiB of address space and a minute; before, it re-read the file 12^8 times and
// grew to 4.7 GB.
TEST_F(Guard, ARequirementFileThatIncludesItselfIsReadOnceInBoundedMemoryAndTime) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = hashes_of(v);
  std::string twelve;
  for (int i = 0; i < 12; ++i) twelve += "-r r.txt\n";
  test::write_file(t.path() + "/r.txt", twelve);
  const auto r = bounded("cd " + shell_quote(t.path()) + " && env -u VIRTUAL_ENV " + shell_quote(test::k_bin) +
                         " guard --json --no-verify --venv " + shell_quote(v) + test::k_no_cache + " -- " + pip(v) +
                         " uninstall -y -r r.txt");
  EXPECT_NE(r.rc, 124) << "still reading after a minute";
  EXPECT_LT(r.peak_kb, 1024 * 1024) << "peak RSS " << r.peak_kb << " KB";
  EXPECT_THAT(r.out, Not(HasSubstr("bad_alloc"))) << r.out.substr(0, 2000);
  EXPECT_THAT(r.out, Not(HasSubstr("out of memory"))) << r.out.substr(0, 2000);
  std::string last;  // guard's document: its last line of standard output that is one
  for (const auto line : resolver::split(r.out, '\n'))
    if (line.starts_with("{")) last = line;
  const auto doc = json::parse(last, nullptr, false);
  ASSERT_TRUE(!doc.is_discarded() && doc.contains("uninstall") && doc["uninstall"].is_object())
      << r.out.substr(0, 2000);
  ASSERT_EQ(doc["uninstall"]["problems"].size(), 1u) << doc["uninstall"].dump();
  EXPECT_THAT(doc["uninstall"]["problems"][0].get<std::string>(), HasSubstr("r.txt: recursively includes itself"));
  EXPECT_EQ(hashes_of(v), before);
}

TEST_F(Guard, AKilledGuardsSnapshotIsReportedByTheNextCommandWithHowToRestoreIt) {
  TempDir t;
  const std::string v = copy(t);
  const std::string pid_file = t.path() + "/pid";
  // guard in the background, its pid kept; the command sleeps until guard is killed.
  ASSERT_EQ(run_shell("(env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " guard -q --venv " + shell_quote(v) +
                      test::k_no_cache + " -- sleep 5 >/dev/null 2>&1 & echo $! > " + shell_quote(pid_file) + ")")
                .exit_code,
            0);
  const pid_t pid = std::stoi(resolver::read_file(pid_file));
  // The record is written before the snapshot; the snapshot is complete once it has its manifest.
  const auto complete = [&] {
    for (const auto& n : snapshots(v))
      if (fs::exists(v + "/.cudafix/snapshots/" + n + "/manifest.json")) return n;
    return std::string();
  };
  for (int i = 0; i < 200 && complete().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(snapshots(v).size(), 1u);
  const std::string name = complete();
  ASSERT_FALSE(name.empty());
  const auto doctor = [&] {
    return run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " doctor --venv " + shell_quote(v) +
                     test::k_no_cache + " 2>&1 >/dev/null");
  };
  EXPECT_THAT(doctor().out, Not(HasSubstr("a guard was killed"))) << "a guard that runs is not reported";
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  for (int i = 0; i < 100 && ::kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto said = doctor().out;
  EXPECT_THAT(said, HasSubstr("a guard was killed while `sleep 5` ran"));
  EXPECT_THAT(said, HasSubstr("`cudafix rollback --snapshot " + name + "` restores it"));
  // Dropping the snapshot ends the notice.
  ASSERT_EQ(run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " snapshot --delete " + name + " -y --venv " +
                      shell_quote(v) + test::k_no_cache)
                .exit_code,
            0);
  EXPECT_THAT(doctor().out, Not(HasSubstr("a guard was killed")));
}

TEST_F(Guard, AGuardThatCannotJudgeWhatTheCommandLeftKeepsTheSnapshotAndSaysHowToRestoreIt) {
  TempDir t;
  const std::string v = copy(t);
  // The command leaves behind a holder of <venv>/.lock longer than guard waits for it.
  const std::string hold = "flock -x " + shell_quote(v + "/.lock") + " sleep 4 & sleep 0.3";
  const auto r = guard(v, "--lock-timeout 1", "sh -c " + shell_quote(hold));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  ASSERT_EQ(snapshots(v).size(), 1u) << r.out;
  const std::string name = snapshots(v)[0];
  EXPECT_THAT(r.out, HasSubstr("snapshot '" + name + "' is kept: `cudafix rollback --snapshot " + name + "`"));
  const auto later = run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " doctor --lock-timeout 10 --venv " +
                               shell_quote(v) + test::k_no_cache + " 2>&1 >/dev/null");
  EXPECT_THAT(later.out, HasSubstr("`cudafix rollback --snapshot " + name + "` restores it"));
}

TEST_F(Guard, AHostileMarkerIsNotObeyedNorSaid) {
  TempDir t;
  const std::string v = copy(t);
  fs::create_directories(v + "/.cudafix/guards");
  fs::permissions(v + "/.cudafix", fs::perms::owner_all, fs::perm_options::replace);
  // A name that is no snapshot's, a marker naming another snapshot, one too large, a symlink.
  test::write_file(v + "/.cudafix/guards/..json", "{}");
  test::write_file(v + "/.cudafix/guards/a.json", R"({"snapshot":"b","command":["rm","-rf","/"]})");
  test::write_file(v + "/.cudafix/guards/big.json", std::string(1 << 20, ' '));
  fs::create_symlink("/etc/passwd", v + "/.cudafix/guards/link.json");
  fs::create_directories(v + "/.cudafix/snapshots/b");
  test::write_file(v + "/.cudafix/snapshots/b/manifest.json", R"({"entries":[]})");
  const auto r = run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " doctor --venv " + shell_quote(v) +
                           test::k_no_cache + " 2>&1 >/dev/null");
  EXPECT_THAT(r.out, Not(HasSubstr("a guard was killed"))) << r.out;
}

// An uninstall cudafix read is guarded by a snapshot of the dists it names alone (linking the
// whole environment is most of guard's cost), and undone from it hash for hash.
TEST_F(Guard, AnUninstallIsUndoneFromASnapshotOfItsDistAlone) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = hashes_of(v);
  const auto [rc, doc] = guard_json(v, "--allow-break", pip(v) + " uninstall -y nvidia-cudnn-cu12");
  EXPECT_EQ(rc, 1) << doc.dump();
  EXPECT_EQ(doc["exit_code"], 0) << "pip ran and succeeded";
  EXPECT_EQ(doc["snapshot_scope"], json::array({"nvidia_cudnn_cu12-9.10.2.21.dist-info"}));
  EXPECT_FALSE(doc["worse"].empty());
  EXPECT_EQ(doc["undone"], true);
  EXPECT_EQ(hashes_of(v), before);
  EXPECT_TRUE(snapshots(v).empty());
  EXPECT_THAT(test::venv_pip(v, "list --format json").out, HasSubstr("nvidia-cudnn-cu12"));
}

TEST_F(Guard, TheSnapshotOfAnUninstallHoldsThatDistsFilesAndRestoresThem) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = hashes_of(v);
  const auto expected = files_of(v, "nvidia_cudnn_cu12-9.10.2.21.dist-info");
  const auto r = guard(v, "--allow-break --keep", pip(v) + " uninstall -y nvidia-cudnn-cu12");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("scoped to nvidia_cudnn_cu12-9.10.2.21"));
  ASSERT_EQ(snapshots(v).size(), 1u);
  const std::string name = snapshots(v)[0];
  const json m = manifest(v, name);
  EXPECT_EQ(m["scope"], json::array({"nvidia_cudnn_cu12-9.10.2.21.dist-info"}));
  EXPECT_EQ(entries_of(m), expected);
  std::size_t in_tree = 0;
  for (const auto& e : fs::recursive_directory_iterator(v + "/.cudafix/snapshots/" + name + "/tree"))
    in_tree += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(in_tree, expected.size());
  EXPECT_THAT(cudafix("snapshot --list", v).out, HasSubstr(name));
  EXPECT_THAT(cudafix("snapshot --list", v).out, HasSubstr("scoped to nvidia_cudnn_cu12-9.10.2.21"));
  EXPECT_NE(hashes_of(v), before) << "--keep leaves pip's change";
  // The shared libcudnn.so.9 the snapshot holds has cu13's bytes, not those cu12's RECORD says:
  // hashed at snapshot time, it is not called altered.
  const auto restored = cudafix("rollback --snapshot " + name + " -y", v);
  EXPECT_EQ(restored.exit_code, 0) << restored.out;
  EXPECT_THAT(restored.out, HasSubstr("scoped to nvidia_cudnn_cu12-9.10.2.21"));
  EXPECT_EQ(hashes_of(v), before);
}

// A dist installed after a scoped snapshot is outside its scope and stays through its restore;
// a whole snapshot's restore moves it aside. A version of the scope's dist installed since goes.
TEST_F(Guard, AScopedRestoreTouchesItsDistsAloneAWholeOneEverything) {
  TempDir t;
  const std::string v = copy(t);
  const std::string w = t.path() + "/wheels", py = t.path() + "/mod.py";
  fs::create_directories(w);
  test::write_file(py, "Y = 2\n");
  const std::string other = test::make_wheel(w, "otherpkg 1.0 otherpkg/__init__.py=" + py);
  const std::string leaf2 = test::make_wheel(w, "leafpkg 2.0 leafpkg/__init__.py=" + py + " leafpkg/new.txt=" + py);
  const std::string before = hashes_of(v);
  ASSERT_EQ(cudafix("snapshot whole", v).exit_code, 0);
  const auto [rc, doc] = guard_json(v, "--keep", pip(v) + " uninstall -y leafpkg");
  EXPECT_EQ(rc, 0) << doc.dump();
  EXPECT_EQ(doc["snapshot_scope"], json::array({"leafpkg-1.0.dist-info"}));
  const std::string scoped = doc["snapshot"].get<std::string>();
  ASSERT_EQ(test::venv_pip(v, "install -q --no-index --no-deps " + shell_quote(other)).exit_code, 0);
  ASSERT_EQ(test::venv_pip(v, "install -q --no-index --no-deps " + shell_quote(leaf2)).exit_code, 0);
  const std::string other_init = site(v) + "/otherpkg/__init__.py";
  ASSERT_TRUE(fs::exists(other_init));
  const auto back = cudafix("rollback --snapshot " + scoped + " -y", v);
  EXPECT_EQ(back.exit_code, 0) << back.out;
  EXPECT_TRUE(fs::exists(other_init)) << "otherpkg is outside the scope";
  EXPECT_TRUE(fs::exists(site(v) + "/otherpkg-1.0.dist-info/RECORD"));
  EXPECT_FALSE(fs::exists(site(v) + "/leafpkg/new.txt")) << "leafpkg 2.0 is the scope's project";
  EXPECT_FALSE(fs::exists(site(v) + "/leafpkg-2.0.dist-info"));
  EXPECT_TRUE(fs::exists(site(v) + "/leafpkg-1.0.dist-info/RECORD"));
  const auto whole = cudafix("rollback --snapshot whole -y", v);
  EXPECT_EQ(whole.exit_code, 0) << whole.out;
  EXPECT_FALSE(fs::exists(other_init)) << "the whole snapshot never held otherpkg";
  EXPECT_EQ(hashes_of(v), before);
  EXPECT_THAT(test::venv_pip(v, "list --format json").out, HasSubstr(R"("leafpkg", "version": "1.0")"));
}

// Any command but an uninstall cudafix read whole is guarded by a snapshot of everything.
TEST_F(Guard, AnyOtherCommandGetsAWholeSnapshot) {
  TempDir t;
  const std::string v = copy(t);
  const auto [rc, doc] = guard_json(v, "--keep", "sh -c true");
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(doc.contains("snapshot_scope"));
  EXPECT_TRUE(doc["snapshot_scope"].is_null());
  const json m = manifest(v, doc["snapshot"].get<std::string>());
  EXPECT_TRUE(m["scope"].is_null());
  EXPECT_EQ(entries_of(m).count(fs::relative(site(v), v).string() + "/torch/lib/libtorch_cuda.so"), 1u);
  // An uninstall whose requirements file cannot be read: what it removes is not known.
  const auto [rc2, doc2] =
      guard_json(v, "", pip(v) + " uninstall -y leafpkg -r " + shell_quote(t.path() + "/missing.txt"));
  EXPECT_NE(rc2, 0);
  EXPECT_TRUE(doc2["snapshot_scope"].is_null()) << doc2.dump();
  // One that names nothing installed: a snapshot of no file.
  const auto [rc3, doc3] = guard_json(v, "", pip(v) + " uninstall -y no-such-dist");
  EXPECT_EQ(doc3["snapshot_scope"], json::array()) << doc3.dump();
}

// With the fake driver: a cuDNN swapped (by rename, as pip replaces a file) for one whose
// cudnnCreate fails passes every model check; the probe after the command finds it.
TEST_F(Guard, ACommandThatBreaksTheProbeIsUndone) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = hashes_of(v);
  const std::string lib = site(v) + "/nvidia/cudnn/lib/libcudnn.so.9";
  const std::string swap = "cp " + shell_quote(k_verify + "/cudnn/create_fails/libcudnn.so.9") + " " +
                           shell_quote(lib + ".new") + " && mv " + shell_quote(lib + ".new") + " " + shell_quote(lib);
  const std::string options = " --ld-library-path " + shell_quote(k_verify + "/cuda/ok");
  const auto [rc, doc] = guard_json(v, "", "sh -c " + shell_quote(swap), options);
  EXPECT_EQ(rc, 1) << doc.dump();
  EXPECT_EQ(doc["before"]["probe"]["ran"], true);
  EXPECT_EQ(doc["before"]["probe"]["outcome"], "ok");
  EXPECT_EQ(doc["probed_after"], true);
  bool create_failed = false;
  for (const auto& w : doc["worse"])
    if (w["kind"] == "probe" && w["what"].get<std::string>().find("cudnnCreate") != std::string::npos)
      create_failed = true;
  EXPECT_TRUE(create_failed) << doc["worse"].dump();
  EXPECT_EQ(doc["undone"], true);
  EXPECT_EQ(hashes_of(v), before);
  // A command that leaves the tree alone is not probed again.
  const auto [rc2, doc2] = guard_json(v, "", pip(v) + " uninstall -y leafpkg", options);
  EXPECT_EQ(rc2, 0);
  EXPECT_EQ(doc2["before"]["probe"]["ran"], true);
  EXPECT_EQ(doc2["probed_after"], false);
}

// ---- other writers in the window (issue 51) --------------------------------------------------

// A cudafix install that commits while a guarded command runs is another writer's: guard undoes
// its own command's change and keeps the install, which stays committed and can be rolled back.
TEST_F(Guard, ACudafixInstallThatCommitsWhileTheCommandRunsIsKeptWhenTheCommandIsUndone) {
  TempDir t;
  const std::string v = copy(t);
  const std::string lib = site(v) + "/nvidia/cu13/lib/libcudart.so.13";
  const std::string go = t.path() + "/installed", out = t.path() + "/guard.json";
  const Canary canary(t.path());
  ASSERT_NO_FATAL_FAILURE(guard_deleting_until(t, v, lib, go, out));
  const auto install = cudafix("install -y --no-verify " + shell_quote(extra_wheel_), v);
  ASSERT_EQ(install.exit_code, 0) << install.out;
  test::write_file(go, "");
  const auto [rc, doc] = finished(out);
  EXPECT_EQ(rc, 1) << doc.dump();
  EXPECT_EQ(doc["verdict"], "undone") << doc.dump();
  EXPECT_TRUE(fs::exists(lib)) << "the command's deletion is undone";
  EXPECT_TRUE(fs::exists(site(v) + "/extrapkg/__init__.py")) << "the install is kept";
  EXPECT_THAT(test::venv_pip(v, "list --format json").out, HasSubstr("extrapkg"));
  bool by_install = false;
  for (const auto& c : doc["changes"]["others"])
    by_install = by_install || c["writer"].get<std::string>().find("cudafix transaction") != std::string::npos;
  EXPECT_TRUE(by_install) << doc["changes"].dump();
  EXPECT_EQ(paths_in(doc["changes"]["command"]), std::set<std::string>{lib});
  // The install is still committed, and its own rollback is not refused.
  const auto history = cudafix("history --json", v);
  EXPECT_THAT(history.out, HasSubstr("committed"));
  const auto back = cudafix("rollback -y", v);  // the newest: guard's undo
  EXPECT_EQ(back.exit_code, 0) << back.out;
}

// A second guard's pip install while the first guard's command runs is the second guard's: the
// first undoes its own deletion alone.
TEST_F(Guard, ASecondGuardsPipInstallWhileTheFirstsCommandRunsIsKept) {
  TempDir t;
  const std::string v = copy(t);
  const std::string lib = site(v) + "/nvidia/cu13/lib/libcudart.so.13";
  const std::string go = t.path() + "/installed", first = t.path() + "/first.json";
  const Canary canary(t.path());
  ASSERT_NO_FATAL_FAILURE(guard_deleting_until(t, v, lib, go, first));
  const auto second =
      run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " guard --no-verify --venv " + shell_quote(v) +
                test::k_no_cache + " -- " + pip(v) + " install -q --no-index --no-deps " + shell_quote(extra_wheel_) +
                " 2>&1; touch " + shell_quote(go));
  const auto [rc, doc] = finished(first);
  EXPECT_EQ(rc, 1) << doc.dump() << second.out;
  EXPECT_EQ(doc["verdict"], "undone");
  EXPECT_TRUE(fs::exists(lib));
  EXPECT_TRUE(fs::exists(site(v) + "/extrapkg/__init__.py")) << "the second guard's install is kept";
  EXPECT_THAT(test::venv_pip(v, "list --format json").out, HasSubstr("extrapkg"));
}

// Two guarded uninstalls at once: the one whose own uninstall is harmless does not undo it for
// the other's break (nor undo the other's), and the one that broke undoes its own alone.
TEST_F(Guard, OfTwoGuardsAtOnceEachJudgesAndUndoesOnlyItsOwnCommand) {
  TempDir t;
  const std::string v = copy(t);
  const std::string harmless = t.path() + "/harmless.json", breaking = t.path() + "/breaking.json";
  // The harmless one judges while the breaking one's change is in its window; the breaking one after.
  guard_in_background(v,
                      "CUDAFIX_TEST_PAUSE_AT=guard-snapshotted:1,guard-ran:5000 CUDAFIX_TEST_FAULT_TRACE=" +
                          shell_quote(t.path() + "/h"),
                      "", pip(v) + " uninstall -y leafpkg", harmless);
  ASSERT_TRUE(wait_for(t.path() + "/h", "mark guard-snapshotted"));
  guard_in_background(v, "CUDAFIX_TEST_PAUSE_AT=guard-ran:12000", "--allow-break",
                      pip(v) + " uninstall -y nvidia-cudnn-cu12", breaking);
  const auto [hrc, hdoc] = finished(harmless);
  const auto [brc, bdoc] = finished(breaking);
  EXPECT_EQ(hrc, 0) << hdoc.dump();
  EXPECT_EQ(hdoc["verdict"], "not_ours") << hdoc.dump();
  EXPECT_FALSE(hdoc["worse"].empty()) << "the break was in its window";
  EXPECT_EQ(brc, 1) << bdoc.dump();
  EXPECT_EQ(bdoc["verdict"], "undone") << bdoc.dump();
  // A serial order's end: the cu12 uninstall undone, leafpkg's uninstall kept.
  const auto listed = test::venv_pip(v, "list --format json").out;
  EXPECT_THAT(listed, HasSubstr("nvidia-cudnn-cu12"));
  EXPECT_THAT(listed, Not(HasSubstr("leafpkg")));
  EXPECT_EQ(test::venv_pip(v, "check").exit_code, 0);
}

// Another writer's install lands on a path the uninstall then deletes: both wrote it, so guard
// undoes nothing, keeps the snapshot and names the path, the writer and the command to restore.
TEST_F(Guard, WhereTheCommandAndAnotherWriterChangedOnePathNothingIsUndoneAndBothAreNamed) {
  TempDir t;
  const std::string v = copy(t);
  const Canary canary(t.path());
  const std::string out = t.path() + "/guard.json", lib = site(v) + "/nvidia/cudnn/lib/libcudnn.so.9";
  guard_in_background(
      v, "CUDAFIX_TEST_PAUSE_AT=guard-snapshotted:3000 CUDAFIX_TEST_FAULT_TRACE=" + shell_quote(t.path() + "/trace"),
      "--allow-break", pip(v) + " uninstall -y nvidia-cudnn-cu12", out);
  ASSERT_TRUE(wait_for(t.path() + "/trace", "mark guard-snapshotted"));
  ASSERT_EQ(test::venv_pip(v, "install -q --no-index --no-deps " + shell_quote(shadow_wheel_)).exit_code, 0);
  const auto [rc, doc] = finished(out);
  EXPECT_EQ(rc, 1) << doc.dump();
  EXPECT_EQ(doc["verdict"], "overlap") << doc.dump();
  EXPECT_EQ(doc["undone"], false);
  EXPECT_EQ(doc["kept"], true);
  bool named = false;
  for (const auto& c : doc["changes"]["overlap"])
    named = named || (c["path"] == lib && c["writer"].get<std::string>().find("cudnnshadow 1.0") != std::string::npos);
  EXPECT_TRUE(named) << doc["changes"].dump();
  EXPECT_FALSE(fs::exists(lib)) << "nothing was undone";
  const std::string name = doc["snapshot"].get<std::string>();
  EXPECT_TRUE(fs::exists(v + "/.cudafix/snapshots/" + name + "/manifest.json"));
  // The next command names it, with the exact command that restores it.
  EXPECT_THAT(cudafix("doctor", v).out, HasSubstr("`cudafix rollback --snapshot " + name + "` restores it"));
}

// A command that plants another guard's record, its scope claiming the cuDNN dist, then deletes
// that dist's library: the record is the command's own word. A record no guard holds whose
// snapshot never completed is no writer at all (the break is undone); one with a snapshot to its
// name only makes guard refuse to undo, and the snapshot that restores the break stays, named by
// every later command: never a break kept with the snapshot deleted.
TEST_F(Guard, AForgedGuardRecordClaimingTheBrokenFilesNeverLeavesABreakWithoutItsSnapshot) {
  for (const bool with_snapshot : {false, true}) {
    SCOPED_TRACE(with_snapshot ? "a forged snapshot beside the record" : "a bare record");
    TempDir t;
    const std::string v = copy(t);
    const std::string lib = site(v) + "/nvidia/cudnn/lib/libcudnn.so.9", state = v + "/.cudafix";
    const std::string plant =
        "mkdir -p " + shell_quote(state + "/guards") + " " + shell_quote(state + "/snapshots/forged") +
        (with_snapshot ? "; echo {} >" + shell_quote(state + "/snapshots/forged/manifest.json") : std::string()) +
        "; printf '%s' " +
        shell_quote(R"({"snapshot":"forged","pid":1,"time":1,"command":["pip","uninstall","-y","x"],)"
                    R"("scope":["nvidia_cudnn_cu13-9.19.0.56.dist-info"]})") +
        " >" + shell_quote(state + "/guards/forged.json") + "; sleep 0.4; rm " + shell_quote(lib);
    const auto [rc, doc] = guard_json(v, "--no-verify", "sh -c " + shell_quote(plant));
    ASSERT_FALSE(doc["worse"].empty()) << doc.dump();
    const std::string name = doc["snapshot"].get<std::string>();
    if (doc["verdict"] == "undone") {
      EXPECT_EQ(rc, 1) << doc.dump();
      EXPECT_TRUE(fs::exists(lib));
      EXPECT_FALSE(with_snapshot) << doc.dump();
    } else {
      EXPECT_TRUE(with_snapshot) << "a bare unlocked record is no writer: " << doc.dump();
      EXPECT_EQ(doc["verdict"], "not_ours") << doc.dump();
      EXPECT_FALSE(fs::exists(lib)) << "nothing undone on the record's word";
      EXPECT_EQ(doc["kept"], true) << doc.dump();
      EXPECT_TRUE(fs::exists(v + "/.cudafix/snapshots/" + name + "/manifest.json"));
      EXPECT_THAT(cudafix("doctor", v).out, HasSubstr("`cudafix rollback --snapshot " + name + "` restores it"));
      const auto back = cudafix("rollback -y --snapshot " + name, v);
      EXPECT_EQ(back.exit_code, 0) << back.out;
      EXPECT_TRUE(fs::exists(lib));
    }
  }
}

// What guard restores comes from what it held in memory when it took the snapshot: a manifest
// rewritten in the window (its scope widened, its entries emptied) is not read back.
TEST_F(Guard, ASnapshotManifestRewrittenInTheWindowIsNotWhatGuardRestoresFrom) {
  TempDir t;
  const std::string v = copy(t);
  const Canary canary(t.path());
  const std::string before = hashes_of(v), out = t.path() + "/guard.json";
  guard_in_background(
      v, "CUDAFIX_TEST_PAUSE_AT=guard-ran:3000 CUDAFIX_TEST_FAULT_TRACE=" + shell_quote(t.path() + "/trace"),
      "--allow-break", pip(v) + " uninstall -y nvidia-cudnn-cu12", out);
  ASSERT_TRUE(wait_for(t.path() + "/trace", "mark guard-ran"));
  for (const auto& n : snapshots(v))
    if (fs::exists(v + "/.cudafix/snapshots/" + n + "/manifest.json")) {
      json m = manifest(v, n);
      m["scope"] = nullptr;
      m["entries"] = json::array();
      test::write_file(v + "/.cudafix/snapshots/" + n + "/manifest.json", m.dump());
    }
  const auto [rc, doc] = finished(out);
  EXPECT_EQ(rc, 1) << doc.dump();
  EXPECT_EQ(doc["verdict"], "undone");
  EXPECT_TRUE(fs::exists(site(v) + "/torch/lib/libtorch_cuda.so")) << "torch was not moved aside";
  EXPECT_EQ(hashes_of(v), before);
}

// A command that removes cudafix's folder and breaks nothing: guard returns its exit code and
// says the snapshot went with it.
TEST_F(Guard, ACommandThatRemovesCudafixsFolderAndBreaksNothingExitsWithItsCode) {
  TempDir t;
  const std::string v = copy(t);
  const auto r = guard(v, "--no-verify", "sh -c " + shell_quote("rm -rf " + shell_quote(v + "/.cudafix") + "; exit 4"));
  EXPECT_EQ(r.exit_code, 4) << r.out;
  EXPECT_THAT(r.out, HasSubstr("nothing got worse"));
  EXPECT_THAT(r.out, HasSubstr("the command removed it"));
  EXPECT_THAT(r.out, Not(HasSubstr("is kept")));
}

// A planted 3 GiB sparse manifest costs nothing to list or to refuse.
TEST_F(Guard, ASparseManifestIsNeitherReadWholeNorListed) {
  TempDir t;
  const std::string v = copy(t);
  ASSERT_EQ(cudafix("snapshot real", v).exit_code, 0);
  fs::create_directories(v + "/.cudafix/snapshots/planted");
  ASSERT_EQ(run_shell("truncate -s 3G " + shell_quote(v + "/.cudafix/snapshots/planted/manifest.json")).exit_code, 0);
  const auto limited = [&](const std::string& args) {
    const auto b = bounded("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " " + args + " --venv " + shell_quote(v) +
                           test::k_no_cache);
    EXPECT_LT(b.peak_kb, 1024 * 1024) << args << ": peak RSS " << b.peak_kb << " KB";
    return test::RunResult{b.rc, b.out};
  };
  const auto list = limited("snapshot --list");
  EXPECT_EQ(list.exit_code, 0) << list.out;
  EXPECT_THAT(list.out, HasSubstr("real"));
  EXPECT_THAT(list.out, Not(HasSubstr("planted")));
  const auto restore = limited("rollback --snapshot planted -y");
  EXPECT_EQ(restore.exit_code, 2) << restore.out;
  EXPECT_THAT(restore.out, HasSubstr("manifest.json cannot be read"));
}

// A guard killed at any point leaves the environment before or after its command, and nothing
// that no command names: the next command that takes the lock removes a half-taken or
// half-deleted snapshot and a record without a snapshot, saying so; a complete snapshot left
// behind is named with how to restore it.
TEST_F(Guard, AGuardKilledAtAnyPointLeavesNothingThatNoCommandNames) {
  const std::vector<std::string> points = {
      "guard-recorded",   "snapshot-linked", "guard-snapshotted", "guard-ran", "guard-judged", "2", "4",
      "snapshot-unlisted"};
  for (const auto& point : points) {
    SCOPED_TRACE(point);
    TempDir t;
    const std::string v = copy(t);
    const Canary canary(t.path());
    const std::string before = hashes_of(v);
    const std::string lib = site(v) + "/nvidia/cu13/lib/libcudart.so.13";
    const auto killed = run_shell("env -u VIRTUAL_ENV CUDAFIX_TEST_KILL_AT=" + point + " " + shell_quote(test::k_bin) +
                                  " guard --no-verify --venv " + shell_quote(v) + test::k_no_cache + " -- rm " +
                                  shell_quote(lib) + " 2>&1");
    EXPECT_EQ(killed.exit_code, 137) << killed.out;
    // The next command that takes the lock: a guard of a command that changes nothing.
    const auto next = guard(v, "--no-verify", "true");
    EXPECT_EQ(next.exit_code, 0) << next.out;
    std::vector<std::string> left;
    for (const auto& n : snapshots(v)) left.push_back(n);
    for (const auto& n : left) {
      EXPECT_FALSE(n.starts_with(".")) << n << " is a half-taken or half-deleted snapshot";
      EXPECT_THAT(next.out, HasSubstr("`cudafix rollback --snapshot " + n + "` restores it")) << "unnamed: " << n;
    }
    std::error_code ec;
    for (fs::directory_iterator it(v + "/.cudafix/guards", ec), end; !ec && it != end; it.increment(ec)) {
      const std::string snap = it->path().stem().string();
      EXPECT_TRUE(fs::exists(v + "/.cudafix/snapshots/" + snap + "/manifest.json")) << "a record without snapshot";
    }
    const bool as_before = hashes_of(v) == before;
    EXPECT_TRUE(as_before || (!fs::exists(lib) && left.size() == 1u)) << "between states, or unnamed";
    if (point == "snapshot-unlisted") {
      EXPECT_THAT(next.out, HasSubstr("finished deleting snapshot"));
    }
    if (point == "snapshot-linked" || point == "guard-recorded") {
      EXPECT_THAT(next.out, HasSubstr("recovering:"));
    }
    for (const auto& n : left) {
      const auto back = cudafix("rollback --snapshot " + n + " -y", v);
      EXPECT_EQ(back.exit_code, 0) << back.out;
      EXPECT_EQ(hashes_of(v), before);
    }
  }
}

// A program named pip that deletes more than the dists it names: guard took it for an uninstall
// of leafpkg (a snapshot of leafpkg alone) and undid that; what it broke outside stays broken,
// and guard says so, keeps the snapshot and names it, rather than reporting the break undone.
TEST_F(Guard, AnUninstallThatBreaksMoreThanItsDistsIsNotReportedAsUndone) {
  TempDir t;
  const std::string v = copy(t);
  const Canary canary(t.path());
  const std::string lib = site(v) + "/nvidia/cu13/lib/libcudart.so.13", fake = t.path() + "/bin/pip";
  fs::create_directories(t.path() + "/bin");
  test::write_file(fake, "#!/bin/sh\nrm -rf " + shell_quote(site(v) + "/leafpkg") + " " +
                             shell_quote(site(v) + "/leafpkg-1.0.dist-info") + " " + shell_quote(lib) + "\n");
  fs::permissions(fake, fs::perms::owner_all);
  const auto [rc, doc] = guard_json(v, "--no-verify", shell_quote(fake) + " uninstall -y leafpkg");
  EXPECT_EQ(rc, 1) << doc.dump();
  EXPECT_EQ(doc["snapshot_scope"], json::array({"leafpkg-1.0.dist-info"}));
  EXPECT_EQ(doc["verdict"], "undone");
  EXPECT_FALSE(doc["still_worse"].empty()) << doc.dump();
  EXPECT_EQ(doc["kept"], true);
  EXPECT_TRUE(fs::exists(site(v) + "/leafpkg/__init__.py")) << "what the snapshot held is back";
  const std::string name = doc["snapshot"].get<std::string>();
  EXPECT_THAT(cudafix("doctor", v).out, HasSubstr("`cudafix rollback --snapshot " + name + "` restores it"));
}

}  // namespace
}  // namespace cudafix
