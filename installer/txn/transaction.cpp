#include "installer/txn/transaction.hpp"

#include <fcntl.h>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "installer/txn/file_ops.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::installer::txn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string active_file(const std::string& root) { return root + "/.cudafix/active"; }

// Sortable and unique: UTC time to the millisecond, then the process id.
std::string new_id() {
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  static std::atomic<int> counter{0};
  return fmt::format("{:%Y%m%dT%H%M%S}.{:03d}-{}-{}", tm, ms, ::getpid(), counter++);
}

json op_json(const Op& op, std::size_t n) {
  json j{{"record", "op"}, {"n", n}};
  switch (op.kind) {
    case OpKind::move:
      j["op"] = "move";
      j["from"] = op.from;
      j["to"] = op.to;
      break;
    case OpKind::rmdir:
      j["op"] = "rmdir";
      j["path"] = op.path;
      j["mode"] = op.mode;
      break;
    case OpKind::mkdir:
      j["op"] = "mkdir";
      j["path"] = op.path;
      j["mode"] = op.mode;
      break;
  }
  return j;
}

void carry_out_op(const Op& op) {
  switch (op.kind) {
    case OpKind::move:
      rename_path(op.from, op.to);
      break;
    case OpKind::mkdir:
      make_dir(op.path, op.mode);
      break;
    case OpKind::rmdir:
      (void)remove_dir_if_empty(op.path);
      break;
  }
}

// Undoes `ops` (the first `done` of them may have happened), newest first, each by what the
// disk shows, so that undoing twice, or undoing what never happened, changes nothing.
void undo_ops(const std::vector<Op>& ops, std::size_t done) {
  for (std::size_t i = done; i-- > 0;) {
    const Op& op = ops[i];
    switch (op.kind) {
      case OpKind::move:
        if (exists_nofollow(op.to) && !exists_nofollow(op.from)) rename_path(op.to, op.from);
        break;
      case OpKind::mkdir:
        if (exists_nofollow(op.path)) (void)remove_dir_if_empty(op.path);
        break;
      case OpKind::rmdir:
        if (!exists_nofollow(op.path)) make_dir(op.path, op.mode);
        break;
    }
  }
}

void sync_folders(const std::vector<Op>& ops) {
  std::set<std::string> folders;
  for (const auto& op : ops) {
    const auto add = [&](const std::string& p) {
      if (!p.empty()) folders.insert(resolver::parent_dir(p));
    };
    add(op.from);
    add(op.to);
    add(op.path);
  }
  for (const auto& f : folders)
    if (exists_nofollow(f)) sync_path(f);
}

}  // namespace

std::string tx_root(const std::string& root) { return root + "/.cudafix/tx"; }

