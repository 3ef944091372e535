// The transactions an environment holds, as history, rollback and pruning read them
// (installer/txn/transaction.hpp): only journals distrust() accepts, newest first; a rollback
// planned from one, checked against what the disk holds now; and the backups beyond those kept.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "installer/txn/file_ops.hpp"
#include "installer/txn/state_files.hpp"
#include "installer/txn/transaction.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/state_folder.hpp"

namespace cudafix::installer::txn {

namespace fs = std::filesystem;

namespace {

// The pruned list: ids only, each checked, the newest k_pruned_kept kept.
std::vector<std::string> read_pruned(const std::string& root) {
  std::vector<std::string> ids;
  struct stat st {};
  if (::lstat(pruned_file(root).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return ids;  // never through a link
  const auto text = resolver::try_read_file(pruned_file(root), k_pruned_kept * 80);
  if (!text) return ids;
  for (auto line : resolver::split(*text, '\n'))
    if (resolver::is_transaction_id(line)) ids.emplace_back(line);
  return ids;
}

void remember_pruned(const std::string& root, const std::vector<std::string>& newly) {
  if (newly.empty()) return;
  auto ids = read_pruned(root);
  ids.insert(ids.end(), newly.begin(), newly.end());
  if (ids.size() > k_pruned_kept) ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(k_pruned_kept));
  write_synced(pruned_file(root), fmt::format("{}\n", fmt::join(ids, "\n")));
  sync_path(state_dir(root));
}

}  // namespace

std::vector<JournalRead> transactions(const std::string& root, std::vector<std::string>* distrusted) {
  std::vector<JournalRead> out;
  if (auto why = resolver::state_folder_problem(root); !why.empty()) {
    if (distrusted) distrusted->push_back(why);
    return out;
  }
  // An id in the pruned list is pruned even where a kill left its journal: it is never offered
  // for rollback, and the next holder of the lock removes its folder (finish_pruning).
  const auto pruned_ids = read_pruned(root);
  const std::set<std::string> pruned(pruned_ids.begin(), pruned_ids.end());
  std::error_code ec;
  fs::directory_iterator listing(tx_root(root), ec);
  // Another user's journals (0700) are not "no transactions".
  if (ec == std::errc::permission_denied || ec == std::errc::operation_not_permitted)
    throw resolver::Error(resolver::cannot("list the transactions in", tx_root(root), ec.value()));
  for (fs::directory_iterator it = std::move(listing), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string folder = tx_root(root) + "/" + name;
    struct stat st {};
    if (!resolver::is_transaction_id(name) || ::lstat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      if (distrusted)
        distrusted->push_back(fmt::format("{}: not a transaction's folder (its name or type)", folder.substr(0, 512)));
      continue;
    }
    if (pruned.count(name)) continue;
    try {
      auto tx = read_journal(folder + "/journal");
      if (auto why = distrust(tx, root, name); !why.empty()) {
        if (distrusted) distrusted->push_back(fmt::format("{}/journal: {}", folder, why));
        continue;
      }
      out.push_back(std::move(tx));
    } catch (const resolver::Error&) {
      // A folder whose journal never got its begin record holds nothing that was done.
    }
  }
  std::sort(out.begin(), out.end(), [](const JournalRead& a, const JournalRead& b) { return a.id > b.id; });
  // A committed rollback's commit record is the mark that what it undoes is undone.
  std::map<std::string, std::string> undone_by;
  for (const auto& t : out)
    if (t.state == TxState::committed && t.undoes) undone_by.emplace(*t.undoes, t.id);
  for (auto& t : out)
    if (const auto it = undone_by.find(t.id); it != undone_by.end()) t.rolled_back_by = it->second;
  return out;
}

namespace {

// Whether `path`, or a path below it, is in `paths`.
bool at_or_below(const std::set<std::string>& paths, const std::string& path) {
  if (paths.count(path)) return true;
  const auto it = paths.lower_bound(path + "/");
  return it != paths.end() && it->starts_with(path + "/");
}

bool pip_rewrites(const RollbackOwners& owners, const std::string& path) {
  const auto name = resolver::base_name(path);
  return owners.reinstalled.count(resolver::parent_dir(path)) &&
         (name == "INSTALLER" || name == "RECORD" || name == "REQUESTED" || name == "direct_url.json");
}

}  // namespace

namespace {

// A rollback of `done` planned into `undo`: first what changed since `done` committed (the paths
// it left, and what appeared in the folders it made), then, where nothing did or --force, its ops
// undone newest first.
struct RollbackPlan {
  const JournalRead& done;
  Transaction& undo;
  bool force;
  const RollbackOwners& owners;
  std::vector<ChangedPath> changed;
  std::map<std::string, LeftType> left_type;
  // Folders `done` left that are something else now (a symlink put in their place): what lies
  // below them is not looked at through what replaced them.
  std::vector<std::string> replaced;
  std::set<std::string> kept;      // changed paths another dist lists now: they stay
  std::vector<std::string> aside;  // what appeared in `done`'s folders: taken aside

