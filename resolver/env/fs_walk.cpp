#include "resolver/env/fs_walk.hpp"

#include "resolver/base/parallel.hpp"
#include "resolver/base/path_index.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/walk_cache.hpp"

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
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

namespace cudafix::resolver::inline env {
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
  std::uint64_t seq;   // the owner's count when it was pushed: a listing's folders are >= its first
  std::uint32_t root;  // index of the root it is below
};

struct WorkerQueue {
  std::mutex mutex;
  std::deque<Pending> items;
  std::atomic<std::size_t> size{0};  // items.size(), read without the lock
};

// The local filesystems, where a folder's ctime moves with every change to its entries (ext2/3/4,
// XFS, Btrfs, tmpfs, and overlayfs as the layers under it do). NFS clients cache attributes and
// FUSE answers what its daemon says: there the cache is not used.
bool is_local_file_system(std::string_view fs_type) {
  for (std::string_view t : {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay"})
    if (fs_type == t) return true;
  return false;
}

// A mount point as /proc/self/mountinfo writes it, with its octal escapes (space, tab, newline,
// backslash) undone.
std::string unescape_mount_point(std::string_view s) {
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && octal(s[i + 1]) && octal(s[i + 2]) && octal(s[i + 3])) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool stamps_show_every_change_here(const std::vector<std::string>& roots) {
  const auto mountinfo = try_read_file("/proc/self/mountinfo");
  if (!mountinfo) return false;
  std::vector<std::string> real;
  real.reserve(roots.size());
  for (const auto& r : roots) real.push_back(real_path_of(r));
  return stamps_show_every_change(real, *mountinfo);
}

// What one worker gathers.
struct WorkerOutput {
  PathArena arena;
  std::vector<WalkEntry> entries;
  std::vector<Diagnostic> diagnostics;
  std::vector<ListedFolder> folders;  // for the next cache: each folder walked, with its stamp
  std::size_t walked = 0;             // folders listed, from the disk or the cache
  std::size_t reused = 0;             // of those, from the cache
};

class TreeWalker {
 public:
  TreeWalker(const std::vector<std::string>& roots, unsigned workers, const std::vector<std::string>& prune,
             const WalkCache* cache)
      : queues_(workers), prune_(prune), cache_(cache), start_(std::chrono::system_clock::now()) {
    for (const auto& r : roots) roots_.push_back(r);
    for (std::uint32_t i = 0; i < roots_.size(); ++i) {
      queues_[0].items.push_back({roots_[i], 0, next_seq_[0]++, i});
      // Cached folders are looked up from their root: a third fewer names to resolve than
      // from / in a venv's site-packages (2.3 us a statx instead of 2.8 on a VM).
      const int fd = cache_ ? ::open(roots_[i].c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
      root_fds_.push_back(fd);
    }
    queues_[0].size = queues_[0].items.size();
  }

  ~TreeWalker() {
    for (const int fd : root_fds_)
      if (fd >= 0) ::close(fd);
  }
  TreeWalker(const TreeWalker&) = delete;
  TreeWalker& operator=(const TreeWalker&) = delete;

  void run_worker(unsigned self, WorkerOutput& out) {
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
      walk(self, -1, p, out);
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

  // Lists the folder `p` (relative to `parent_fd` when that is open, else by its path) and
  // everything below it that no other worker steals: from the cache when its stamp is the one
  // kept there, else from the disk.
  void walk(unsigned self, int parent_fd, const Pending& p, WorkerOutput& out) {
    auto& subdirs = subdirs_listed();
    subdirs.clear();
    const std::string_view dir = p.path;
    const std::string_view tail = dir.ends_with('/') ? "" : "/";
    PathHash dir_hash;  // of the folder and its slash, what every entry's path starts with
    dir_hash.add(dir).add(tail);
    const std::uint64_t first_seq = next_seq_[self];
    const auto first = static_cast<std::uint32_t>(out.entries.size());
    // Folders are opened relative to their parent where it is open (a path lookup of one name),
    // else to their root.
    int at = AT_FDCWD;
    std::string where;
    if (parent_fd >= 0) {
      at = parent_fd;
      where = dir.substr(dir.size() - p.name_len);
    } else if (p.name_len > 0 && root_fds_[p.root] >= 0) {
      at = root_fds_[p.root];
      const std::string_view root = roots_[p.root];
      where = dir.substr(root.size() + (root.ends_with('/') ? 0 : 1));
    } else {
      where = dir;
    }
    std::optional<Stamp> stamp;
    int fd = -1;
    const WalkCache::Folder* kept = cache_ ? cache_->find(dir, tail, dir_hash.value()) : nullptr;
    if (kept) stamp = stamp_at(at, where.c_str(), AT_SYMLINK_NOFOLLOW, S_IFDIR);
    if (kept && stamp == kept->stamp) {
      replay(self, p.root, *kept, dir, dir_hash, out);
      ++out.reused;
    } else {
      fd = open_folder(at, where, parent_fd >= 0);
      if (fd < 0) {
        out.diagnostics.push_back(
            {std::string(dir), std::nullopt, std::nullopt, "cannot list: " + os_error_text(errno, std::string(dir))});
        return;
      }
      // The stamp is taken before the listing, so that a change during it shows next time.
      if (cache_ && !stamp) stamp = stamp_at(fd, "", AT_EMPTY_PATH, S_IFDIR);
      list(self, p.root, fd, dir, dir_hash, out);
    }
    ++out.walked;
    if (stamp && settled(*stamp, start_))
      out.folders.push_back(
          {dir, dir_hash.value(), *stamp, self, first, static_cast<std::uint32_t>(out.entries.size()) - first});
    if (!subdirs.empty()) {
      auto& q = queues_[self];
      std::lock_guard lock(q.mutex);
      q.items.insert(q.items.end(), subdirs.begin(), subdirs.end());
      q.size = q.items.size();
    }
    Pending child;
    while (take_own(self, first_seq, child)) walk(self, fd, child, out);
    if (fd >= 0) ::close(fd);
  }

  // Opens a folder for listing, following no symlink: `where` is one name below an open parent,
  // or, below a root, a path whose every folder this walk has seen as a folder, and which a
  // symlink put in place of one meanwhile must not lead out of the root (openat2's
  // RESOLVE_NO_SYMLINKS; where the kernel or a seccomp filter refuses openat2, plain openat,
  // which follows no symlink in the last name only).
  static int open_folder(int at, const std::string& where, bool one_name) {
    constexpr int k_flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW;
    if (!one_name && at != AT_FDCWD) {
      open_how how{};
      how.flags = k_flags;
      how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH;
      const long fd = ::syscall(SYS_openat2, at, where.c_str(), &how, sizeof how);
      if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return static_cast<int>(fd);
    }
    return ::openat(at, where.c_str(), k_flags);
  }

  // The entries of the folder open as `fd`, read with getdents64 and a large buffer: readdir's
  // smaller one costs twice the system calls on big folders. Only a call that returns 0 ends the
  // folder: one that left room in the buffer may still have stopped early, because a signal
  // arrived (the kernel's filldir64 stops at a pending one), and taking that for the end once
  // cost doctor 6,425 of torch's files.
  void list(unsigned self, std::uint32_t root, int fd, std::string_view dir, const PathHash& dir_hash,
            WorkerOutput& out) {
    alignas(8) static thread_local char buf[1 << 16];
    while (true) {
      const long r = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        out.diagnostics.push_back(
            {std::string(dir), std::nullopt, std::nullopt, "cannot list: " + os_error_text(errno, std::string(dir))});
        break;
      }
      if (r == 0) break;
      for (long off = 0; off < r;) {
        const auto* e = reinterpret_cast<const Dirent64*>(buf + off);
        off += e->d_reclen;
        const char* n = e->d_name;
        if (n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0))) continue;
        const std::string_view name(n);
        const EntryType t = type_of(e->d_type, n, fd);
        add(self, root, dir, dir_hash, name, t, t != EntryType::directory && looks_like_shared_object(name), out);
      }
    }
  }

  // The entries the cache kept for a folder whose stamp has not changed since.
  void replay(unsigned self, std::uint32_t root, const WalkCache::Folder& kept, std::string_view dir,
              const PathHash& dir_hash, WorkerOutput& out) {
    for (std::uint32_t i = kept.first_entry; i < kept.first_entry + kept.entry_count; ++i) {
      const auto e = cache_->entry(i);
      add(self, root, dir, dir_hash, e.name, e.type, e.shared_object_name, out);
    }
  }

  void add(unsigned self, std::uint32_t root, std::string_view dir, const PathHash& dir_hash, std::string_view name,
           EntryType type, bool shared_object_name, WorkerOutput& out) {
    const std::string_view path = out.arena.store(dir, name);
    out.entries.push_back({path, PathHash(dir_hash).add(name).value(), type, shared_object_name});
    if (type == EntryType::directory && !pruned(name))
      subdirs_listed().push_back({path, name.size(), next_seq_[self]++, root});
  }

  // The folders the listing in progress found, queued when it ends; one per thread, since a
  // listing ends before the walk goes down into what it found.
  static std::vector<Pending>& subdirs_listed() {
    static thread_local std::vector<Pending> subdirs;
    return subdirs;
  }

  bool pruned(std::string_view name) const {
    for (const auto& p : prune_)
      if (p == name) return true;
    return false;
  }

  std::deque<WorkerQueue> queues_;  // one per worker (a deque: WorkerQueue cannot move)
  std::vector<std::uint64_t> next_seq_ = std::vector<std::uint64_t>(queues_.size(), 0);  // each worker's own
  std::vector<std::string> roots_;
  std::vector<int> root_fds_;  // O_PATH, with a cache; -1: none
  const std::vector<std::string>& prune_;
  const WalkCache* cache_;  // null: none
  const std::chrono::system_clock::time_point start_;
  std::atomic<unsigned> active_{0};  // workers walking a folder they took
};

}  // namespace

