// Hostile state and symlinks against the write path, on real venvs (python3 -m venv, wheels
// installed by real pip): journals, `active` files and snapshots planted in .cudafix/ (by hand,
// and by pip installing a wheel whose .data/data/ lands in the venv's root), symlinked folders
// that lead out, and the kernel's fences (openat2 and Landlock) seen from outside: a write cudafix
// is tricked or hooked into trying outside the environment, and every path-changing call of a
// whole command under strace. Each test keeps canaries outside the venv and asserts they are
// unchanged, that nothing died of a signal, and that a refusal names what it refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>

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
using test::tree_diff;
using test::tree_of;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string k_id = "20261203T120000.000-1-0";

class HostileState : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    const std::string src = tmp_->path() + "/src", w = tmp_->path() + "/wheels";
    fs::create_directories(src);
    fs::create_directories(w);
    test::write_file(src + "/a.so", "alpha library\n");
    test::write_file(src + "/b.py", "print('alpha')\n");
    alpha_ = test::make_wheel(w, "alpha 1.0 alpha/lib/liba.so=" + src + "/a.so alpha/__init__.py=" + src + "/b.py");
    victim_ = test::make_wheel(w, "victim 2.0 shared/x.so=" + src + "/a.so victim/__init__.py=" + src + "/b.py");
    base_ = tmp_->path() + "/base";
    ASSERT_NO_FATAL_FAILURE(test::make_venv(base_, {alpha_}));
  }
  static void TearDownTestSuite() { delete tmp_; }

  // A copy of the venv, and canaries beside it (outside it).
  struct Setup {
    std::string venv;
    test::Canaries canaries;
  };
  static Setup setup(const TempDir& t) {
    const std::string v = t.path() + "/venv";
    EXPECT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(v)).exit_code, 0);
    return {v, test::Canaries(t.path() + "/outside")};
  }
  // `cudafix ARGS --venv VENV`, standard error with the output, its cache in the test's folder.
  static test::RunResult cudafix(const std::string& args, const std::string& venv, const std::string& env = "") {
    return run_shell("env -u VIRTUAL_ENV CUDAFIX_CACHE_DIR=" + shell_quote(fs::path(venv).parent_path().string()) +
                     "/cache " + env + " " + shell_quote(test::k_bin) + " " + args + " --venv " + shell_quote(venv) +
                     test::k_no_cache + " 2>&1");
  }
  // doctor's untrusted-state rule alone, as JSON.
  static test::JsonRun doctor_state(const std::string& venv) {
    return test::cudafix_json("doctor --select untrusted-state --venv " + shell_quote(venv) + test::k_no_cache);
  }
  // A journal written as cudafix writes one (checksummed lines), planted at <venv>/.cudafix/tx/<folder>.
  static void plant_journal(const std::string& venv, const std::string& folder, const std::vector<json>& records) {
    const std::string tx = venv + "/.cudafix/tx/" + folder;
    fs::create_directories(tx + "/old");
    fs::permissions(venv + "/.cudafix", fs::perms::owner_all);
    fs::permissions(venv + "/.cudafix/tx", fs::perms::owner_all);
    std::string text;
    for (const auto& r : records) text += installer::txn::journal_line(r.dump());
    test::write_file(tx + "/journal", text);
  }
  static json begin(const std::string& venv, const std::string& id = k_id) {
    return {{"record", "begin"}, {"id", id}, {"time", 1}, {"command", "remove alpha"}, {"root", venv}};
  }
  static json move(std::size_t n, const std::string& from, const std::string& to) {
    return {{"record", "op"}, {"n", n}, {"op", "move"}, {"from", from}, {"to", to}};
  }

  static inline TempDir* tmp_ = nullptr;
  static inline std::string alpha_, victim_, base_;
};

#define EXPECT_NO_SIGNAL(r) EXPECT_LT((r).exit_code, 128) << (r).out

// A committed journal whose op moved a file from outside into the venv's backups: rolling it
// back would create that file outside. It is not listed, not rolled back, and said why.
TEST_F(HostileState, APlantedJournalThatWouldWriteOutsideIsNeitherListedNorRolledBack) {
  TempDir t;
  auto [v, canaries] = setup(t);
  const std::string old = v + "/.cudafix/tx/" + k_id + "/old/planted.txt";
  plant_journal(v, k_id,
                {begin(v),
                 move(0, canaries.dir() + "/made-by-rollback.txt", old),
                 {{"record", "intent_end"}, {"ops", 1}},
                 {{"record", "commit"}}});
  test::write_file(old, "planted\n");
  const std::string before = tree_of(v);
  const auto history = cudafix("history", v);
  EXPECT_EQ(history.exit_code, 0) << history.out;
  EXPECT_THAT(history.out, HasSubstr("not trusted"));
  EXPECT_THAT(history.out, HasSubstr("outside the environment"));
  const auto back = cudafix("rollback " + k_id + " -y", v);
  EXPECT_NO_SIGNAL(back);
  EXPECT_NE(back.exit_code, 0) << back.out;
  EXPECT_THAT(back.out, HasSubstr("no transaction " + k_id));
  EXPECT_EQ(canaries.changes(), "");
  EXPECT_EQ(tree_of(v), before) << tree_diff(before, tree_of(v));
}

