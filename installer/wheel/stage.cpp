// Staging wheels into a transaction (installer/wheel/install.hpp: stage_wheels, plan_puts): the
// members of every wheel inflated side by side into the transaction's new/, each checked against
// RECORD, the generated files written, free space and a full disk said by name.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "installer/txn/file_ops.hpp"
#include "installer/wheel/install.hpp"
#include "installer/wheel/install_parts.hpp"
#include "installer/wheel/mapped_file.hpp"
#include "installer/wheel/zip_reader.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer {
namespace {

namespace r = cudafix::resolver;

// Whether an errno says the file system has no room left (ENOSPC; EDQUOT, a quota's).
bool out_of_space(int err) { return err == ENOSPC || err == EDQUOT; }

// A member's bytes written to `fd` whole; returns RECORD's form of its SHA-256, and feeds
// `other` (RECORD's digest when not SHA-256); the CRC is checked by the reader. Its blocks are
// reserved first (posix_fallocate): a mapped file's pages get their blocks when first written,
// and a file system found full then raises SIGBUS, which no check can catch. Reserved, it is
// inflated by libdeflate straight into the file mapped for writing (its size is known: no
// streaming, no copy); where the file system cannot reserve (EOPNOTSUPP, EINVAL), it is
// streamed through write(2), whose ENOSPC is an error like any other. `full(errno)` throws
// the refusal for a file system without room.
std::string write_member(const zip::Archive& archive, const zip::Entry& e, int fd, const std::string& path,
                         std::optional<r::DigestStream>& other, const std::function<void(int)>& full) {
  r::Sha256Stream hash;
  if (e.size == 0) {
    as_install_refusal([&] { archive.extract(e, nullptr); });
    return hash.record_digest();
  }
  const int err = txn::reserve_blocks(fd, e.size, path);
  if (out_of_space(err)) full(err);
  if (err == EOPNOTSUPP || err == EINVAL) {
    as_install_refusal([&] {
      archive.stream(e, [&](const unsigned char* p, std::size_t n) {
        txn::write_all(fd, p, n, path);
        hash.update(p, n);
        if (other) other->update(p, n);
      });
    });
    return hash.record_digest();
  }
  if (err != 0) throw r::Error(fmt::format("{}: posix_fallocate: {}", path, std::strerror(err)));
  void* p = ::mmap(nullptr, e.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw r::Error(fmt::format("{}: mmap: {}", path, std::strerror(errno)));
  const std::unique_ptr<void, std::function<void(void*)>> unmap(p, [&](void* q) { ::munmap(q, e.size); });
  auto* out = static_cast<unsigned char*>(p);
  as_install_refusal([&] { archive.extract(e, out); });
  hash.update(out, e.size);
  if (other) other->update(out, e.size);
  return hash.record_digest();
}

// The mount point of the file system holding `path` (a real path): its highest folder on the
// same device. What a full-disk message names.
std::string mount_point_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path;
  std::string at = path;
  for (std::string up = r::parent_dir(at); up != at; at = up, up = r::parent_dir(at)) {
    struct stat above {};
    if (::stat(up.c_str(), &above) != 0 || above.st_dev != st.st_dev) break;
  }
  return at;
}

// What staging a wheel needs free, beyond its files' blocks: room for what else the transaction
// writes (RECORD, INSTALLER, console scripts, folders, the journal's records of each file's put).
std::uint64_t staging_margin(std::uint64_t blocks_bytes, std::size_t files) {
  return std::max<std::uint64_t>(blocks_bytes / 100, std::uint64_t{4} << 20) + std::uint64_t{files} * 1024;
}

// A file a wheel writes: where it goes, where it is staged, and what RECORD says of it.
struct Staged {
  std::string target, staged, hash;
  std::uint64_t size = 0;
  bool executable = false;
  bool put_already = false;  // an earlier wheel of the transaction writes it too: its put stands
};

// One wheel being staged: the file read again and held to what was validated (a file changed
// since, shorter or with other members, would otherwise be read at the old offsets), and each
// member's staged file.
struct WheelStaging {
  WheelStaging(const ValidatedWheel& wheel, const r::EnvLayout& layout)
      : w(wheel),
        file(wheel.path),
        archive(as_install_refusal([&] { return zip::Archive(file.data(), file.size(), wheel.path); })),
        staged(wheel.members.size()) {
    claimed = check_targets(w, layout);
    const auto same = [&](const ZipMember& m) {
      if (m.entry >= archive.entries().size()) return false;
      const zip::Entry& e = archive.entries()[m.entry];
      return e.name == m.name && e.crc == m.crc && e.size == m.size && e.compressed == m.compressed &&
             e.data_offset == m.data_offset && e.method == m.method;
    };
    if (file.size() != w.size || !std::all_of(w.members.begin(), w.members.end(), same))
      refuse(w.path, "", "the file changed after it was validated");
  }
  const ValidatedWheel& w;
  const MappedFile file;
  const zip::Archive archive;
  std::vector<Staged> staged;        // the members', then the generated files
  std::vector<std::string> claimed;  // check_targets' answer

