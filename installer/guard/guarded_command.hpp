// A command someone already runs on an environment (pip uninstall, uv pip uninstall, a script),
// run under a snapshot and undone where it left the environment worse: `cudafix guard`'s work,
// below cli/, which only parses, shows and exits (docs/cli.md).
//
// The order, each step's intent on disk before its effect (installer/txn/guard_record.hpp):
//   1. read_uninstall: a pip or uv uninstall is judged as `plan remove` judges it, and scopes the
//      snapshot to the dists it names;
//   2. start_baseline: the probe started on its own thread, the environment judged (the judge is
//      the caller's: doctor, which lives in rules/, a sibling this layer may not include);
//   3. take_snapshot: the guard's record written and synced, then the snapshot taken, its entries
//      held in memory, the transactions and dists there noted: the window opens;
//   4. (the caller runs the command with the environment's lock released, then takes it again and
//      scans afresh)
//   5. judge: what got worse, and what changed since the snapshot, each change attributed: to a
//      cudafix transaction that committed in the window (its journal's `left` records), to another
//      guard's uninstall (its record's scope), to a dist that appeared in the window when the
//      command is an uninstall (its RECORD); what none of them claims is the command's. Only the
//      command's changes are undone, and only when they are what broke something; where a change
//      another writer claims is not as that writer left it (both wrote the path), nothing is
//      undone and the snapshot stays, named with the exact command that restores it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "installer/probe/verify.hpp"
#include "installer/txn/changes.hpp"
#include "installer/txn/guard_record.hpp"
#include "resolver/env/environment.hpp"
#include "resolver/plan/plan.hpp"

namespace cudafix::installer::guard {

// What the caller's judge says of an environment.
struct Judgement {
  int errors = 0, warnings = 0;
  std::set<std::string> error_keys;  // each error finding as "rule\nmessage"
};
using Judge = std::function<Judgement(const resolver::Environment&)>;

struct Worse {
  std::string kind;  // "doctor", "resolution", "probe"
  std::string what;  // the rule, the soname, the stage or check
  std::string message;
};

// The command read as a pip or uv uninstall.
struct UninstallRead {
  std::string tool;
  std::vector<int> dists;  // indexes into env.dists, as pip finds them
  std::vector<std::string> names, skipped, problems;
  bool unnamed = false;  // a requirement names no project (a path, a URL)
  std::optional<resolver::RemovalPlan> plan;
  // The dists whose files alone it deletes, where cudafix reads them whole (RECORDs): the
  // snapshot's scope. None: anything may change.
  std::optional<std::vector<int>> scope;
  bool touches_no_library = false;  // no deletion holds a shared object (the probe may run beside it)
  // Whether it is refused before it runs: plan remove judges pip's removal to break something,
  // and --allow-break was not given.
  [[nodiscard]] bool refused(bool allow_break) const { return plan && !plan->safe() && !allow_break; }
};
[[nodiscard]] std::optional<UninstallRead> read_uninstall(const resolver::Environment& env,
                                                          const resolver::Knowledge& knowledge,
                                                          const std::vector<std::string>& argv, unsigned threads);

// A change in the window that another writer made.
struct Claimed {
  std::string path;    // absolute
  std::string what;    // as changes_since says it
  std::string writer;  // "cudafix transaction ID (`install ...`)", "nvidia-cudnn-cu13 9.19.0.56 (installed by pip)"
  std::string found;   // for an overlap: how the path differs from what that writer left
};

enum class Verdict {
  nothing_worse,  // nothing got worse: the snapshot is deleted (or kept, --keep)
  kept,           // worse, kept as it is (--keep)
  undone,         // the command's own changes put back
  not_ours,       // worse, but not through the command's changes: nothing undone
  overlap,        // the command's and another writer's changes meet: nothing undone, snapshot kept
  altered,        // the snapshot's files were written in place: nothing undone, snapshot kept
  snapshot_gone,  // the command removed the snapshot: nothing could be undone
};

struct Outcome {
  Judgement after;
  std::optional<probe::VerifyReport> after_probe;
  std::string after_probe_why_not;
  std::vector<Worse> worse;
  std::vector<txn::SnapshotChange> ours;  // the command's changes
  std::vector<Claimed> others;            // other writers' changes in the window, kept
  std::vector<Claimed> overlap;           // paths both wrote
  Verdict verdict = Verdict::nothing_worse;
  bool snapshot_kept = false;
  bool snapshot_gone = false;  // the command removed it (or all of .cudafix/)
  std::vector<std::string> altered;
  std::string transaction;  // the undo's
  std::size_t restored = 0, moved_aside = 0;
  // After the undo, what is still worse than before: something changed that the command was not
  // read to change (a script named pip, a .pth run at its start) and its snapshot does not hold;
  // the snapshot is then kept and named.
  std::vector<Worse> still_worse;
};

struct Settings {
  std::vector<std::string> command;
  std::string probe;  // cudafix-probe's path; empty: no probe (--no-verify)
  unsigned threads = 0;
  bool keep = false;           // keep the snapshot, and what the command did even where it broke something
  std::string retention_root;  // where transactions are pruned after the undo, and how many kept
  std::size_t retention_count = 0;
};

// Progress lines ("cudafix guard: snapshot ... taken") and phases ("doctor", "snapshot", ...).
struct Callbacks {
  std::function<void(const char*)> phase;
  // The environment scanned afresh (the caller's scan options): after an undo, to see whether
  // what got worse is gone with it.
  std::function<resolver::Environment()> rescan;
};

class GuardedCommand {
 public:
  GuardedCommand(const resolver::Environment& env, const resolver::Knowledge& knowledge, Judge judge, Settings settings,
                 Callbacks callbacks = {});
  ~GuardedCommand();
  GuardedCommand(const GuardedCommand&) = delete;
  GuardedCommand& operator=(const GuardedCommand&) = delete;

