#include "resolver/fs_walk.hpp"

#include "resolver/parallel.hpp"
#include "resolver/path_index.hpp"
#include "resolver/text.hpp"

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

namespace cudafix::resolver {
namespace {

// The record getdents64 fills (linux_dirent64).
struct Dirent64 {
  std::uint64_t d_ino;
  std::int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];
};

EntryType type_of(unsigned char d_type, const char* name, int dir_fd) {
  switch (d_type) {
    case DT_REG:
      return EntryType::file;
    case DT_LNK:
      return EntryType::symlink;
    case DT_DIR:
      return EntryType::directory;
    case DT_UNKNOWN:
      break;  // some filesystems do not fill d_type
    default:
      return EntryType::other;
  }
  struct stat st {};
  if (::fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return EntryType::other;
  if (S_ISREG(st.st_mode)) return EntryType::file;
  if (S_ISLNK(st.st_mode)) return EntryType::symlink;
  if (S_ISDIR(st.st_mode)) return EntryType::directory;
  return EntryType::other;
}

// Paths go into large blocks rather than one allocation each: a venv has 70,000 of them.
class PathArena {
 public:
  std::string_view store(std::string_view dir, std::string_view name) {
    const std::size_t n = name.size();
    const bool slash = dir.empty() || dir.back() != '/';
    const std::size_t need = dir.size() + (slash ? 1 : 0) + n;
    if (used_ + need > size_) {
      size_ = std::max<std::size_t>(k_block, need);
      blocks_.push_back(std::make_unique_for_overwrite<char[]>(size_));
      used_ = 0;
    }
    char* p = blocks_.back().get() + used_;
    std::memcpy(p, dir.data(), dir.size());
    if (slash) p[dir.size()] = '/';
    std::memcpy(p + dir.size() + (slash ? 1 : 0), name.data(), n);
    used_ += need;
    return {p, need};
  }
  std::vector<std::unique_ptr<char[]>>& blocks() { return blocks_; }

 private:
  static constexpr std::size_t k_block = 1 << 20;
  std::vector<std::unique_ptr<char[]>> blocks_;
  std::size_t size_ = 0;
  std::size_t used_ = 0;
};

// Workers walk their subtree depth-first, opening folders relative to their parent (no path
// lookup from /), and keep the shared queue topped up to one folder per worker so that a worker
// that runs dry finds work at once. With 8 or more workers every folder goes through the queue
// instead: a worker deep in one subtree no longer holds the siblings it has yet to list, and on
// 16 cores that balance is worth more than the relative opens (walk 14.2 -> 12.5 ms there; with
// 2 workers it measured slower). Idle workers poll the queue's length rather than sleep on a
// condition variable: folders are handed over thousands of times a walk, and a futex wake for
// each cost more than the walk itself on 16 cores.
class TreeWalker {
 public:
  TreeWalker(const std::vector<std::string>& roots, unsigned workers, const std::vector<std::string>& prune)
      : workers_(workers), share_all_(workers >= 8), prune_(prune) {
    for (const auto& r : roots) queue_.push_back(r);
    queued_ = queue_.size();
  }

  void run_worker(PathArena& arena, std::vector<WalkEntry>& out, std::vector<Diagnostic>& diags) {
    unsigned polls = 0;
    while (true) {
      std::string dir;
      if (!take(dir)) {
        if (active_.load() == 0 && queued_.load() == 0) return;  // nothing queued, nobody to queue more
        pause(++polls);
        continue;
      }
      polls = 0;
      const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) {
        diags.push_back({dir, std::nullopt, std::nullopt, fmt::format("cannot list: {}", std::strerror(errno))});
      } else {
        walk(fd, dir, arena, out, diags);
      }
      --active_;
    }
  }

 private:
  // Takes a queued folder, counting its worker active before the queue shrinks, so that an
  // empty queue with no active worker means the walk is over.
  bool take(std::string& dir) {
    if (queued_.load(std::memory_order_relaxed) == 0) return false;
    std::lock_guard lock(mutex_);
    if (queue_.empty()) return false;
    ++active_;
    dir = std::move(queue_.back());
    queue_.pop_back();
    queued_ = queue_.size();
    return true;
  }

  void share(std::string_view dir) {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(dir);
    queued_ = queue_.size();
  }

  // Idle: spin briefly, then give the core away, then sleep, so that more threads than cores
  // (--threads 16 on 2 cores) cost little.
  static void pause(unsigned polls) {
    if (polls < 64) return;
    if (polls < 1024) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  // Lists the folder open as `fd` (closed here) and everything below it. getdents64 with a
  // large buffer: readdir's smaller one costs twice the system calls on big folders.
  void walk(int fd, std::string_view dir, PathArena& arena, std::vector<WalkEntry>& out,
            std::vector<Diagnostic>& diags) {
    alignas(8) static thread_local char buf[1 << 16];
    std::vector<std::pair<std::string_view, std::size_t>> subdirs;  // (path, length of its name)
    PathHash dir_hash;  // of the folder and its slash, what every entry's path starts with
    dir_hash.add(dir);
    if (dir.empty() || dir.back() != '/') dir_hash.add("/");
    while (true) {
      const long r = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (r < 0) {
        diags.push_back(
            {std::string(dir), std::nullopt, std::nullopt, fmt::format("cannot list: {}", std::strerror(errno))});
        break;
      }
      if (r == 0) break;
      for (long off = 0; off < r;) {
        const auto* e = reinterpret_cast<const Dirent64*>(buf + off);
        off += e->d_reclen;
        const char* n = e->d_name;
        if (n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0))) continue;
        const std::string_view name(n);
        const std::string_view path = arena.store(dir, name);
        const EntryType t = type_of(e->d_type, n, fd);
        out.push_back({path, t, PathHash(dir_hash).add(name).value(),
                       t != EntryType::directory && looks_like_shared_object(name)});
        if (t == EntryType::directory && !pruned(n)) subdirs.emplace_back(path, name.size());
      }
    }
    for (const auto& [path, name_len] : subdirs) {
      if (share_all_ || queued_.load(std::memory_order_relaxed) < workers_) {
        share(path);
        continue;
      }
      const std::string child(path.substr(path.size() - name_len));
      const int child_fd = ::openat(fd, child.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
      if (child_fd < 0) {
        diags.push_back(
            {std::string(path), std::nullopt, std::nullopt, fmt::format("cannot list: {}", std::strerror(errno))});
        continue;
      }
      walk(child_fd, path, arena, out, diags);
    }
    ::close(fd);
  }

  bool pruned(const char* name) const {
    for (const auto& p : prune_)
      if (p == name) return true;
    return false;
  }

  const unsigned workers_;
  const bool share_all_;
  const std::vector<std::string>& prune_;
  std::mutex mutex_;
  std::vector<std::string> queue_;      // a stack: the deepest folder first, as a walk would
  std::atomic<std::size_t> queued_{0};  // queue_.size(), read without the lock
  std::atomic<unsigned> active_{0};     // workers listing a folder taken from the queue
};

}  // namespace

WalkResult walk_tree(const std::vector<std::string>& roots, unsigned threads, const std::vector<std::string>& prune) {
  const unsigned n = thread_count(threads);
  TreeWalker walker(roots, n, prune);
  std::vector<PathArena> arenas(n);
  std::vector<std::vector<WalkEntry>> outs(n);
  std::vector<std::vector<Diagnostic>> diags(n);
  parallel_for(n, n, [&](std::size_t i) { walker.run_worker(arenas[i], outs[i], diags[i]); });
  WalkResult result;
  for (auto& a : arenas)
    for (auto& b : a.blocks()) result.arena.push_back(std::move(b));
  result.parts = std::move(outs);
  for (auto& d : diags)
    for (auto& e : d) result.diagnostics.push_back(std::move(e));
  return result;
}

}  // namespace cudafix::resolver
