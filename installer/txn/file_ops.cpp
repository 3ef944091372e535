#include "installer/txn/file_ops.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "resolver/base/diagnostic.hpp"

namespace cudafix::installer::txn {
namespace {

struct Fault {
  std::string call;
  long nth = 0;
  int err = 0;
};

int errno_named(const std::string& name) {
  static const std::map<std::string, int> names{{"ENOSPC", ENOSPC}, {"EIO", EIO},     {"EACCES", EACCES},
                                                {"EROFS", EROFS},   {"EPERM", EPERM}, {"EXDEV", EXDEV}};
  const auto it = names.find(name);
  return it == names.end() ? EIO : it->second;
}

const Fault& fault() {
  static const Fault f = [] {
    Fault out;
    const char* spec = std::getenv("CUDAFIX_TEST_FAULT");
    if (!spec) return out;
    const std::string s = spec;
    const auto a = s.find(':'), b = s.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) return out;
    out.call = s.substr(0, a);
    out.nth = std::strtol(s.substr(a + 1, b - a - 1).c_str(), nullptr, 10);
    out.err = errno_named(s.substr(b + 1));
    return out;
  }();
  return f;
}

// The trace file, opened once for appending; none unless CUDAFIX_TEST_FAULT_TRACE names one.
std::FILE* trace() {
  static std::FILE* const file = [] {
    const char* path = std::getenv("CUDAFIX_TEST_FAULT_TRACE");
    return path && *path ? std::fopen(path, "ae") : nullptr;
  }();
  return file;
}

std::mutex& hook_mutex() {
  static std::mutex m;
  return m;
}

// Whether this call of `call` on `path` is the one to fail; sets errno when it is.
bool injected(const char* call, const std::string& path) {
  const Fault& f = fault();
  std::FILE* const t = trace();
  if (f.call != call && t == nullptr) return false;
  static std::map<std::string, long> counts;
  std::lock_guard<std::mutex> lock(hook_mutex());
  const long n = ++counts[call];
  if (t != nullptr) {
    std::fprintf(t, "%s %ld %s\n", call, n, path.c_str());
    std::fflush(t);
  }
  if (f.call != call || n != f.nth) return false;
  errno = f.err;
  return true;
}

[[noreturn]] void fail(const char* call, const std::string& path, int err) {
  throw resolver::Error(fmt::format("{} {}: {}", call, path, std::strerror(err)));
}

bool syncing() {
  static const bool on = std::getenv("CUDAFIX_BENCH_NO_SYNC") == nullptr;
  return on;
}

}  // namespace

void rename_path(const std::string& from, const std::string& to) {
  if (injected("rename", from) || ::rename(from.c_str(), to.c_str()) != 0)
    fail("rename", fmt::format("{} -> {}", from, to), errno);
}

void make_dir(const std::string& path, unsigned mode) {
  if (injected("mkdir", path) || (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST)) fail("mkdir", path, errno);
}

bool remove_dir_if_empty(const std::string& path) {
  if (injected("rmdir", path)) fail("rmdir", path, errno);
  if (::rmdir(path.c_str()) == 0) return true;
  if (errno == ENOTEMPTY || errno == EEXIST || errno == ENOENT) return false;
  fail("rmdir", path, errno);
}

void link_path(const std::string& from, const std::string& to) {
  if (injected("link", from) || ::link(from.c_str(), to.c_str()) != 0)
    fail("link", fmt::format("{} -> {}", from, to), errno);
}

void sync_fd(int fd, const std::string& what) {
  if (!syncing()) return;
  if (injected("fsync", what) || ::fsync(fd) != 0) fail("fsync", what, errno);
}

void start_writeback(int fd) {
  // Only a hint: a failure shows at the batch sync, which is what is checked.
  if (syncing()) (void)::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
}

void sync_file_system(const std::string& folder) {
  if (!syncing()) return;
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("open", folder, errno);
  const int rc = injected("fsync", folder) ? -1 : ::syncfs(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail("syncfs", folder, err);
}

namespace {

// An open file, closed however the scope ends.
struct OpenFile {
  int fd;
  OpenFile(const std::string& path, int flags) : fd(::open(path.c_str(), flags | O_CLOEXEC, 0644)) {
    if (fd < 0) fail("open", path, errno);
  }
  ~OpenFile() { ::close(fd); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
};

}  // namespace

void sync_path(const std::string& path) {
  const OpenFile f(path, O_RDONLY);
  sync_fd(f.fd, path);
}

void write_all(int fd, const void* data, std::size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = injected("write", path) ? -1 : ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write", path, errno);
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void append_synced(const std::string& path, std::string_view text) {
  const OpenFile f(path, O_WRONLY | O_APPEND | O_CREAT);
  write_all(f.fd, text.data(), text.size(), path);
  sync_fd(f.fd, path);
}

void write_synced(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  append_synced(tmp, text);
  rename_path(tmp, path);
}

bool exists_nofollow(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

void fault_trace_mark(std::string_view what) {
  std::FILE* const t = trace();
  if (t == nullptr) return;
  std::lock_guard<std::mutex> lock(hook_mutex());
  std::fprintf(t, "mark %.*s\n", static_cast<int>(what.size()), what.data());
  std::fflush(t);
}

void journal_step() {
  static const long kill_at = [] {
    const char* v = std::getenv("CUDAFIX_TEST_KILL_AT");
    return v ? std::strtol(v, nullptr, 10) : 0L;
  }();
  static const std::pair<long, long> pause_at = [] {
    const char* v = std::getenv("CUDAFIX_TEST_PAUSE_AT");
    if (!v) return std::pair<long, long>{0, 0};
    char* rest = nullptr;
    const long at = std::strtol(v, &rest, 10);
    return std::pair<long, long>{at, *rest == ':' ? std::strtol(rest + 1, nullptr, 10) : 0L};
  }();
  static long step = 0;
  ++step;
  if (kill_at > 0 && step == kill_at) ::kill(::getpid(), SIGKILL);
  if (pause_at.first > 0 && step == pause_at.first)
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_at.second));
}

}  // namespace cudafix::installer::txn
