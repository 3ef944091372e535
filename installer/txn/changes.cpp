#include "installer/txn/changes.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "installer/txn/file_ops.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/state_folder.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer::txn {
namespace {

namespace fs = std::filesystem;
namespace r = cudafix::resolver;
using nlohmann::json;

// The path, and each folder above it up to the root, really inside the root: a symlinked
// folder on the way out of it refuses.
void check_inside(const r::Environment& env, const std::string& path) {
  const std::string& root = env.layout.root_real;
  if (path == root || !r::is_within(path, root))
    throw r::Error(
        fmt::format("refusing to remove {}: it is outside the environment {}; nothing was changed", path, root));
  const std::string parent = r::parent_dir(path);
  const std::string real = r::real_path_of(parent);
  if (!r::is_within(real, root))
    throw r::Error(
        fmt::format("refusing to remove {}: its folder {} leads to {}, outside the environment; nothing "
                    "was changed",
                    path, parent, real));
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0755;
}

// Whether every file below `dir` is one that goes (or compiled bytecode, which pip takes along).
bool everything_below_goes(const std::string& dir, const std::set<std::string>& files) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) continue;
    const std::string p = it->path().string();
    if (!files.count(p) && !r::in_pycache(p)) return false;
  }
  return !ec;
}

std::string snapshots_root(const std::string& root) { return root + "/.cudafix/snapshots"; }

void check_snapshot_name(const std::string& name) {
  if (!r::is_snapshot_name(name))
    throw r::Error(fmt::format("snapshot name '{}': use up to 128 letters, digits, '-', '_' or '.', not a leading '.'",
                               name.substr(0, 128)));
}

struct Entry {
  std::string rel;
  bool symlink = false;
  unsigned mode = 0644;
  std::uint64_t size = 0;
  std::string sha256;  // RECORD form: sha256=<urlsafe b64>
  std::string target;
};

// Every file the dists list inside the environment, and every file in their dist-info folders,
// by path relative to the root, with RECORD's hash where it gives one. With `in_scope`, the files
// of the dists it marks; `outside` then gets those of them that another dist lists too.
struct Listed {
  std::map<std::string, std::string> files;  // abs -> RECORD hash (may be empty)
  std::set<std::string> outside;
};

void record_hash(std::map<std::string, std::string>::iterator at, bool added, const std::string& hash) {
  // Two dists listing one path with different hashes (a CUDA 12 and a CUDA 13 cuDNN both
  // shipping nvidia/cudnn/lib/libcudnn.so.9): which one's bytes are there is known only by
  // reading them, so the snapshot hashes the file (else its restore called it altered).
  if (!added && at->second != hash) at->second.clear();
}

std::string sha256_of_row(const r::RecordRow& row) { return row.hash_algo() == "sha256" ? std::string(row.hash) : ""; }

Listed listed_files(const r::Environment& env, const std::vector<bool>* in_scope = nullptr) {
  Listed out;
  const std::string& root = env.layout.root_real;
  for (std::size_t i = 0; i < env.dists.size(); ++i) {
    if (in_scope && !(*in_scope)[i]) continue;
    const auto& d = env.dists[i];
    for (const auto& row : d.record) {
      const std::string abs = r::join_normal(d.site_dir, row.path);
      if (!r::is_within(abs, root)) continue;
      const std::string hash = sha256_of_row(row);
      const auto [at, added] = out.files.emplace(abs, hash);
      record_hash(at, added, hash);
    }
    if (d.format == r::DistFormat::egg_link || d.format == r::DistFormat::egg_info_file) continue;
    std::error_code ec;
    const std::string info = d.site_dir + "/" + d.dir_name;
    for (fs::recursive_directory_iterator it(info, ec), end; !ec && it != end; it.increment(ec))
      if (!it->is_directory(ec) || it->is_symlink(ec)) out.files.emplace(it->path().string(), "");
  }
  if (!in_scope) return out;
  // The other dists' rows, joined only where the file name is one of the scope's: a scope is a
  // few dists, the rest of a torch venv some 69,000 rows.
  std::set<std::string_view> names;
  for (const auto& [abs, hash] : out.files) names.insert(r::base_name(abs));
  for (std::size_t i = 0; i < env.dists.size(); ++i) {
    if ((*in_scope)[i]) continue;
    const auto& d = env.dists[i];
    for (const auto& row : d.record) {
      const auto name = r::base_name(row.path);
      // "pkg/a.py/." names a.py too: such a row is joined whatever its last part.
      if (!names.count(name) && !name.empty() && name != "." && name != "..") continue;
      const std::string abs = r::join_normal(d.site_dir, row.path);
      const auto at = out.files.find(abs);
      if (at == out.files.end()) continue;
      record_hash(at, false, sha256_of_row(row));
      out.outside.insert(abs);
    }
  }
  return out;
}

