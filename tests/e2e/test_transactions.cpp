// The write half on real venvs (python3 -m venv, wheels installed by real pip): `remove`,
// `history`, `rollback`, `snapshot`, each judged by the tree on disk (every file's SHA-256 and
// every symlink's target) and by pip itself; a kill -9 at every journal step, injected ENOSPC,
// EIO and EACCES, the environment's lock held as uv holds it, and hostile input, each leaving
// the before or the after state and nothing else.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "installer/txn/journal.hpp"
#include "resolver/base/text.hpp"
#include "tests/e2e/cudafix_run.hpp"

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;

using test::tree_diff;
using test::tree_of;

#define EXPECT_SAME_TREE(now, expected) EXPECT_TRUE((now) == (expected)) << tree_diff(expected, now)

class Transactions : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    const std::string src = tmp_->path() + "/src", w = tmp_->path() + "/wheels";
    fs::create_directories(src);
    fs::create_directories(w);
    test::write_file(src + "/a.so", "alpha library\n");
    test::write_file(src + "/b.py", "print('beta')\n");
    test::write_file(src + "/c.so", "beta library\n");
    test::write_file(src + "/common.py", "SHARED = 1\n");
    alpha_ = test::make_wheel(w, "alpha 1.0 alpha/lib/liba.so=" + src + "/a.so alpha/__init__.py=" + src + "/b.py");
    beta_ = test::make_wheel(w, "beta 2.0 beta/libb.so=" + src + "/c.so shared/common.py=" + src + "/common.py");
    gamma_ = test::make_wheel(
        w, "gamma 3.0 gamma/g.py=" + src + "/b.py shared/common.py=" + src + "/common.py --requires beta");
    test::write_file(src + "/d1.so", "delta library, as cudafix installed it\n");
    test::write_file(src + "/d2.so", "delta library, as another dist's wheel has it\n");
    delta_ = test::make_wheel(w, "delta 1.0 delta/lib.so=" + src + "/d1.so delta/__init__.py=" + src + "/b.py");
    epsilon_ = test::make_wheel(w, "epsilon 1.0 delta/lib.so=" + src + "/d2.so epsilon/e.py=" + src + "/b.py");
    // Two NVIDIA-like wheels: each ships its files below nvidia/, which neither lists.
    nva_ = test::make_wheel(w, "nvidia-a-cu12 1.0 nvidia/a/lib/liba.so.1=" + src + "/a.so");
    nvb_ = test::make_wheel(w, "nvidia-b-cu12 1.0 nvidia/b/lib/libb.so.1=" + src + "/c.so");
    base_ = tmp_->path() + "/base";
    ASSERT_NO_FATAL_FAILURE(test::make_venv(base_, {alpha_, beta_, gamma_}));
  }
  static void TearDownTestSuite() { delete tmp_; }

  static std::string copy(const TempDir& t) {
    const std::string v = t.path() + "/venv";
    EXPECT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(v)).exit_code, 0);
    return v;
  }
  // `cudafix ARGS --venv VENV`, text output and standard error together.
  static test::RunResult cudafix(const std::string& args, const std::string& venv, const std::string& env = "") {
    return run_shell("env -u VIRTUAL_ENV " + env + " " + shell_quote(test::k_bin) + " " + args + " --venv " +
                     shell_quote(venv) + test::k_no_cache + " 2>&1");
  }
  static std::set<std::string> pip_names(const std::string& venv) {
    std::set<std::string> out;
    for (const auto& d : json::parse(test::venv_pip(venv, "list --format json").out)) out.insert(d["name"]);
    return out;
  }

  static inline TempDir* tmp_ = nullptr;
  // The ids of history, newest first, and each one's result.
  static std::vector<std::pair<std::string, std::string>> history_of(const std::string& venv) {
    std::vector<std::pair<std::string, std::string>> out;
    const auto r = run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " history --json --venv " +
                             shell_quote(venv) + test::k_no_cache + " 2>/dev/null");
    const auto doc = json::parse(r.out);
    for (const auto& t : doc["transactions"]) out.emplace_back(t["id"], t["result"]);
    return out;
  }
  // What .cudafix/tx holds below each transaction's folder, beyond its journal: "ID/new", ...
  static std::set<std::string> state_left(const std::string& venv) {
    std::set<std::string> out;
    std::error_code ec;
    for (fs::directory_iterator it(venv + "/.cudafix/tx", ec), end; !ec && it != end; it.increment(ec))
      for (const auto& e : fs::directory_iterator(it->path()))
        if (e.path().filename() != "journal")
          out.insert(it->path().filename().string() + "/" + e.path().filename().string());
    return out;
  }

  // nvidia-a installed by cudafix (which makes nvidia/), then nvidia-b by pip into that folder;
  // the install's transaction id.
  static std::string a_by_cudafix_then_b_by_pip(const std::string& v) {
    const auto installed = cudafix("install " + shell_quote(nva_) + " -y --no-verify --json", v);
    const auto doc = json::parse(installed.out, nullptr, false);
    EXPECT_TRUE(doc.is_object() && doc.contains("transaction")) << installed.out;
    EXPECT_EQ(test::venv_pip(v, "install -q --no-index --no-deps " + shell_quote(nvb_)).exit_code, 0);
    return doc.is_object() && doc.contains("transaction") ? doc["transaction"].get<std::string>() : "";
  }
  static inline std::string alpha_, beta_, gamma_, delta_, epsilon_, nva_, nvb_, base_;
};

TEST_F(Transactions, SnapshotThenPipUninstallAndInstallThenRollbackGivesTheSnapshotsTreeHashForHash) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = tree_of(v);
  const auto snap = cudafix("snapshot before", v);
  ASSERT_EQ(snap.exit_code, 0) << snap.out;
  EXPECT_THAT(snap.out, HasSubstr("hardlinked"));
  ASSERT_EQ(test::venv_pip(v, "uninstall -y -q alpha beta").exit_code, 0);
  ASSERT_EQ(test::venv_pip(v, "install -q --no-index --no-deps --force-reinstall " + shell_quote(gamma_)).exit_code, 0);
  ASSERT_NE(tree_of(v), before);
  const auto back = cudafix("rollback --snapshot before -y", v);
  ASSERT_EQ(back.exit_code, 0) << back.out;
  EXPECT_SAME_TREE(tree_of(v), before);
  EXPECT_EQ(pip_names(v), pip_names(base_));
  EXPECT_EQ(test::venv_pip(v, "check").exit_code, 0);
  // The restore is a transaction too: rolling it back gives the state it replaced.
  ASSERT_EQ(test::venv_pip(v, "uninstall -y -q alpha").exit_code, 0);
  const std::string without_alpha = tree_of(v);
  ASSERT_EQ(cudafix("rollback --snapshot before -y", v).exit_code, 0);
  ASSERT_EQ(cudafix("rollback -y", v).exit_code, 0);
  EXPECT_SAME_TREE(tree_of(v), without_alpha);
  // Undoing that rollback (a redo) takes its id.
  const auto history = test::cudafix_json("history --venv " + shell_quote(v) + test::k_no_cache);
  const std::string undo = history.doc["transactions"][0]["id"];
  ASSERT_EQ(cudafix("rollback " + undo + " -y", v).exit_code, 0);
  EXPECT_SAME_TREE(tree_of(v), before);
  const auto list = cudafix("snapshot --list", v);
  EXPECT_THAT(list.out, HasSubstr("before"));
}