EnvLock::EnvLock(const std::string& root, std::chrono::milliseconds wait,
                 const std::function<void(const std::string&)>& waiting) {
  const std::string path = root + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw resolver::Error(fmt::format("{}: cannot open the environment's lock: {}", path, std::strerror(errno)));
  const auto deadline = std::chrono::steady_clock::now() + wait;
  bool said = false;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      const int err = errno;
      ::close(fd_);
      throw resolver::Error(fmt::format("{}: flock: {}", path, std::strerror(err)));
    }
    if (!said && waiting) waiting(fmt::format("waiting for {}: another process (uv or cudafix) holds it", path));
    said = true;
    if (std::chrono::steady_clock::now() >= deadline) {
      ::close(fd_);
      throw resolver::Error(
          fmt::format("{} is held by another process (uv or cudafix), which did not release it "
                      "within {} s; nothing was changed",
                      path, static_cast<double>(wait.count()) / 1000.0));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

EnvLock::~EnvLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

Transaction::Transaction(const std::string& root, const std::string& command) : root_(root), id_(new_id()) {
  std::error_code ec;
  fs::create_directories(dir() + "/old", ec);
  fs::create_directories(dir() + "/new", ec);
  if (ec) throw resolver::Error(fmt::format("{}: cannot make the transaction's folder: {}", dir(), ec.message()));
  write_synced(active_file(root_), id_ + "\n");
  append(json{{"record", "begin"},
              {"id", id_},
              {"time", static_cast<std::int64_t>(std::time(nullptr))},
              {"command", command},
              {"root", root_}}
             .dump());
  sync_path(dir());
}

std::string Transaction::dir() const { return tx_root(root_) + "/" + id_; }

void Transaction::append(const std::string& j) const {
  append_synced(dir() + "/journal", journal_line(j));
  journal_step();
}

bool Transaction::will_exist(const std::string& path) const {
  const auto it = planned_.find(path);
  return it != planned_.end() ? it->second : exists_nofollow(path);
}

void Transaction::move(const std::string& from, const std::string& to) {
  Op op;
  op.kind = OpKind::move;
  op.from = from;
  op.to = to;
  ops_.push_back(op);
  // Everything planned below `from` moves with it.
  const std::string below = from + "/";
  std::vector<std::pair<std::string, bool>> moved;
  for (auto it = planned_.lower_bound(below); it != planned_.end() && it->first.starts_with(below);)
    moved.emplace_back(to + it->first.substr(from.size()), it->second), it = planned_.erase(it);
  for (auto& [p, e] : moved) planned_[p] = e;
  planned_[from] = false;
  planned_[to] = true;
}

void Transaction::move_aside(const std::string& path) {
  if (!resolver::is_within(path, root_) || path == root_)
    throw resolver::Error(fmt::format("{} is outside the environment {}; nothing was changed", path, root_));
  const std::string backup = dir() + "/old/" + resolver::relative_to(path, root_);
  std::error_code ec;
  fs::create_directories(resolver::parent_dir(backup), ec);
  if (ec) throw resolver::Error(fmt::format("{}: {}", resolver::parent_dir(backup), ec.message()));
  move(path, backup);
}

void Transaction::folder_op(OpKind kind, const std::string& path, unsigned mode) {
  Op op;
  op.kind = kind;
  op.path = path;
  op.mode = mode;
  ops_.push_back(op);
  planned_[path] = kind == OpKind::mkdir;
}

void Transaction::make_folder(const std::string& path, unsigned mode) { folder_op(OpKind::mkdir, path, mode); }

void Transaction::remove_folder_if_empty(const std::string& path, unsigned mode) {
  folder_op(OpKind::rmdir, path, mode);
}

void Transaction::put(const std::string& staged, const std::string& target, unsigned folder_mode) {
  if (will_exist(target)) move_aside(target);
  std::vector<std::string> missing;
  for (std::string p = resolver::parent_dir(target); !will_exist(p) && p != root_ && p != "/";
       p = resolver::parent_dir(p))
    missing.push_back(p);
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) make_folder(*it, folder_mode);
  move(staged, target);
}

void Transaction::carry_out() { carry_out({}); }

void Transaction::carry_out(const std::function<void(std::size_t)>& check) {
  started_ = true;
  std::string intent;
  for (std::size_t i = 0; i < ops_.size(); ++i) intent += journal_line(op_json(ops_[i], i).dump());
  intent += journal_line(json{{"record", "intent_end"}, {"ops", ops_.size()}}.dump());
  std::size_t done = 0;
  try {
    append_synced(dir() + "/journal", intent);
    fault_trace_mark("intent");
    journal_step();
    std::size_t step = 0;
    for (; done < ops_.size(); ++done) {
      carry_out_op(ops_[done]);
      journal_step();
      if (progress_) progress_(done + 1, ops_.size());
      while (check && step < steps_.size() && steps_[step] == done + 1) check(step++);
    }
    sync_folders(ops_);
    append(json{{"record", "commit"}}.dump());
    fault_trace_mark("commit");
  } catch (const std::exception& e) {
    const std::string why = e.what();
    undo_ops(ops_, std::min(done + 1, ops_.size()));
    try {
      append(json{{"record", "aborted"}, {"why", why}}.dump());
    } catch (const std::exception&) {
      // The journal cannot be written (the disk is full): recovery finds the ops undone already.
    }
    ::unlink(active_file(root_).c_str());
    throw resolver::Error(fmt::format("{}; every change was undone", why));
  }
  ::unlink(active_file(root_).c_str());
}

void Transaction::abandon() {
  if (started_) return;
  started_ = true;
  std::error_code ec;
  fs::remove_all(dir(), ec);
  ::unlink(active_file(root_).c_str());
}

Transaction::~Transaction() { abandon(); }

std::vector<JournalRead> transactions(const std::string& root) {
  std::vector<JournalRead> out;
  std::error_code ec;
  for (fs::directory_iterator it(tx_root(root), ec), end; !ec && it != end; it.increment(ec)) {
    try {
      out.push_back(read_journal(it->path().string() + "/journal"));
    } catch (const resolver::Error&) {
      // A folder whose journal never got its begin record holds nothing that was done.
    }
  }
  std::sort(out.begin(), out.end(), [](const JournalRead& a, const JournalRead& b) { return a.id > b.id; });
  return out;
}