// The project a dist folder's name is of, PEP 503: "nvidia_cudnn_cu13-9.19.0.56.dist-info",
// "foo-1.0-py3.11.egg-info" and "foo.egg-link" -> "nvidia-cudnn-cu13", "foo", "foo".
std::string project_of_folder(std::string_view folder) {
  for (const std::string_view suffix : {".dist-info", ".egg-info", ".egg-link"})
    if (folder.ends_with(suffix)) folder.remove_suffix(suffix.size());
  return r::normalize_name(folder.substr(0, folder.find('-')));
}

// The dists of `env` a scope covers: the folders it names, and any version of their projects
// installed now.
std::vector<bool> dists_in_scope(const r::Environment& env, const std::vector<std::string>& scope) {
  std::set<std::string> folders(scope.begin(), scope.end()), projects;
  for (const auto& f : scope) projects.insert(project_of_folder(f));
  std::vector<bool> in(env.dists.size());
  for (std::size_t i = 0; i < env.dists.size(); ++i)
    in[i] = folders.count(env.dists[i].dir_name) || projects.count(env.dists[i].normalized);
  return in;
}

}  // namespace

std::string snapshot_dir(const std::string& root, const std::string& name) { return snapshots_root(root) + "/" + name; }

void plan_removal_ops(const r::Environment& env, const r::Deletion& deletion, Transaction& tx) {
  for (const auto& f : deletion.files) check_inside(env, f);
  for (const auto& d : deletion.dirs) check_inside(env, d);
  // The planner never lists a scheme folder, cudafix's state or the venv's core; a plan.json
  // edited by hand might.
  for (const auto* paths : {&deletion.files, &deletion.dirs})
    for (const auto& p : *paths)
      if (const auto why = r::protected_path(env.layout, p))
        throw r::Error(fmt::format("refusing to remove {}: it {}; nothing was changed", p, *why));
  const std::set<std::string> files(deletion.files.begin(), deletion.files.end());
  // Top-most folders that go whole.
  std::vector<std::string> whole;
  for (const auto& d : deletion.dirs) {
    if (std::any_of(whole.begin(), whole.end(), [&](const std::string& w) { return r::is_within(d, w); })) continue;
    if (everything_below_goes(d, files)) whole.push_back(d);
  }
  const auto in_whole = [&](const std::string& p) {
    return std::any_of(whole.begin(), whole.end(), [&](const std::string& w) { return r::is_within(p, w); });
  };
  for (const auto& f : deletion.files)
    if (!in_whole(f) && exists_nofollow(f)) tx.move_aside(f);
  for (const auto& w : whole) tx.move_aside(w);
  // The folders left empty, deepest first.
  std::vector<std::string> rest;
  for (const auto& d : deletion.dirs)
    if (!in_whole(d)) rest.push_back(d);
  std::sort(rest.begin(), rest.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const auto& d : rest) tx.remove_folder_if_empty(d, mode_of(d));
}