TEST_F(Transactions, ASnapshotFileWrittenInPlaceRefusesTheRestoreNamingItAndChangesNothing) {
  TempDir t;
  const std::string v = copy(t);
  ASSERT_EQ(cudafix("snapshot s1", v).exit_code, 0);
  const std::string lib = test::site_packages(v) + "/beta/libb.so";
  // Written in place (the same inode): the snapshot's hard link sees the new bytes too.
  run_shell("printf 'tampered' >> " + shell_quote(lib));
  ASSERT_EQ(test::venv_pip(v, "uninstall -y -q beta").exit_code, 0);
  const std::string after = tree_of(v);
  const auto back = cudafix("rollback --snapshot s1 -y", v);
  EXPECT_EQ(back.exit_code, 1) << back.out;
  EXPECT_THAT(back.out, HasSubstr("lib/python3"));
  EXPECT_THAT(back.out, HasSubstr("beta/libb.so"));
  EXPECT_THAT(back.out, HasSubstr("nothing was changed"));
  EXPECT_SAME_TREE(tree_of(v), after);
}

TEST_F(Transactions, RemoveIsOwnerCountedAndRollbackRestoresTheTreeByteForByte) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = tree_of(v);
  // gamma requires beta: refused, naming the requirement, nothing changed.
  const auto refused = cudafix("remove beta -y", v);
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("refused"));
  EXPECT_SAME_TREE(tree_of(v), before);
  // alpha shares nothing and nobody needs it.
  const auto removed = cudafix("remove alpha -y", v);
  ASSERT_EQ(removed.exit_code, 0) << removed.out;
  EXPECT_FALSE(pip_names(v).count("alpha"));
  EXPECT_FALSE(fs::exists(test::site_packages(v) + "/alpha"));
  // --force takes beta (typed as its dist-info folder), and owner counting keeps
  // shared/common.py, which gamma lists too.
  ASSERT_EQ(cudafix("remove beta-2.0.dist-info --force -y", v).exit_code, 0);
  EXPECT_TRUE(fs::exists(test::site_packages(v) + "/shared/common.py"));
  EXPECT_FALSE(fs::exists(test::site_packages(v) + "/beta/libb.so"));
  const auto history = test::cudafix_json("history --venv " + shell_quote(v) + test::k_no_cache);
  ASSERT_EQ(history.doc["transactions"].size(), 2u) << history.out;
  // history names it as pip list does, whatever spelling was typed.
  EXPECT_EQ(history.doc["transactions"][0]["command"], "remove beta");
  EXPECT_EQ(history.doc["transactions"][1]["result"], "committed");
  // Two rollbacks, newest first, give the first tree back.
  ASSERT_EQ(cudafix("rollback -y", v).exit_code, 0);
  ASSERT_EQ(cudafix("rollback -y", v).exit_code, 0);
  EXPECT_SAME_TREE(tree_of(v), before);
  EXPECT_EQ(test::venv_pip(v, "check").exit_code, 0);
  EXPECT_EQ(pip_names(v), pip_names(base_));
  // And pip can still uninstall what came back.
  EXPECT_EQ(test::venv_pip(v, "uninstall -y -q alpha").exit_code, 0);
}

// pip uninstall moves a folder whose every file goes as one, and then climbs no further: a
// parent only that move empties (`lone/` of `lone/sub/`, or a namespace package's folder) stays,
// empty, and Python imports it as an empty namespace package. cudafix removes it; a folder
// another dist still has files in stays. Twin venvs, one uninstalled by pip, one by cudafix.
TEST_F(Transactions, RemoveTakesTheFoldersItEmptiesWherePipLeavesThemEmptyAndImportable) {
  TempDir t;
  const std::string src = t.path() + "/src";
  for (const auto* f : {"lone/sub/a.py", "only/deep/y.py", "pkg/__init__.py", "pkg/inner/m.py", "both/mine/a.py",
                        "both/theirs/b.py", "mix/a.py", "mix/b.py"}) {
    fs::create_directories(fs::path(src + "/" + f).parent_path());
    test::write_file(src + "/" + f, std::string("NAME = '") + f + "'\n");
  }
  auto member = [&](const std::string& f) { return " " + f + "=" + src + "/" + f; };
  const std::string demo = test::make_wheel(t.path(), "demo 1.0" + member("lone/sub/a.py") + member("only/deep/y.py") +
                                                          member("pkg/__init__.py") + member("pkg/inner/m.py") +
                                                          member("both/mine/a.py") + member("mix/a.py"));
  const std::string other = test::make_wheel(t.path(), "other 1.0" + member("both/theirs/b.py") + member("mix/b.py"));
  const std::string by_pip = t.path() + "/pip", by_cudafix = t.path() + "/cudafix";
  ASSERT_NO_FATAL_FAILURE(test::make_venv(by_pip, {demo, other}));
  ASSERT_NO_FATAL_FAILURE(test::make_venv(by_cudafix, {demo, other}));
  const std::string before = tree_of(by_cudafix);

  ASSERT_EQ(test::venv_pip(by_pip, "uninstall -y -q demo").exit_code, 0);
  const auto removed = cudafix("remove demo -y", by_cudafix);
  ASSERT_EQ(removed.exit_code, 0) << removed.out;

  // The trees agree but for the two folders pip leaves behind, empty.
  const std::string site = "./" + fs::relative(test::site_packages(by_pip), by_pip).string();
  std::set<std::string> pip_lines, cudafix_lines, only_pip, only_cudafix;
  for (const auto& [tree, lines] : {std::pair{tree_of(by_pip), &pip_lines}, {tree_of(by_cudafix), &cudafix_lines}}) {
    std::istringstream in(tree);
    for (std::string line; std::getline(in, line);) lines->insert(line);
  }
  std::set_difference(pip_lines.begin(), pip_lines.end(), cudafix_lines.begin(), cudafix_lines.end(),
                      std::inserter(only_pip, only_pip.end()));
  std::set_difference(cudafix_lines.begin(), cudafix_lines.end(), pip_lines.begin(), pip_lines.end(),
                      std::inserter(only_cudafix, only_cudafix.end()));
  EXPECT_EQ(only_pip, (std::set<std::string>{site + "/lone", site + "/only"}));
  EXPECT_TRUE(only_cudafix.empty()) << ::testing::PrintToString(only_cudafix);
  // What pip leaves imports as an empty namespace package; after cudafix there is nothing to import.
  const auto imports = [](const std::string& venv, const std::string& module) {
    return run_shell("env -u VIRTUAL_ENV " + shell_quote(venv + "/bin/python3") + " -c 'import " + module + "' 2>&1")
        .exit_code;
  };
  EXPECT_EQ(imports(by_pip, "lone"), 0);
  EXPECT_NE(imports(by_cudafix, "lone"), 0);
  EXPECT_NE(imports(by_cudafix, "only"), 0);
  // Folders the other dist has files in stay, with its files.
  EXPECT_TRUE(fs::exists(test::site_packages(by_cudafix) + "/both/theirs/b.py"));
  EXPECT_TRUE(fs::exists(test::site_packages(by_cudafix) + "/mix/b.py"));
  EXPECT_EQ(imports(by_cudafix, "both.theirs.b, mix.b"), 0);
  EXPECT_EQ(test::venv_pip(by_cudafix, "check").exit_code, 0);
  EXPECT_EQ(pip_names(by_cudafix), pip_names(by_pip));
  // A rollback gives the folders back with the rest.
  ASSERT_EQ(cudafix("rollback -y", by_cudafix).exit_code, 0);
  EXPECT_SAME_TREE(tree_of(by_cudafix), before);
}