std::vector<std::string> recover(const std::string& root, std::chrono::milliseconds wait,
                                 const std::function<void(const std::string&)>& waiting) {
  if (!exists_nofollow(active_file(root))) return {};
  EnvLock lock(root, wait, waiting);
  const auto id_text = resolver::try_read_file(active_file(root));
  if (!id_text) return {};  // another run finished it while we waited
  const std::string id(resolver::trim(*id_text));
  std::vector<std::string> said;
  const std::string journal = tx_root(root) + "/" + id + "/journal";
  JournalRead tx;
  try {
    tx = read_journal(journal);
  } catch (const resolver::Error&) {
    ::unlink(active_file(root).c_str());
    said.push_back(fmt::format("recovering: transaction {} was stopped before it changed anything", id));
    return said;
  }
  if (!tx.unreadable.empty())
    throw resolver::Error(
        fmt::format("{}: {}: cudafix cannot tell what transaction {} changed, so it left it as it is (a newer cudafix "
                    "wrote it? that version can recover it)",
                    journal, tx.unreadable, id));
  if (tx.state == TxState::committed || tx.state == TxState::aborted) {
    said.push_back(fmt::format("recovering: transaction {} ({}) had {}; nothing to undo", id, tx.command,
                               tx.state == TxState::committed ? "committed" : "been undone"));
  } else {
    undo_ops(tx.ops, tx.ops.size());
    append_synced(journal,
                  journal_line(json{{"record", "aborted"}, {"why", "interrupted; undone by recovery"}}.dump()));
    said.push_back(fmt::format("recovering: transaction {} ({}) was interrupted{}; its {} changes were undone", id,
                               tx.command, tx.torn ? " (a torn journal tail was cut)" : "", tx.ops.size()));
  }
  ::unlink(active_file(root).c_str());
  return said;
}

void plan_rollback(const JournalRead& done, Transaction& undo) {
  if (!done.unreadable.empty())
    throw resolver::Error(
        fmt::format("cannot roll back {}: its journal has {}; nothing was changed", done.id, done.unreadable));
  for (auto it = done.ops.rbegin(); it != done.ops.rend(); ++it) {
    const Op& op = *it;
    switch (op.kind) {
      case OpKind::move: {
        if (!undo.will_exist(op.to))
          throw resolver::Error(
              fmt::format("cannot roll back {}: {} (what it moved to) is gone; nothing was changed", done.id, op.to));
        if (undo.will_exist(op.from)) undo.move_aside(op.from);
        std::vector<std::string> missing;
        for (std::string p = resolver::parent_dir(op.from); !undo.will_exist(p) && p != "/";
             p = resolver::parent_dir(p))
          missing.push_back(p);
        for (auto m = missing.rbegin(); m != missing.rend(); ++m) undo.make_folder(*m, 0755);
        undo.move(op.to, op.from);
        break;
      }
      case OpKind::mkdir:
        undo.remove_folder_if_empty(op.path, op.mode);
        break;
      case OpKind::rmdir:
        if (!undo.will_exist(op.path)) undo.make_folder(op.path, op.mode);
        break;
    }
  }
}

void mark_rolled_back(const std::string& root, const std::string& id, const std::string& by) {
  append_synced(tx_root(root) + "/" + id + "/journal",
                journal_line(json{{"record", "rolled_back_by"}, {"id", by}}.dump()));
}

std::uint64_t bytes_held(const std::string& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) total += static_cast<std::uint64_t>(st.st_size);
  }
  return total;
}

Pruned prune_transactions(const std::string& root, std::size_t keep) {
  Pruned pruned;
  if (keep == 0) return pruned;
  std::size_t finished = 0;
  for (const auto& t : transactions(root)) {
    if (t.state != TxState::committed && t.state != TxState::aborted) continue;
    if (++finished <= keep) continue;
    const std::string dir = tx_root(root) + "/" + t.id;
    const auto held = bytes_held(dir);
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) throw resolver::Error(fmt::format("{}: cannot remove an old transaction's backups: {}", dir, ec.message()));
    pruned.ids.push_back(t.id);
    pruned.bytes += held;
  }
  return pruned;
}

}  // namespace cudafix::installer::txn
