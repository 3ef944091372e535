// A kill -9 at the journal steps of every write command (install, remove, rollback, rollback
// --snapshot, fix) on real venvs made by pip, each recovered by the next command: the tree is the
// before or the after state and nothing between, history shows nothing in progress, the next
// command works and pip reads the venv. CI kills at a sample of each command's steps (the first,
// the last, those around the intent and the commit, and 8 drawn from the run's seed between
// them: tests/support/seed.hpp, CUDAFIX_SEED=N draws the same); CUDAFIX_SWEEP_ALL=1 walks every
// step (bench/kill_sweep.sh). And, on the same venvs, the other
// ways issue 36 found a change lost or unexplained: the writer that queued on the lock while the
// killed one held it (it recovers the killed transaction before its own work), a site-packages on
// another mount (refused up front, named; snapshot says it copies), doctor's recovery (said), and
// pip writing a shared library in the middle of a removal (kept, or doctor names it missing).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "installer/txn/journal.hpp"
#include "resolver/base/text.hpp"
#include "tests/e2e/cudafix_run.hpp"
#include "tests/support/seed.hpp"

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

// One write command under the sweep: the venv it starts from, what is done to each copy first
// (a transaction to roll back, a snapshot and the change it undoes), and the command killed.
struct Case {
  std::string name;
  std::string base;         // copied (cp -a) for each trial
  std::string setup;        // cudafix arguments run on each copy first ("" for none)
  std::string shell_setup;  // then this, in the venv's site-packages ("" for none)
  std::string command;      // the command killed
};

// What one command's sweep found.
struct Tally {
  int trials = 0, befores = 0, afters = 0;
};

