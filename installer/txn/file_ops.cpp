#include "installer/txn/file_ops.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/openat2.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::installer::txn {
namespace {

struct Fault {
  std::string call;
  long nth = 0;
  int err = 0;
};

int errno_named(const std::string& name) {
  static const std::map<std::string, int> names{{"ENOSPC", ENOSPC},         {"EIO", EIO},      {"EACCES", EACCES},
                                                {"EROFS", EROFS},           {"EPERM", EPERM},  {"EXDEV", EXDEV},
                                                {"EOPNOTSUPP", EOPNOTSUPP}, {"EINVAL", EINVAL}};
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
  throw resolver::Error(fmt::format("{} {}: {}", call, path, resolver::os_error_text(err, path)));
}

bool syncing() {
  static const bool on = std::getenv("CUDAFIX_BENCH_NO_SYNC") == nullptr;
  return on;
}

// The folders cudafix may change, each open as a directory descriptor of its real path: every
// path-changing call beneath one resolves its folder with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_MAGICLINKS) from that descriptor, so that the kernel, not a check made earlier,
// keeps a symlinked folder, a ".." or a bug from leading the call outside.
struct Confined {
  std::string path;  // as callers name it (the lexical path, or the real one)
  std::string real;
  int fd = -1;
};

std::mutex& confined_mutex() {
  static std::mutex m;
  return m;
}

std::vector<Confined>& confined() {
  static auto* roots = new std::vector<Confined>();  // never freed: the descriptors live as long as the process
  return *roots;
}

std::atomic<bool> openat2_missing{false};  // the kernel has no openat2 (before 5.6): the userspace checks alone

long openat2_beneath(int dirfd, const char* path, int flags) {
  open_how how{};
  how.flags = static_cast<std::uint64_t>(flags) | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  long fd = 0;
  do fd = ::syscall(SYS_openat2, dirfd, path, &how, sizeof how);
  while (fd < 0 && errno == EAGAIN);
  return fd;
}

// The folder a path's last part is in, open beneath the confined root it lies under, and that
// part's name: what the *at calls take. Without confinement (nothing registered), the path as it is.
class Parent {
 public:
  Parent(const char* call, const std::string& path) {
    std::optional<Confined> root;
    {
      std::lock_guard<std::mutex> lock(confined_mutex());
      if (confined().empty()) {
        name_ = path;
        return;
      }
      for (const auto& c : confined())
        if (resolver::is_within(path, c.path) && (!root || c.path.size() > root->path.size())) root = c;
      if (!root)
        throw resolver::Error(fmt::format("{} {}: outside the environment {}; cudafix changes nothing there", call,
                                          path, confined().front().path));
    }
    if (path == root->path) {
      fd_ = root->fd;
      name_ = ".";
      return;
    }
    const std::string rel = path.substr(root->path.size() + 1);
    if (!resolver::is_clean_relative(rel))
      throw resolver::Error(fmt::format("{} {}: not a normal path (a '.', '..' or empty part); refused", call, path));
    const auto slash = rel.rfind('/');
    name_ = slash == std::string::npos ? rel : rel.substr(slash + 1);
    const std::string folder = slash == std::string::npos ? "." : rel.substr(0, slash);
    if (openat2_missing) {
      open_checked_by_realpath(call, path, *root, folder);
      return;
    }
    const long fd = openat2_beneath(root->fd, folder.c_str(), O_PATH | O_DIRECTORY);
    if (fd < 0 && errno == ENOSYS) {
      openat2_missing = true;
      open_checked_by_realpath(call, path, *root, folder);
      return;
    }
    if (fd < 0 && (errno == EXDEV || errno == ELOOP))
      throw resolver::Error(fmt::format(
          "{} {}: the folder {}/{} leads outside {} (a symlink on the way out); refused, nothing there was changed",
          call, path, root->path, folder, root->path));
    if (fd < 0) {
      missing_ = errno;  // ENOENT, ENOTDIR: the call fails as it would on the path itself
      return;
    }
    fd_ = static_cast<int>(fd);
    owned_ = true;
  }
  ~Parent() {
    if (owned_) ::close(fd_);
  }
  Parent(const Parent&) = delete;
  Parent& operator=(const Parent&) = delete;

  // The folder's descriptor, or -1 with errno set where it could not be opened.
  [[nodiscard]] int fd() const {
    if (missing_ != 0) errno = missing_;
    return missing_ != 0 ? -1 : fd_;
  }
  [[nodiscard]] const char* name() const { return name_.c_str(); }
  [[nodiscard]] bool missing() const { return missing_ != 0; }