TEST_F(Transactions, AKillAtEveryJournalStepLeavesTheBeforeOrTheAfterStateOnceRecovered) {
  TempDir ref;
  const std::string done = copy(ref);
  ASSERT_EQ(cudafix("remove alpha -y", done).exit_code, 0);
  const std::string after = tree_of(done);
  const std::string before = tree_of(base_);
  int befores = 0, afters = 0;
  for (int step = 1; step < 40; ++step) {
    TempDir t;
    const std::string v = copy(t);
    const auto killed = cudafix("remove alpha -y", v, "CUDAFIX_TEST_KILL_AT=" + std::to_string(step));
    if (killed.exit_code == 0) break;  // past the last step: the run finished
    EXPECT_EQ(killed.exit_code, 137) << "step " << step << ": " << killed.out;
    // Any command recovers first.
    const auto next = cudafix("history", v);
    EXPECT_EQ(next.exit_code, 0) << next.out;
    const std::string now = tree_of(v);
    EXPECT_TRUE(now == before || now == after) << "step " << step << " left a state between:\n" << next.out;
    befores += now == before;
    afters += now == after;
    if (now == before) {
      EXPECT_TRUE(pip_names(v).count("alpha")) << step;
    }
  }
  EXPECT_GT(befores, 3);
  EXPECT_GE(afters, 1) << "a kill after the commit record keeps the removal";
}

// A disk error at the first, a middle and the last of each kind of call a removal of two dists
// makes while it changes the venv (their four folders renamed aside whole, the folders synced,
// the commit record written and synced), found by tracing a run without faults: every change
// undone hash for hash, the call and the error named, and the next run works.
TEST_F(Transactions, InjectedDiskErrorsMidChangeUndoEveryChangeAndSayWhatFailed) {
  const std::string before = tree_of(base_);
  TempDir ref;
  const std::string traced = copy(ref), trace = ref.path() + "/trace";
  ASSERT_EQ(cudafix("remove alpha gamma -y", traced, "CUDAFIX_TEST_FAULT_TRACE=" + trace).exit_code, 0);
  const std::string after = tree_of(traced);
  const auto during = test::calls_during_the_change(resolver::try_read_file(trace).value_or(""));
  const auto points = test::first_middle_and_last(during, {"rename", "rmdir", "fsync", "write"});
  auto kinds = test::count_by_call(points);
  EXPECT_EQ(kinds["rename"], 3) << "four folders renamed aside, one by one";
  EXPECT_GE(kinds["fsync"], 2);
  EXPECT_GE(kinds["write"], 1) << "the commit record";
  for (const auto& [p, fault, says] : test::aim_disk_errors(points)) {
    TempDir t;
    const std::string v = copy(t);
    const auto r = cudafix("remove alpha gamma -y", v, "CUDAFIX_TEST_FAULT=" + fault);
    EXPECT_EQ(r.exit_code, 2) << fault << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr(says)) << fault;
    EXPECT_THAT(r.out, HasSubstr("every change was undone")) << fault;
    // The message names the call and, where it is the venv's own, the file.
    const auto in_venv = p.path.find("/venv/");
    if (p.path.find("/.cudafix/") == std::string::npos && in_venv != std::string::npos) {
      EXPECT_THAT(r.out, HasSubstr(p.call + " " + v + p.path.substr(in_venv + 5))) << fault;
    }
    EXPECT_SAME_TREE(tree_of(v), before) << fault << ": " << r.out;
    EXPECT_TRUE(pip_names(v).count("alpha") && pip_names(v).count("gamma")) << fault;
    const auto again = cudafix("remove alpha gamma -y", v);
    EXPECT_EQ(again.exit_code, 0) << fault << ": " << again.out;
    EXPECT_SAME_TREE(tree_of(v), after) << fault;
  }
}

TEST_F(Transactions, TheLockUvTakesMakesCudafixWaitThenGiveUpChangingNothing) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = tree_of(v);
  // Held as uv holds it: flock on <venv>/.lock, by another process, for longer than we wait.
  const std::string holder = test::k_python + " -c " +
                             shell_quote(
                                 "import fcntl,sys,time; f=open(sys.argv[1],'a'); fcntl.flock(f, fcntl.LOCK_EX); "
                                 "print('held', flush=True); time.sleep(6)") +
                             " " + shell_quote(v + "/.lock");
  // cudafix starts once the holder says it holds the lock, not after a guess at how long that takes.
  const std::string held = shell_quote(t.path() + "/held");
  const auto r = run_shell("(" + holder + " > " + held + " &) ; until grep -q held " + held +
                           " 2>/dev/null; do sleep 0.01; done; env -u VIRTUAL_ENV " + shell_quote(test::k_bin) +
                           " remove alpha -y --lock-timeout 1 --venv " + shell_quote(v) + test::k_no_cache + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("waiting for " + v + "/.lock"));
  EXPECT_THAT(r.out, HasSubstr("nothing was changed"));
  EXPECT_SAME_TREE(tree_of(v), before);
}

TEST_F(Transactions, ARemovalNeverTouchesAFileOutsideTheEnvironment) {
  TempDir t;
  const std::string v = copy(t);
  // A folder inside site-packages that is a symlink to one outside, and a RECORD naming a file
  // through it, and one climbing out.
  const std::string outside = t.path() + "/outside";
  fs::create_directories(outside);
  test::write_file(outside + "/precious.txt", "keep me\n");
  const std::string site = test::site_packages(v);
  fs::create_symlink(outside, site + "/evil");
  const std::string record = site + "/alpha-1.0.dist-info/RECORD";
  const auto text = resolver::try_read_file(record);
  ASSERT_TRUE(text);
  test::write_file(record, *text + "evil/precious.txt,,\n../../../../outside/precious.txt,,\n");
  const auto r = cudafix("remove alpha -y --force", v);
  EXPECT_TRUE(fs::exists(outside + "/precious.txt")) << r.out;
  EXPECT_EQ(resolver::try_read_file(outside + "/precious.txt").value_or(""), "keep me\n");
}