class KillSweep : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    const std::string src = tmp_->path() + "/src";
    links_ = tmp_->path() + "/wheels";
    fs::create_directories(src);
    fs::create_directories(links_);
    const auto file = [&](const std::string& name, const std::string& text) {
      test::write_file(src + "/" + name, text);
      return src + "/" + name;
    };
    // alpha's libraries share common/lib/ with beta's, so that a removal moves each aside on its
    // own (a folder all of whose files go is moved whole, in one step).
    std::string alpha1 = "alpha 1.0 alpha/__init__.py=" + file("a1.py", "VERSION = 1\n") +
                         " alpha/lib/liba.so=" + file("a1.so", "alpha 1 library\n");
    std::string alpha2 = "alpha 2.0 alpha/__init__.py=" + file("a2.py", "VERSION = 2\n") +
                         " alpha/lib/liba.so=" + file("a2.so", "alpha 2 library\n") +
                         " alpha/lib/libextra.so=" + file("a2x.so", "alpha 2 extra\n") +
                         " alpha/tools/tool.py=" + file("a2t.py", "TOOL = 2\n");
    for (int i = 0; i < 20; ++i) {
      const std::string n = fmt::format("{:02d}", i);
      alpha1 += " common/lib/liba" + n + ".so=" + file("c1_" + n, "alpha 1 part " + n + "\n");
      alpha2 += " common/lib/liba" + n + ".so=" + file("c2_" + n, "alpha 2 part " + n + "\n");
    }
    for (int i = 20; i < 26; ++i)
      alpha2 += " common/lib/liba" + std::to_string(i) + ".so=" + file("c2_" + std::to_string(i), "alpha 2 new\n");
    alpha1_ = test::make_wheel(tmp_->path(), alpha1);
    alpha2_ = test::make_wheel(tmp_->path(), alpha2);
    const std::string beta =
        test::make_wheel(tmp_->path(), "beta 2.0 beta/libb.so=" + file("b.so", "beta library\n") +
                                           " common/lib/libb.so=" + file("cb.so", "beta common\n") +
                                           " shared/common.py=" + file("common.py", "SHARED = 1\n"));
    const std::string gamma =
        test::make_wheel(tmp_->path(), "gamma 3.0 gamma/g.py=" + file("g.py", "G = 3\n") + " shared/common.py=" + src +
                                           "/common.py --requires beta");
    delta_ = test::make_wheel(tmp_->path(), "delta 1.0 delta/__init__.py=" + file("d.py", "D = 1\n") +
                                                " common/lib/libdelta.so=" + file("d.so", "delta library\n"));
    base_ = tmp_->path() + "/base";
    ASSERT_NO_FATAL_FAILURE(test::make_venv(base_, {alpha1_, beta, gamma}));
    ASSERT_NO_FATAL_FAILURE(without_pip(base_));
    // fix's case (tests/e2e/test_plan.cpp, PlanFix): the CUDA 12 cuDNN's shared library holds the
    // CUDA 13 one's bytes, so the fix reinstalls the first from its wheel, then removes the second.
    const std::string v = test::k_fixtures + "/verify";
    std::vector<std::string> fix_wheels;
    for (const std::string& args :
         {"nvidia-cuda-runtime-cu12 12.8.90 nvidia/cuda_runtime/lib/libcudart.so.12=" + v + "/cu12/libcudart.so.12",
          // Headers beside the library, as NVIDIA's wheels have them: enough ops for 20 kill points.
          "nvidia-cudnn-cu12 9.10.2.21 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/cudnn/v91400/libcudnn.so.9" +
              " nvidia/cudnn/include/cudnn.h=" + v + "/cu12/libcudart.so.12" +
              " nvidia/cudnn/include/cudnn_version.h=" + v + "/cu12/libcudart.so.12" +
              " nvidia/cudnn/include/cudnn_graph.h=" + v + "/cu12/libcudart.so.12" +
              " nvidia/cudnn/include/cudnn_ops.h=" + v + "/cu12/libcudart.so.12",
          "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/cudnn/v91900/libcudnn.so.9",
          "torch12like 2.7.0 torch/lib/libtorch_cuda.so=" + v +
              "/torch12/libtorch_cuda.so --requires 'nvidia-cudnn-cu12==9.10.2.21'"})
      fix_wheels.push_back(test::make_wheel(links_, args));
    fix_base_ = tmp_->path() + "/fix_base";
    ASSERT_NO_FATAL_FAILURE(test::make_venv(fix_base_, fix_wheels));
    ASSERT_NO_FATAL_FAILURE(without_pip(fix_base_));
  }
  static void TearDownTestSuite() { delete tmp_; }

  // pip and setuptools uninstalled from the venv (by its pip): a trial copies and hashes the
  // whole tree several times, and pip's 1,600 files would be most of it. pip itself still reads
  // the venv, run from outside it (pip_list).
  static void without_pip(const std::string& venv) {
    const auto r = test::venv_pip(venv, "uninstall -y -q pip setuptools 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }

  static std::vector<Case> cases() {
    const std::string site_rel = "$(ls -d lib/python3*/site-packages)";
    return {
        {"install", base_, "", "", "install " + shell_quote(alpha2_) + " -y --no-verify"},
        {"remove", base_, "", "", "remove alpha gamma -y"},
        {"rollback", base_, "install " + shell_quote(alpha2_) + " -y --no-verify", "", "rollback -y"},
        // What pip's uninstall of alpha does, and a file of beta's replaced (a new inode, as pip
        // and uv replace one), between the snapshot and its restore.
        {"rollback --snapshot", base_, "snapshot s1",
         "rm -rf alpha alpha-1.0.dist-info common/lib/liba*.so && printf 'other bytes\\n' > beta/libb.so.new && mv "
         "beta/libb.so.new beta/libb.so",
         "rollback --snapshot s1 -y"},
        {"fix", fix_base_, "", "", "fix -y --no-verify --ld-library-path '' --find-links " + shell_quote(links_)},
    };
  }

  // `cudafix ARGS --venv VENV`, text output and standard error together.
  static test::RunResult cudafix(const std::string& args, const std::string& venv, const std::string& env = "") {
    return run_shell("env -u VIRTUAL_ENV -u PIP_FIND_LINKS " + env + " " + shell_quote(test::k_bin) + " " + args +
                     " --venv " + shell_quote(venv) + test::k_no_cache + " 2>&1 </dev/null");
  }
  static json history(const std::string& venv) {
    const auto r = cudafix("history --json", venv);
    auto doc = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << r.out;
    return doc.is_discarded() ? json::object() : doc;
  }
  // A copy of the case's venv with its setup done.
  static std::string prepared(const Case& c, const TempDir& t) {
    const std::string v = t.path() + "/venv";
    EXPECT_EQ(run_shell("cp -a " + shell_quote(c.base) + " " + shell_quote(v)).exit_code, 0);
    if (!c.setup.empty()) {
      const auto r = cudafix(c.setup, v);
      EXPECT_EQ(r.exit_code, 0) << c.setup << ": " << r.out;
    }
    if (!c.shell_setup.empty()) {
      const auto r = run_shell("cd " + shell_quote(test::site_packages(v)) + " && " + c.shell_setup + " 2>&1");
      EXPECT_EQ(r.exit_code, 0) << r.out;
    }
    return v;
  }
  // pip's own listing of the venv, by the pip outside it (--python): its exit code and what it
  // said; none for a tree pip listed before in this run. pip reads only the files tree_of()
  // hashes, so the same tree lists the same, and its failure is said once, not once a trial.
  static std::optional<test::RunResult> pip_list(const std::string& venv, const std::string& tree) {
    static std::set<std::string> listed;
    if (!listed.insert(tree).second) return std::nullopt;
    return run_shell("env -u VIRTUAL_ENV python3 -m pip --disable-pip-version-check --python " +
                     shell_quote(venv + "/bin/python3") + " list 2>&1");
  }

  // The journal steps to kill at: every one with CUDAFIX_SWEEP_ALL=1; otherwise the first, the
  // intent (step 2, after the begin record), the step after it (the first change), the last two
  // (the last change and the commit record), and k_sampled steps between drawn from the run's
  // seed for this command: each CI run kills at other steps, and the whole sweep over runs.
  static constexpr long k_sampled = 8;
  static std::vector<long> steps_to_kill(const std::string& command, long total) {
    std::set<long> at;
    const char* all = std::getenv("CUDAFIX_SWEEP_ALL");
    if (all && std::string(all) == "1") {
      for (long s = 1; s <= total; ++s) at.insert(s);
    } else {
      for (const long s : {1L, 2L, 3L, total - 1, total})
        if (s >= 1 && s <= total) at.insert(s);
      std::vector<long> between;
      for (long s = 4; s <= total - 2; ++s) between.push_back(s);
      std::mt19937 rng(test::seed_for("kill sweep " + command));
      std::shuffle(between.begin(), between.end(), rng);
      between.resize(std::min<std::size_t>(between.size(), k_sampled));
      at.insert(between.begin(), between.end());
    }
    return {at.begin(), at.end()};
  }

  // Every transaction history lists, none in progress.
  static void expect_nothing_in_progress(const json& h, const std::string& what) {
    for (const auto& t : h.value("transactions", json::array()))
      EXPECT_NE(t.value("result", ""), "in progress") << what << ": " << t.dump();
  }

  Tally sweep(const Case& c);

  static inline TempDir* tmp_ = nullptr;
  static inline std::string links_, base_, fix_base_, alpha1_, alpha2_, delta_;
};

Tally KillSweep::sweep(const Case& c) {
  Tally tally;
  // The run without a kill: the after state, and how many journal steps it takes (the begin
  // record, the intent, one per op, the commit record).
  TempDir ref;
  const std::string rv = prepared(c, ref);
  const std::string before = tree_of(rv);
  const auto done = cudafix(c.command, rv);
  EXPECT_EQ(done.exit_code, 0) << c.command << ": " << done.out;
  const std::string after = tree_of(rv);
  EXPECT_NE(before, after) << c.command << " changed nothing";
  const json h = history(rv);
  if (h.value("transactions", json::array()).empty()) {
    ADD_FAILURE() << c.name << ": no transaction in history: " << h.dump();
    return tally;
  }
  const long total = 3 + h["transactions"][0].value("ops", 0L);
  // A kill one past the last step never fires: the run ends as the one above did.
  {
    TempDir t;
    const std::string v = prepared(c, t);
    const auto past = cudafix(c.command, v, "CUDAFIX_TEST_KILL_AT=" + std::to_string(total + 1));
    EXPECT_EQ(past.exit_code, 0) << c.name << ": the journal has more than " << total << " steps: " << past.out;
  }
  const auto steps = steps_to_kill(c.name, total);
  std::printf("kill sweep: %s: killing at steps %s of %ld\n", c.name.c_str(),
              fmt::format("{}", fmt::join(steps, ",")).c_str(), total);
  for (const long step : steps) {
    const std::string at = c.name + ", killed at step " + std::to_string(step) + " of " + std::to_string(total);
    TempDir t;
    const std::string v = prepared(c, t);
    const auto killed = cudafix(c.command, v, "CUDAFIX_TEST_KILL_AT=" + std::to_string(step));
    ++tally.trials;
    EXPECT_EQ(killed.exit_code, 137) << at << ": " << killed.out;
    // A read command recovers first, and says so.
    const auto next = cudafix("history", v);
    EXPECT_EQ(next.exit_code, 0) << at << ": " << next.out;
    EXPECT_THAT(next.out, HasSubstr("recovering: transaction")) << at;
    const std::string now = tree_of(v);
    const bool is_before = now == before, is_after = now == after;
    EXPECT_TRUE(is_before || is_after) << at << " left a third state:\n"
                                       << tree_diff(before, now) << "(against the after state:)\n"
                                       << tree_diff(after, now) << next.out;
    tally.befores += is_before;
    tally.afters += is_after;
    const json hist = history(v);
    expect_nothing_in_progress(hist, at);
    if (const auto pip = pip_list(v, now)) {
      EXPECT_EQ(pip->exit_code, 0) << at << ": " << pip->out;
      EXPECT_THAT(pip->out, ::testing::Not(HasSubstr("WARNING"))) << at;
    }
    if (!is_before && !is_after) continue;
    const auto& listed = hist["transactions"];
    if (c.name == "rollback") {
      // The rolled-back transaction (the setup's install) says what undid it exactly when the
      // tree is rolled back.
      for (const auto& tx : listed) {
        if (tx.value("command", "").starts_with("install ")) {
          EXPECT_EQ(tx["result"].get<std::string>().starts_with("rolled back by"), is_after) << at << ": " << tx;
        }
      }
    }
    if (is_before) {
      // The same command again does what the killed one would have.
      const auto again = cudafix(c.command, v);
      EXPECT_EQ(again.exit_code, 0) << at << ", run again: " << again.out;
      EXPECT_TRUE(tree_of(v) == after) << at << ", run again:\n" << tree_diff(after, tree_of(v));
    } else {
      // The killed transaction committed: it is the newest, and rolling it back gives the before state.
      if (listed.empty()) {
        ADD_FAILURE() << at << ": history lists no transaction";
        continue;
      }
      EXPECT_EQ(listed[0]["result"], "committed") << at << ": " << listed[0];
      const auto back = cudafix("rollback " + listed[0]["id"].get<std::string>() + " -y", v);
      EXPECT_EQ(back.exit_code, 0) << at << ", rolled back: " << back.out;
      EXPECT_TRUE(tree_of(v) == before) << at << ", rolled back:\n" << tree_diff(before, tree_of(v));
    }
  }
  // Where bench/kill_sweep.sh reads the counts.
  std::printf("kill sweep: %s: %d trials of %ld steps, %d before, %d after\n", c.name.c_str(), tally.trials, total,
              tally.befores, tally.afters);
  std::fflush(stdout);
  return tally;
}

TEST_F(KillSweep, AKillAtAnyStepOfInstallLeavesTheBeforeOrTheAfterState) {
  const auto t = sweep(cases()[0]);
  EXPECT_GE(t.trials, 5 + k_sampled);
  EXPECT_GE(t.befores, 1);
  EXPECT_GE(t.afters, 1);
}

TEST_F(KillSweep, AKillAtAnyStepOfRemoveLeavesTheBeforeOrTheAfterState) {
  const auto t = sweep(cases()[1]);
  EXPECT_GE(t.trials, 5 + k_sampled);
  EXPECT_GE(t.befores, 1);
  EXPECT_GE(t.afters, 1);
}

TEST_F(KillSweep, AKillAtAnyStepOfRollbackLeavesTheBeforeOrTheAfterState) {
  const auto t = sweep(cases()[2]);
  EXPECT_GE(t.trials, 5 + k_sampled);
  EXPECT_GE(t.befores, 1);
  EXPECT_GE(t.afters, 1);
}

TEST_F(KillSweep, AKillAtAnyStepOfASnapshotRestoreLeavesTheBeforeOrTheAfterState) {
  const auto t = sweep(cases()[3]);
  EXPECT_GE(t.trials, 5 + k_sampled);
  EXPECT_GE(t.befores, 1);
  EXPECT_GE(t.afters, 1);
}

TEST_F(KillSweep, AKillAtAnyStepOfFixLeavesTheBeforeOrTheAfterState) {
  const auto t = sweep(cases()[4]);
  EXPECT_GE(t.trials, 5 + k_sampled);
  EXPECT_GE(t.befores, 1);
  EXPECT_GE(t.afters, 1);
}

// A kill at each step of pruning (CUDAFIX_TEST_KILL_AT=prune:N: the pruned list written, then
// old/, new/, the journal and the folder removed). The change that pruned has committed; what
// the kill left of the pruned transaction is named by history (listed, or counted as a
// leftover) until the next command that takes the lock removes it, saying so; `rollback ID`
// then says pruned, and nothing of it is left on disk.
TEST_F(KillSweep, AKillAtAnyStepOfPruningLeavesNothingThatNoCommandNamesAndRollbackSaysPruned) {
  int trials = 0;
  for (int step = 1; step < 10; ++step) {
    const std::string at = "killed at pruning step " + std::to_string(step);
    TempDir t;
    const std::string v = t.path() + "/venv";
    ASSERT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(v)).exit_code, 0);
    test::write_file(v + "/cudafix.toml", "[transactions]\nkeep = 1\n");
    const auto first = cudafix("remove gamma -y --json", v);
    ASSERT_EQ(first.exit_code, 0) << first.out;
    const std::string pruned = json::parse(first.out)["transaction"];
    const std::string after = [&] {
      const auto r = cudafix("remove alpha -y", v, "CUDAFIX_TEST_KILL_AT=prune:" + std::to_string(step));
      EXPECT_TRUE(r.exit_code == 137 || r.exit_code == 0) << at << ": " << r.out;
      return r.exit_code == 0 ? std::string("done") : std::string("killed");
    }();
    const std::string tx = v + "/.cudafix/tx";
    // What is on disk of the pruned transaction, history names: listed, or as a leftover.
    const json h = history(v);
    expect_nothing_in_progress(h, at);
    std::set<std::string> named;
    for (const auto& e : h.value("transactions", json::array())) named.insert(e["id"].get<std::string>());
    for (const auto& e : h.value("prune_leftovers", json::array())) named.insert(e["id"].get<std::string>());
    for (const auto& e : fs::directory_iterator(tx))
      EXPECT_TRUE(named.count(e.path().filename().string())) << at << ": history does not name " << e.path();
    for (const auto& e : h.value("transactions", json::array())) EXPECT_NE(e["id"], pruned) << at;
    // The change that pruned had committed before it pruned.
    ASSERT_FALSE(h.value("transactions", json::array()).empty()) << at;
    EXPECT_EQ(h["transactions"][0]["command"], "remove alpha") << at;
    EXPECT_EQ(h["transactions"][0]["result"], "committed") << at;
    const auto back = cudafix("rollback " + pruned + " -y", v);
    EXPECT_EQ(back.exit_code, 2) << at << ": " << back.out;
    EXPECT_THAT(back.out, HasSubstr("transaction " + pruned + " was pruned")) << at;
    if (fs::exists(tx + "/" + pruned)) ADD_FAILURE() << at << ": the pruned folder is still there after " << back.out;
    const bool left_something = back.out.find("recovering: ") != std::string::npos;
    EXPECT_EQ(left_something, back.out.find(pruned + ", which a killed prune left") != std::string::npos) << back.out;
    // One transaction folder, the kept one, with its journal and backups; nothing else.
    std::set<std::string> folders;
    for (const auto& e : fs::directory_iterator(tx)) {
      folders.insert(e.path().filename().string());
      EXPECT_TRUE(fs::exists(e.path() / "journal")) << at << ": " << e.path();
    }
    EXPECT_EQ(folders.size(), 1U) << at;
    if (after == "done") break;
    ++trials;
  }
  EXPECT_GE(trials, 4) << "pruning has fewer kill points than its steps";
}

}  // namespace
}  // namespace cudafix

