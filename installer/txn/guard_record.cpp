#include "installer/txn/guard_record.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "installer/txn/changes.hpp"
#include "installer/txn/file_ops.hpp"
#include "installer/txn/transaction.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/state_folder.hpp"

namespace cudafix::installer::txn {
namespace {

namespace fs = std::filesystem;
namespace r = cudafix::resolver;
using json = nlohmann::ordered_json;

std::string records_dir(const std::string& root) { return root + "/.cudafix/guards"; }

std::string record_path(const std::string& root, const std::string& snapshot) {
  return records_dir(root) + "/" + snapshot + ".json";
}

// The record at `path`, read through a descriptor (no FIFO, no link, bounded), and whether a
// guard holds it; nullopt where it is not one cudafix could have written.
std::optional<GuardRecord> read_record(const std::string& root, const std::string& snapshot) {
  const std::string path = record_path(root, snapshot);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::size_t>(st.st_size) > k_record_max_bytes) {
    ::close(fd);
    return std::nullopt;
  }
  GuardRecord rec;
  rec.alive = ::flock(fd, LOCK_SH | LOCK_NB) != 0;
  std::string text;
  char buf[4096];
  for (ssize_t n; text.size() <= k_record_max_bytes && (n = ::read(fd, buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  if (text.size() > k_record_max_bytes) return std::nullopt;
  const auto j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("snapshot") || j["snapshot"] != snapshot) return std::nullopt;
  rec.snapshot = snapshot;
  if (j.contains("pid") && j["pid"].is_number_integer()) rec.pid = j["pid"].get<long>();
  if (j.contains("time") && j["time"].is_number_integer()) rec.time = j["time"].get<std::int64_t>();
  if (j.contains("command") && j["command"].is_array())
    for (const auto& a : j["command"])
      if (a.is_string() && rec.command.size() < k_record_args)
        rec.command.push_back(a.get<std::string>().substr(0, k_record_arg_bytes));
  if (j.contains("scope") && j["scope"].is_array()) {
    rec.scope.emplace();
    for (const auto& d : j["scope"])
      if (d.is_string() && r::is_dist_folder_name(d.get<std::string>()) && rec.scope->size() < k_record_scope)
        rec.scope->push_back(d.get<std::string>());
  }
  struct stat snap {};
  rec.has_snapshot = ::lstat((snapshot_dir(root, snapshot) + "/manifest.json").c_str(), &snap) == 0;
  return rec;
}

}  // namespace

std::string shown_command(const std::vector<std::string>& argv) {
  std::vector<std::string> words;
  for (const auto& a : argv) {
    const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_./=:,+@%", c) != nullptr;
    });
    if (plain) {
      words.push_back(a);
      continue;
    }
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    words.push_back(q + "'");
  }
  return fmt::format("{}", fmt::join(words, " "));
}

HeldGuardRecord::HeldGuardRecord(const std::string& root, const GuardRecord& record)
    : path_(record_path(root, record.snapshot)) {
  if (!r::is_snapshot_name(record.snapshot))
    throw r::Error(fmt::format("'{}' is not a snapshot name", record.snapshot.substr(0, 128)));
  make_state_folders(root);
  make_dirs(records_dir(root), 0700);
  json args = json::array();
  for (std::size_t i = 0; i < record.command.size() && i < k_record_args; ++i)
    args.push_back(r::to_valid_utf8(record.command[i].substr(0, k_record_arg_bytes)));
  json scope;
  if (record.scope) {
    scope = json::array();
    for (std::size_t i = 0; i < record.scope->size() && i < k_record_scope; ++i) scope.push_back((*record.scope)[i]);
  }
  const std::string text = json{
      {"snapshot", record.snapshot},
      {"pid", static_cast<long>(::getpid())},
      {"time", static_cast<std::int64_t>(std::time(nullptr))},
      {"command", args},
      {"scope", scope}}.dump();
  fd_ = open_file(path_, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (::flock(fd_, LOCK_EX) != 0) {
    const int err = errno;
    ::close(fd_);
    throw r::Error(fmt::format("{}: flock: {}", path_, std::strerror(err)));
  }
  try {
    write_all(fd_, text.data(), text.size(), path_);
    sync_fd(fd_, path_);
    sync_path(records_dir(root));  // the record's name is durable before the snapshot starts
  } catch (...) {
    ::unlink(path_.c_str());
    ::close(fd_);
    throw;
  }
}

HeldGuardRecord::~HeldGuardRecord() {
  if (!left_) ::unlink(path_.c_str());
  ::close(fd_);
}

std::vector<GuardRecord> guard_records(const std::string& root) {
  std::vector<GuardRecord> out;
  if (!r::state_folder_problem(root).empty()) return out;  // doctor's untrusted-state says why
  const std::string dir = records_dir(root);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return out;
  std::error_code ec;
  std::size_t seen = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end && out.size() < k_records_read; it.increment(ec)) {
    if (++seen > 4 * k_records_read) break;
    const std::string file = it->path().filename().string();
    if (!file.ends_with(".json")) continue;
    const std::string snapshot = file.substr(0, file.size() - 5);
    if (!r::is_snapshot_name(snapshot)) continue;
    if (auto rec = read_record(root, snapshot)) out.push_back(std::move(*rec));
  }
  std::sort(out.begin(), out.end(), [](const GuardRecord& a, const GuardRecord& b) { return a.snapshot < b.snapshot; });
  return out;
}

void tidy_guard_records(const std::string& root, const std::function<void(const std::string&)>& say) {
  for (const auto& rec : guard_records(root)) {
    if (rec.alive || rec.has_snapshot) continue;
    remove_file(record_path(root, rec.snapshot));
    say(
        fmt::format("recovering: a guard of `{}` was killed before its snapshot '{}' was complete, or while it was "
                    "being deleted: the command did not run under it, or had been judged; its record removed",
                    r::to_valid_utf8(shown_command(rec.command)), rec.snapshot));
  }
}

void forget_guard_record(const std::string& root, const std::string& snapshot) {
  if (!r::is_snapshot_name(snapshot)) return;
  ::unlink(record_path(root, snapshot).c_str());
}

}  // namespace cudafix::installer::txn