bool stamps_show_every_change(const std::vector<std::string>& real_roots, std::string_view mountinfo) {
  if (real_roots.empty()) return false;
  // Per root: the length of the longest mount point holding it and whether its type is a local
  // one (the last of equal ones: a later mount on the same point hides the earlier).
  std::vector<std::pair<std::size_t, bool>> holder(real_roots.size(), {0, false});
  for (auto line : split(mountinfo, '\n')) {
    // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw": the mount point is the
    // fifth field, the type the first after " - ".
    const auto dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    const auto fields = split(line.substr(0, dash), ' ');
    if (fields.size() < 5) continue;
    const std::string point = unescape_mount_point(fields[4]);
    const auto type = line.substr(dash + 3);
    const bool local = is_local_file_system(type.substr(0, type.find(' ')));
    for (std::size_t i = 0; i < real_roots.size(); ++i) {
      if (is_within(real_roots[i], point)) {
        if (point.size() >= holder[i].first) holder[i] = {point.size(), local};
      } else if (!local && is_within(point, real_roots[i])) {
        return false;  // a folder below the root is not local
      }
    }
  }
  for (const auto& [length, local] : holder)
    if (length == 0 || !local) return false;
  return true;
}

WalkResult walk_tree(const std::vector<std::string>& roots, unsigned threads, const std::vector<std::string>& prune,
                     const std::string& cache_file) {
  const unsigned n = thread_count(threads);
  WalkResult result;
  std::optional<WalkCache> cache;
  if (!cache_file.empty()) {
    result.cache.file = cache_file;
    result.cache.trusted = stamps_show_every_change_here(roots);
    if (result.cache.trusted) {
      cache = WalkCache::load(cache_file, n);
      result.cache.problem = cache->problem();
    } else {
      result.cache.problem = "not used: a file system at or below the roots is not one whose ctime the cache trusts";
    }
  }
  TreeWalker walker(roots, n, prune, cache ? &*cache : nullptr);
  std::vector<WorkerOutput> outs(n);
  parallel_for(n, n, [&](std::size_t i) { walker.run_worker(static_cast<unsigned>(i), outs[i]); });
  std::vector<ListedFolder> folders;
  for (auto& o : outs) {
    for (auto& b : o.arena.blocks()) result.arena.push_back(std::move(b));
    result.parts.push_back(std::move(o.entries));
    for (auto& e : o.diagnostics) result.diagnostics.push_back(std::move(e));
    result.cache.reused += o.reused;
    result.cache.folders += o.walked;
    folders.insert(folders.end(), o.folders.begin(), o.folders.end());
  }
  // Rewritten when a folder was listed from the disk, or one the cache kept was not walked.
  if (cache && (result.cache.reused != result.cache.folders || cache->folders() != folders.size())) {
    const std::string problem = store_walk_cache(cache_file, folders, result.parts);
    result.cache.written = problem.empty();
    if (!problem.empty()) result.cache.problem = problem;
  }
  return result;
}

}  // namespace cudafix::resolver::inline env