namespace cudafix {
namespace {

// Polls `done` every 20 ms for up to `seconds`; whether it came true.
bool wait_for(const std::function<bool()>& done, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Issue 36, item 1: a write command that found no transaction to recover, then queued on the
// lock behind one that is killed mid-change, must recover the killed one (under the lock it now
// holds) before its own work; else it overwrites .cudafix/active and the killed transaction
// stays half done and "in progress" for ever.
//
// The order is made, not guessed: strace holds the queued `install` for 3 s at its first flock,
// after it opened .lock (so after its look for a transaction to recover); the `remove` starts
// once .lock exists, takes the lock first and pauses after its fifth rename (as its journal and
// the disk show); it is killed once the install says it is waiting.
TEST_F(KillSweep, AWriterQueuedOnTheLockRecoversTheKilledHolderFirstThenDoesItsOwnWork) {
  // delta shares no file with what the removal moves, so only a recovery puts those back.
  const std::string install = "install " + shell_quote(delta_) + " -y --no-verify";
  TempDir ref;
  const std::string expected_venv = ref.path() + "/venv";
  ASSERT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(expected_venv)).exit_code, 0);
  ASSERT_EQ(cudafix(install, expected_venv).exit_code, 0);
  const std::string expected = tree_of(expected_venv);

  TempDir t;
  const std::string v = t.path() + "/venv";
  ASSERT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(v)).exit_code, 0);
  fs::remove(v + "/.lock");
  const std::string queued_out = t.path() + "/queued.out", holder_out = t.path() + "/holder.out";
  const std::string cudafix_at =
      "env -u VIRTUAL_ENV -u PIP_FIND_LINKS ASAN_OPTIONS=detect_leaks=0 " + shell_quote(test::k_bin);
  run_shell("(strace -f -qq -o /dev/null -e trace=flock -e inject=flock:delay_enter=3000000:when=1 " + cudafix_at +
            " " + install + " --venv " + shell_quote(v) + test::k_no_cache + " > " + shell_quote(queued_out) +
            " 2>&1 </dev/null; echo rc=$? >> " + shell_quote(queued_out) + ") >/dev/null 2>&1 &");
  ASSERT_TRUE(wait_for([&] { return fs::exists(v + "/.lock"); }, 20)) << "the queued install never opened the lock";
  const auto started =
      run_shell("env CUDAFIX_TEST_PAUSE_AT=7:60000 " + cudafix_at + " remove alpha gamma -y --no-cache --venv " +
                shell_quote(v) + test::k_no_cache + " > " + shell_quote(holder_out) + " 2>&1 </dev/null & echo $!");
  const pid_t holder = static_cast<pid_t>(std::stol(started.out));
  ASSERT_GT(holder, 0) << started.out;
  struct Reaper {
    pid_t pid;
    ~Reaper() { ::kill(pid, SIGKILL); }
  } reaper{holder};
  // The holder's transaction, once its journal lists its ops, and its fifth op done on disk.
  std::string id;
  const auto fifth_done = [&] {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(v + "/.cudafix/tx", ec)) {
      try {
        const auto j = installer::txn::read_journal(e.path().string() + "/journal");
        if (j.ops.size() < 5 || j.ops[4].kind != installer::txn::OpKind::move) return false;
        id = j.id;
        return fs::exists(fs::symlink_status(j.ops[4].to)) && !fs::exists(fs::symlink_status(j.ops[4].from));
      } catch (const std::exception&) {
        return false;
      }
    }
    return false;
  };
  ASSERT_TRUE(wait_for(fifth_done, 30)) << "the remove never made its fifth rename: "
                                        << resolver::try_read_file(holder_out).value_or("");
  const auto queued_says = [&](const std::string& what) {
    return resolver::try_read_file(queued_out).value_or("").find(what) != std::string::npos;
  };
  ASSERT_TRUE(wait_for([&] { return queued_says("waiting for"); }, 30))
      << "the install never queued on the lock: " << resolver::try_read_file(queued_out).value_or("");
  EXPECT_THAT(resolver::try_read_file(holder_out).value_or(""), ::testing::Not(HasSubstr("waiting for")))
      << "the remove did not take the lock first";
  ASSERT_EQ(::kill(holder, SIGKILL), 0);
  ASSERT_TRUE(wait_for([&] { return queued_says("rc="); }, 60)) << "the queued install never ended";
  const std::string out = resolver::try_read_file(queued_out).value_or("");
  EXPECT_THAT(out, HasSubstr("rc=0")) << out;
  // It recovered the killed removal first, then installed.
  const auto recovered = out.find("recovering: transaction " + id), installed = out.find("installed delta 1.0");
  EXPECT_NE(recovered, std::string::npos) << out;
  EXPECT_NE(installed, std::string::npos) << out;
  EXPECT_LT(recovered, installed) << out;
  const json h = history(v);
  expect_nothing_in_progress(h, "after the queued install");
  // The killed one is known as undone: rolling it back is refused, saying so.
  const auto back = cudafix("rollback " + id + " -y", v);
  EXPECT_NE(back.exit_code, 0) << back.out;
  EXPECT_THAT(back.out, HasSubstr("undone")) << back.out;
  // The venv is the install's alone on the state before the removal.
  EXPECT_TRUE(tree_of(v) == expected) << tree_diff(expected, tree_of(v));
}

}  // namespace
}  // namespace cudafix