 private:
  int fd_ = AT_FDCWD;
  bool owned_ = false;
  int missing_ = 0;
  std::string name_;

  void open_checked_by_realpath(const char* call, const std::string& path, const Confined& root,
                                const std::string& folder) {
    const std::string abs = folder == "." ? root.real : root.real + "/" + folder;
    const std::string real = resolver::real_path_of(abs);
    if (!resolver::is_within(real, root.real))
      throw resolver::Error(
          fmt::format("{} {}: the folder {} leads to {}, outside {} (a symlink); refused, nothing there was changed",
                      call, path, abs, real, root.path));
    const int fd = ::open(abs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      missing_ = errno;
      return;
    }
    fd_ = fd;
    owned_ = true;
  }
};

}  // namespace

void confine_to(const std::string& path) {
  const std::string real = resolver::real_path_of(path);
  std::lock_guard<std::mutex> lock(confined_mutex());
  for (const auto& c : confined())
    if (c.path == path) return;
  const int fd = ::open(real.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("open", real, errno);
  confined().push_back({path, real, fd});
  if (real != path) confined().push_back({real, real, fd});
}

bool kernel_confines() { return !openat2_missing; }

void rename_path(const std::string& from, const std::string& to) {
  const Parent a("rename", from), b("rename", to);
  if (injected("rename", from) || ::renameat(a.fd(), a.name(), b.fd(), b.name()) != 0) {
    // The kernel's "Invalid cross-device link" names no cause: a site folder mounted apart from
    // the venv's root (a bind mount of the same disk counts as apart).
    if (errno == EXDEV)
      throw resolver::Error(fmt::format(
          "rename {} -> {}: {} and {} are on different file systems (a bind mount?): cudafix moves files by "
          "rename within one file system",
          from, to, resolver::parent_dir(from), resolver::parent_dir(to)));
    fail("rename", fmt::format("{} -> {}", from, to), errno);
  }
}

void make_dir(const std::string& path, unsigned mode) {
  const Parent p("mkdir", path);
  if (injected("mkdir", path) || (::mkdirat(p.fd(), p.name(), mode) != 0 && errno != EEXIST))
    fail("mkdir", path, errno);
}

void make_dirs(const std::string& path, unsigned mode) {
  if (exists_nofollow(path)) return;
  const std::string parent = resolver::parent_dir(path);
  if (parent != path && parent != "/" && !parent.empty()) make_dirs(parent, mode);
  make_dir(path, mode);
}

bool remove_dir_if_empty(const std::string& path) {
  const Parent p("rmdir", path);
  if (injected("rmdir", path)) fail("rmdir", path, errno);
  if (::unlinkat(p.fd(), p.name(), AT_REMOVEDIR) == 0) return true;
  if (errno == ENOTEMPTY || errno == EEXIST || errno == ENOENT) return false;
  fail("rmdir", path, errno);
}

void remove_file(const std::string& path) {
  const Parent p("unlink", path);
  if (::unlinkat(p.fd(), p.name(), 0) != 0 && errno != ENOENT) fail("unlink", path, errno);
}

namespace {

// Removes everything in the open folder `fd` (closed here), never following a symlink: each
// entry is unlinked by name from its folder's descriptor, so no path is resolved again.
void empty_folder(int fd, const std::string& shown, int depth) {
  if (depth > 256) {
    ::close(fd);
    throw resolver::Error(fmt::format("{}: folders nested over 256 deep; not removed", shown));
  }
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    fail("opendir", shown, errno);
  }
  std::vector<std::pair<std::string, bool>> entries;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    entries.emplace_back(std::string(name), S_ISDIR(st.st_mode));
  }
  for (const auto& [name, folder] : entries) {
    if (folder) {
      const int sub = ::openat(::dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) continue;
      try {
        empty_folder(sub, shown + "/" + name, depth + 1);
      } catch (...) {
        ::closedir(d);
        throw;
      }
    }
    if (::unlinkat(::dirfd(d), name.c_str(), folder ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT) {
      const int err = errno;
      ::closedir(d);
      fail("unlink", shown + "/" + name, err);
    }
  }
  ::closedir(d);
}

}  // namespace