// A killed change whose undo would move a file from outside into the venv: no command obeys it.
// doctor (reading only) says why in untrusted-state; a write command refuses; both leave it.
TEST_F(HostileState, APlantedInterruptedJournalIsNotRecoveredAndDoctorSaysWhy) {
  TempDir t;
  auto [v, canaries] = setup(t);
  const std::string site = test::site_packages(v);
  plant_journal(v, k_id,
                {begin(v),
                 move(0, site + "/alpha/planted.py", canaries.dir() + "/canary.txt"),
                 {{"record", "intent_end"}, {"ops", 1}}});
  test::write_file(v + "/.cudafix/active", k_id + "\n");
  const std::string before = tree_of(v);
  const auto doctor = doctor_state(v);
  EXPECT_EQ(doctor.exit_code, 1);
  const auto found = test::fires(doctor.doc, "untrusted-state");
  ASSERT_FALSE(found.empty());
  EXPECT_THAT(found[0].dump(), HasSubstr("recovery refused"));
  EXPECT_THAT(found[0].dump(), HasSubstr("outside the environment"));
  const auto remove = cudafix("remove alpha -y", v);
  EXPECT_NO_SIGNAL(remove);
  EXPECT_EQ(remove.exit_code, 2) << remove.out;
  EXPECT_THAT(remove.out, HasSubstr("obeyed none of it"));
  EXPECT_EQ(canaries.changes(), "");
  EXPECT_EQ(tree_of(v), before) << tree_diff(before, tree_of(v));
  EXPECT_TRUE(fs::exists(v + "/.cudafix/active"));
}

// A killed change whose op goes through a symlinked folder inside the venv that leads out: its
// text is normal and beneath the root, but it is refused as not cudafix's, by name, and the next
// write command is not locked out by an undo that can never finish.
TEST_F(HostileState, APlantedJournalThroughASymlinkedFolderIsRefusedAsNotCudafixs) {
  TempDir t;
  auto [v, canaries] = setup(t);
  fs::create_directory_symlink(canaries.dir(), v + "/link");
  plant_journal(v, k_id,
                {begin(v),
                 move(0, v + "/.cudafix/tx/" + k_id + "/new/c1", v + "/link/canary.txt"),
                 {{"record", "intent_end"}, {"ops", 1}}});
  test::write_file(v + "/.cudafix/active", k_id + "\n");
  const auto remove = cudafix("remove alpha -y", v);
  EXPECT_NO_SIGNAL(remove);
  EXPECT_EQ(remove.exit_code, 2) << remove.out;
  EXPECT_THAT(remove.out, HasSubstr("leads outside"));
  EXPECT_THAT(remove.out, HasSubstr("obeyed none of it"));
  EXPECT_EQ(canaries.changes(), "");
}

// `active` naming a path, not an id: never joined into one.
TEST_F(HostileState, AnActiveFileNamingAPathIsNotFollowed) {
  TempDir t;
  auto [v, canaries] = setup(t);
  fs::create_directories(v + "/.cudafix");
  fs::permissions(v + "/.cudafix", fs::perms::owner_all);
  const std::string rel = fs::relative(canaries.dir() + "/folder", v + "/.cudafix/tx").string();
  test::write_file(v + "/.cudafix/active", rel + "\n");
  const auto doctor = doctor_state(v);
  EXPECT_EQ(doctor.exit_code, 1);
  EXPECT_THAT(doctor.doc.dump(), HasSubstr("not a transaction id"));
  const auto remove = cudafix("remove alpha -y", v);
  EXPECT_NO_SIGNAL(remove);
  EXPECT_EQ(remove.exit_code, 2) << remove.out;
  EXPECT_THAT(remove.out, HasSubstr("not a transaction id"));
  EXPECT_EQ(canaries.changes(), "");
}

// A journal whose id is a path, in a folder named like a transaction: pruning (keep = 1) after
// two real removals removes only real transactions' folders.
TEST_F(HostileState, PruningNeverRemovesWhatAPlantedIdNames) {
  TempDir t;
  auto [v, canaries] = setup(t);
  const std::string id = "../../../outside/folder";
  plant_journal(v, "20200101T000000.000-1-0",
                {begin(v, id), {{"record", "intent_end"}, {"ops", 0}}, {{"record", "commit"}}});
  test::write_file(v + "/cudafix.toml", "[transactions]\nkeep = 1\n");
  ASSERT_EQ(cudafix("remove alpha -y", v).exit_code, 0);
  ASSERT_EQ(cudafix("rollback -y", v).exit_code, 0);
  const auto third = cudafix("remove alpha -y", v);
  ASSERT_EQ(third.exit_code, 0) << third.out;
  EXPECT_THAT(third.out, HasSubstr("removed the backups of"));
  EXPECT_EQ(canaries.changes(), "");
  EXPECT_TRUE(fs::exists(v + "/.cudafix/tx/20200101T000000.000-1-0/journal"));
}