namespace cudafix {
namespace {

// Issue 36, item 9: the kernel's EXDEV says "Invalid cross-device link" and nothing more. A
// rename that fails so (injected here, at the first rename of the removal's changes) names the
// two folders and the cause, and everything is undone.
TEST_F(KillSweep, ARenameAcrossFileSystemsNamesTheCauseAndEveryChangeIsUndone) {
  TempDir t;
  const std::string v = t.path() + "/venv";
  ASSERT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(v)).exit_code, 0);
  const std::string before = tree_of(v);
  const auto r = cudafix("remove alpha gamma -y", v, "CUDAFIX_TEST_FAULT=rename:2:EXDEV");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("are on different file systems (a bind mount?): cudafix moves files by rename within "
                               "one file system"));
  EXPECT_THAT(r.out, HasSubstr("every change was undone"));
  EXPECT_TRUE(tree_of(v) == before) << tree_diff(before, tree_of(v));
}

// site-packages bind-mounted from elsewhere (a bind mount of the same disk: the same device, a
// mount of its own, which rename and link refuse to cross). Every write that moves files is
// refused before it changes anything, naming both folders; snapshot copies instead of
// hardlinking and says how many files and MB, and why, in text and JSON.
TEST_F(KillSweep, ABindMountedSitePackagesIsRefusedBeforeAnyChangeAndSnapshotSaysItCopies) {
  TempDir t;
  const std::string v = t.path() + "/venv", elsewhere = t.path() + "/elsewhere";
  ASSERT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(v)).exit_code, 0);
  const std::string site = test::site_packages(v);
  ASSERT_EQ(run_shell("cp -a " + shell_quote(site) + " " + shell_quote(elsewhere)).exit_code, 0);
  const auto mounted = run_shell("mount --bind " + shell_quote(elsewhere) + " " + shell_quote(site) + " 2>&1");
  if (mounted.exit_code != 0) GTEST_SKIP() << "mount --bind is not allowed here: " << mounted.out;
  struct Unmount {
    std::string at;
    ~Unmount() { run_shell("umount " + shell_quote(at)); }
  } unmount{site};
  const std::string before = tree_of(v);
  for (const std::string& command :
       {std::string("remove alpha -y"), "install " + shell_quote(alpha2_) + " -y --no-verify"}) {
    const auto r = cudafix(command, v);
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr(site + " and " + v +
                                 " are on different file systems (a bind mount?): cudafix "
                                 "moves files by rename within one file system; nothing was "
                                 "changed"))
        << command;
    EXPECT_TRUE(tree_of(v) == before) << command << ":\n" << tree_diff(before, tree_of(v));
  }
  const auto text = cudafix("snapshot s1", v);
  EXPECT_EQ(text.exit_code, 0) << text.out;
  EXPECT_THAT(text.out, HasSubstr("0 files (0.0 MB) hardlinked"));
  EXPECT_THAT(text.out, ::testing::ContainsRegex("[0-9]+ files copied \\([0-9.]+ MB\\): no hard link can be made, "
                                                 "another mount of the same file system \\(a bind mount\\)"));
  const auto j = json::parse(cudafix("snapshot s2 --json", v).out, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_GT(j.value("files", 0), 0) << j;
  EXPECT_EQ(j.value("copied", 0), j.value("files", 0)) << j;
  EXPECT_EQ(j.value("linked", -1), 0) << j;
  EXPECT_EQ(j.value("copied_bytes", 0), j.value("bytes", 1)) << j;
  EXPECT_EQ(j.value("copied_because", ""), "another mount of the same file system (a bind mount)") << j;
}