  [[nodiscard]] bool generated_member(const std::string& name) const {
    return name == w.dist_info + "/RECORD" || name == w.dist_info + "/INSTALLER" || name == w.dist_info + "/REQUESTED";
  }
  // Every file the install writes, normal: what check_targets claimed, and the dist-info's own.
  [[nodiscard]] std::vector<std::string> targets(const r::EnvLayout& layout) const {
    std::vector<std::string> out = claimed;
    const std::string site = w.root_is_purelib ? layout.purelib()->path : layout.platlib()->path;
    for (const char* own : {"/RECORD", "/INSTALLER", "/REQUESTED"})
      out.push_back(r::lexically_normal(site + "/" + w.dist_info + own));
    return out;
  }
};

// Wheels staged into one transaction's new/: what their members share while they are inflated
// side by side (the folders made, the first failure, the progress), and each wheel's files.
class Stager {
 public:
  Stager(const r::EnvLayout& layout, txn::Transaction& tx,
         const std::function<void(std::uint64_t, std::uint64_t)>& progress)
      : layout_(layout), tx_(tx), root_(layout.root_real), python_(layout.root + "/bin/python"), progress_(progress) {}

  // Free space first: the staged copies sit beside the files they replace until the renames. (And
  // the bytes the progress counts to.)
  void check_free_space(const std::vector<std::unique_ptr<WheelStaging>>& wheels) {
    for (const auto& ws : wheels) total_ += ws->w.unpacked;
    struct statvfs fs_stat {};
    if (::statvfs(tx_.new_dir().c_str(), &fs_stat) != 0) return;
    free_bytes_ = std::uint64_t{fs_stat.f_bavail} * fs_stat.f_frsize;
    const std::uint64_t block = std::max<std::uint64_t>(fs_stat.f_frsize, 1);
    std::size_t files = 0;
    for (const auto& ws : wheels) {
      for (const auto& m : ws->w.members) needed_ += (m.size + block - 1) / block * block;
      files += ws->w.members.size();
    }
    needed_ += staging_margin(needed_, files);
    staging_what_ = wheels.size() == 1 ? "the wheel" : fmt::format("the {} wheels", wheels.size());
    if (free_bytes_ < needed_)
      throw r::Error(
          fmt::format("{}: {} MiB free on the environment's file system, {} MiB needed to stage {}; "
                      "nothing was installed",
                      root_, free_bytes_ >> 20, (needed_ + (1 << 20) - 1) >> 20, wheel_names(wheels)));
  }