// pip itself plants the state: a wheel whose .data/data/ writes a journal into .cudafix/. doctor
// names the dist's RECORD; rollback trusts none of the history while a RECORD lists it.
TEST_F(HostileState, AWheelThatPipInstallsIntoCudafixStateIsReportedAndNotObeyed) {
  TempDir t;
  auto [v, canaries] = setup(t);
  ASSERT_EQ(cudafix("remove alpha -y", v).exit_code, 0);  // a real transaction to roll back
  const std::string src = t.path() + "/journal";
  std::string text;
  for (const auto& r : {begin(v, k_id), {{"record", "intent_end"}, {"ops", 0}}, json{{"record", "commit"}}})
    text += installer::txn::journal_line(r.dump());
  test::write_file(src, text);
  const std::string evil =
      test::make_wheel(t.path(), "evil 1.0 evil-1.0.data/data/.cudafix/tx/" + k_id + "/journal=" + src);
  ASSERT_EQ(test::venv_pip(v, "install -q --no-index --no-deps " + shell_quote(evil)).exit_code, 0);
  const auto doctor = doctor_state(v);
  const auto found = test::fires(doctor.doc, "untrusted-state");
  ASSERT_FALSE(found.empty());
  EXPECT_THAT(found[0].dump(), HasSubstr("evil-1.0.dist-info/RECORD"));
  const std::string before = tree_of(v);
  const auto back = cudafix("rollback -y", v);
  EXPECT_NE(back.exit_code, 0);
  EXPECT_THAT(back.out, HasSubstr("a dist's RECORD lists cudafix's own state"));
  EXPECT_EQ(tree_of(v), before) << tree_diff(before, tree_of(v));
  EXPECT_EQ(canaries.changes(), "");
}

// site-packages/shared -> a folder outside: installing a wheel with shared/x.so is refused by
// name, before anything moves (before, it wrote into the folder outside).
TEST_F(HostileState, AnInstallThroughASymlinkedFolderLeadingOutsideIsRefused) {
  TempDir t;
  auto [v, canaries] = setup(t);
  fs::create_directory_symlink(canaries.dir() + "/folder", test::site_packages(v) + "/shared");
  const std::string before = tree_of(v);
  const auto r = cudafix("install " + shell_quote(victim_) + " -y --no-verify", v);
  EXPECT_NO_SIGNAL(r);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("site-packages/shared leads outside"));
  EXPECT_EQ(canaries.changes(), "");
  EXPECT_EQ(tree_of(v), before) << tree_diff(before, tree_of(v));
  EXPECT_FALSE(fs::exists(v + "/.cudafix/active"));
}

// --venv given through a symlink: resolved once, so a second install (which moves the first's
// files aside) plans and changes at the same real path.
TEST_F(HostileState, AVenvGivenThroughASymlinkInstallsTwice) {
  TempDir t;
  auto [v, canaries] = setup(t);
  const std::string link = t.path() + "/link";
  fs::create_directory_symlink(v, link);
  const auto first = cudafix("install " + shell_quote(victim_) + " -y --no-verify", link);
  ASSERT_EQ(first.exit_code, 0) << first.out;
  const auto second = cudafix("install " + shell_quote(victim_) + " -y --no-verify", link);
  EXPECT_EQ(second.exit_code, 0) << second.out;
  EXPECT_EQ(test::venv_pip(v, "check").exit_code, 0);
  EXPECT_EQ(canaries.changes(), "");
}

