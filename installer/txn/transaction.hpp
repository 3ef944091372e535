// Changing an environment as one transaction: every change a rename (or a folder made or
// removed), written ahead in the journal (installer/txn/journal.hpp has the format and what
// survives a crash), carried out under the environment's lock, undone whole when anything fails,
// and kept afterwards (its `old/` backups) so that `rollback` can undo it later, byte for byte.
//
//   <root>/.lock                      flock, the file uv locks: opened, never recreated
//   <root>/.cudafix/active            the id of the transaction in progress, while it is
//   <root>/.cudafix/tx/<id>/          journal, new/, old/ (journal.hpp)
//   <root>/.cudafix/pruned            the ids of transactions pruned, one per line, the newest
//                                     k_pruned_kept kept: so that a rollback of one names it as
//                                     pruned rather than unknown; written before their folders
//                                     are removed, so it is also the pruning's intent
//
// Whoever takes the lock recovers first: a transaction a killed run left (the one `active`
// names, and any other journal with neither commit nor abort, which only a killed run leaves)
// is undone before the holder reads the environment, so `active` is never overwritten while it
// names an unfinished transaction. Staging (new/) is removed when a transaction commits, is
// undone or is recovered; old/ is removed when it is undone; what a kill left of either is
// removed before the next transaction begins. So .cudafix/tx holds only committed transactions'
// backups and the journals of the others.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "installer/txn/journal.hpp"
#include "resolver/env/venv.hpp"

namespace cudafix::installer::txn {

// flock(LOCK_EX) on <root>/.lock, waiting up to `wait` (saying so through `say` once), then
// recovering what a killed holder left (each line of what it did said through `say`, starting
// "recovering: "); released when destroyed. Throws resolver::Error when the wait runs out or the
// recovery cannot finish (the lock is then released).
class EnvLock {
 public:
  EnvLock(const std::string& root, std::chrono::milliseconds wait, const std::function<void(const std::string&)>& say);
  ~EnvLock();
  EnvLock(const EnvLock&) = delete;
  EnvLock& operator=(const EnvLock&) = delete;

 private:
  int fd_ = -1;
};

class Transaction {
 public:
  // A new transaction folder and its begin record, <root>/.cudafix/active naming it.
  Transaction(const std::string& root, const std::string& command);
  // One never carried out (a refusal while planning or staging) changed nothing: its folder,
  // staged files included, is removed.
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  [[nodiscard]] const std::string& id() const { return id_; }
  [[nodiscard]] const std::string& root() const { return root_; }
  [[nodiscard]] std::string dir() const;
  [[nodiscard]] std::string new_dir() const { return dir() + "/new"; }

  // Planning (nothing changes yet). `path` goes to old/<path relative to root>.
  void move_aside(const std::string& path);
  // `staged` (under new/) into place at `target`, what is there moved aside first, missing
  // folders made.
  // `sha256` (RECORD's form), where known, is recorded with what the transaction left there, so
  // that a later rollback can tell the same bytes from changed ones when the inode differs.
  void put(const std::string& staged, const std::string& target, unsigned folder_mode = 0755,
           const std::string& sha256 = "");
  // The staged file of a put() already planned was written again (a later wheel of the
  // transaction ships the same path): its new bytes' sha256.
  void restaged(const std::string& target, const std::string& sha256) { hashes_[target] = sha256; }
  void move(const std::string& from, const std::string& to);
  void remove_folder_if_empty(const std::string& path, unsigned mode);
  void make_folder(const std::string& path, unsigned mode);
  [[nodiscard]] const std::vector<Op>& ops() const { return ops_; }
  // Whether `path` exists once the planned ops are done (the disk, overlaid with the plan).
  [[nodiscard]] bool will_exist(const std::string& path) const;

  // Writes the intent, syncs it, carries out every op, syncs the folders touched, commits. On
  // a failure, undoes what was done, records why, and rethrows.
  void carry_out();
  // The same, calling `check(k)` once the ops of step k are done (a step ends where mark_step()
  // was called); a check that throws undoes the whole transaction, as a failed call does.
  void carry_out(const std::function<void(std::size_t)>& check);
  // This transaction rolls back `id`: its commit record says so (journal.hpp).
  void undoes(const std::string& id) { undoes_ = id; }
  // Ends the current step: the ops planned so far belong to it.
  void mark_step() { steps_.push_back(ops_.size()); }
  // The paths of the environment step k's ops change: what they put in place, move aside, make
  // or remove (a folder moved stands for what it holds).
  [[nodiscard]] std::set<std::string> step_paths(std::size_t step) const;
  [[nodiscard]] std::size_t step_count() const { return steps_.size(); }
  // Ends a transaction that changed nothing (a refused plan): its folder is removed.
  void abandon();
  // Called with (ops done, ops in all) as carry_out() goes: a progress bar's feed.
  void on_progress(std::function<void(std::uint64_t, std::uint64_t)> progress) { progress_ = std::move(progress); }

