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
#include <deque>
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

// A worker's folders listed but not yet walked, oldest first. The worker takes from the back (the
// folder it listed last, as a depth-first walk would) and opens it relative to its parent; an
// idle worker steals from the front, the shallowest folder left, usually the largest subtree.
// Sharing only the front keeps the workers busy: a queue topped up with the next folder each
// worker met handed over small leaf folders, and on 2 cores one worker idled for a third of the
// walk waiting for the other to reach another folder with subfolders.
struct Pending {
  std::string_view path;  // in an arena, which outlives the walk
  std::size_t name_len;
  std::uint64_t seq;  // the owner's count when it was pushed: a listing's folders are >= its first
};

struct WorkerQueue {
  std::mutex mutex;
  std::deque<Pending> items;
  std::atomic<std::size_t> size{0};  // items.size(), read without the lock
};

class TreeWalker {
 public:
  TreeWalker(const std::vector<std::string>& roots, unsigned workers, const std::vector<std::string>& prune)
      : queues_(workers), prune_(prune) {
    for (const auto& r : roots) roots_.push_back(r);
    for (const auto& r : roots_) queues_[0].items.push_back({r, 0, next_seq_[0]++});
    queues_[0].size = queues_[0].items.size();
  }

  void run_worker(unsigned self, PathArena& arena, std::vector<WalkEntry>& out, std::vector<Diagnostic>& diags) {
    unsigned polls = 0;
    while (true) {
      Pending p;
      if (!take(self, p)) {
        // Emptiness first, then activity: a taker counts itself active before the item leaves
        // its queue, so empty queues and no active worker mean the walk is over.
        if (all_empty() && active_.load() == 0) return;
        pause(++polls);
        continue;
      }
      polls = 0;
      const std::string dir(p.path);
      const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) {
        diags.push_back({dir, std::nullopt, std::nullopt, fmt::format("cannot list: {}", std::strerror(errno))});
      } else {
        walk(self, fd, p.path, arena, out, diags);
      }
      --active_;
    }
  }

 private:
  // The worker's own folders first (the roots are queued with worker 0), then the front of
  // another worker's queue.
  bool take(unsigned self, Pending& p) {
    const auto n = static_cast<unsigned>(queues_.size());
    for (unsigned k = 0; k < n; ++k) {
      auto& q = queues_[(self + k) % n];
      if (q.size.load(std::memory_order_relaxed) == 0) continue;
      std::lock_guard lock(q.mutex);
      if (q.items.empty()) continue;
      ++active_;
      p = q.items.front();
      q.items.pop_front();
      q.size = q.items.size();
      return true;
    }
    return false;
  }

  bool all_empty() const {
    for (const auto& q : queues_)
      if (q.size.load() != 0) return false;
    return true;
  }

  // The newest folder of the worker's queue if the listing that started at `first` pushed it;
  // none when that listing's folders are walked or stolen.
  bool take_own(unsigned self, std::uint64_t first, Pending& p) {
    auto& q = queues_[self];
    std::lock_guard lock(q.mutex);
    if (q.items.empty() || q.items.back().seq < first) return false;
    p = q.items.back();
    q.items.pop_back();
    q.size = q.items.size();
    return true;
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

  // Lists the folder open as `fd` (closed here) and everything below it that no other worker
  // steals. getdents64 with a large buffer: readdir's smaller one costs twice the system calls on
  // big folders. Only a call that returns 0 ends a folder: one that left room in the buffer may
  // still have stopped early, because a signal arrived (the kernel's filldir64 stops at a pending
  // one), and taking that for the end once cost doctor 6,425 of torch's files.
  void walk(unsigned self, int fd, std::string_view dir, PathArena& arena, std::vector<WalkEntry>& out,
            std::vector<Diagnostic>& diags) {
    alignas(8) static thread_local char buf[1 << 16];
    static thread_local std::vector<Pending> subdirs;
    subdirs.clear();
    const std::uint64_t first = next_seq_[self];
    PathHash dir_hash;  // of the folder and its slash, what every entry's path starts with
    dir_hash.add(dir);
    if (dir.empty() || dir.back() != '/') dir_hash.add("/");
    while (true) {
      const long r = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
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
        if (t == EntryType::directory && !pruned(n)) subdirs.push_back({path, name.size(), next_seq_[self]++});
      }
    }
    if (!subdirs.empty()) {
      auto& q = queues_[self];
      std::lock_guard lock(q.mutex);
      q.items.insert(q.items.end(), subdirs.begin(), subdirs.end());
      q.size = q.items.size();
    }
    Pending p;
    while (take_own(self, first, p)) {
      const std::string child(p.path.substr(p.path.size() - p.name_len));
      const int child_fd = ::openat(fd, child.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
      if (child_fd < 0) {
        diags.push_back(
            {std::string(p.path), std::nullopt, std::nullopt, fmt::format("cannot list: {}", std::strerror(errno))});
        continue;
      }
      walk(self, child_fd, p.path, arena, out, diags);
    }
    ::close(fd);
  }

  bool pruned(const char* name) const {
    for (const auto& p : prune_)
      if (p == name) return true;
    return false;
  }

  std::deque<WorkerQueue> queues_;  // one per worker (a deque: WorkerQueue cannot move)
  std::vector<std::uint64_t> next_seq_ = std::vector<std::uint64_t>(queues_.size(), 0);  // each worker's own
  std::vector<std::string> roots_;
  const std::vector<std::string>& prune_;
  std::atomic<unsigned> active_{0};  // workers walking a folder they took
};

}  // namespace

WalkResult walk_tree(const std::vector<std::string>& roots, unsigned threads, const std::vector<std::string>& prune) {
  const unsigned n = thread_count(threads);
  TreeWalker walker(roots, n, prune);
  std::vector<PathArena> arenas(n);
  std::vector<std::vector<WalkEntry>> outs(n);
  std::vector<std::vector<Diagnostic>> diags(n);
  parallel_for(n, n, [&](std::size_t i) { walker.run_worker(static_cast<unsigned>(i), arenas[i], outs[i], diags[i]); });
  WalkResult result;
  for (auto& a : arenas)
    for (auto& b : a.blocks()) result.arena.push_back(std::move(b));
  result.parts = std::move(outs);
  for (auto& d : diags)
    for (auto& e : d) result.diagnostics.push_back(std::move(e));
  return result;
}

}  // namespace cudafix::resolver