// A planted snapshot: an entry that climbs out, and a tree/ that is a symlink to a folder
// outside (restoring would hardlink an outside file into the venv). Both refused by name.
TEST_F(HostileState, APlantedSnapshotCannotLinkOrRestoreFromOutside) {
  TempDir t;
  auto [v, canaries] = setup(t);
  ASSERT_EQ(cudafix("snapshot real", v).exit_code, 0);
  const std::string snaps = v + "/.cudafix/snapshots";
  fs::create_directories(snaps + "/climb/tree");
  test::write_file(snaps + "/climb/manifest.json",
                   json{{"name", "climb"},
                        {"time", 1},
                        {"entries", {{{"path", "../outside/canary.txt"}, {"type", "file"}, {"sha256", "x"}}}}}
                       .dump());
  fs::create_directories(snaps + "/link");
  fs::create_directory_symlink(canaries.dir(), snaps + "/link/tree");
  const std::string sha = run_shell(
                              "python3 -c \"import hashlib,base64,sys;print(base64.urlsafe_b64encode("
                              "hashlib.sha256(open(sys.argv[1],'rb').read()).digest()).rstrip(b'=').decode())\" " +
                              shell_quote(canaries.dir() + "/canary.txt"))
                              .out;
  test::write_file(
      snaps + "/link/manifest.json",
      json{{"name", "link"},
           {"time", 1},
           {"entries", {{{"path", "canary.txt"}, {"type", "file"}, {"sha256", std::string(resolver::trim(sha))}}}}}
          .dump());
  const std::string before = tree_of(v);
  const auto climb = cudafix("rollback --snapshot climb -y", v);
  EXPECT_NO_SIGNAL(climb);
  EXPECT_NE(climb.exit_code, 0);
  EXPECT_THAT(climb.out, HasSubstr("'../outside/canary.txt' is not a normal path"));
  const auto link = cudafix("rollback --snapshot link -y", v);
  EXPECT_NO_SIGNAL(link);
  EXPECT_NE(link.exit_code, 0);
  EXPECT_THAT(link.out, HasSubstr("leads outside"));
  EXPECT_EQ(canaries.changes(), "");
  EXPECT_EQ(tree_of(v), before) << tree_diff(before, tree_of(v));
  EXPECT_FALSE(fs::exists(v + "/canary.txt"));
}

// A snapshot's scope is read as untrusted input: a name that is no dist folder's, an entry that
// is no string, more names than any scope cudafix writes, a scope that is no list. Each refuses
// the restore, saying which, and the snapshot is not listed.
TEST_F(HostileState, ASnapshotScopeOfAnotherShapeRefusesTheRestore) {
  TempDir t;
  auto [v, canaries] = setup(t);
  ASSERT_EQ(cudafix("snapshot real", v).exit_code, 0);
  const std::string snaps = v + "/.cudafix/snapshots";
  const json real = json::parse(resolver::read_file(snaps + "/real/manifest.json"));
  json many = json::array();
  for (int i = 0; i < 5000; ++i) many.push_back("alpha-1.0.dist-info");
  const std::vector<std::tuple<std::string, json, std::string>> cases{
      {"climb", json::array({"../x"}), "its scope entry '../x' is not a dist-info folder name"},
      {"outside", json::array({"../outside/canary.txt"}), "its scope entry '../outside/canary.txt' is not a"},
      {"number", json::array({"alpha-1.0.dist-info", 1}), "its scope entry 1 is not a string"},
      {"many", many, "its scope names 5000 dists, more than 4096"},
      {"word", "alpha-1.0.dist-info", "its scope is not a list of dist-info folder names"}};
  // A restore would change something: alpha's module is gone.
  fs::remove(test::site_packages(v) + "/alpha/__init__.py");
  for (const auto& [name, scope, says] : cases) {
    ASSERT_EQ(run_shell("cp -a " + shell_quote(snaps + "/real") + " " + shell_quote(snaps + "/" + name)).exit_code, 0);
    json m = real;
    m["name"] = name;
    m["scope"] = scope;
    test::write_file(snaps + "/" + name + "/manifest.json", m.dump());
  }
  const std::string before = tree_of(v);
  const auto listed = cudafix("snapshot --list", v);
  EXPECT_THAT(listed.out, HasSubstr("real"));
  for (const auto& [name, scope, says] : cases) {
    const auto r = cudafix("rollback --snapshot " + name + " -y", v);
    EXPECT_NO_SIGNAL(r);
    EXPECT_EQ(r.exit_code, 2) << name << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr(says)) << name;
    EXPECT_THAT(r.out, HasSubstr("nothing was changed")) << name;
    EXPECT_THAT(listed.out, Not(HasSubstr(name))) << name;
  }
  EXPECT_EQ(canaries.changes(), "");
  EXPECT_EQ(tree_of(v), before) << tree_diff(before, tree_of(v));
  EXPECT_FALSE(fs::exists(test::site_packages(v) + "/alpha/__init__.py"));
}

// A RECORD row through a symlinked folder that leads outside: the snapshot refuses it by name
// rather than copying the file outside into the venv's snapshot (before, it said "1 copied",
// and the restore put the outside file into site-packages).
TEST_F(HostileState, ASnapshotNeverCopiesAFileFromOutsideThroughASymlinkedFolder) {
  TempDir t;
  auto [v, canaries] = setup(t);
  const std::string site = test::site_packages(v);
  fs::create_directory_symlink(canaries.dir() + "/folder", site + "/sd");
  const std::string record = site + "/alpha-1.0.dist-info/RECORD";
  test::write_file(record, resolver::try_read_file(record).value_or("") + "sd/inner.txt,,\n");
  const auto r = cudafix("snapshot leak", v);
  EXPECT_NO_SIGNAL(r);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("leads outside"));
  EXPECT_FALSE(fs::exists(v + "/.cudafix/snapshots/leak"));
  EXPECT_EQ(canaries.changes(), "");
}