void remove_tree(const std::string& path) {
  const Parent p("rmdir", path);
  if (p.missing()) return;
  struct stat st {};
  if (::fstatat(p.fd(), p.name(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    const int fd = ::openat(p.fd(), p.name(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) fail("open", path, errno);
    empty_folder(fd, path, 0);
  }
  if (::unlinkat(p.fd(), p.name(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT)
    fail("unlink", path, errno);
}

namespace {

// A folder below the one being removed: its path relative to that one, and its depth.
struct Subfolder {
  std::string rel;
  int depth = 0;
};

enum class Entries { folders, not_folders };

// The names in an open folder of one kind: a folder is what the entry is, never what a symlink
// points at (d_type, or lstat where the file system does not say).
std::vector<std::string> entries_of(DIR* d, Entries kind) {
  std::vector<std::string> out;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    bool folder = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st {};
      folder = ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    if (folder == (kind == Entries::folders)) out.emplace_back(name);
  }
  return out;
}

// Every folder below the open folder `fd` (closed here), listed without following a symlink.
void list_subfolders(int fd, const std::string& rel, int depth, const std::string& shown, std::vector<Subfolder>& out) {
  if (depth > 256) {
    ::close(fd);
    throw resolver::Error(fmt::format("{}: folders nested over 256 deep; not removed", shown));
  }
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    fail("opendir", shown, errno);
  }
  const std::vector<std::string> folders = entries_of(d, Entries::folders);
  for (const auto& name : folders) {
    const std::string sub_rel = rel.empty() ? name : rel + "/" + name;
    out.push_back({sub_rel, depth + 1});
    const int sub = ::openat(::dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) continue;
    try {
      list_subfolders(sub, sub_rel, depth + 1, shown + "/" + name, out);
    } catch (...) {
      ::closedir(d);
      throw;
    }
  }
  ::closedir(d);
}

// `rel` below the open folder `top`, opened by the kernel's rules alone: beneath it, through no
// symlink, so that a folder swapped for a link since it was listed leads nowhere.
int open_beneath_no_links(int top, const std::string& rel) {
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = 0;
  do fd = ::syscall(SYS_openat2, top, rel.c_str(), &how, sizeof how);
  while (fd < 0 && errno == EAGAIN);
  return static_cast<int>(fd);
}

// Unlinks every entry of the open folder `fd` (closed here) that is not a folder.
void unlink_files_in(int fd, const std::string& shown) {
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    fail("opendir", shown, errno);
  }
  const std::vector<std::string> files = entries_of(d, Entries::not_folders);
  for (const auto& name : files)
    if (::unlinkat(::dirfd(d), name.c_str(), 0) != 0 && errno != ENOENT) {
      const int err = errno;
      ::closedir(d);
      fail("unlink", shown + "/" + name, err);
    }
  ::closedir(d);
}

}  // namespace

void remove_tree_on_every_core(const std::string& path) {
  if (openat2_missing) return remove_tree(path);
  const Parent p("rmdir", path);
  if (p.missing()) return;
  const int top = ::openat(p.fd(), p.name(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0) return remove_tree(path);  // a file, a symlink, or gone: as remove_tree does
  std::vector<Subfolder> folders{{"", 0}};
  try {
    const int listing = ::fcntl(top, F_DUPFD_CLOEXEC, 0);
    if (listing < 0) fail("dup", path, errno);
    list_subfolders(listing, "", 0, path, folders);
    // The files, each folder's on a core of its own; then the folders, deepest first.
    resolver::parallel_for(folders.size(), 0, [&](std::size_t i) {
      const auto& f = folders[i];
      const int fd = f.rel.empty() ? ::fcntl(top, F_DUPFD_CLOEXEC, 0) : open_beneath_no_links(top, f.rel);
      if (fd < 0) {
        if (errno == ENOENT) return;
        fail("open", path + "/" + f.rel, errno);
      }
      unlink_files_in(fd, f.rel.empty() ? path : path + "/" + f.rel);
    });
    std::stable_sort(folders.begin(), folders.end(),
                     [](const Subfolder& a, const Subfolder& b) { return a.depth > b.depth; });
    for (const auto& f : folders) {
      if (f.rel.empty()) continue;
      const auto slash = f.rel.rfind('/');
      const int parent = slash == std::string::npos ? ::fcntl(top, F_DUPFD_CLOEXEC, 0)
                                                    : open_beneath_no_links(top, f.rel.substr(0, slash));
      if (parent < 0) {
        if (errno == ENOENT) continue;
        fail("open", path + "/" + f.rel, errno);
      }
      const char* name = f.rel.c_str() + (slash == std::string::npos ? 0 : slash + 1);
      const int rc = ::unlinkat(parent, name, AT_REMOVEDIR), err = errno;
      ::close(parent);
      if (rc != 0 && err != ENOENT) fail("rmdir", path + "/" + f.rel, err);
    }
  } catch (...) {
    ::close(top);
    throw;
  }
  ::close(top);
  // Whatever appeared meanwhile goes the one-thread way, and the folder itself with it.
  remove_tree(path);
}

void link_path(const std::string& from, const std::string& to) {
  const Parent a("link", from), b("link", to);
  if (injected("link", from) || ::linkat(a.fd(), a.name(), b.fd(), b.name(), 0) != 0)
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

int open_file(const std::string& path, int flags, unsigned mode) {
  const Parent p("open", path);
  const int fd = ::openat(p.fd(), p.name(), flags | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) fail("open", path, errno);
  return fd;
}

void sync_file_system(const std::string& folder) {
  if (!syncing()) return;
  const int fd = open_file(folder, O_RDONLY | O_DIRECTORY, 0);
  const int rc = injected("fsync", folder) ? -1 : ::syncfs(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail("syncfs", folder, err);
}

namespace {

// An open file, closed however the scope ends.
struct OpenFile {
  int fd;
  OpenFile(const std::string& path, int flags) : fd(open_file(path, flags, 0644)) {}
  ~OpenFile() { ::close(fd); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
};

}  // namespace

void sync_path(const std::string& path) {
  const OpenFile f(path, O_RDONLY);
  sync_fd(f.fd, path);
}

int reserve_blocks(int fd, std::uint64_t size, const std::string& path) {
  if (injected("fallocate", path)) return errno;
  int err = EINTR;
  while (err == EINTR) err = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
  return err;
}

void set_mode(int fd, unsigned mode, const std::string& path) {
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0) fail("fchmod", path, errno);
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
  // A hard link planted in a journal's place would carry the append to a file elsewhere.
  if (struct stat st{}; ::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1)
    throw resolver::Error(fmt::format("{}: not a file of its own (a hard link, or not a regular file); refused", path));
  write_all(f.fd, text.data(), text.size(), path);
  sync_fd(f.fd, path);
}

void write_synced(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  remove_file(tmp);
  append_synced(tmp, text);
  rename_path(tmp, path);
}

bool exists_nofollow(const std::string& path) {
  const Parent p("stat", path);
  if (p.missing()) return false;
  struct stat st {};
  return ::fstatat(p.fd(), p.name(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

void open_test_hooks() { (void)trace(); }

void fault_trace_mark(std::string_view what) {
  std::FILE* const t = trace();
  if (t == nullptr) return;
  std::lock_guard<std::mutex> lock(hook_mutex());
  std::fprintf(t, "mark %.*s\n", static_cast<int>(what.size()), what.data());
  std::fflush(t);
}

void test_pause(std::string_view point) {
  // POINT:MS[,POINT:MS...]
  static const std::map<std::string, long, std::less<>> pause_at = [] {
    std::map<std::string, long, std::less<>> at;
    const char* v = std::getenv("CUDAFIX_TEST_PAUSE_AT");
    const std::string s = v ? v : "";
    if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return at;
    for (std::size_t start = 0; start < s.size();) {
      const auto end = std::min(s.find(',', start), s.size());
      const std::string one = s.substr(start, end - start);
      const auto colon = one.find(':');
      if (colon != std::string::npos && colon > 0)
        at[one.substr(0, colon)] = std::strtol(one.c_str() + colon + 1, nullptr, 10);
      start = end + 1;
    }
    return at;
  }();
  kill_point(point);
  const auto at = pause_at.find(point);
  if (at == pause_at.end()) return;
  fault_trace_mark(point);
  std::this_thread::sleep_for(std::chrono::milliseconds(at->second));
}

void kill_point(std::string_view point) {
  static const std::pair<std::string, long> kill_at = [] {
    const char* v = std::getenv("CUDAFIX_TEST_KILL_AT");
    const std::string s = v ? v : "";
    const auto colon = s.find(':');
    if (s.empty() || colon == 0 || (s[0] >= '0' && s[0] <= '9')) return std::pair<std::string, long>{};
    if (colon == std::string::npos) return std::pair<std::string, long>{s, 1};  // POINT: its first time
    return std::pair<std::string, long>{s.substr(0, colon), std::strtol(s.c_str() + colon + 1, nullptr, 10)};
  }();
  static long passed = 0;
  if (kill_at.first.empty() || kill_at.first != point) return;
  if (++passed == kill_at.second) ::kill(::getpid(), SIGKILL);
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