  // The members of `wheels` inflated on `threads` threads, the largest first whichever wheel
  // holds it, so that the threads finish together. The first failure stops the members not yet
  // begun. A full disk is said once every thread is done, before what it caused elsewhere (a
  // folder that could not be made).
  void stage_members(const std::vector<WheelStaging*>& wheels, unsigned threads) {
    std::vector<std::pair<WheelStaging*, std::size_t>> order;
    for (WheelStaging* ws : wheels)
      for (std::size_t i = 0; i < ws->w.members.size(); ++i) order.emplace_back(ws, i);
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return a.first->w.members[a.second].size > b.first->w.members[b.second].size;
    });
    r::parallel_for(order.size(), threads, [&](std::size_t k) {
      if (stop_) return;
      try {
        stage_member(*order[k].first, order[k].second);
      } catch (const DiskFull&) {
        stop_ = true;
      } catch (...) {
        stop_ = true;
        const std::lock_guard lock(mutex_);
        if (!failed_) failed_ = std::current_exception();
      }
    });
    if (fullest_) throw r::Error(fullest_->second);
    if (failed_) std::rethrow_exception(failed_);
  }

  // The generated files: console scripts, INSTALLER, REQUESTED, and RECORD last (cudafix's
  // hashes of what it staged). Returns what the wheel writes; its puts are planned later.
  StagedWheel finish(WheelStaging& ws, bool requested) {
    const ValidatedWheel& w = ws.w;
    StagedWheel out;
    const std::string site = w.root_is_purelib ? layout_.purelib()->path : layout_.platlib()->path;
    const std::string info = site + "/" + w.dist_info;
    const auto add_generated = [&](const std::string& target, const std::string& text, bool executable) {
      Staged s;
      s.target = target;
      s.staged = staged_path(target);
      make_parent(s.staged);
      s.put_already = restage(s.staged);
      s.hash = write_generated(s.staged, text, executable);
      s.size = text.size();
      s.executable = executable;
      ws.staged.push_back(std::move(s));
    };
    for (const auto& [name, body] : scripts_of(w.entry_points, python_)) {
      add_generated(layout_.root + "/bin/" + name, body, true);
      out.generated.push_back(layout_.root + "/bin/" + name);
    }
    add_generated(info + "/INSTALLER", "cudafix\n", false);
    out.generated.push_back(info + "/INSTALLER");
    if (requested) {
      add_generated(info + "/REQUESTED", "", false);
      out.generated.push_back(info + "/REQUESTED");
    }
    std::string record;
    for (const auto& s : ws.staged) {
      if (s.target.empty()) continue;
      std::string rel = r::relative_to(s.target, site);
      if (rel == s.target) rel = "../../../" + r::relative_to(s.target, layout_.root);  // bin/, include/ from the site
      record += fmt::format("{},sha256={},{}\n", rel, s.hash, s.size);
    }
    record += w.dist_info + "/RECORD,,\n";
    Staged s;
    s.target = info + "/RECORD";
    s.staged = staged_path(s.target);
    make_parent(s.staged);
    s.put_already = restage(s.staged);
    s.hash = write_generated(s.staged, record, false);  // not listed in RECORD, but what a rollback compares
    ws.staged.push_back(std::move(s));
    for (const auto& f : ws.staged) {
      if (f.target.empty()) continue;
      out.targets.push_back(f.target);
      out.bytes += f.size;
      out.puts.push_back({f.staged, f.target, f.hash, f.put_already});
    }
    return out;
  }

  void done() {
    if (progress_) progress_(total_, total_);  // the bar's end (RECORD and INSTALLER are not counted)
  }

 private:
  struct DiskFull {};
  const r::EnvLayout& layout_;
  txn::Transaction& tx_;
  const std::string root_, python_;
  const std::function<void(std::uint64_t, std::uint64_t)>& progress_;
  std::uint64_t free_bytes_ = 0, needed_ = 0, total_ = 0;
  std::string staging_what_ = "the wheel";  // what needed_ stages, as the full-disk refusal says
  std::atomic<std::uint64_t> written_{0};
  std::mutex mutex_;                                              // fullest_, failed_
  std::optional<std::pair<std::uint64_t, std::string>> fullest_;  // the member's size, the refusal
  std::exception_ptr failed_;
  std::atomic<bool> stop_{false};
  std::mutex folders_mutex_;
  std::set<std::string> folders_;

  static std::string wheel_names(const std::vector<std::unique_ptr<WheelStaging>>& wheels) {
    std::vector<std::string> names;
    for (const auto& ws : wheels) names.emplace_back(r::base_name(ws->w.path));
    return fmt::format("{}", fmt::join(names, ", "));
  }
  void wrote(std::uint64_t n) {
    const auto now = written_ += n;
    if (progress_) progress_(now, total_);
  }
  [[nodiscard]] std::string staged_path(const std::string& target) const {
    return tx_.new_dir() + "/" + r::relative_to(target, root_);
  }
  // A path several wheels of one transaction write is staged at one place (new/ holds only this
  // transaction's staging): a later wheel's bytes replace the earlier one's there, as pip
  // installing them in order leaves the file, and the one put planned for it stands, so that
  // what is on disk is moved aside once and undone once. Returns whether it was staged before.
  static bool restage(const std::string& staged_file) {
    if (!txn::exists_nofollow(staged_file)) return false;
    txn::remove_file(staged_file);
    return true;
  }
  void make_parent(const std::string& p) {
    const std::string parent = r::parent_dir(p);
    const std::lock_guard<std::mutex> lock(folders_mutex_);
    if (folders_.insert(parent).second) txn::make_dirs(parent);
  }
  // Space another process takes from here on is found when a file's blocks are reserved. Where
  // several threads find the disk full at once, each is heard and the largest member named (the
  // one the space was taken from, whichever thread got there first).
  std::function<void(int)> full(const std::string& wheel, const std::string& member, std::uint64_t size) {
    return [this, wheel, member, size](int err) {
      std::string refusal;
      try {
        refuse(wheel, member,
               fmt::format("the file system at {} is full ({}) with its {} bytes still to write: {} MiB needed to "
                           "stage {}, {} MiB were free when staging began (another process has taken space since)",
                           mount_point_of(root_), std::strerror(err), size, (needed_ + (1 << 20) - 1) >> 20,
                           staging_what_, free_bytes_ >> 20));
      } catch (const r::Error& e) {
        refusal = e.what();
      }
      {
        const std::lock_guard lock(mutex_);
        if (!fullest_ || size > fullest_->first) fullest_ = std::pair{size, refusal};
      }
      throw DiskFull{};
    };
  }
  void stage_member(WheelStaging& ws, std::size_t index);

  // 0755 whatever the umask, set on the file `fd` was written through: by path, the mode would
  // follow a staging folder swapped for a symlink since (another process of this user can write
  // .cudafix/) to a file outside, and Landlock does not fence mode changes.
  static void set_executable(int fd, const std::string& staged_file) {
    txn::test_pause("mode");
    txn::set_mode(fd, 0755, staged_file);
  }
  // A generated file written whole where it is staged, its mode set and its hash taken from the
  // bytes written: nothing is looked up by path again once it is open. Returns RECORD's form of
  // its SHA-256.
  static std::string write_generated(const std::string& staged_file, std::string_view text, bool executable) {
    const int fd = txn::open_file(staged_file, O_WRONLY | O_CREAT | O_EXCL, executable ? 0755 : 0644);
    try {
      txn::write_all(fd, text.data(), text.size(), staged_file);
      if (executable) set_executable(fd, staged_file);
      txn::sync_fd(fd, staged_file);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    r::Sha256Stream hash;
    hash.update(text.data(), text.size());
    return hash.record_digest();
  }
};