// A journal that is a hard link to a file outside: nothing is appended to it. The one journal
// cudafix appends to after its own run is an interrupted one, by recovery.
TEST_F(HostileState, AJournalThatIsAHardLinkToAFileOutsideIsNotAppendedTo) {
  TempDir t;
  auto [v, canaries] = setup(t);
  const std::string before_tree = test::tree_of(v);
  ASSERT_EQ(cudafix("remove alpha -y", v, "CUDAFIX_TEST_KILL_AT=4").exit_code, 137);
  const std::string id = fs::directory_iterator(v + "/.cudafix/tx")->path().filename().string();
  const std::string journal = v + "/.cudafix/tx/" + id + "/journal", outside = canaries.dir() + "/journal";
  fs::rename(journal, outside);
  fs::create_hard_link(outside, journal);
  const std::string before = resolver::try_read_file(outside).value_or("");
  const auto r = cudafix("rollback -y", v);
  EXPECT_NO_SIGNAL(r);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("not a file of its own (a hard link"));
  EXPECT_EQ(resolver::try_read_file(outside).value_or(""), before);
  EXPECT_EQ(test::tree_of(v), before_tree) << "the interrupted removal's renames are undone all the same";
}

// A planted killed change whose ops reach the venv's own files and cudafix's snapshots through
// a symlinked folder that stays inside the root (`evil -> .`): their text names no protected
// path, but where they lead does. Before, recovery moved the snapshots and pyvenv.cfg into the
// planted transaction's staging and then removed it with them.
TEST_F(HostileState, APlantedJournalReachingProtectedFilesThroughASymlinkInsideIsRefused) {
  TempDir t;
  auto [v, canaries] = setup(t);
  ASSERT_EQ(cudafix("snapshot keep", v).exit_code, 0);
  fs::create_directory_symlink(".", v + "/evil");
  const std::string staged = v + "/.cudafix/tx/" + k_id + "/new/";
  plant_journal(v, k_id,
                {begin(v),
                 move(0, staged + "a", v + "/evil/.cudafix/snapshots"),
                 move(1, staged + "b", v + "/evil/pyvenv.cfg"),
                 {{"record", "intent_end"}, {"ops", 2}}});
  test::write_file(v + "/.cudafix/active", k_id + "\n");
  const auto history = cudafix("history", v);
  EXPECT_NO_SIGNAL(history);
  EXPECT_THAT(history.out, HasSubstr("through a symlinked folder"));
  EXPECT_THAT(history.out, HasSubstr("obeyed none of it"));
  EXPECT_TRUE(fs::exists(v + "/pyvenv.cfg"));
  EXPECT_TRUE(fs::exists(v + "/.cudafix/snapshots/keep/manifest.json"));
  EXPECT_EQ(canaries.changes(), "");
}

// Records appended after a journal's final one were not appended by cudafix: a committed
// transaction followed by `aborted` (which would let the next start remove its backups), a
// rolled_back_by naming no id, and a planted rollback whose commit undoes a real transaction
// its command does not name. None is obeyed, and history does not say the real one was undone.
TEST_F(HostileState, RecordsAfterTheFinalOneAndARollbackMarkOfAnotherAreNotObeyed) {
  TempDir t;
  auto [v, canaries] = setup(t);
  const auto removed = cudafix("remove alpha -y", v);
  ASSERT_EQ(removed.exit_code, 0) << removed.out;
  std::string real;
  for (const auto& e : fs::directory_iterator(v + "/.cudafix/tx")) real = e.path().filename().string();
  const std::string journal = v + "/.cudafix/tx/" + real + "/journal";
  const std::string kept = resolver::try_read_file(journal).value_or("");
  const auto append = [&](const json& r) { test::write_file(journal, kept + installer::txn::journal_line(r.dump())); };
  append({{"record", "aborted"}, {"why", "planted"}});
  fs::create_directories(v + "/.cudafix/tx/" + real + "/new");
  EXPECT_THAT(cudafix("history", v).out, HasSubstr("after the transaction's final one"));
  EXPECT_EQ(cudafix("snapshot s", v).exit_code, 0);
  EXPECT_FALSE(fs::is_empty(v + "/.cudafix/tx/" + real + "/old")) << "its backups are kept";
  append({{"record", "rolled_back_by"}, {"id", "<script>\u001b[31m"}});
  EXPECT_THAT(cudafix("history", v).out, HasSubstr("not a transaction id"));
  test::write_file(journal, kept);
  // A planted "rollback" of something else whose commit claims the real one.
  json fake = begin(v, "20991231T000000.000-1-0");
  fake["command"] = "rollback 20200101T000000.000-1-0";
  plant_journal(v, "20991231T000000.000-1-0",
                {fake, {{"record", "intent_end"}, {"ops", 0}}, {{"record", "commit"}, {"undoes", real}}});
  const auto history = test::cudafix_json("history --venv " + shell_quote(v) + test::k_no_cache);
  bool listed = false;
  for (const auto& tx : history.doc["transactions"])
    if (tx["id"] == real) {
      listed = true;
      EXPECT_EQ(tx["result"], "committed") << tx;
    }
  EXPECT_TRUE(listed) << history.out;
  const auto back = cudafix("rollback " + real + " -y", v);
  EXPECT_EQ(back.exit_code, 0) << back.out;
  EXPECT_EQ(canaries.changes(), "");
}