  // The probe started (unless no probe), the environment judged.
  void start_baseline();
  // The record, then the snapshot (scoped to `uninstall`'s dists where it has a scope). Throws
  // resolver::Error; then the command must not run.
  const txn::SnapshotInfo& take_snapshot(const std::optional<UninstallRead>& uninstall);
  // Waits for the baseline probe; "no driver" counts as not run.
  void finish_baseline();
  [[nodiscard]] const Judgement& before() const { return before_; }
  [[nodiscard]] const std::optional<probe::VerifyReport>& before_probe() const { return before_probe_; }
  [[nodiscard]] const std::string& probe_why_not() const { return probe_why_not_; }
  // Whether the baseline probe may go on while the command runs (finish_baseline() after it):
  // only for an uninstall read whole whose deletions hold no shared object, which no load sees.
  [[nodiscard]] bool probe_beside_command() const {
    return probing_.valid() && uninstall_ && uninstall_->touches_no_library;
  }
  [[nodiscard]] const std::string& snapshot_name() const { return snapshot_.name; }

  // After the command exited with `exit_code`, the environment's lock held again and `now`
  // scanned afresh: judged, and undone where the verdict says so. A failure leaves the record,
  // so that every later command names the snapshot, and rethrows.
  [[nodiscard]] Outcome judge(const resolver::Environment& now);
  // The command ran but could not be judged (the lock not free again, a scan that failed): the
  // record stays, so that every later command names the snapshot.
  void leave_record() {
    if (record_) record_->leave();
  }

 private:
  const resolver::Environment& env_;
  const resolver::Knowledge& knowledge_;
  Judge judge_;
  Settings settings_;
  Callbacks callbacks_;
  Judgement before_;
  std::future<std::optional<probe::VerifyReport>> probing_;
  std::optional<probe::VerifyReport> before_probe_;
  std::string probe_why_not_;
  std::optional<UninstallRead> uninstall_;
  std::unique_ptr<txn::HeldGuardRecord> record_;
  txn::SnapshotInfo snapshot_;
  std::set<std::string> transactions_before_, dists_before_;
  // The other guards seen while the window is open: a thread reads their records every
  // k_watch_interval, since one that ends in the window takes its record with it.
  std::map<std::string, txn::GuardRecord> guards_seen_;
  std::mutex guards_mutex_;
  std::thread watcher_;
  std::atomic<bool> window_open_{false};
  void watch_guards();
  void close_window();
  // Every file of the consumer's tree the baseline probe mapped: its link's stamp and its target's.
  struct Stamp {
    bool exists = false;
    std::uint64_t dev = 0, ino = 0, size = 0;
    std::int64_t mtime = 0, ctime = 0;
    bool operator==(const Stamp&) const = default;
  };
  static Stamp stamp_of(const std::string& path, bool follow);
  std::map<std::string, std::pair<Stamp, Stamp>> stamps_;
  [[nodiscard]] bool tree_changed() const;

  void phase(const char* name) const;
  Outcome judge_held(const resolver::Environment& now);
  std::vector<Claimed> claims(const resolver::Environment& now, const std::vector<txn::SnapshotChange>& changes,
                              std::vector<Claimed>& overlap) const;
  void undo(const resolver::Environment& now, Outcome& out);
  // Whether anyone else changed the environment in the window: another guard, a cudafix
  // transaction, a dist that appeared or went (the uninstall's own aside).
  [[nodiscard]] bool others_wrote(const resolver::Environment& now) const;
};

// "ran", "outcome", ... are the caller's words; this is the probe's part of what got worse.
[[nodiscard]] std::vector<Worse> probe_worse(const probe::VerifyReport& before, const probe::VerifyReport& after);

// What a killed guard left that a person must decide on: each record of a killed guard whose
// snapshot is complete, as a notice naming the command and the two commands that resolve it.
[[nodiscard]] std::vector<std::string> killed_guard_notices(const std::string& root);

}  // namespace cudafix::installer::guard