// A journal planted in the venv (a wheel's .data/data/ can write .cudafix/) with an op of a kind
// this cudafix does not know: a read-only command must not take it for a rename and undo it.
// Before the reader refused such records, `history` "undid" this one by moving the venv's file
// out to the path the op named.
TEST_F(Transactions, APlantedJournalWithAnOpOfAnUnknownKindIsRefusedAndNothingMoves) {
  TempDir t;
  const std::string v = copy(t);
  const std::string outside = t.path() + "/outside", victim = test::site_packages(v) + "/alpha/__init__.py";
  fs::create_directories(outside);
  const std::string id = "20261203T111500.000-1-0", tx = v + "/.cudafix/tx/" + id;
  fs::create_directories(tx);
  const json records[] = {{{"record", "begin"}, {"id", id}, {"time", 1}, {"command", "remove x"}, {"root", v}},
                          {{"record", "op"}, {"n", 0}, {"op", "swap"}, {"from", outside + "/planted"}, {"to", victim}},
                          {{"record", "intent_end"}, {"ops", 1}}};
  std::string journal;
  for (const auto& r : records) journal += installer::txn::journal_line(r.dump());
  test::write_file(tx + "/journal", journal);
  test::write_file(v + "/.cudafix/active", id + "\n");
  const std::string before = tree_of(v);
  const auto r = cudafix("history", v);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("line 2: an op of a kind this cudafix does not know ('swap')"));
  EXPECT_FALSE(fs::exists(outside + "/planted")) << r.out;
  EXPECT_SAME_TREE(tree_of(v), before);
}

// Two cudafix on one environment: the second waits for the first's lock, says so, then plans
// from what the first left (it scans under the lock), so both removals land and both undo.
TEST_F(Transactions, TwoCudafixRunsAtOnceTakeTurnsAndBothLand) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = tree_of(v);
  const std::string run = "env -u VIRTUAL_ENV " + shell_quote(test::k_bin);
  const std::string first_out = shell_quote(t.path() + "/first.out");
  // The first sleeps 2 s at its second journal step, the lock held; the second starts as soon as
  // the first's transaction exists (its .cudafix/active, written under the lock), not after a guess.
  const std::string active = shell_quote(v + "/.cudafix/active");
  const auto second = run_shell(
      "(CUDAFIX_TEST_PAUSE_AT=2:2000 " + run + " remove alpha -y --venv " + shell_quote(v) + test::k_no_cache + " > " +
      first_out + " 2>&1; echo rc=$? >> " + first_out + ") & until [ -e " + active + " ]; do sleep 0.01; done; " + run +
      " remove gamma -y --venv " + shell_quote(v) + test::k_no_cache + " 2>&1; echo rc=$?; wait");
  const std::string first = resolver::try_read_file(t.path() + "/first.out").value_or("");
  EXPECT_THAT(first, HasSubstr("removed alpha 1.0")) << first;
  EXPECT_THAT(first, HasSubstr("rc=0")) << first;
  EXPECT_THAT(second.out, HasSubstr("waiting for " + v + "/.lock")) << second.out;
  EXPECT_THAT(second.out, HasSubstr("removed gamma 3.0")) << second.out;
  EXPECT_THAT(second.out, HasSubstr("rc=0")) << second.out;
  const auto names = pip_names(v);
  EXPECT_FALSE(names.count("alpha"));
  EXPECT_FALSE(names.count("gamma"));
  EXPECT_TRUE(names.count("beta"));
  EXPECT_TRUE(fs::exists(test::site_packages(v) + "/shared/common.py")) << "beta still lists it";
  const auto history = json::parse(cudafix("history --json", v).out);
  ASSERT_EQ(history["transactions"].size(), 2U);
  for (const auto& tx : history["transactions"]) EXPECT_EQ(tx["result"], "committed") << tx;
  EXPECT_EQ(cudafix("rollback -y", v).exit_code, 0);
  EXPECT_EQ(cudafix("rollback -y", v).exit_code, 0);
  EXPECT_SAME_TREE(tree_of(v), before);
}

// [transactions] keep bounds the backups kept: the older ones go, history stops listing them,
// and rolling one of them back is refused by name.
TEST_F(Transactions, TheKeepSettingRemovesOlderBackupsAndHistorySaysWhatIsHeld) {
  TempDir t;
  const std::string v = copy(t);
  test::write_file(v + "/cudafix.toml", "[transactions]\nkeep = 1\n");
  const auto first = json::parse(cudafix("remove alpha -y --json", v).out);
  EXPECT_TRUE(first["pruned"].empty()) << first;
  const auto second = cudafix("remove gamma -y", v);
  EXPECT_EQ(second.exit_code, 0) << second.out;
  EXPECT_THAT(second.out, HasSubstr("removed the backups of 1 older transaction"));
  EXPECT_THAT(second.out, HasSubstr("[transactions] keep = 1"));
  const auto history = json::parse(cudafix("history --json", v).out);
  ASSERT_EQ(history["transactions"].size(), 1U) << history;
  EXPECT_GT(history["backup_bytes"].get<std::uint64_t>(), 0U);
  EXPECT_THAT(history["transactions"][0]["command"].get<std::string>(), HasSubstr("gamma"));
  const auto gone = cudafix("rollback " + first["transaction"].get<std::string>() + " -y", v);
  EXPECT_EQ(gone.exit_code, 2) << gone.out;
  EXPECT_THAT(gone.out, HasSubstr("transaction " + first["transaction"].get<std::string>() + " was pruned"));
  EXPECT_THAT(gone.out, HasSubstr("[transactions] keep"));
  // A setting that is not a count is refused, naming the file and line.
  test::write_file(v + "/cudafix.toml", "[transactions]\nkeep = -3\n");
  const auto bad = cudafix("history", v);
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr(v + "/cudafix.toml:2"));
  EXPECT_THAT(bad.out, HasSubstr("keep must be a whole number"));
}