namespace {

// Why `file` could not be hard-linked into the snapshot folder `into`: the two on different file
// systems (their devices), or on different mounts of one (a bind mount: link(2) refuses across
// mounts too), else what the link said.
std::string why_no_link(const std::string& file, const std::string& into, const std::string& said) {
  struct stat a {};
  struct stat b {};
  if (::lstat(file.c_str(), &a) == 0 && ::stat(into.c_str(), &b) == 0) {
    if (a.st_dev != b.st_dev) return "another file system";
    if (said.find(std::strerror(EXDEV)) != std::string::npos)
      return "another mount of the same file system (a bind mount)";
  }
  return said;
}

// `from`'s bytes into the new file `to`, which is opened confined (file_ops) and never through a
// link; `from` is opened without following a final link and must be a regular file.
void copy_confined(const std::string& from, const std::string& to) {
  const int in = ::open(from.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (in < 0) throw r::Error(r::cannot("read", from, errno));
  struct stat st {};
  if (::fstat(in, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(in);
    throw r::Error(fmt::format("{} is no regular file", from));
  }
  int out = -1;
  try {
    out = open_file(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    char buf[1 << 16];
    for (ssize_t n; (n = ::read(in, buf, sizeof buf)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw r::Error(r::cannot("read", from, errno));
      write_all(out, buf, static_cast<std::size_t>(n), to);
    }
  } catch (...) {
    if (out >= 0) ::close(out);
    ::close(in);
    throw;
  }
  ::close(out);
  ::close(in);
}

// A manifest's scope, read as untrusted input: none (absent or null) for the whole environment,
// else at most k_scope_max dist folder names; any other shape throws, saying what is wrong.
std::optional<std::vector<std::string>> scope_of(const json& manifest, const std::string& dir) {
  const auto at = manifest.find("scope");
  if (at == manifest.end() || at->is_null()) return std::nullopt;
  const auto refuse = [&](const std::string& why) {
    return r::Error(fmt::format("{}/manifest.json: its scope {}; nothing was changed", dir, why));
  };
  if (!at->is_array()) throw refuse("is not a list of dist-info folder names");
  if (at->size() > k_scope_max) throw refuse(fmt::format("names {} dists, more than {}", at->size(), k_scope_max));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < at->size(); ++i) {
    const auto& n = (*at)[i];
    if (!n.is_string()) throw refuse(fmt::format("entry {} is not a string", i));
    const auto& name = n.get_ref<const std::string&>();
    if (!r::is_dist_folder_name(name))
      throw refuse(fmt::format("entry '{}' is not a dist-info folder name", r::to_valid_utf8(name.substr(0, 256))));
    out.push_back(name);
  }
  return out;
}

}  // namespace

namespace {

// The dists a scoped snapshot holds, by index, with their folders' names in info.scope; none (a
// snapshot of everything) where `scope` is none, too long, or names a folder the manifest's reader
// would refuse.
std::optional<std::vector<bool>> snapshot_scope(const r::Environment& env, const std::optional<std::vector<int>>& scope,
                                                SnapshotInfo& info) {
  if (!scope || scope->size() > k_scope_max) return std::nullopt;
  std::vector<bool> in_scope(env.dists.size());
  info.scope.emplace();
  for (const int d : *scope) {
    const auto& dist = env.dists.at(static_cast<std::size_t>(d));
    if (!r::is_dist_folder_name(dist.dir_name)) {
      // A name the manifest's reader refuses would make the snapshot unrestorable: whole.
      info.scope.reset();
      return std::nullopt;
    }
    if (!in_scope[static_cast<std::size_t>(d)]) info.scope->push_back(dist.dir_name);
    in_scope[static_cast<std::size_t>(d)] = true;
  }
  return in_scope;
}

// Each listed file kept in a snapshot's tree (`tmp`/tree) on every core: hard-linked where the
// file system allows, else copied; a symlink recorded. What was kept, and how, is counted; the
// first failure is kept and thrown once every file was tried.
struct SnapshotKeeper {
  SnapshotKeeper(const std::string& root_, const std::string& tmp_) : root(root_), tmp(tmp_) {}
  const std::string& root;
  const std::string& tmp;
  std::atomic<std::size_t> linked{0}, copied{0}, symlinks{0};
  std::atomic<std::uint64_t> bytes{0}, copied_bytes{0};
  std::mutex failure_mutex;
  std::string failure, copied_because;

  void fail(std::string why) {
    std::lock_guard<std::mutex> lock(failure_mutex);
    failure = std::move(why);
  }

  // A regular file linked or copied into the tree; false (and failure said) where it cannot be.
  bool keep_bytes(const std::string& abs, const std::string& rel, std::uint64_t size) {
    const std::string into = tmp + "/tree/" + rel;
    try {
      (void)exists_nofollow(abs);  // confined: a folder on the way that leads outside throws
    } catch (const r::Error& outside) {
      fail(fmt::format("snapshot: refusing {}: {}", abs, outside.what()));
      return false;
    }
    try {
      link_path(abs, into);
      ++linked;
      return true;
    } catch (const r::Error& refused) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (copied_because.empty()) copied_because = why_no_link(abs, tmp, refused.what());
    }
    // Another file system, or one that refuses hard links: a copy, counted and said, written
    // through a descriptor opened beneath the root (std::filesystem::copy_file opens by path).
    try {
      copy_confined(abs, into);
    } catch (const r::Error& cannot_copy) {
      fail(fmt::format("snapshot: cannot keep {}: {}", abs, cannot_copy.what()));
      return false;
    }
    ++copied;
    copied_bytes += size;
    return true;
  }

  // One file's manifest entry, and its entry held in memory; null where nothing is kept (gone
  // since listed, neither a file nor a symlink, or refused).
  json keep(const std::string& abs, const std::string& hash, SnapshotEntry& kept) {
    struct stat st {};
    if (::lstat(abs.c_str(), &st) != 0) return nullptr;  // listed, not on disk: nothing to keep
    const std::string rel = r::relative_to(abs, root);
    const auto size = static_cast<std::uint64_t>(st.st_size);
    json e{{"path", rel}, {"mode", st.st_mode & 07777}, {"size", size}};
    kept = {rel,
            S_ISLNK(st.st_mode),
            st.st_mode & 07777,
            size,
            "",
            "",
            st.st_dev,
            st.st_ino,
            static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
    if (S_ISLNK(st.st_mode)) {
      std::error_code link_ec;
      e["type"] = "symlink";
      kept.target = fs::read_symlink(abs, link_ec).string();
      e["target"] = kept.target;
      ++symlinks;
      return e;
    }
    if (!S_ISREG(st.st_mode)) return nullptr;
    e["type"] = "file";
    if (!keep_bytes(abs, rel, size)) return nullptr;
    kept.sha256 = hash.empty() ? r::sha256_of_file(abs) : hash;
    e["sha256"] = kept.sha256;
    bytes += size;
    return e;
  }
};

}  // namespace

SnapshotInfo take_snapshot(const r::Environment& env, const std::string& name,
                           const std::function<void(std::uint64_t, std::uint64_t)>& progress,
                           const std::optional<std::vector<int>>& scope) {
  check_snapshot_name(name);
  const std::string root = env.layout.root_real;
  const std::string dir = snapshot_dir(root, name);
  if (exists_nofollow(dir)) throw r::Error(fmt::format("snapshot '{}' exists already ({})", name, dir));
  const std::string tmp = snapshots_root(root) + "/." + name + ".partial";
  confine_to(root);
  make_state_folders(root);
  make_dirs(snapshots_root(root), 0700);
  remove_tree(tmp);
  make_dirs(tmp + "/tree", 0700);
  SnapshotInfo info;
  info.name = name;
  info.time = static_cast<std::int64_t>(std::time(nullptr));
  const auto in_scope = snapshot_scope(env, scope, info);
  // The folders first (one thread), then every file's stat, link and hash on every core.
  const auto listed = listed_files(env, in_scope ? &*in_scope : nullptr).files;
  std::vector<std::pair<std::string, std::string>> files(listed.begin(), listed.end());
  std::set<std::string> folders;
  for (const auto& [abs, hash] : files) folders.insert(r::parent_dir(tmp + "/tree/" + r::relative_to(abs, root)));
  for (const auto& f : folders) make_dirs(f);
  std::vector<json> made(files.size());
  std::vector<SnapshotEntry> held(files.size());
  SnapshotKeeper keeper(root, tmp);
  std::atomic<std::size_t> seen{0};
  r::parallel_for(files.size(), 0, [&](std::size_t i) {
    if (progress) progress(++seen, files.size());
    made[i] = keeper.keep(files[i].first, files[i].second, held[i]);
  });
  if (!keeper.failure.empty()) throw r::Error(keeper.failure);
  json entries = json::array();
  for (std::size_t i = 0; i < made.size(); ++i) {
    if (made[i].is_null()) continue;
    entries.push_back(std::move(made[i]));
    info.entries.push_back(std::move(held[i]));
  }
  info.files = entries.size();
  info.linked = keeper.linked;
  info.copied = keeper.copied;
  info.symlinks = keeper.symlinks;
  info.bytes = keeper.bytes;
  info.copied_bytes = keeper.copied_bytes;
  info.copied_because = keeper.copied_because;
  const json manifest{{"name", name},
                      {"time", info.time},
                      {"root", root},
                      {"linked", info.linked},
                      {"copied", info.copied},
                      {"scope", info.scope ? json(*info.scope) : json()},
                      {"entries", std::move(entries)}};
  test_pause("snapshot-linked");
  write_synced(tmp + "/manifest.json", manifest.dump());
  rename_path(tmp, dir);
  return info;
}

std::vector<SnapshotInfo> list_snapshots(const std::string& root) {
  std::vector<SnapshotInfo> out;
  std::error_code ec;
  for (fs::directory_iterator it(snapshots_root(root), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.starts_with(".")) continue;
    const auto text = r::try_read_file(it->path().string() + "/manifest.json", k_manifest_max_bytes);
    if (!text) continue;
    const auto j = json::parse(*text, nullptr, false);
    if (!j.is_object()) continue;
    SnapshotInfo s;
    s.name = n;
    try {
      s.time = j.value("time", std::int64_t{0});
      s.linked = j.value("linked", std::size_t{0});
      s.copied = j.value("copied", std::size_t{0});
      if (!j["entries"].is_array()) continue;
      s.scope = scope_of(j, it->path().string());
      for (const auto& e : j["entries"]) {
        ++s.files;
        if (e.value("type", "") == "file") s.bytes += e.value("size", std::uint64_t{0});
      }
    } catch (const json::exception&) {
      continue;  // not a manifest cudafix wrote: not listed
    } catch (const r::Error&) {
      continue;  // a scope of another shape: not listed either
    }
    out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const SnapshotInfo& a, const SnapshotInfo& b) { return a.time > b.time; });
  return out;
}

void delete_snapshot(const std::string& root, const std::string& name) {
  check_snapshot_name(name);
  const std::string dir = snapshot_dir(root, name);
  if (!exists_nofollow(dir + "/manifest.json"))
    throw r::Error(fmt::format("no snapshot named '{}' in {}", name, snapshots_root(root)));
  // Unlisted before its files go: a kill in between leaves no snapshot that names missing files.
  const std::string going = snapshots_root(root) + "/." + name + ".deleting";
  remove_tree(going);
  rename_path(dir, going);
  test_pause("snapshot-unlisted");
  remove_tree_on_every_core(going);
}

void tidy_snapshots(const std::string& root, const std::function<void(const std::string&)>& say) {
  const std::string folder = snapshots_root(root);
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    for (const std::string_view suffix : {std::string_view(".partial"), std::string_view(".deleting")}) {
      if (name.size() <= suffix.size() + 1 || name.front() != '.' || !name.ends_with(suffix)) continue;
      const auto snapshot = std::string_view(name).substr(1, name.size() - 1 - suffix.size());
      if (!r::is_snapshot_name(snapshot)) continue;
      remove_tree(folder + "/" + name);
      say(suffix == ".partial"
              ? fmt::format("recovering: removed snapshot '{}', which a killed run left half taken", snapshot)
              : fmt::format("recovering: finished deleting snapshot '{}', which a killed run had begun to delete",
                            snapshot));
    }
  }
}

namespace {

// A manifest's entries, each checked: a normal path inside the environment, not cudafix's state.
std::vector<SnapshotEntry> entries_of(const json& manifest, const std::string& dir) {
  std::vector<SnapshotEntry> out;
  for (const auto& e : manifest["entries"]) {
    const std::string rel = e.is_object() && e["path"].is_string() ? e["path"].get<std::string>() : "";
    if (!r::is_clean_relative(rel) || r::is_protected_path(rel))
      throw r::Error(
          fmt::format("{}/manifest.json: entry '{}' is not a normal path inside the environment (or names "
                      "cudafix's own state); nothing was changed",
                      dir, rel.substr(0, 256)));
    SnapshotEntry entry;
    entry.rel = rel;
    entry.symlink = e.value("type", "") == "symlink";
    entry.target = e.value("target", "");
    entry.sha256 = e.value("sha256", "");
    out.push_back(std::move(entry));
  }
  return out;
}

// The ops that put `entries` back (those `only` names, where given) and move aside what the
// scope's dists list now that the entries do not hold.
RestoreCheck plan_restore_entries(const r::Environment& env, const std::string& dir,
                                  const std::vector<SnapshotEntry>& entries,
                                  const std::optional<std::vector<std::string>>& scope,
                                  const std::set<std::string>* only, Transaction& tx) {
  const std::string root = env.layout.root_real;
  RestoreCheck check;
  check.scope = scope;
  struct Restore {
    std::string abs, from;
    bool symlink;
    std::string target;
    std::string sha256;
  };
  std::vector<Restore> restores;
  std::set<std::string> kept;
  for (const auto& e : entries) {
    const std::string abs = root + "/" + e.rel;
    kept.insert(abs);
    if (only && !only->count(abs)) continue;
    struct stat now {
    }, was{};
    const bool present = ::lstat(abs.c_str(), &now) == 0;
    if (e.symlink) {
      std::error_code ec;
      if (present && S_ISLNK(now.st_mode) && fs::read_symlink(abs, ec).string() == e.target) {
        ++check.unchanged;
        continue;
      }
      restores.push_back({abs, "", true, e.target, ""});
      continue;
    }
    const std::string from = dir + "/tree/" + e.rel;
    if (::lstat(from.c_str(), &was) != 0 || !S_ISREG(was.st_mode)) {
      check.altered.push_back(e.rel + " (gone from the snapshot)");
      continue;
    }
    if (present && now.st_dev == was.st_dev && now.st_ino == was.st_ino) {
      ++check.unchanged;  // the very file the snapshot holds
      continue;
    }
    if (r::sha256_of_file(from) != e.sha256) {
      check.altered.push_back(e.rel);
      continue;
    }
    restores.push_back({abs, from, false, "", e.sha256});
  }
  if (!check.altered.empty()) return check;
  // What the dists list now that the snapshot did not hold goes aside; for a scoped one, what the
  // scope's dists list, and not a file a dist outside it lists too.
  std::optional<std::vector<bool>> in_scope;
  if (check.scope) in_scope = dists_in_scope(env, *check.scope);
  const Listed listed = listed_files(env, in_scope ? &*in_scope : nullptr);
  std::set<std::string> folders;
  for (const auto& [abs, hash] : listed.files) {
    if (kept.count(abs) || listed.outside.count(abs) || !exists_nofollow(abs)) continue;
    if (only && !only->count(abs)) continue;
    check_inside(env, abs);
    tx.move_aside(abs);
    ++check.remove;
    for (std::string p = r::parent_dir(abs); r::is_within(p, root) && p != root; p = r::parent_dir(p))
      folders.insert(p);
  }
  for (const auto& rs : restores) {
    const std::string staged = tx.new_dir() + "/" + r::relative_to(rs.abs, root);
    make_dirs(r::parent_dir(staged));
    if (rs.symlink) {
      std::error_code ec;
      fs::create_symlink(rs.target, staged, ec);  // in the transaction's own new/, made by it
      if (ec) throw r::Error(fmt::format("{}: {}", staged, ec.message()));
    } else {
      link_path(rs.from, staged);
    }
    // What stands at the path now (a folder where a file was, say) goes aside first.
    tx.put(staged, rs.abs, 0755, rs.sha256);
    ++check.restore;
  }
  // Folders the removals emptied, deepest first (a folder still holding something stays).
  std::vector<std::string> deep(folders.begin(), folders.end());
  std::sort(deep.begin(), deep.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const auto& f : deep)
    if (!kept.count(f)) tx.remove_folder_if_empty(f, mode_of(f));
  return check;
}

RestoreCheck plan_restore_checked(const r::Environment& env, const std::string& name, Transaction& tx) {
  check_snapshot_name(name);
  const std::string root = env.layout.root_real;
  if (auto why = r::state_folder_problem(root); !why.empty())
    throw r::Error(fmt::format("cudafix's state cannot be trusted: {}; nothing was changed", why));
  const std::string dir = snapshot_dir(root, name);
  if (!exists_nofollow(dir + "/manifest.json"))
    throw r::Error(fmt::format("no snapshot named '{}' in {}", name, snapshots_root(root)));
  const auto text = r::try_read_file(dir + "/manifest.json", k_manifest_max_bytes);
  if (!text)
    throw r::Error(
        fmt::format("{}/manifest.json cannot be read: no regular file, unreadable, or over {} MiB; nothing "
                    "was changed",
                    dir, k_manifest_max_bytes >> 20));
  const auto manifest = json::parse(*text, nullptr, false);
  if (!manifest.is_object() || !manifest["entries"].is_array())
    throw r::Error(fmt::format("{}/manifest.json is not a snapshot manifest", dir));
  return plan_restore_entries(env, dir, entries_of(manifest, dir), scope_of(manifest, dir), nullptr, tx);
}

}  // namespace

RestoreCheck plan_restore(const r::Environment& env, const std::string& name, Transaction& tx) {
  try {
    return plan_restore_checked(env, name, tx);
  } catch (const json::exception& e) {
    throw r::Error(fmt::format("{}/manifest.json: a field of the wrong type ({}); nothing was changed",
                               snapshot_dir(env.layout.root_real, name), e.what()));
  }
}

RestoreCheck plan_restore_paths(const r::Environment& now, const SnapshotInfo& held,
                                const std::vector<std::string>& paths, Transaction& tx) {
  const std::string root = now.layout.root_real;
  if (auto why = r::state_folder_problem(root); !why.empty())
    throw r::Error(fmt::format("cudafix's state cannot be trusted: {}; nothing was changed", why));
  const std::set<std::string> only(paths.begin(), paths.end());
  auto check = plan_restore_entries(now, snapshot_dir(root, held.name), held.entries, held.scope, &only, tx);
  // A tree file linked when the snapshot was taken and replaced since is not what was kept.
  return check;
}

std::vector<SnapshotChange> changes_since(const r::Environment& now, const SnapshotInfo& held) {
  const std::string root = now.layout.root_real;
  std::vector<SnapshotChange> out;
  std::set<std::string> kept;
  for (const auto& e : held.entries) {
    const std::string abs = root + "/" + e.rel;
    kept.insert(abs);
    struct stat st {};
    if (::lstat(abs.c_str(), &st) != 0) {
      out.push_back({abs, "was removed"});
      continue;
    }
    if (e.symlink) {
      std::error_code ec;
      if (!S_ISLNK(st.st_mode) || fs::read_symlink(abs, ec).string() != e.target) out.push_back({abs, "was changed"});
      continue;
    }
    if (S_ISLNK(st.st_mode)) {
      out.push_back({abs, "was replaced by a symlink"});
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      out.push_back({abs, "was replaced by a folder"});
      continue;
    }
    const std::int64_t mtime = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (st.st_dev == e.dev && st.st_ino == e.ino) {
      if (static_cast<std::uint64_t>(st.st_size) != e.size || mtime != e.mtime_ns)
        out.push_back({abs, "was written in place"});
      continue;
    }
    // A new inode: pip reinstalling the same wheel writes the same bytes, which is no change.
    if (static_cast<std::uint64_t>(st.st_size) != e.size || r::sha256_of_file(abs) != e.sha256)
      out.push_back({abs, "was changed"});
  }
  std::optional<std::vector<bool>> in_scope;
  if (held.scope) in_scope = dists_in_scope(now, *held.scope);
  for (const auto& [abs, hash] : listed_files(now, in_scope ? &*in_scope : nullptr).files)
    if (!kept.count(abs) && exists_nofollow(abs)) out.push_back({abs, "was created"});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  return out;
}

}  // namespace cudafix::installer::txn