// State files planted sparse and huge (no disk, any size): read capped, never whole. Before,
// a 400 MB `active` took 825 MB of memory and ended in std::bad_alloc under a 300 MB limit.
TEST_F(HostileState, HugeSparseStateFilesAreNotReadWhole) {
  TempDir t;
  auto [v, canaries] = setup(t);
  fs::create_directories(v + "/.cudafix/tx");
  fs::permissions(v + "/.cudafix", fs::perms::owner_all);
  fs::permissions(v + "/.cudafix/tx", fs::perms::owner_all);
  for (const char* f : {"/.cudafix/active", "/.cudafix/pruned"})
    ASSERT_EQ(run_shell("truncate -s 400M " + shell_quote(v + f)).exit_code, 0);
  // The child's peak RSS from its own rusage (a limit on address space would stop the sanitizer
  // build, which reserves terabytes).
  const auto r = run_shell(test::k_python + " -c " +
                           shell_quote("import resource, subprocess, sys\n"
                                       "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
                                       "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
                                       "print(p.stdout + p.stderr)\n") +
                           " env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " rollback " + k_id + " -y --venv " +
                           shell_quote(v) + test::k_no_cache);
  std::istringstream in(r.out);
  int rc = -1;
  long max_rss_kb = -1;
  in >> rc >> max_rss_kb;
  EXPECT_EQ(rc, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("no transaction " + k_id)) << r.out;
  EXPECT_GT(max_rss_kb, 0) << r.out;
  EXPECT_LT(max_rss_kb, 200 * 1024) << "peak RSS " << max_rss_kb << " KB";
  EXPECT_EQ(canaries.changes(), "");
}

// A dist's RECORD planted sparse and huge (3 GiB, no disk): doctor and a rollback's check of
// RECORDs read at most k_max_dist_info_file_bytes of it, and doctor names it. Before, each read it
// whole (3 GB of memory).
TEST_F(HostileState, AHugeSparseRecordIsNotReadWhole) {
  TempDir t;
  auto [v, canaries] = setup(t);
  std::string record;
  for (const auto& e : fs::directory_iterator(test::site_packages(v)))
    if (e.path().extension() == ".dist-info" && fs::exists(e.path() / "RECORD"))
      record = (e.path() / "RECORD").string();
  ASSERT_FALSE(record.empty());
  ASSERT_EQ(run_shell("truncate -s 3G " + shell_quote(record)).exit_code, 0);
  for (const std::string args : {"doctor", "rollback -y"}) {
    const auto r = run_shell(test::k_python + " -c " +
                             shell_quote("import resource, subprocess, sys\n"
                                         "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
                                         "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
                                         "print(p.stdout + p.stderr)\n") +
                             " env -u VIRTUAL_ENV timeout 60 " + shell_quote(test::k_bin) + " " + args + " --venv " +
                             shell_quote(v) + test::k_no_cache);
    std::istringstream in(r.out);
    int rc = -1;
    long max_rss_kb = -1;
    in >> rc >> max_rss_kb;
    EXPECT_NE(rc, 124) << args << ": " << r.out.substr(0, 2000);
    EXPECT_GT(max_rss_kb, 0) << r.out;
    EXPECT_LT(max_rss_kb, 600 * 1024) << args << ": peak RSS " << max_rss_kb << " KB";
    if (args == "doctor") {
      EXPECT_THAT(r.out, HasSubstr("too large")) << r.out.substr(0, 2000);
    }
  }
  EXPECT_EQ(canaries.changes(), "");
}

// A FIFO, or /dev/zero, in pyvenv.cfg's place: every command says so at once (before, they hung
// forever, or grew until memory ran out).
TEST_F(HostileState, AFifoOrADeviceInPyvenvCfgsPlaceIsRefusedAtOnce) {
  TempDir t;
  auto [v, canaries] = setup(t);
  fs::remove(v + "/pyvenv.cfg");
  ASSERT_EQ(run_shell("mkfifo " + shell_quote(v + "/pyvenv.cfg")).exit_code, 0);
  for (const char* args : {"history", "doctor", "snapshot s"}) {
    const auto r = run_shell("timeout 20 env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " " + std::string(args) +
                             " --venv " + shell_quote(v) + test::k_no_cache + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("pyvenv.cfg: not a regular file")) << args;
  }
  fs::remove(v + "/pyvenv.cfg");
  fs::create_symlink("/dev/zero", v + "/pyvenv.cfg");
  const auto r = run_shell("timeout 20 env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " history --venv " +
                           shell_quote(v) + test::k_no_cache + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("not a regular file"));
}