void Stager::stage_member(WheelStaging& ws, std::size_t index) {
  const ValidatedWheel& w = ws.w;
  const ZipMember& m = w.members[index];
  if (ws.generated_member(m.name)) return;
  const zip::Entry& e = ws.archive.entries()[m.entry];
  Staged& s = ws.staged[index];
  s.target = target_of(w, m.name, layout_);
  s.staged = staged_path(s.target);
  const bool script = m.name.starts_with(w.dist_info.substr(0, w.dist_info.size() - 10) + ".data/scripts/");
  s.executable = m.executable;
  make_parent(s.staged);
  s.put_already = restage(s.staged);
  // O_EXCL: two members of one wheel never share a staged file (check_targets refused that).
  const int fd = txn::open_file(s.staged, O_RDWR | O_CREAT | O_EXCL, s.executable ? 0755 : 0644);
  // RECORD's digest of the wheel's bytes where it is not SHA-256, the digest the new RECORD gives.
  std::optional<r::DigestStream> wheel_digest;
  // A member with no RECORD hash is one of RECORD's signatures (validate_wheel refuses any other).
  const bool unhashed = m.record_hash.empty();
  if (!unhashed && m.record_algorithm != "sha256") wheel_digest.emplace(m.record_algorithm);
  if (!script) {
    const std::string digest = write_member(ws.archive, e, fd, s.staged, wheel_digest, full(w.path, m.name, m.size));
    if (s.executable) set_executable(fd, s.staged);
    txn::start_writeback(fd);
    ::close(fd);
    if (!unhashed && (wheel_digest ? wheel_digest->record_digest() : digest) != m.record_hash)
      refuse(w.path, m.name, fmt::format("its bytes do not match RECORD's {}", m.record_algorithm));
    s.hash = digest;
    s.size = m.size;
    wrote(m.size);
    return;
  }
  r::Sha256Stream wheel_hash, written_hash;
  // A script's `#!python` line names this environment's interpreter, as pypa/installer's
  // fix_shebang rewrites it: the whole first line replaced, however many pieces it spans.
  enum class Line { unread, skipping, copying } first = Line::unread;
  std::string head;  // the first bytes, until 8 tell whether the line is `#!python`
  std::uint64_t written = 0;
  const auto put = [&](const void* p, std::size_t n) {
    written_hash.update(p, n);
    txn::write_all(fd, p, n, s.staged);
    written += n;
  };
  const auto rewrite = [&](const unsigned char* p, std::size_t n) {
    if (first == Line::unread) {
      const std::size_t take = std::min<std::size_t>(n, 8 - head.size());
      head.append(reinterpret_cast<const char*>(p), take);
      p += take;
      n -= take;
      if (head.size() < 8) return;  // more to come, or the member ends (flushed below)
      first = head == "#!python" ? Line::skipping : Line::copying;
      const std::string line = first == Line::skipping ? "#!" + python_ + "\n" : head;
      put(line.data(), line.size());
    }
    if (first == Line::skipping) {
      const auto* eol = static_cast<const unsigned char*>(std::memchr(p, '\n', n));
      if (!eol) return;
      first = Line::copying;
      n -= static_cast<std::size_t>(eol + 1 - p);
      p = eol + 1;
    }
    if (n) put(p, n);
  };
  as_install_refusal([&] {
    ws.archive.stream(e, [&](const unsigned char* p, std::size_t n) {
      wheel_hash.update(p, n);
      if (wheel_digest) wheel_digest->update(p, n);
      rewrite(p, n);
    });
  });
  if (first == Line::unread) put(head.data(), head.size());  // a script of fewer than 8 bytes
  if (s.executable) set_executable(fd, s.staged);
  ::close(fd);
  if (!unhashed && (wheel_digest ? wheel_digest->record_digest() : wheel_hash.record_digest()) != m.record_hash)
    refuse(w.path, m.name, fmt::format("its bytes do not match RECORD's {}", m.record_algorithm));
  s.hash = written_hash.record_digest();
  s.size = written;
  wrote(m.size);
}

}  // namespace

