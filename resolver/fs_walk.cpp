#include "resolver/fs_walk.hpp"

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
#include <condition_variable>
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
  std::string_view store(std::string_view dir, const char* name) {
    const std::size_t n = std::strlen(name);
    const bool slash = dir.empty() || dir.back() != '/';
    const std::size_t need = dir.size() + (slash ? 1 : 0) + n;
    if (used_ + need > size_) {
      size_ = std::max<std::size_t>(k_block, need);
      blocks_.push_back(std::make_unique<char[]>(size_));
      used_ = 0;
    }
    char* p = blocks_.back().get() + used_;
    std::memcpy(p, dir.data(), dir.size());
    if (slash) p[dir.size()] = '/';
    std::memcpy(p + dir.size() + (slash ? 1 : 0), name, n);
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
// lookup from /), and hand folders to the shared queue only while other workers are idle.
class TreeWalker {
 public:
  TreeWalker(const std::vector<std::string>& roots, unsigned workers, const std::vector<std::string>& prune)
      : workers_(workers), prune_(prune) {
    for (const auto& r : roots) queue_.push_back(r);
  }

  void run_worker(PathArena& arena, std::vector<WalkEntry>& out, std::vector<Diagnostic>& diags) {
    while (true) {
      std::string dir;
      {
        std::unique_lock lock(mutex_);
        ++idle_;
        cv_.wait(lock, [&] { return !queue_.empty() || idle_ == workers_; });
        if (queue_.empty()) {
          cv_.notify_all();
          return;  // every worker idle and nothing queued: done
        }
        --idle_;
        dir = std::move(queue_.front());
        queue_.pop_front();
      }
      const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) {
        diags.push_back({dir, std::nullopt, std::nullopt, fmt::format("cannot list: {}", std::strerror(errno))});
        continue;
      }
      walk(fd, dir, arena, out, diags);
    }
  }

 private:
  bool others_hungry() {
    if (idle_.load(std::memory_order_relaxed) == 0) return false;
    std::lock_guard lock(mutex_);
    return queue_.size() < workers_;
  }

  void share(std::string_view dir) {
    {
      std::lock_guard lock(mutex_);
      queue_.emplace_back(dir);
    }
    cv_.notify_one();
  }

  // Lists the folder open as `fd` (closed here) and everything below it. getdents64 with a
  // large buffer: readdir's smaller one costs twice the system calls on big folders.
  void walk(int fd, std::string_view dir, PathArena& arena, std::vector<WalkEntry>& out,
            std::vector<Diagnostic>& diags) {
    alignas(8) static thread_local char buf[1 << 16];
    std::vector<std::pair<std::string_view, std::size_t>> subdirs;  // (path, length of its name)
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
        const std::string_view path = arena.store(dir, n);
        const EntryType t = type_of(e->d_type, n, fd);
        out.push_back({path, t, std::hash<std::string_view>{}(path),
                       t != EntryType::directory && looks_like_shared_object(std::string_view(n))});
        if (t == EntryType::directory && !pruned(n)) subdirs.emplace_back(path, std::strlen(n));
      }
    }
    for (const auto& [path, name_len] : subdirs) {
      if (others_hungry()) {
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
  const std::vector<std::string>& prune_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::atomic<unsigned> idle_{0};
};

}  // namespace

WalkResult walk_tree(const std::vector<std::string>& roots, unsigned threads, const std::vector<std::string>& prune) {
  const unsigned n = thread_count(threads);
  TreeWalker walker(roots, n, prune);
  std::vector<PathArena> arenas(n);
  std::vector<std::vector<WalkEntry>> outs(n);
  std::vector<std::vector<Diagnostic>> diags(n);
  {
    std::vector<std::jthread> pool;
    for (unsigned i = 0; i < n; ++i) pool.emplace_back([&, i] { walker.run_worker(arenas[i], outs[i], diags[i]); });
  }
  WalkResult result;
  for (auto& a : arenas)
    for (auto& b : a.blocks()) result.arena.push_back(std::move(b));
  std::size_t total = 0;
  for (auto& o : outs) total += o.size();
  result.entries.reserve(total);
  for (auto& o : outs) result.entries.insert(result.entries.end(), o.begin(), o.end());
  for (auto& d : diags)
    for (auto& e : d) result.diagnostics.push_back(std::move(e));
  return result;
}

unsigned thread_count(unsigned requested) {
  if (requested) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? hw : 1;
}

void parallel_for(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& fn) {
  const auto t = static_cast<unsigned>(std::min<std::size_t>(thread_count(threads), std::max<std::size_t>(n, 1)));
  if (t <= 1) {
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::vector<std::jthread> pool;
  for (unsigned k = 0; k < t; ++k)
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < n; i = next++) fn(i);
    });
}

}  // namespace cudafix::resolver