// Issue 51, item 1: another process of the same user (a command run under `cudafix guard`)
// swaps a staging folder under .cudafix/tx/<id>/new/ for a symlink to a folder outside, between
// an executable file's write and the setting of its mode (the `mode` pause point). The mode is
// set through the descriptor the file was written through, so the file of the same name outside
// keeps its mode; the staged file's move then meets the symlink and the install is refused by
// name, the venv as it was. Before, a chmod by path followed the symlink and made the file
// outside 0755: Landlock does not fence mode changes. `staged_folder` is the folder swapped,
// relative to new/; `name` the file in it: a wheel's member, or a console script cudafix writes.
void swapped_while_staged(const TempDir& t, const std::string& v, const std::string& wheel,
                          const std::string& staged_folder, const std::string& name) {
  const std::string outside = t.path() + "/mode-canaries", canary = outside + "/" + name;
  fs::create_directories(outside);
  test::write_file(canary, "a file outside the environment\n");
  fs::permissions(canary, fs::perms::owner_read | fs::perms::owner_write);
  const std::string before = tree_of(v), trace = t.path() + "/trace", out = t.path() + "/out";
  const std::string folder = "\"$(echo " + shell_quote(v) + "/.cudafix/tx/*/new/" + shell_quote(staged_folder) + ")\"";
  const auto ran = run_shell(
      "(env -u VIRTUAL_ENV CUDAFIX_CACHE_DIR=" + shell_quote(t.path() + "/cache") +
      " CUDAFIX_TEST_PAUSE_AT=mode:3000 CUDAFIX_TEST_FAULT_TRACE=" + shell_quote(trace) + " " +
      shell_quote(test::k_bin) + " install " + shell_quote(wheel) + " -y --no-verify --venv " + shell_quote(v) +
      test::k_no_cache + " > " + shell_quote(out) + " 2>&1; echo rc=$? >> " + shell_quote(out) +
      ") & for i in $(seq 1000); do grep -qs 'mark mode' " + shell_quote(trace) +
      " && break; sleep 0.01; done; grep -qs 'mark mode' " + shell_quote(trace) + " || echo never paused; d=" + folder +
      "; mv \"$d\" \"$d.moved\" && ln -s " + shell_quote(outside) + " \"$d\" && echo swapped; wait");
  ASSERT_THAT(ran.out, Not(HasSubstr("never paused"))) << ran.out;
  EXPECT_THAT(ran.out, HasSubstr("swapped")) << ran.out;
  const std::string said = resolver::try_read_file(out).value_or("");
  EXPECT_EQ(fs::status(canary).permissions(), fs::perms::owner_read | fs::perms::owner_write)
      << "the file outside changed mode: " << said;
  EXPECT_EQ(resolver::try_read_file(canary).value_or(""), "a file outside the environment\n");
  EXPECT_THAT(said, HasSubstr("rc=2")) << said;
  EXPECT_THAT(said, HasSubstr(staged_folder + " leads outside")) << said;
  EXPECT_EQ(tree_of(v), before) << tree_diff(before, tree_of(v));
  EXPECT_FALSE(fs::exists(v + "/.cudafix/active"));
}

TEST_F(HostileState, AStagingFolderSwappedForASymlinkBeforeAMembersModeIsSetChangesNothingOutside) {
  TempDir t;
  auto [v, canaries] = setup(t);
  test::write_file(t.path() + "/src/tool", "#!/bin/sh\necho tool\n");
  const std::string wheel =
      test::make_wheel(t.path(), "modetarget 1.0 modetarget/tool=" + t.path() + "/src/tool --unix-mode 100755");
  const std::string site = fs::relative(test::site_packages(v), v).string();
  swapped_while_staged(t, v, wheel, site + "/modetarget", "tool");
  EXPECT_EQ(canaries.changes(), "");
}

TEST_F(HostileState, AStagingFolderSwappedForASymlinkBeforeAScriptsModeIsSetChangesNothingOutside) {
  TempDir t;
  auto [v, canaries] = setup(t);
  const std::string wheel = test::make_wheel(t.path(), "modescript 1.0 --console-script modetool=modescript:main");
  swapped_while_staged(t, v, wheel, "bin", "modetool");
  EXPECT_EQ(canaries.changes(), "");
}