std::vector<StagedWheel> stage_wheels(const std::vector<const ValidatedWheel*>& wheels, const r::EnvLayout& layout,
                                      txn::Transaction& tx, unsigned threads, bool requested,
                                      const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  std::vector<std::unique_ptr<WheelStaging>> staging;
  for (const ValidatedWheel* w : wheels) staging.push_back(std::make_unique<WheelStaging>(*w, layout));
  Stager stager(layout, tx, progress);
  stager.check_free_space(staging);
  txn::test_pause("staging");
  // Side by side where no two wheels write one path; else one wheel after the other, so that the
  // later one's bytes replace the earlier one's where both write.
  std::set<std::string> seen;
  bool shared = false;
  for (const auto& ws : staging)
    for (const auto& target : ws->targets(layout)) shared = !seen.insert(target).second || shared;
  std::vector<WheelStaging*> all;
  for (const auto& ws : staging) all.push_back(ws.get());
  std::vector<StagedWheel> out;
  if (shared) {
    for (WheelStaging* ws : all) {
      stager.stage_members({ws}, threads);
      out.push_back(stager.finish(*ws, requested));
    }
  } else {
    stager.stage_members(all, threads);
    for (WheelStaging* ws : all) out.push_back(stager.finish(*ws, requested));
  }
  stager.done();
  // One batch: the staged data durable before any rename makes it live.
  txn::sync_file_system(tx.new_dir());
  return out;
}

void plan_puts(const StagedWheel& wheel, txn::Transaction& tx) {
  for (const auto& p : wheel.puts) {
    if (p.again)
      tx.restaged(p.target, p.hash);
    else
      tx.put(p.staged, p.target, 0755, p.hash);
  }
}

void check_members(const ValidatedWheel& wheel, unsigned threads) {
  const MappedFile file(wheel.path);
  const zip::Archive archive(file.data(), file.size(), wheel.path);
  std::vector<std::optional<std::string>> refused(wheel.members.size());
  r::parallel_for(wheel.members.size(), threads, [&](std::size_t i) {
    const ZipMember& m = wheel.members[i];
    // RECORD itself has no hash, and staging writes its own INSTALLER and REQUESTED.
    for (const char* own : {"/RECORD", "/INSTALLER", "/REQUESTED"})
      if (m.name == wheel.dist_info + own) return;
    try {
      r::DigestStream digest(m.record_algorithm);
      as_install_refusal([&] {
        archive.stream(archive.entries()[m.entry], [&](const unsigned char* p, std::size_t n) { digest.update(p, n); });
      });
      if (digest.record_digest() != m.record_hash)
        refuse(wheel.path, m.name, fmt::format("its bytes do not match RECORD's {}", m.record_algorithm));
    } catch (const r::Error& e) {
      refused[i] = e.what();
    }
  });
  for (const auto& why : refused)
    if (why) throw r::Error(*why);
}

}  // namespace cudafix::installer