// pip writes over a file cudafix installed: rolling cudafix's install back would put that file
// aside silently. It is refused by path and by who wrote it, changing nothing; --force rolls back
// the rest and leaves that file where it is, since another installed dist (epsilon) lists it, and
// undoing the rollback gives the tree back.
TEST_F(Transactions, RollbackRefusesByPathWhatPipWroteSinceAndForceLeavesAnotherDistsFileWhereItIs) {
  TempDir t;
  const std::string v = copy(t);
  const auto installed = json::parse(cudafix("install " + shell_quote(delta_) + " -y --no-verify --json", v).out);
  const std::string id = installed["transaction"];
  ASSERT_EQ(test::venv_pip(v, "install -q --no-deps " + shell_quote(epsilon_)).exit_code, 0);
  const std::string with_pip = tree_of(v);
  const auto refused = cudafix("rollback -y", v);
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("delta/lib.so was changed after transaction " + id + " (by pip, INSTALLER says)"));
  EXPECT_THAT(refused.out, HasSubstr("nothing was changed"));
  EXPECT_SAME_TREE(tree_of(v), with_pip);
  // Files cudafix left that nobody touched are not named.
  EXPECT_THAT(refused.out, ::testing::Not(HasSubstr("delta/__init__.py")));
  const auto as_json = json::parse(cudafix("rollback -y --json", v).out);
  ASSERT_EQ(as_json["changed"].size(), 1U) << as_json;
  EXPECT_THAT(as_json["changed"][0]["path"].get<std::string>(), ::testing::EndsWith("/delta/lib.so"));
  // A file no dist lists, added to a folder cudafix made, is a change too.
  test::write_file(test::site_packages(v) + "/delta/plugin.py", "P = 1\n");
  const auto added = cudafix("rollback -y", v);
  EXPECT_EQ(added.exit_code, 1) << added.out;
  EXPECT_THAT(added.out, HasSubstr("delta/plugin.py was created after transaction " + id));
  fs::remove(test::site_packages(v) + "/delta/plugin.py");

  const auto forced = json::parse(cudafix("rollback -y --force --json", v).out);
  EXPECT_EQ(forced["taken_aside"], 0) << forced;
  EXPECT_FALSE(fs::exists(test::site_packages(v) + "/delta/__init__.py"));
  EXPECT_EQ(resolver::try_read_file(test::site_packages(v) + "/delta/lib.so").value_or(""),
            "delta library, as another dist's wheel has it\n")
      << "epsilon's file stays";
  EXPECT_FALSE(pip_names(v).count("delta"));
  EXPECT_TRUE(pip_names(v).count("epsilon"));
  const auto redo = cudafix("rollback " + forced["transaction"].get<std::string>() + " -y", v);
  EXPECT_EQ(redo.exit_code, 0) << redo.out;
  EXPECT_SAME_TREE(tree_of(v), with_pip);
}

// pip reinstalls the same bytes over what cudafix installed (new inodes, same content), and
// Python compiles the package's bytecode into the folder cudafix made: nothing was changed, so
// the rollback goes ahead, and takes the bytecode with the folder, as pip's uninstall does.
TEST_F(Transactions, RollbackTakesTheSameBytesRewrittenAsUnchanged) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = tree_of(v);
  ASSERT_EQ(cudafix("install " + shell_quote(delta_) + " -y --no-verify", v).exit_code, 0);
  for (const auto& f : {"/delta/lib.so", "/delta/__init__.py"}) {
    const std::string p = test::site_packages(v) + f;
    const std::string bytes = resolver::try_read_file(p).value_or("");
    fs::remove(p);
    test::write_file(p, bytes);
  }
  ASSERT_EQ(run_shell("cd / && " + shell_quote(v + "/bin/python") + " -m compileall -q " +
                      shell_quote(test::site_packages(v) + "/delta"))
                .exit_code,
            0);
  ASSERT_TRUE(fs::exists(test::site_packages(v) + "/delta/__pycache__"));
  const auto r = cudafix("rollback -y", v);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_SAME_TREE(tree_of(v), before);
  EXPECT_FALSE(fs::exists(test::site_packages(v) + "/delta")) << "the folder cudafix made goes, its bytecode with it";
}

// cudafix installs one NVIDIA wheel, making nvidia/, and pip installs another into it. The later
// dist's files in the folder cudafix made are no change: the rollback takes cudafix's files and
// leaves the folder with them. Before, it was refused, and --force moved nvidia-b's files away
// while pip still listed it.
TEST_F(Transactions, RollbackOfAnInstallThatMadeASharedFolderLeavesTheLaterDistsFilesThere) {
  TempDir t;
  const std::string v = copy(t);
  const std::string sp = test::site_packages(v);
  const std::string id = a_by_cudafix_then_b_by_pip(v);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(fs::exists(sp + "/nvidia/a/lib/liba.so.1"));
  const std::string with_b = tree_of(v);
  const auto r = cudafix("rollback " + id + " -y --json", v);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(fs::exists(sp + "/nvidia/a"));
  EXPECT_TRUE(fs::exists(sp + "/nvidia/b/lib/libb.so.1"));
  EXPECT_FALSE(pip_names(v).count("nvidia-a-cu12"));
  EXPECT_TRUE(pip_names(v).count("nvidia-b-cu12"));
  const auto doctor = test::cudafix_json("doctor --venv " + shell_quote(v) + test::k_no_cache);
  EXPECT_TRUE(test::of_rule(doctor.doc, "missing-files").empty()) << doctor.doc["findings"].dump().substr(0, 1000);
  // Undoing the rollback gives the tree it replaced.
  const auto redo = cudafix("rollback " + json::parse(r.out)["transaction"].get<std::string>() + " -y", v);
  EXPECT_EQ(redo.exit_code, 0) << redo.out;
  EXPECT_SAME_TREE(tree_of(v), with_b);
}

// A file no dist lists in the folder cudafix made is still a change, named alone; --force takes
// it aside and never nvidia-b's files.
TEST_F(Transactions, ForceTakesAsideAStrayFileInASharedFolderButNeverAnotherDistsFiles) {
  TempDir t;
  const std::string v = copy(t);
  const std::string sp = test::site_packages(v);
  const std::string id = a_by_cudafix_then_b_by_pip(v);
  ASSERT_FALSE(id.empty());
  test::write_file(sp + "/nvidia/stray.txt", "no dist lists this\n");
  const auto refused = cudafix("rollback " + id + " -y", v);
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("nvidia/stray.txt was created after transaction " + id));
  EXPECT_THAT(refused.out, ::testing::Not(HasSubstr("nvidia/b")));
  const auto forced = cudafix("rollback " + id + " -y --force --json", v);
  ASSERT_EQ(forced.exit_code, 0) << forced.out;
  EXPECT_EQ(json::parse(forced.out)["taken_aside"], 1);
  EXPECT_FALSE(fs::exists(sp + "/nvidia/stray.txt"));
  EXPECT_FALSE(fs::exists(sp + "/nvidia/a"));
  EXPECT_TRUE(fs::exists(sp + "/nvidia/b/lib/libb.so.1"));
  EXPECT_TRUE(pip_names(v).count("nvidia-b-cu12"));
  const auto doctor = test::cudafix_json("doctor --venv " + shell_quote(v) + test::k_no_cache);
  EXPECT_TRUE(test::of_rule(doctor.doc, "missing-files").empty()) << doctor.doc["findings"].dump().substr(0, 1000);
}

// pip --force-reinstall of the very wheel cudafix installed writes the same bytes (new inodes),
// and its own bookkeeping in the dist-info (INSTALLER saying pip, its RECORD, REQUESTED,
// direct_url.json): no change, so the rollback goes ahead and gives the tree before the install.
TEST_F(Transactions, RollbackGoesAheadAfterPipForceReinstallsTheSameWheel) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = tree_of(v);
  ASSERT_EQ(cudafix("install " + shell_quote(delta_) + " -y --no-verify", v).exit_code, 0);
  const auto pip = test::venv_pip(v, "install -q --no-index --no-deps --force-reinstall " + shell_quote(delta_));
  ASSERT_EQ(pip.exit_code, 0) << pip.out;
  const auto r = cudafix("rollback -y", v);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_SAME_TREE(tree_of(v), before);
  EXPECT_FALSE(pip_names(v).count("delta"));
}