 private:
  std::string root_, id_;
  std::vector<Op> ops_;
  std::map<std::string, bool> planned_;        // path -> exists after the planned ops
  std::map<std::string, std::string> hashes_;  // target -> the sha256 of what put() puts there
  std::string undoes_;
  std::vector<std::size_t> steps_;  // each step's end, as an op count
  bool started_ = false;            // carry_out() began: from then on the journal says the rest
  std::function<void(std::uint64_t, std::uint64_t)> progress_;
  void append(const std::string& json) const;
  void folder_op(OpKind kind, const std::string& path, unsigned mode);
  [[nodiscard]] std::string commit_records() const;
  [[nodiscard]] std::size_t files_changed() const;
};

// Why the journal `tx`, read from the folder named `folder` under <root>/.cudafix/tx, cannot be
// trusted ("" when it can): an unreadable record, an id that is not its folder's, another root,
// or an op whose path is not normal, lies outside the root, or names the environment's own files
// (.lock, pyvenv.cfg, cudafix.toml) or cudafix's state outside a transaction's new/ and old/.
// Anything in an environment can write this folder, so nothing from it is obeyed unchecked.
[[nodiscard]] std::string distrust(const JournalRead& tx, const std::string& root, std::string_view folder);

// <root>/.cudafix and its tx/, 0700, synced into their parents when made; refuses untrusted ones.
void make_state_folders(const std::string& root);

// The trusted transactions of an environment, newest first; what was not trusted (a folder
// that is not a transaction's, a journal distrust() refuses) is skipped and, where
// `distrusted` is given, said there.
[[nodiscard]] std::vector<JournalRead> transactions(const std::string& root,
                                                    std::vector<std::string>* distrusted = nullptr);

// Where a killed run left a transaction, takes the lock (EnvLock), which recovers it: its ops
// undone in reverse, each by what the disk shows, each line of what was done said through `say`.
void recover(const std::string& root, std::chrono::milliseconds wait,
             const std::function<void(const std::string&)>& say);

// A path of the environment whose bytes are not what a transaction left there: someone (pip, uv,
// a person) changed it after.
struct ChangedPath {
  std::string path;
  std::string what;  // "was changed", "was removed", "was created", "was replaced by a symlink"
  // Another installed dist's RECORD lists it now: a forced rollback leaves it where it is.
  bool kept = false;
};

// What a rollback must know of the installed dists (rollback_owners.hpp reads it), since the
// journal knows none: the paths the other dists' RECORDs list, which a rollback never moves, and
// the dist-info folders of the dists the transaction installed that pip has installed again over
// the same files, whose bookkeeping pip rewrote (INSTALLER, RECORD, REQUESTED, direct_url.json).
struct RollbackOwners {
  std::set<std::string> others;
  std::set<std::string> reinstalled;
};

// How what is at a path now differs from what a transaction left there ("was changed", "was
// removed", ...); nullopt: it does not (the same bytes under another inode are no change where
// the transaction recorded their hash).
[[nodiscard]] std::optional<std::string> change_at(const Left& was);

// The transaction that undoes committed transaction `done` (planned, not carried out): each of its
// ops reversed, newest first. What `done` put in place goes aside into `undo`'s own old/, and its
// backups come back, so a rollback needs nothing but `done`'s old/, and later needs nothing of
// `done` at all. Each path `done` left is compared first with what is there now (type, size,
// mtime, ctime, inode, and the sha256 where those differ and `done` recorded one): the paths
// changed since are returned, and nothing is planned, unless `force`, when what is there now goes
// aside into `undo`'s old/ as a backup of its own. What `owners.others` lists is never moved: in
// a folder `done` made it is no change at all (the folder stays, removed only if it ends empty),
// a changed path it lists is left where it is under `force`, and one a backup of `done` would
// replace refuses even a forced rollback. Pip's bookkeeping in a dist-info folder of
// `owners.reinstalled` is no change.
[[nodiscard]] std::vector<ChangedPath> plan_rollback(const JournalRead& done, Transaction& undo, bool force,
                                                     const RollbackOwners& owners = {});

// Bytes on disk (allocated blocks) below a transaction's old/ and new/: a committed one's backups
// (staging, only while one is in progress or what a kill left).
[[nodiscard]] std::uint64_t bytes_held(const std::string& tx_dir);

struct Pruned {
  std::vector<std::string> ids;  // the transactions whose folders were removed, newest first
  std::uint64_t bytes = 0;       // what their backups held
};
// Keeps the backups of the `keep` newest committed transactions, and the journals of the `keep`
// newest undone ones; removes the folders of the older ones (those can no longer be rolled back).
// Intent before effect: their ids go to the pruned list (synced) first, then each folder's old/
// and new/, its journal, the folder last; a kill in between leaves folders the list names, which
// the next holder of the lock removes. One in progress is never touched (recovery needs its
// journal). `keep` 0 keeps every one.
[[nodiscard]] Pruned prune_transactions(const std::string& root, std::size_t keep);
// What a killed prune left of a transaction's folder: its id, the bytes below its old/ and new/,
// and whether the pruned list names it (else its journal is gone and its backups are not).
struct PruneLeftover {
  std::string id;
  std::uint64_t bytes = 0;
  bool listed = false;
};
// Those folders, newest first: the next holder of the lock removes them (recover_held); until
// then history names them, so that no backups lie on disk that no command shows.
[[nodiscard]] std::vector<PruneLeftover> prune_leftovers(const std::string& root);
// Whether `id` is one prune_transactions() removed (the newest k_pruned_kept are remembered).
[[nodiscard]] bool was_pruned(const std::string& root, const std::string& id);
inline constexpr std::size_t k_pruned_kept = 4096;

[[nodiscard]] std::string tx_root(const std::string& root);  // <root>/.cudafix/tx

// Refuses, before anything changes, an environment whose site folders are on another mount than
// the root's .cudafix: every change is a rename into .cudafix/tx/<id>/, which the kernel refuses
// across file systems and bind mounts (EXDEV). Site folders outside the root (a system's) are not
// looked at: cudafix does not change them.
void check_one_file_system(const resolver::EnvLayout& layout);

}  // namespace cudafix::installer::txn