// doctor is a read command, and recovering a killed change is the one write it makes: it says
// so on standard error in text and JSON modes, and its document lists what it did.
TEST_F(KillSweep, DoctorSaysWhenItRecoversAKilledChangeInTextAndJson) {
  for (const bool as_json : {false, true}) {
    TempDir t;
    const std::string v = t.path() + "/venv", err = t.path() + "/stderr";
    ASSERT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(v)).exit_code, 0);
    const std::string before = tree_of(v);
    ASSERT_EQ(cudafix("remove alpha gamma -y", v, "CUDAFIX_TEST_KILL_AT=6").exit_code, 137);
    ASSERT_NE(tree_of(v), before) << "the killed removal moved nothing";
    const auto r = run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " doctor" + (as_json ? " --json" : "") +
                             " --venv " + shell_quote(v) + test::k_no_cache + " 2>" + shell_quote(err));
    EXPECT_LT(r.exit_code, 2) << r.out;
    const std::string said = resolver::try_read_file(err).value_or("");
    EXPECT_THAT(said, HasSubstr("cudafix: recovering: transaction ")) << (as_json ? "--json" : "text");
    EXPECT_THAT(said, HasSubstr("(remove alpha gamma) was interrupted")) << said;
    EXPECT_TRUE(tree_of(v) == before) << tree_diff(before, tree_of(v));
    if (!as_json) continue;
    const auto doc = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << r.out;
    ASSERT_TRUE(doc.contains("recovered") && doc["recovered"].size() == 1) << doc.dump().substr(0, 400);
    EXPECT_THAT(doc["recovered"][0].get<std::string>(), HasSubstr("recovering: transaction ")) << doc["recovered"];
    // Nothing left to recover: the next doctor says nothing of it.
    const auto again = json::parse(cudafix("doctor --json 2>/dev/null", v).out, nullptr, false);
    ASSERT_FALSE(again.is_discarded());
    EXPECT_TRUE(again["recovered"].empty()) << again["recovered"];
  }
}

}  // namespace
}  // namespace cudafix