// A folder cudafix made, replaced by a symlink (here to a folder outside the venv): the rollback
// names it and what happened to it, and refuses (exit 1), as for any change; --force does not
// follow it nor move it. Before, the journal was taken as untrusted and skipped: "nothing to roll
// back", exit 2.
TEST_F(Transactions, AFolderATransactionMadeReplacedByASymlinkIsNamedAndRefusesTheRollback) {
  TempDir t;
  const std::string v = copy(t);
  const std::string sp = test::site_packages(v);
  const std::string id =
      json::parse(cudafix("install " + shell_quote(delta_) + " -y --no-verify --json", v).out)["transaction"];
  const std::string outside = t.path() + "/outside";
  fs::create_directories(outside);
  test::write_file(outside + "/lib.so", "not cudafix's\n");
  fs::remove_all(sp + "/delta");
  fs::create_directory_symlink(outside, sp + "/delta");
  const std::string linked = tree_of(v), outside_tree = tree_of(outside);
  const auto r = cudafix("rollback -y", v);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("  delta was replaced by a symlink after transaction " + id));
  EXPECT_THAT(r.out, HasSubstr("nothing was changed"));
  const auto forced = cudafix("rollback " + id + " -y --force", v);
  EXPECT_EQ(forced.exit_code, 2) << forced.out;
  EXPECT_THAT(forced.out, HasSubstr("is not a folder now"));
  EXPECT_SAME_TREE(tree_of(v), linked);
  EXPECT_EQ(tree_of(outside), outside_tree);
}

// keep = 2: roll back the oldest, so that pruning removes its folder, then undo that rollback,
// and again: each works from its own folder's backups, and the pruned one is named as pruned.
TEST_F(Transactions, PruningNeverRemovesWhatAKeptTransactionOrARollbackOfOneNeeds) {
  TempDir t;
  const std::string v = copy(t);
  test::write_file(v + "/cudafix.toml", "[transactions]\nkeep = 2\n");
  const std::string a = json::parse(cudafix("remove alpha -y --json", v).out)["transaction"];
  const std::string b = json::parse(cudafix("remove gamma -y --json", v).out)["transaction"];
  const std::string both_removed = tree_of(v);
  const auto undo_a = json::parse(cudafix("rollback " + a + " -y --json", v).out);
  ASSERT_EQ(undo_a["rolled_back"], a) << undo_a;
  EXPECT_EQ(undo_a["pruned"], json::array({a})) << "the third committed transaction prunes the oldest";
  const std::string only_b = tree_of(v);
  EXPECT_TRUE(fs::exists(test::site_packages(v) + "/alpha/lib/liba.so"));
  const std::string r1 = undo_a["transaction"];
  const auto redo = cudafix("rollback " + r1 + " -y --json", v);
  ASSERT_EQ(redo.exit_code, 0) << redo.out;
  EXPECT_SAME_TREE(tree_of(v), both_removed);
  const std::string r2 = json::parse(redo.out)["transaction"];
  const auto again = cudafix("rollback " + r2 + " -y", v);
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_SAME_TREE(tree_of(v), only_b);
  const auto pruned = cudafix("rollback " + a + " -y", v);
  EXPECT_EQ(pruned.exit_code, 2) << pruned.out;
  EXPECT_THAT(pruned.out, HasSubstr("transaction " + a + " was pruned"));
  // Every folder left is a transaction's, with its journal; nothing pruned is listed.
  for (const auto& e : fs::directory_iterator(v + "/.cudafix/tx"))
    EXPECT_TRUE(fs::exists(e.path() / "journal")) << e.path();
  for (const auto& [id, result] : history_of(v)) EXPECT_NE(id, a);
  (void)b;
}

// Staging goes when a transaction ends, however it ends; only committed ones keep old/; undone
// ones hold nothing and do not count toward keep.
TEST_F(Transactions, StagingIsRemovedHoweverATransactionEndsAndUndoneOnesDoNotCountTowardKeep) {
  TempDir t;
  const std::string v = copy(t);
  test::write_file(v + "/cudafix.toml", "[transactions]\nkeep = 2\n");
  const std::string install = "install " + shell_quote(delta_) + " -y --no-verify";
  const auto failed = cudafix(install, v, "CUDAFIX_TEST_FAULT=rename:3:EIO");
  EXPECT_EQ(failed.exit_code, 2) << failed.out;
  EXPECT_THAT(failed.out, HasSubstr("every change was undone"));
  EXPECT_EQ(cudafix(install, v, "CUDAFIX_TEST_KILL_AT=5").exit_code, 137);
  const auto recovered = cudafix("history", v);
  EXPECT_THAT(recovered.out, HasSubstr("recovering: transaction"));
  EXPECT_EQ(state_left(v), std::set<std::string>{}) << "an undone or recovered transaction keeps no new/ or old/";
  const std::string a = json::parse(cudafix("remove alpha -y --json", v).out)["transaction"];
  const std::string b = json::parse(cudafix("remove gamma -y --json", v).out)["transaction"];
  EXPECT_EQ(state_left(v), (std::set<std::string>{a + "/old", b + "/old"}));
  const auto history = json::parse(cudafix("history --json", v).out);
  ASSERT_EQ(history["transactions"].size(), 4U) << history;
  std::uint64_t undone_bytes = 0, committed = 0;
  for (const auto& tx : history["transactions"]) {
    if (tx["result"] == "committed")
      ++committed;
    else
      undone_bytes += tx["backup_bytes"].get<std::uint64_t>();
  }
  EXPECT_EQ(committed, 2U);
  EXPECT_EQ(undone_bytes, 0U);
  EXPECT_EQ(cudafix("rollback " + a + " -y", v).exit_code, 0) << "both committed keep their backups";
}

// A kill at every step of a rollback: the tree is the rolled-back or the committed state, and
// history says which, so the next `rollback -y` undoes what is in effect (before, a kill
// between the rollback's commit and its mark left the tree rolled back and history saying
// "committed", and the next rollback picked the same transaction and failed).
TEST_F(Transactions, AKillAtEveryStepOfARollbackLeavesHistoryAgreeingWithTheTree) {
  TempDir ref;
  const std::string removed = copy(ref);
  const std::string before = tree_of(removed);
  ASSERT_EQ(cudafix("remove alpha -y", removed).exit_code, 0);
  const std::string after = tree_of(removed);
  int rolled = 0, kept = 0;
  for (int step = 1; step < 60; ++step) {
    TempDir t;
    const std::string v = copy(t);  // the journal names its venv's root: each copy makes its own
    const auto remove = cudafix("remove alpha -y --json", v);
    ASSERT_EQ(remove.exit_code, 0) << step << ": " << remove.out;
    const std::string id = json::parse(remove.out)["transaction"];
    const auto killed = cudafix("rollback -y", v, "CUDAFIX_TEST_KILL_AT=" + std::to_string(step));
    if (killed.exit_code == 0) break;
    ASSERT_EQ(killed.exit_code, 137) << step << ": " << killed.out;
    const auto history = history_of(v);
    const std::string now = tree_of(v);
    ASSERT_TRUE(now == before || now == after) << "step " << step;
    std::string result;
    for (const auto& [tid, res] : history) {
      EXPECT_NE(res, "in progress") << step;
      if (tid == id) result = res;
    }
    if (now == before) {
      ++rolled;
      EXPECT_THAT(result, HasSubstr("rolled back by")) << step;
      EXPECT_NE(cudafix("rollback -y", v).exit_code, 0) << step << ": nothing is left to roll back";
    } else {
      ++kept;
      EXPECT_EQ(result, "committed") << step;
      const auto again = cudafix("rollback -y", v);
      EXPECT_EQ(again.exit_code, 0) << step << ": " << again.out;
      EXPECT_SAME_TREE(tree_of(v), before);
    }
  }
  EXPECT_GE(rolled, 1);
  EXPECT_GE(kept, 3);
}