// The kernel's fence: a write outside, tried by a test hook past every check cudafix makes,
// fails with EACCES, the command says so, and the venv is as it was.
TEST_F(HostileState, TheLandlockFenceStopsAWriteOutsideTheEnvironment) {
  TempDir t;
  auto [v, canaries] = setup(t);
  const std::string before = tree_of(v);
  const std::string outside = canaries.dir() + "/written-past-the-checks";
  const auto r = cudafix("-v remove alpha -y", v, "CUDAFIX_TEST_WRITE_OUTSIDE=" + shell_quote(outside));
  EXPECT_THAT(r.out, HasSubstr("writes fenced by the kernel (Landlock ABI"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr(outside + ": permission denied: the kernel refused a write outside the environment"));
  EXPECT_FALSE(fs::exists(outside));
  EXPECT_EQ(canaries.changes(), "");
  EXPECT_EQ(tree_of(v), before) << tree_diff(before, tree_of(v));
}

// Every path-changing call of install, remove, snapshot and rollback, as strace sees it (each
// *at call's folder descriptor decoded by -y): beneath the venv or the cache, or a device.
TEST_F(HostileState, EveryPathChangingCallOfTheWriteCommandsIsBeneathTheRootOrTheCache) {
  TempDir t;
  auto [v, canaries] = setup(t);
  const std::string trace = t.path() + "/trace";
  // fchmod names no path: traced beside the path calls, its descriptor decoded by -y.
  const std::string strace = "strace -f -qq -y -e trace=%file,fchmod,fchown -o " + shell_quote(trace) + " ";
  const std::string cache = t.path() + "/cache";
  // A wheel whose member and console script are executable: their modes are set too.
  test::write_file(t.path() + "/src/tool", "#!/bin/sh\n");
  const std::string modes = test::make_wheel(
      t.path(), "modes 1.0 modes/tool=" + t.path() + "/src/tool --unix-mode 100755 --console-script modes=modes:main");
  std::string all;
  for (const std::string& args :
       {"install " + shell_quote(victim_) + " -y --no-verify", "install " + shell_quote(modes) + " -y --no-verify",
        std::string("remove alpha -y"), std::string("snapshot s"), std::string("rollback -y"),
        std::string("rollback --snapshot s -y")}) {
    const auto r = run_shell("env -u VIRTUAL_ENV ASAN_OPTIONS=detect_leaks=0 CUDAFIX_CACHE_DIR=" + shell_quote(cache) +
                             " " + strace + shell_quote(test::k_bin) + " " + args + " --venv " + shell_quote(v) +
                             test::k_no_cache + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << args << ": " << r.out;
    all += resolver::try_read_file(trace).value_or("");
  }
  // renameat2(3</v/x>, "a", 4</v/y>, "b", 0) = 0; mkdirat(3</v>, "d", 0700) = 0; openat(..., O_WRONLY|O_CREAT...);
  // fchmod(5</v/new/x>, 0755) = 0
  const std::regex changing(
      R"(^\d+ +((rename|renameat|renameat2|mkdir|mkdirat|rmdir|unlink|unlinkat|link|linkat|symlink|symlinkat|chmod|fchmodat|fchmodat2|fchmod|chown|lchown|fchownat|fchown|utimensat|truncate)\(|(open|openat|creat)\(.*O_(WRONLY|RDWR|CREAT|TRUNC)))");
  const std::regex first_path(R"(\((?:(-?\d+)<([^>]*)>, |AT_FDCWD, )?"([^"]*)\")");
  const std::regex by_descriptor(R"(^\d+ +f(chmod|chown)\((\d+)<([^>]*)>)");
  std::istringstream lines(all);
  std::string line;
  int checked = 0, modes_set = 0;
  std::vector<std::string> outside;
  const std::string real_venv = fs::canonical(v).string(), real_cache = fs::weakly_canonical(cache).string();
  while (std::getline(lines, line)) {
    if (!std::regex_search(line, changing) || line.find(" = -1 ") != std::string::npos) continue;
    std::smatch m;
    std::string path;
    if (std::regex_search(line, m, by_descriptor)) {
      path = m[3];
      modes_set += m[1] == "chmod";
    } else {
      if (!std::regex_search(line, m, first_path)) continue;
      path = m[3];
      if (m[2].matched && !path.starts_with("/")) path = std::string(m[2]) + (path == "." ? "" : "/" + path);
    }
    if (!path.starts_with("/")) continue;  // relative to the working folder: none expected, shown below
    ++checked;
    const bool beneath = resolver::is_within(path, real_venv) || resolver::is_within(path, real_cache) ||
                         resolver::is_within(path, v) || path.starts_with("/dev/") || path == trace;
    if (!beneath) outside.push_back(line);
  }
  EXPECT_GT(checked, 20) << all.substr(0, 2000);
  EXPECT_GE(modes_set, 2) << "the executable member's and the console script's";
  EXPECT_TRUE(outside.empty()) << outside.size()
                               << " calls outside, the first: " << (outside.empty() ? "" : outside.front());
  EXPECT_EQ(canaries.changes(), "");
}

}  // namespace
}  // namespace cudafix