namespace cudafix {
namespace {

// Issue 36, item 9: pip takes no lock. A `cudafix remove` of the only dist listing a shared
// library plans to move it aside; pip installs another dist listing the same library in the
// middle (the removal stopped by SIGSTOP just after its intent is synced, pip run whole, then
// SIGCONT). The tree must keep the library the installed dist lists, or doctor must name it
// missing: never a lost library that nothing reports.
TEST_F(KillSweep, PipInstallingADistSharingALibraryDuringARemovalLeavesItOrDoctorNamesIt) {
  TempDir t;
  const std::string src = t.path() + "/src";
  test::write_file(src + "/libshared.so.1", "the shared library\n");
  test::write_file(src + "/y.py", "Y = 1\n");
  test::write_file(src + "/b.py", "B = 1\n");
  const std::string lib = "nvidia/shared/lib/libshared.so.1";
  const std::string ywhl =
      test::make_wheel(t.path(), "ycu 1.0 " + lib + "=" + src + "/libshared.so.1 ycu/y.py=" + src + "/y.py");
  const std::string bwhl =
      test::make_wheel(t.path(), "bcu 1.0 " + lib + "=" + src + "/libshared.so.1 bcu/b.py=" + src + "/b.py");
  const std::string v = t.path() + "/venv";
  ASSERT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(v)).exit_code, 0);
  const auto pip = [&](const std::string& args) {
    return run_shell("env -u VIRTUAL_ENV python3 -m pip --disable-pip-version-check -q --python " +
                     shell_quote(v + "/bin/python3") + " " + args + " 2>&1");
  };
  ASSERT_EQ(pip("install --no-index --no-deps " + shell_quote(ywhl)).exit_code, 0);
  const std::string removal_out = t.path() + "/removal.out";
  run_shell("(env -u VIRTUAL_ENV CUDAFIX_TEST_PAUSE_AT=2:3000 " + shell_quote(test::k_bin) + " remove ycu -y --venv " +
            shell_quote(v) + test::k_no_cache + " > " + shell_quote(removal_out) + " 2>&1 </dev/null; echo rc=$? >> " +
            shell_quote(removal_out) + ") >/dev/null 2>&1 &");
  // Stopped once its intent (every op it will make) is on disk, before its first rename; its
  // process id is its transaction id's second field.
  pid_t removal = 0;
  const auto intent_written = [&] {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(v + "/.cudafix/tx", ec)) {
      try {
        const auto j = installer::txn::read_journal(e.path().string() + "/journal");
        if (j.ops.empty()) continue;
        removal = static_cast<pid_t>(std::stol(j.id.substr(j.id.find('-') + 1)));
        return true;
      } catch (const std::exception&) {
      }
    }
    return false;
  };
  ASSERT_TRUE(wait_for(intent_written, 30)) << resolver::try_read_file(removal_out).value_or("");
  ASSERT_GT(removal, 0);
  ASSERT_EQ(::kill(removal, SIGSTOP), 0);
  struct Resume {
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{removal};
  const auto installed = pip("install --no-index --no-deps " + shell_quote(bwhl));
  EXPECT_EQ(installed.exit_code, 0) << installed.out;
  ASSERT_EQ(::kill(removal, SIGCONT), 0);
  const auto said = [&] { return resolver::try_read_file(removal_out).value_or(""); };
  ASSERT_TRUE(wait_for([&] { return said().find("rc=") != std::string::npos; }, 30)) << said();
  EXPECT_THAT(said(), HasSubstr("rc=0")) << said();
  const std::string shared = test::site_packages(v) + "/" + lib;
  if (fs::exists(fs::symlink_status(shared))) return;  // the library bcu lists is there
  const auto doctor = test::cudafix_json("doctor --venv " + shell_quote(v) + test::k_no_cache);
  bool named = false;
  for (const auto& f : doctor.doc.value("findings", json::array()))
    named = named || f.dump().find(lib) != std::string::npos;
  EXPECT_TRUE(named) << lib << " is gone though bcu lists it, and doctor does not say so: "
                     << doctor.doc.dump().substr(0, 2000);
  std::printf("pip during a removal: %s gone; doctor: %s\n", lib.c_str(),
              test::fires(doctor.doc, "missing-files").empty() ? "(no missing-files)" : "missing-files names it");
}

}  // namespace
}  // namespace cudafix