// A prune killed by a version that removed the folder before recording its id (remove_tree
// takes the journal as readdir gives it, the backups after): old/ is left without a journal,
// which history did not list nor count, nothing removed, and `rollback ID` said "no transaction".
// history counts and names it; the next command that takes the lock removes it, says so, and
// remembers the id as pruned.
TEST_F(Transactions, BackupsAKilledPruneLeftWithoutTheirJournalAreNamedThenRemovedAndTheIdIsPruned) {
  TempDir t;
  const std::string v = copy(t);
  const std::string a = json::parse(cudafix("remove alpha -y --json", v).out)["transaction"];
  const std::string dir = v + "/.cudafix/tx/" + a;
  ASSERT_TRUE(fs::exists(dir + "/old"));
  fs::remove(dir + "/journal");
  const auto history = json::parse(cudafix("history --json", v).out);
  EXPECT_TRUE(history["transactions"].empty()) << history;
  EXPECT_GT(history["backup_bytes"].get<std::uint64_t>(), 0U) << "what is on disk is counted: " << history;
  EXPECT_THAT(cudafix("history", v).out, HasSubstr(a));
  const auto gone = cudafix("rollback " + a + " -y", v);
  EXPECT_EQ(gone.exit_code, 2) << gone.out;
  EXPECT_THAT(gone.out, HasSubstr("recovering: removed the backups of transaction " + a));
  EXPECT_THAT(gone.out, HasSubstr("transaction " + a + " was pruned"));
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_EQ(json::parse(cudafix("history --json", v).out)["backup_bytes"], 0U);
}

// A snapshot killed while it links its files leaves `.NAME.partial`, which nothing lists or
// restores: the next command that takes the lock removes it, and says so.
TEST_F(Transactions, AHalfTakenSnapshotIsRemovedByTheNextCommandThatTakesTheLock) {
  TempDir t;
  const std::string v = copy(t);
  ASSERT_EQ(cudafix("snapshot whole", v).exit_code, 0);
  const std::string snapshots = v + "/.cudafix/snapshots";
  ASSERT_EQ(run_shell("cp -al " + shell_quote(snapshots + "/whole") + " " + shell_quote(snapshots + "/.half.partial"))
                .exit_code,
            0);
  const auto next = cudafix("snapshot other", v);
  EXPECT_EQ(next.exit_code, 0) << next.out;
  EXPECT_THAT(next.out, HasSubstr("recovering: removed snapshot 'half', which a killed run left half taken"));
  EXPECT_FALSE(fs::exists(snapshots + "/.half.partial"));
  EXPECT_TRUE(fs::exists(snapshots + "/whole/manifest.json"));
  EXPECT_TRUE(fs::exists(snapshots + "/other/manifest.json"));
}

// Two installs, the newer rolled back, that rollback undone (a redo): the redo is the change in
// effect, so the next plain rollback undoes it, not the older install. Before, it skipped the
// redo and refused the older install over the files cudafix itself had put back.
TEST_F(Transactions, AfterARedoAPlainRollbackUndoesTheRedo) {
  TempDir t;
  const std::string v = copy(t);
  ASSERT_EQ(cudafix("install " + shell_quote(delta_) + " -y --no-verify", v).exit_code, 0);
  const std::string with_delta = tree_of(v);
  ASSERT_EQ(cudafix("remove alpha -y", v).exit_code, 0);
  const std::string both = tree_of(v);
  const auto undo = json::parse(cudafix("rollback -y --json", v).out);
  ASSERT_EQ(cudafix("rollback " + undo["transaction"].get<std::string>() + " -y", v).exit_code, 0);
  EXPECT_SAME_TREE(tree_of(v), both);
  const auto again = cudafix("rollback -y", v);
  EXPECT_EQ(again.exit_code, 0) << again.out;
  EXPECT_SAME_TREE(tree_of(v), with_delta);
  const auto walk = cudafix("rollback -y", v);
  EXPECT_EQ(walk.exit_code, 0) << walk.out;
  EXPECT_FALSE(pip_names(v).count("delta")) << "then the older install, walking back";
}

// A RECORD cudafix wrote, edited in place to the same size with its mtime put back (touch -r):
// its recorded bytes tell, and the rollback is refused.
TEST_F(Transactions, AnInPlaceEditThatKeepsSizeAndMtimeIsStillAChange) {
  TempDir t;
  const std::string v = copy(t);
  ASSERT_EQ(cudafix("install " + shell_quote(delta_) + " -y --no-verify", v).exit_code, 0);
  const std::string record = test::site_packages(v) + "/delta-1.0.dist-info/RECORD";
  ASSERT_EQ(run_shell("cp -p " + shell_quote(record) + " " + shell_quote(t.path() + "/stamp")).exit_code, 0);
  std::string text = resolver::try_read_file(record).value_or("");
  ASSERT_FALSE(text.empty());
  text[0] = text[0] == 'x' ? 'y' : 'x';
  ASSERT_EQ(run_shell("printf %s " + shell_quote(text) + " 1<> " + shell_quote(record) + " && touch -r " +
                      shell_quote(t.path() + "/stamp") + " " + shell_quote(record))
                .exit_code,
            0);
  const auto r = cudafix("rollback -y", v);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("delta-1.0.dist-info/RECORD was changed after transaction"));
}

// `ARGS --venv VENV` at a terminal (script(1) gives it a pseudo-terminal, as a user's shell
// would), `typed` its keyboard: the prompt and the answer as a user sees them.
test::RunResult at_terminal(const std::string& args, const std::string& venv, const std::string& typed) {
  const std::string cmd =
      "env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " " + args + " --venv " + shell_quote(venv) + test::k_no_cache;
  return run_shell("printf " + shell_quote(typed) + " | script -qec " + shell_quote(cmd) + " /dev/null");
}

