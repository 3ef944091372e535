// Recovering what a killed run left (installer/txn/transaction.hpp: recover, and EnvLock, which
// calls recover_held): each unfinished transaction whose journal can be trusted finished or undone
// by what the disk shows, half-taken snapshots removed, and a finished one's leftovers tidied.
#include <fmt/format.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "installer/txn/changes.hpp"
#include "installer/txn/file_ops.hpp"
#include "installer/txn/guard_record.hpp"
#include "installer/txn/state_files.hpp"
#include "installer/txn/transaction.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/state_folder.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer::txn {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Whether a transaction's folder holds nothing that was done: no journal, or one without its
// begin record (the ops come after it), and no file below old/ or new/. Such a folder is a
// kill's leftover and goes; one whose journal cannot be read now (too large, EIO) stays.
bool never_began(const std::string& dir) {
  const std::string journal = dir + "/journal";
  if (exists_nofollow(journal)) {
    if (!resolver::try_read_file(journal, k_max_journal)) return false;
    try {
      (void)read_journal(journal);
      return false;
    } catch (const resolver::Error&) {
      // no begin record
    }
  }
  for (const char* below : {"/old", "/new"}) {
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir + below, ec), end; !ec && it != end; it.increment(ec))
      if (!it->is_directory(ec) || it->is_symlink(ec)) return false;
  }
  return true;
}

// Finishes or undoes the one transaction `id` a killed run left, the lock held.
void recover_one(const std::string& root, const std::string& id, const std::function<void(const std::string&)>& say) {
  const std::string dir = tx_root(root) + "/" + id;
  const std::string journal = dir + "/journal";
  JournalRead tx;
  try {
    tx = read_journal(journal);
  } catch (const resolver::Error& e) {
    if (!never_began(dir)) throw;  // unreadable, not empty: left as it is, and said
    remove_tree(dir);
    say(fmt::format("recovering: transaction {} was stopped before it changed anything", id));
    return;
  }
  if (!tx.unreadable.empty())
    throw resolver::Error(
        fmt::format("{}: {}: cudafix cannot tell what transaction {} changed, so it left it as it is (a newer cudafix "
                    "wrote it? that version can recover it)",
                    journal, tx.unreadable, id));
  if (auto why = distrust(tx, root, id); !why.empty())
    throw resolver::Error(
        fmt::format("{}: {}: cudafix did not write this journal, so it obeyed none of it and left "
                    "it as it is",
                    journal, why));
  if (tx.state == TxState::committed || tx.state == TxState::aborted) {
    clear_staging(dir, tx.state == TxState::committed);
    say(fmt::format("recovering: transaction {} ({}) had {}; nothing to undo", id, tx.command,
                    tx.state == TxState::committed ? "committed" : "been undone"));
    return;
  }
  const auto stuck = undo_ops(tx.ops, tx.ops.size());
  if (!stuck.empty())
    throw resolver::Error(
        fmt::format("recovering transaction {} ({}): {} of its {} changes could not be undone, "
                    "and its journal stays for a later try: {}",
                    id, tx.command, stuck.size(), tx.ops.size(), fmt::join(stuck, "; ")));
  append_synced(journal, journal_line(json{{"record", "aborted"}, {"why", "interrupted; undone by recovery"}}.dump()));
  clear_staging(dir, false);
  say(fmt::format("recovering: transaction {} ({}) was interrupted{}; its {} changes were undone", id, tx.command,
                  tx.torn ? " (a torn journal tail was cut)" : "", tx.ops.size()));
}

// A journal in a wheel's RECORD was written by pip installing that wheel, not by cudafix: while
// any dist lists cudafix's state, no journal is obeyed (rollback refuses the same way).
void refuse_state_a_wheel_wrote(const std::string& root) {
  std::vector<std::string> listed;
  try {
    listed = resolver::records_listing_protected(resolver::read_layout(root, "the environment's lock"));
  } catch (const resolver::Error&) {
    return;  // not a layout cudafix reads: nothing lists anything
  }
  if (!listed.empty())
    throw resolver::Error(
        fmt::format("a killed change waits to be recovered, but a dist's RECORD lists cudafix's own state or the "
                    "venv's files, so a wheel may have written its journal, and cudafix obeys none of it: {}; nothing "
                    "was changed (uninstall that dist first)",
                    fmt::join(listed, "; ")));
}

// The trusted journals with neither commit nor abort. Only those are checked whole (distrust()
// asks the disk about every op): this runs each time the lock is taken.
std::vector<std::string> unfinished_transactions(const std::string& root) {
  std::vector<std::string> ids;
  for_each_transaction_folder(root, [&](const std::string& name, const std::string& dir) {
    try {
      const auto tx = read_journal(dir + "/journal");
      if ((tx.state == TxState::open || tx.state == TxState::intended) && distrust(tx, root, name).empty())
        ids.push_back(name);
    } catch (const resolver::Error&) {
      // No begin record: nothing was done (tidy_state removes the folder).
    }
  });
  return ids;
}

}  // namespace

// Every transaction a killed run left, the lock held: the one `active` names, and any other
// trusted journal with neither commit nor abort (only a killed run leaves one; versions before
// this one could also overwrite `active` while it named one); and what a killed prune left.
void recover_held(const std::string& root, const std::function<void(const std::string&)>& say) {
  const bool active = exists_nofollow(active_file(root));
  if (auto why = resolver::state_folder_problem(root); !why.empty()) {
    if (!active) return;  // nothing to recover; a command that writes refuses such state itself
    throw resolver::Error(
        fmt::format("{} names a transaction to recover, but cudafix's state cannot be trusted: {}; "
                    "nothing was changed",
                    active_file(root), why));
  }
  std::set<std::string, std::greater<>> ids;  // newest first
  if (active) {
    if (const auto id_text = resolver::try_read_file(active_file(root), k_max_active)) {
      const std::string id(resolver::trim(*id_text));
      if (!resolver::is_transaction_id(id))
        throw resolver::Error(
            fmt::format("{} names '{}', which is not a transaction id: cudafix did not write it, and "
                        "left it as it is (remove the file once you know where it came from)",
                        active_file(root), id.substr(0, 64)));
      ids.insert(id);
    }
  }
  for (const auto& id : unfinished_transactions(root)) ids.insert(id);
  if (!ids.empty()) refuse_state_a_wheel_wrote(root);
  for (const auto& id : ids) recover_one(root, id, say);
  if (active) remove_file(active_file(root));
  tidy_snapshots(root, say);
  tidy_guard_records(root, say);
  finish_pruning(root, say);
}

// What a kill left of finished transactions is removed before the next begins: staging, the
// backups of undone ones, and folders whose journal never got its begin record.
void tidy_state(const std::string& root) {
  for_each_transaction_folder(root, [&](const std::string& name, const std::string& dir) {
    if (never_began(dir)) {
      remove_tree(dir);
      return;
    }
    if (!exists_nofollow(dir + "/new")) return;  // committed (or cleaned): nothing to tidy
    try {
      const auto tx = read_journal(dir + "/journal");
      if (distrust(tx, root, name).empty() && (tx.state == TxState::committed || tx.state == TxState::aborted))
        clear_staging(dir, tx.state == TxState::committed);
    } catch (const resolver::Error&) {
      // Unreadable: left as it is (history and doctor say so).
    }
  });
}

void recover(const std::string& root, std::chrono::milliseconds wait,
             const std::function<void(const std::string&)>& say) {
  if (!exists_nofollow(active_file(root))) return;
  confine_to(root);
  const EnvLock lock(root, wait, say);  // which recovers
}

}  // namespace cudafix::installer::txn
