// What transaction.cpp, recovery.cpp and history.cpp share of cudafix's state folder, and no one
// outside installer/txn/ uses: where its files are, what a path's `left` record would say now,
// and undoing a transaction's ops. Layout of the folder: installer/txn/transaction.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "installer/txn/journal.hpp"

namespace cudafix::installer::txn {

[[nodiscard]] std::string active_file(const std::string& root);  // <root>/.cudafix/active
[[nodiscard]] std::string state_dir(const std::string& root);    // <root>/.cudafix
[[nodiscard]] std::string pruned_file(const std::string& root);  // <root>/.cudafix/pruned
inline constexpr std::uint64_t k_max_active = 256;               // an id and its newline, with room

// Inside cudafix's own folder: a transaction's staging or backups, never the environment's.
[[nodiscard]] bool in_state(const std::string& p, const std::string& root);

// What is at `path` now, as a `left` record would say it.
[[nodiscard]] Left left_now(const std::string& path);

// Calls fn(id, folder) for each folder below <root>/.cudafix/tx whose name is a transaction id
// (a real folder, never a link to one); anything else there is skipped.
void for_each_transaction_folder(const std::string& root,
                                 const std::function<void(const std::string&, const std::string&)>& fn);

// Removes what a finished transaction no longer needs: its staging always, and its backups when
// it was undone.
void clear_staging(const std::string& tx_dir, bool keep_backups);

// Undoes `ops` (the first `done` of them may have happened), newest first, each by what the disk
// shows; each op that could not be undone is returned, named.
[[nodiscard]] std::vector<std::string> undo_ops(const std::vector<Op>& ops, std::size_t done);

// With the environment's lock held: every transaction a killed run left, finished or undone
// (recovery.cpp), each said through `say`.
void recover_held(const std::string& root, const std::function<void(const std::string&)>& say);
// With the lock held: the folders a killed prune left (prune_leftovers) removed, each said
// through `say`, and the ids of those whose journal was gone added to the pruned list (history.cpp).
void finish_pruning(const std::string& root, const std::function<void(const std::string&)>& say);
// What a kill left of finished transactions, removed before the next begins (recovery.cpp).
void tidy_state(const std::string& root);

}  // namespace cudafix::installer::txn
