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
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "installer/txn/file_ops.hpp"
#include "installer/txn/state_files.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/state_folder.hpp"
#include "resolver/plan/provenance.hpp"  // sha256_of_file

namespace cudafix::installer::txn {

namespace fs = std::filesystem;
using nlohmann::json;

std::string active_file(const std::string& root) { return root + "/.cudafix/active"; }
std::string state_dir(const std::string& root) { return root + "/.cudafix"; }
std::string pruned_file(const std::string& root) { return root + "/.cudafix/pruned"; }

bool in_state(const std::string& p, const std::string& root) { return resolver::is_within(p, state_dir(root)); }

namespace {

std::int64_t ns_of(const struct timespec& t) { return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec; }

}  // namespace

// What is at `path` now, as a `left` record would say it.
Left left_now(const std::string& path) {
  Left l;
  l.path = path;
  struct stat st {};
  if (!exists_nofollow(path) || ::lstat(path.c_str(), &st) != 0) return l;
  if (S_ISDIR(st.st_mode)) {
    l.type = LeftType::dir;
    return l;
  }
  l.type = S_ISLNK(st.st_mode) ? LeftType::symlink : LeftType::file;
  l.dev = static_cast<std::uint64_t>(st.st_dev);
  l.ino = static_cast<std::uint64_t>(st.st_ino);
  l.size = static_cast<std::uint64_t>(st.st_size);
  l.mtime_ns = ns_of(st.st_mtim);
  l.ctime_ns = ns_of(st.st_ctim);
  return l;
}

// Whether what is at a path now is what a transaction left there. The inode, size and times
// alike say so at once; where they differ (a copy, an identical rewrite) the bytes decide, when
// the transaction knew them. Without the bytes, inode, size and mtime decide: a ctime moves with
// every rename (recovery's, a killed rollback's) and every hard link (a snapshot makes one per
// file), so alone it says nothing.
std::optional<std::string> change_at(const Left& was) {
  const Left now = left_now(was.path);
  if (was.type == LeftType::none) return now.type == LeftType::none ? std::nullopt : std::optional("was created");
  if (now.type == LeftType::none) return "was removed";
  if (now.type != was.type)
    return now.type == LeftType::symlink ? "was replaced by a symlink" : "was replaced by another kind of file";
  if (was.type == LeftType::dir) return std::nullopt;
  const bool same_file = now.dev == was.dev && now.ino == was.ino && now.size == was.size;
  if (same_file && now.mtime_ns == was.mtime_ns && now.ctime_ns == was.ctime_ns) return std::nullopt;
  if (!was.sha256.empty())
    return now.type == LeftType::file && now.size == was.size && resolver::sha256_of_file(was.path) == was.sha256
               ? std::nullopt
               : std::optional("was changed");
  return same_file && now.mtime_ns == was.mtime_ns ? std::nullopt : std::optional("was changed");
}

// Removes what a finished transaction no longer needs: its staging always, and its backups when
// it was undone (old/ first, so that a folder with no new/ is a committed one or a clean one).
void clear_staging(const std::string& tx_dir, bool keep_backups) {
  try {
    if (!keep_backups) remove_tree(tx_dir + "/old");
    remove_tree(tx_dir + "/new");
  } catch (const std::exception&) {
    // Left for the next transaction's start, which removes it again (tidy_state).
  }
}

// Undoes `ops` (the first `done` of them may have happened), newest first, each by what the
// disk shows, so that undoing twice, or undoing what never happened, changes nothing. An op that
// cannot be undone does not stop the others: each failure is returned, naming where its path is.
std::vector<std::string> undo_ops(const std::vector<Op>& ops, std::size_t done) {
  std::vector<std::string> failed;
  for (std::size_t i = done; i-- > 0;) {
    const Op& op = ops[i];
    try {
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
    } catch (const std::exception& e) {
      failed.push_back(op.kind == OpKind::move ? fmt::format("{} is still at {} ({})", op.from, op.to, e.what())
                                               : fmt::format("{} ({})", op.path, e.what()));
    }
  }
  return failed;
}

namespace {

// Whether `p` is a path a journal of `root` may name: absolute, normal, beneath the root (not
// the root itself), and, inside cudafix's own folder, only in the new/ or old/ of a transaction
// `ids` names (any, where none are given).
std::string path_problem(const std::string& p, const std::string& root, const std::vector<std::string>& ids = {}) {
  if (p.empty() || p[0] != '/' || resolver::lexically_normal(p) != p || p.find("//") != std::string::npos)
    return fmt::format("'{}' is not a normal absolute path", p);
  if (p == root || !resolver::is_within(p, root)) return fmt::format("'{}' is outside the environment {}", p, root);
  const std::string rel = p.substr(root.size() + 1);
  if (!resolver::is_protected_path(rel)) return {};
  if (!rel.starts_with(".cudafix/")) return fmt::format("'{}' is the environment's own {}", p, rel);
  // .cudafix/tx/<id>/(new|old)[/...]
  const std::string_view r(rel);
  const auto id_end = r.find('/', 12);
  const bool in_tx = r.starts_with(".cudafix/tx/") && id_end != std::string_view::npos &&
                     resolver::is_transaction_id(r.substr(12, id_end - 12)) &&
                     (r.substr(id_end).starts_with("/new") || r.substr(id_end).starts_with("/old")) &&
                     (r.size() == id_end + 4 || r[id_end + 4] == '/');
  if (!in_tx) return fmt::format("'{}' is cudafix's own state, not a transaction's new/ or old/", p);
  if (!ids.empty() && std::find(ids.begin(), ids.end(), r.substr(12, id_end - 12)) == ids.end())
    return fmt::format("'{}' is another transaction's folder", p);
  return {};
}

// `p` with the folders on its way resolved (the nearest one that exists, by realpath): where a
// symlinked folder inside the root leads, which the text of `p` does not say.
std::string resolved_path(const std::string& p) {
  std::vector<std::string> rest{std::string(resolver::base_name(p))};
  std::string head = resolver::parent_dir(p);
  struct stat st {};
  while (head.size() > 1 && ::lstat(head.c_str(), &st) != 0) {
    rest.emplace_back(resolver::base_name(head));
    head = resolver::parent_dir(head);
  }
  std::string out = resolver::real_path_of(head);
  for (auto it = rest.rbegin(); it != rest.rend(); ++it) out += (out == "/" ? "" : "/") + *it;
  return out;
}

// A path's problem as written and as the disk resolves it.
std::string named_path_problem(const std::string& p, const std::string& root, const std::vector<std::string>& ids) {
  if (auto why = path_problem(p, root, ids); !why.empty()) return why;
  const std::string real = resolved_path(p);
  if (real == p) return {};
  if (real == root || !resolver::is_within(real, root))
    return fmt::format("'{}' leads outside the environment {} (a symlinked folder on the way, to {})", p, root, real);
  if (auto why = path_problem(real, root, ids); !why.empty())
    return fmt::format("'{}' leads, through a symlinked folder, to {}", p, why);
  return {};
}

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

void for_each_transaction_folder(const std::string& root,
                                 const std::function<void(const std::string&, const std::string&)>& fn) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(tx_root(root), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string dir = tx_root(root) + "/" + name;
    struct stat st {};
    if (resolver::is_transaction_id(name) && ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fn(name, dir);
  }
}

std::string distrust(const JournalRead& tx, const std::string& root, std::string_view folder) {
  if (!tx.unreadable.empty()) return tx.unreadable;
  if (!resolver::is_transaction_id(tx.id) || tx.id != folder)
    return fmt::format("its id '{}' is not the transaction id its folder is named by", tx.id.substr(0, 64));
  if (tx.root != root) return fmt::format("it was written for {}, not this environment", tx.root);
  // Its own folder, and for a rollback the folder of the transaction it undoes (whose backups
  // it moves back): no other transaction's.
  std::vector<std::string> ids{tx.id};
  if (tx.command.starts_with("rollback ") && resolver::is_transaction_id(std::string_view(tx.command).substr(9)))
    ids.push_back(tx.command.substr(9));
  if (tx.undoes && (ids.size() < 2 || *tx.undoes != ids[1] || *tx.undoes >= tx.id))
    return fmt::format("its commit undoes '{}', which is not the older transaction its command rolls back",
                       tx.undoes->substr(0, 64));
  // A folder the transaction left that something else (a symlink) replaced since is a change
  // after it, which a rollback names and refuses, not a sign that cudafix did not write the
  // journal: what lies below it is checked as written, never through what replaced it.
  std::vector<std::string> replaced;
  for (const auto& left : tx.left) {
    struct stat st {};
    if (left.type == LeftType::dir && path_problem(left.path, root, ids).empty() &&
        ::lstat(left.path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
      replaced.push_back(left.path + "/");
  }
  const auto on_disk = [&](const std::string& p) {
    return std::none_of(replaced.begin(), replaced.end(), [&](const std::string& f) { return p.starts_with(f); });
  };
  const auto problem = [&](const std::string& p) {
    return on_disk(p) ? named_path_problem(p, root, ids) : path_problem(p, root, ids);
  };
  for (std::size_t i = 0; i < tx.ops.size(); ++i) {
    const Op& op = tx.ops[i];
    if (op.mode > 07777) return fmt::format("op {}: mode {:o} is not a file mode", i, op.mode);
    for (const std::string* p : op.kind == OpKind::move ? std::vector{&op.from, &op.to} : std::vector{&op.path})
      if (auto why = problem(*p); !why.empty()) return fmt::format("op {}: {}", i, why);
  }
  for (const auto& left : tx.left) {
    if (auto why = problem(left.path); !why.empty()) return fmt::format("left record: {}", why);
    if (in_state(left.path, root)) return fmt::format("left record: '{}' is cudafix's own state", left.path);
  }
  // Normal text is not enough: a folder on the way may be a symlink leading out. Asked through
  // the confined calls (where the root is registered), which refuse such a path by name.
  for (std::size_t i = 0; i < tx.ops.size(); ++i) {
    const Op& op = tx.ops[i];
    try {
      for (const std::string* p : {&op.from, &op.to, &op.path})
        if (!p->empty() && on_disk(*p)) (void)exists_nofollow(*p);
    } catch (const resolver::Error& e) {
      return fmt::format("op {}: {}", i, e.what());
    }
  }
  for (const auto& left : tx.left) {
    try {
      if (on_disk(left.path)) (void)exists_nofollow(left.path);
    } catch (const resolver::Error& e) {
      return fmt::format("left record: {}", e.what());
    }
  }
  return {};
}

EnvLock::EnvLock(const std::string& root, std::chrono::milliseconds wait,
                 const std::function<void(const std::string&)>& say) {
  const std::string path = root + "/.lock";
  // Never through a symlink (O_NOFOLLOW, and beneath the root once confined): a planted .lock
  // link would otherwise make the file it names.
  try {
    fd_ = open_file(path, O_RDWR | O_CREAT, 0644);
  } catch (const resolver::Error& e) {
    throw resolver::Error(fmt::format("cannot open the environment's lock: {}", e.what()));
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  bool said = false;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      const int err = errno;
      ::close(fd_);
      throw resolver::Error(fmt::format("{}: flock: {}", path, std::strerror(err)));
    }
    if (!said && say) say(fmt::format("waiting for {}: another process (uv or cudafix) holds it", path));
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
  // The holder may have been killed mid-change: what it left is recovered before anything is
  // read or planned under this lock.
  try {
    confine_to(root);
    recover_held(
        root, say ? say : [](const std::string&) {});
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

EnvLock::~EnvLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

Transaction::Transaction(const std::string& root, const std::string& command) : root_(root), id_(new_id()) {
  confine_to(root_);
  make_state_folders(root_);
  // The caller holds the lock, which recovered what a killed run left; `active` naming a
  // transaction still would mean a writer that took no lock: never overwritten.
  if (const auto other = resolver::try_read_file(active_file(root_), k_max_active))
    throw resolver::Error(
        fmt::format("{} names transaction {}, which is not finished; nothing was changed (any cudafix command "
                    "recovers it under the environment's lock)",
                    active_file(root_), std::string(resolver::trim(*other)).substr(0, 64)));
  tidy_state(root_);
  make_dir(dir(), 0700);
  make_dir(dir() + "/old", 0700);
  make_dir(dir() + "/new", 0700);
  sync_path(tx_root(root_));  // the transaction's folder is an entry of tx/ that recovery relies on
  write_synced(active_file(root_), id_ + "\n");
  sync_path(state_dir(root_));
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
  if (auto why = path_problem(path, root_); !why.empty())
    throw resolver::Error(fmt::format("refusing to move {} aside: {}; nothing was changed", path, why));
  const std::string backup = dir() + "/old/" + resolver::relative_to(path, root_);
  // A second move aside of one path would move what the first put there over its backup, and
  // undoing both would lose the file: a planning bug, refused before anything changes.
  if (const auto it = planned_.find(backup); it != planned_.end() && it->second)
    throw resolver::Error(fmt::format("{} would be moved aside twice in one transaction; nothing was changed", path));
  make_dirs(resolver::parent_dir(backup), 0700);
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

void Transaction::put(const std::string& staged, const std::string& target, unsigned folder_mode,
                      const std::string& sha256) {
  if (will_exist(target)) move_aside(target);
  std::vector<std::string> missing;
  for (std::string p = resolver::parent_dir(target); !will_exist(p) && p != root_ && p != "/";
       p = resolver::parent_dir(p))
    missing.push_back(p);
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) make_folder(*it, folder_mode);
  move(staged, target);
  if (sha256.empty())
    hashes_.erase(target);
  else
    hashes_[target] = sha256;
}

std::string Transaction::commit_records() const {
  std::set<std::string> touched;
  for (const auto& op : ops_)
    for (const std::string* p : {&op.from, &op.to, &op.path})
      if (!p->empty() && !in_state(*p, root_)) touched.insert(*p);
  std::string records;
  for (const auto& path : touched) {
    Left left = left_now(path);
    if (left.type == LeftType::file)
      if (const auto it = hashes_.find(path); it != hashes_.end()) left.sha256 = it->second;
    records += journal_line(left_json(left));
  }
  json commit{{"record", "commit"}};
  if (!undoes_.empty()) commit["undoes"] = undoes_;
  return records + journal_line(commit.dump());
}

// The files of the environment the ops change, counted before they run (a folder moved counts
// the files it holds, a file replaced counts once): what history says beside the steps, where
// the op count says little (a dist-info folder moved aside whole is one op).
std::size_t Transaction::files_changed() const {
  std::set<std::string> files;
  for (const auto& op : ops_) {
    if (op.kind != OpKind::move) continue;
    const std::string& place = in_state(op.to, root_) ? op.from : op.to;  // the environment's side
    if (in_state(place, root_)) continue;
    struct stat st {};
    if (::lstat(op.from.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      files.insert(place);
      continue;
    }
    std::error_code ec;
    for (fs::recursive_directory_iterator it(op.from, ec), end; !ec && it != end; it.increment(ec))
      if (it->symlink_status(ec).type() != fs::file_type::directory)
        files.insert(place + it->path().string().substr(op.from.size()));
  }
  return files.size();
}

std::set<std::string> Transaction::step_paths(std::size_t step) const {
  std::set<std::string> out;
  if (step >= steps_.size()) return out;
  const std::string own = dir() + "/";
  for (std::size_t i = step == 0 ? 0 : steps_[step - 1]; i < steps_[step]; ++i) {
    const Op& op = ops_[i];
    if (op.kind != OpKind::move) {
      out.insert(op.path);
      continue;
    }
    if (!op.from.starts_with(own)) out.insert(op.from);
    if (!op.to.starts_with(own)) out.insert(op.to);
  }
  return out;
}

void Transaction::carry_out() { carry_out({}); }

void Transaction::carry_out(const std::function<void(std::size_t)>& check) {
  started_ = true;
  std::string intent;
  for (std::size_t i = 0; i < ops_.size(); ++i) intent += journal_line(op_json(ops_[i], i).dump());
  // A transaction without marked steps (remove, rollback) is one step.
  const std::size_t steps = steps_.empty() ? (ops_.empty() ? 0 : 1) : steps_.size();
  intent += journal_line(
      json{{"record", "intent_end"}, {"ops", ops_.size()}, {"steps", steps}, {"files", files_changed()}}.dump());
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
    // What was left at each path, and the commit, in one synced write: a commit never lacks them.
    append_synced(dir() + "/journal", commit_records());
    journal_step();
    fault_trace_mark("commit");
  } catch (const std::exception& e) {
    const std::string why = e.what();
    const auto stuck = undo_ops(ops_, std::min(done + 1, ops_.size()));
    if (!stuck.empty()) {
      // The journal and active stay: the next command's recovery tries again.
      throw resolver::Error(fmt::format("{}; undoing it failed for {} of the changes, which recovery will retry: {}",
                                        why, stuck.size(), fmt::join(stuck, "; ")));
    }
    try {
      append(json{{"record", "aborted"}, {"why", why}}.dump());
    } catch (const std::exception&) {
      // The journal cannot be written (the disk is full): recovery finds the ops undone already.
    }
    clear_staging(dir(), false);
    remove_file(active_file(root_));
    throw resolver::Error(fmt::format("{}; every change was undone", why));
  }
  remove_file(active_file(root_));
  clear_staging(dir(), true);
}

void Transaction::abandon() {
  if (started_) return;
  started_ = true;
  try {
    remove_tree(dir());
    remove_file(active_file(root_));
  } catch (const std::exception&) {
    // Left for the next transaction's start: one never carried out holds nothing the
    // environment needs.
  }
}

Transaction::~Transaction() { abandon(); }

void make_state_folders(const std::string& root) {
  if (auto why = resolver::state_folder_problem(root); !why.empty())
    throw resolver::Error(fmt::format("cudafix's state cannot be trusted: {}; nothing was changed", why));
  const bool made = !exists_nofollow(state_dir(root)) || !exists_nofollow(tx_root(root));
  make_dir(state_dir(root), 0700);
  make_dir(tx_root(root), 0700);
  if (made) {
    sync_path(state_dir(root));
    sync_path(root);
  }
}

namespace {

// The mount a path is on: its device and, where name_to_handle_at answers, its mount id, which
// tells two bind mounts of one file system apart as rename does (-1 where it does not answer).
struct Mount {
  int id = -1;
  dev_t dev = 0;
};
std::optional<Mount> mount_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  // A file_handle ends in a flexible array: room for the largest handle, aligned as one.
  alignas(file_handle) unsigned char room[sizeof(file_handle) + MAX_HANDLE_SZ] = {};
  auto* handle = reinterpret_cast<file_handle*>(room);
  handle->handle_bytes = MAX_HANDLE_SZ;
  Mount m;
  m.dev = st.st_dev;
  if (::name_to_handle_at(AT_FDCWD, path.c_str(), handle, &m.id, 0) != 0) m.id = -1;
  return m;
}

}  // namespace

void check_one_file_system(const resolver::EnvLayout& layout) {
  // Where the transaction's backups and staging go (.cudafix/ is made in the root when absent).
  const std::string state = layout.root_real + "/.cudafix";
  const std::string held = ::access(state.c_str(), F_OK) == 0 ? state : layout.root_real;
  const auto home = mount_of(held);
  if (!home) return;
  for (const auto& site : layout.sites) {
    if (!resolver::is_within(site.real, layout.root_real)) continue;  // a system site: cudafix does not change it
    const auto there = mount_of(site.real);
    if (!there) continue;
    const bool apart = there->dev != home->dev || (there->id >= 0 && home->id >= 0 && there->id != home->id);
    if (apart)
      throw resolver::Error(
          fmt::format("refused: {} and {} are on different file systems (a bind mount?): cudafix moves files "
                      "by rename within one file system; nothing was changed",
                      site.path, held));
  }
}

}  // namespace cudafix::installer::txn