TEST_F(Transactions, DecliningThePromptIsAnAnswerNotAnErrorItChangesNothingAndExitsOne) {
  TempDir t;
  const std::string v = copy(t);
  const std::string before = tree_of(v);
  const auto no = at_terminal("remove alpha", v, "n\n");
  EXPECT_EQ(no.exit_code, 1) << no.out;
  EXPECT_THAT(no.out, HasSubstr("remove alpha 1.0"));
  EXPECT_THAT(no.out, HasSubstr("? [y/N]"));
  EXPECT_THAT(no.out, HasSubstr("not confirmed: nothing was changed"));
  EXPECT_THAT(no.out, ::testing::Not(HasSubstr("error")));
  EXPECT_SAME_TREE(tree_of(v), before);
  EXPECT_TRUE(history_of(v).empty());
  EXPECT_EQ(pip_names(v), pip_names(base_));
  // Under --json the answer is a document too, saying nothing changed.
  const auto json_no = at_terminal("rollback --snapshot nothing-yet --json", v, "n\n");
  EXPECT_THAT(json_no.out, ::testing::Not(HasSubstr("not confirmed"))) << "no snapshot: refused before the prompt";
  ASSERT_EQ(cudafix("snapshot s0", v).exit_code, 0);
  const auto declined = at_terminal("snapshot --delete s0 --json", v, "n\n");
  EXPECT_EQ(declined.exit_code, 1) << declined.out;
  EXPECT_THAT(declined.out, HasSubstr(R"({"schema":1,"command":"snapshot","venv":)"));
  EXPECT_THAT(declined.out, HasSubstr(R"("confirmed":false,"changed":false})"));
  // And a yes goes ahead.
  const auto yes = at_terminal("remove alpha", v, "y\n");
  EXPECT_EQ(yes.exit_code, 0) << yes.out;
  EXPECT_FALSE(pip_names(v).count("alpha"));
}

TEST_F(Transactions, SnapshotDeleteAsksFirstAsEveryWriteDoesAndAnEmptyListSaysSo) {
  TempDir t;
  const std::string v = copy(t);
  const auto none = cudafix("snapshot --list", v);
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_EQ(none.out, "no snapshots\n");
  ASSERT_EQ(cudafix("snapshot keep-me", v).exit_code, 0);
  // No terminal to ask on and no -y: refused, as remove and rollback refuse, and the snapshot stays.
  const auto refused =
      run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " snapshot --delete keep-me --venv " +
                shell_quote(v) + test::k_no_cache + " </dev/null 2>&1");
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("delete snapshot 'keep-me'"));
  EXPECT_THAT(refused.out, HasSubstr("give -y (there is no terminal to ask on)"));
  EXPECT_THAT(cudafix("snapshot --list", v).out, HasSubstr("keep-me"));
  const auto unknown = cudafix("snapshot --delete nosuch -y", v);
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.out, HasSubstr("no snapshot named 'nosuch'"));
  const auto deleted = cudafix("snapshot --delete keep-me -y", v);
  EXPECT_EQ(deleted.exit_code, 0) << deleted.out;
  EXPECT_THAT(deleted.out, HasSubstr("deleted snapshot 'keep-me'"));
  EXPECT_EQ(cudafix("snapshot --list", v).out, "no snapshots\n");
}

TEST_F(Transactions, HistoryCountsAStepForARemovalAndTheFilesItMovedAsideApart) {
  TempDir t;
  const std::string v = copy(t);
  const auto removed = test::cudafix_json("remove gamma -y --venv " + shell_quote(v) + test::k_no_cache);
  ASSERT_EQ(removed.exit_code, 0) << removed.out;
  const std::size_t files = removed.doc["deleted"];
  ASSERT_GT(files, 2u);
  const auto h = test::cudafix_json("history --venv " + shell_quote(v) + test::k_no_cache);
  ASSERT_EQ(h.doc["transactions"].size(), 1u);
  const auto& tx = h.doc["transactions"][0];
  EXPECT_EQ(tx["steps"], 1);
  // The files the removal moved aside, as remove said, though its dist-info and package folders
  // move whole as one op each.
  EXPECT_EQ(tx["files"], files);
  EXPECT_LT(tx["ops"].get<std::size_t>(), files);
  const auto text = cudafix("history", v);
  EXPECT_THAT(text.out, HasSubstr(fmt::format("1 step, {} files", files)));
  // Its rollback is one step putting the same files back.
  ASSERT_EQ(cudafix("rollback -y", v).exit_code, 0);
  const auto after = test::cudafix_json("history --venv " + shell_quote(v) + test::k_no_cache);
  EXPECT_EQ(after.doc["transactions"][0]["steps"], 1);
  EXPECT_EQ(after.doc["transactions"][0]["files"], files);
}

TEST_F(Transactions, QuietPrintsNothingButErrorsWithTheExitCodesUnchanged) {
  TempDir t;
  const std::string v = copy(t);
  for (const char* args : {"snapshot s1 -q", "snapshot --list -q", "remove alpha -y -q", "history -q", "scan -q",
                           "rules -q", "rollback -y -q"}) {
    const auto r = cudafix(args, v);
    EXPECT_EQ(r.exit_code, 0) << args << ": " << r.out;
    EXPECT_EQ(r.out, "") << args;
  }
  // What was done is done: -q hides the saying only.
  EXPECT_EQ(pip_names(v), pip_names(base_));
  EXPECT_EQ(history_of(v).size(), 2u);
  const auto error = cudafix("remove nosuch -y -q", v);
  EXPECT_EQ(error.exit_code, 2);
  EXPECT_THAT(error.out, HasSubstr("cudafix: error: not installed in"));
  // remove's refusal is what went wrong: said under -q too, without the plan's summary lines.
  const auto refused = cudafix("remove beta -y -q", v);
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("refused:"));
  EXPECT_THAT(refused.out, ::testing::Not(HasSubstr("pip uninstall would delete")));
}

TEST_F(Transactions, ASmallWheelsProgressBarCountsInItsOwnUnitNotZeroMegabytes) {
  TempDir t;
  const std::string v = copy(t);
  const auto r = at_terminal("install -y --no-verify " + shell_quote(delta_), v, "");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("installing ["));
  EXPECT_THAT(r.out, HasSubstr("100%"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("0.0 of 0.0")));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("[0-9.]+ of [0-9.]+ (bytes|kB)"));
}

TEST_F(Transactions, APlanOfNoStepsIsNothingToDoWithoutAPromptOrAClaimOfVerification) {
  TempDir t;
  const std::string v = copy(t);
  const std::string plan = t.path() + "/plan.json";
  const auto made = run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " plan fix -o " + shell_quote(plan) +
                              " --venv " + shell_quote(v) + test::k_no_cache + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const std::string before = tree_of(v);
  // No -y and no terminal: nothing to ask about, so nothing is refused either.
  const auto r = run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " apply " + shell_quote(plan) +
                           " --venv " + shell_quote(v) + test::k_no_cache + " </dev/null 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("nothing to do"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("verified")));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("steps: :")));
  EXPECT_SAME_TREE(tree_of(v), before);
  EXPECT_TRUE(history_of(v).empty());
  const auto j = test::cudafix_json("apply " + shell_quote(plan) + " --venv " + shell_quote(v) + test::k_no_cache);
  EXPECT_EQ(j.exit_code, 0);
  EXPECT_EQ(j.doc["steps"], json::array());
  EXPECT_EQ(j.doc["changed"], false);
  EXPECT_EQ(j.doc["verified"], false);
}

}  // namespace
}  // namespace cudafix