  bool below_replaced(const std::string& p) const {
    return std::any_of(replaced.begin(), replaced.end(),
                       [&](const std::string& f) { return resolver::is_within(p, f); });
  }

  // The paths `done` left that differ now.
  void left_paths_changed() {
    for (const auto& left : done.left) {
      left_type[left.path] = left.type;
      if (below_replaced(left.path)) continue;  // sorted by path: a folder comes before what it holds
      const auto what = change_at(left);
      if (!what || pip_rewrites(owners, left.path)) continue;
      if (left.type == LeftType::dir && left_now(left.path).type != LeftType::none) replaced.push_back(left.path);
      changed.push_back({left.path, *what, at_or_below(owners.others, left.path)});
    }
    if (force && !replaced.empty())
      throw resolver::Error(fmt::format(
          "cannot roll back {}, even with --force: {} (a folder it left) is not a folder now, and cudafix neither "
          "follows nor moves what was put in its place; nothing was changed (remove it first)",
          done.id, fmt::join(replaced, ", ")));
    for (const auto& c : changed)
      if (c.kept) kept.insert(c.path);
  }

  // Folders `done` made that now hold what it did not put there: another tool's files (a file in
  // a dist-info cudafix wrote) are changes; bytecode Python compiled there goes with the folder,
  // as pip's uninstall takes it; another dist's files (the `nvidia/` every NVIDIA wheel shares)
  // are no change, and stay with the folder.
  void created_in_its_folders() {
    std::set<std::string> touched;
    for (const auto& op : done.ops)
      for (const std::string* p : {&op.from, &op.to, &op.path})
        if (!p->empty()) touched.insert(*p);
    for (const auto& op : done.ops) {
      if (op.kind != OpKind::mkdir || left_type[op.path] != LeftType::dir || below_replaced(op.path) ||
          left_now(op.path).type != LeftType::dir)
        continue;
      std::error_code ec;
      for (fs::directory_iterator it(op.path, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string entry = op.path + "/" + it->path().filename().string();
        if (touched.count(entry) || at_or_below(owners.others, entry)) continue;
        aside.push_back(entry);
        if (it->path().filename() != "__pycache__" && !pip_rewrites(owners, entry))
          changed.push_back({entry, "was created"});
      }
    }
  }

  // Where a backup of `done` comes back, what is there now goes aside: never another dist's.
  void take_aside(const std::string& path) {
    if (at_or_below(kept, path) || at_or_below(owners.others, path))
      throw resolver::Error(fmt::format(
          "cannot roll back {}, even with --force: {} is where its backup goes back, and another installed dist "
          "lists what is there now; nothing was changed (uninstall that dist first)",
          done.id, path));
    undo.move_aside(path);
  }

  void undo_move(const Op& op) {
    if (in_state(op.from, undo.root())) {
      // `done` put op.to in place: it goes aside into this rollback's own backups. Gone (and
      // so said above, or by a journal from before `left` records), there is nothing to keep.
      if (kept.count(op.to)) return;  // another dist's now: it stays
      if (undo.will_exist(op.to))
        undo.move_aside(op.to);
      else if (done.left.empty() && !force)
        throw resolver::Error(
            fmt::format("cannot roll back {}: {} (what it put there) is gone; nothing was changed", done.id, op.to));
      return;
    }
    // `done` moved op.from aside: its backup comes back, what is there now goes aside.
    if (!undo.will_exist(op.to))
      throw resolver::Error(fmt::format("cannot roll back {}: its backup of {} ({}) is gone; nothing was changed",
                                        done.id, op.from, op.to));
    if (undo.will_exist(op.from)) take_aside(op.from);
    std::vector<std::string> missing;
    for (std::string p = resolver::parent_dir(op.from); !undo.will_exist(p) && p != undo.root() && p != "/";
         p = resolver::parent_dir(p))
      missing.push_back(p);
    for (auto m = missing.rbegin(); m != missing.rend(); ++m) undo.make_folder(*m, 0755);
    undo.move(op.to, op.from);
  }

  void undo_ops() {
    undo.undoes(done.id);
    for (const auto& entry : aside) undo.move_aside(entry);
    for (auto it = done.ops.rbegin(); it != done.ops.rend(); ++it) {
      const Op& op = *it;
      switch (op.kind) {
        case OpKind::move:
          undo_move(op);
          break;
        case OpKind::mkdir:
          // A folder gone since (another tool removed it) is not removed again, so that undoing
          // this rollback does not make it.
          if (undo.will_exist(op.path)) undo.remove_folder_if_empty(op.path, op.mode);
          break;
        case OpKind::rmdir:
          // Made again only where `done` removed it (its left record says so; a folder that held
          // something stayed).
          if (!undo.will_exist(op.path) && (done.left.empty() || left_type[op.path] == LeftType::none))
            undo.make_folder(op.path, op.mode);
          break;
      }
    }
  }
};

}  // namespace

std::vector<ChangedPath> plan_rollback(const JournalRead& done, Transaction& undo, bool force,
                                       const RollbackOwners& owners) {
  if (!done.unreadable.empty())
    throw resolver::Error(
        fmt::format("cannot roll back {}: its journal has {}; nothing was changed", done.id, done.unreadable));
  if (auto why = distrust(done, undo.root(), done.id); !why.empty())
    throw resolver::Error(fmt::format("cannot roll back {}: its journal {}; nothing was changed", done.id, why));
  RollbackPlan plan{done, undo, force, owners, {}, {}, {}, {}, {}};
  plan.left_paths_changed();
  plan.created_in_its_folders();
  if (!plan.changed.empty() && !force) return plan.changed;
  plan.undo_ops();
  return plan.changed;
}

std::uint64_t bytes_held(const std::string& dir) {
  std::uint64_t total = 0;
  for (const char* below : {"/old", "/new"}) {
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir + below, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
      struct stat st {};
      if (::lstat(it->path().c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
        total += static_cast<std::uint64_t>(st.st_blocks) * 512;
    }
  }
  return total;
}

bool was_pruned(const std::string& root, const std::string& id) {
  const auto ids = read_pruned(root);
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

namespace {

bool holds_files(const std::string& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->symlink_status(ec).type() != fs::file_type::directory) return true;
  return false;
}

// Whether a transaction's journal says it is unfinished: recovery's to undo, never pruning's
// (which takes only finished ones), whatever the pruned list says.
bool unfinished(const std::string& dir) {
  try {
    const auto tx = read_journal(dir + "/journal");
    return tx.state == TxState::open || tx.state == TxState::intended;
  } catch (const resolver::Error&) {
    return false;
  }
}

// The transaction folders a killed prune left: those whose id the pruned list holds (the id is
// recorded first), and those whose journal is gone but whose backups are not (a version that
// removed the folder before recording the id, in the order readdir gave).
std::vector<PruneLeftover> leftovers(const std::string& root) {
  std::vector<PruneLeftover> out;
  if (!resolver::state_folder_problem(root).empty()) return out;
  const auto ids = read_pruned(root);
  const std::set<std::string> pruned(ids.begin(), ids.end());
  for_each_transaction_folder(root, [&](const std::string& name, const std::string& dir) {
    const bool listed = pruned.count(name) > 0;
    if (listed ? unfinished(dir) : exists_nofollow(dir + "/journal") || !holds_files(dir + "/old")) return;
    out.push_back({name, bytes_held(dir), listed});
  });
  std::sort(out.begin(), out.end(), [](const PruneLeftover& a, const PruneLeftover& b) { return a.id > b.id; });
  return out;
}

// Intent before effect: the folder's backups and staging go first, its journal next, the folder
// last, so that a kill at any point leaves a folder the pruned list names (finish_pruning removes
// it) and never backups that no journal explains.
void remove_pruned(const std::string& dir) {
  remove_tree(dir + "/old");
  kill_point("prune");
  remove_tree(dir + "/new");
  kill_point("prune");
  remove_file(dir + "/journal");
  kill_point("prune");
  remove_tree(dir);
  kill_point("prune");
}

}  // namespace

std::vector<PruneLeftover> prune_leftovers(const std::string& root) { return leftovers(root); }

void finish_pruning(const std::string& root, const std::function<void(const std::string&)>& say) {
  const auto left = leftovers(root);
  std::vector<std::string> newly;
  for (const auto& l : left)
    if (!l.listed) newly.push_back(l.id);
  std::sort(newly.begin(), newly.end());
  remember_pruned(root, newly);
  for (const auto& l : left) {
    remove_pruned(tx_root(root) + "/" + l.id);
    say(fmt::format("recovering: removed {} of transaction {}, which a killed prune left ({:.1f} MB); it was pruned",
                    l.listed ? "what remained" : "the backups", l.id, static_cast<double>(l.bytes) / 1e6));
  }
}

Pruned prune_transactions(const std::string& root, std::size_t keep) {
  Pruned pruned;
  if (keep == 0) return pruned;
  std::size_t committed = 0, undone = 0;
  for (const auto& t : transactions(root)) {
    if (t.state == TxState::committed && ++committed <= keep) continue;
    if (t.state == TxState::aborted && ++undone <= keep) continue;
    if (t.state != TxState::committed && t.state != TxState::aborted) continue;
    pruned.ids.push_back(t.id);
  }
  if (pruned.ids.empty()) return pruned;
  // The ids first, synced: from then on they are pruned, whatever a kill leaves of their folders.
  remember_pruned(root, std::vector<std::string>(pruned.ids.rbegin(), pruned.ids.rend()));
  kill_point("prune");
  for (const auto& id : pruned.ids) {
    const std::string dir = tx_root(root) + "/" + id;  // a checked id: transactions() says so
    pruned.bytes += bytes_held(dir);
    remove_pruned(dir);
  }
  return pruned;
}

}  // namespace cudafix::installer::txn
