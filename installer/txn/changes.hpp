// What the write commands change, planned as a transaction's ops (installer/txn/transaction.hpp):
// an owner-counted removal, and the snapshot a cleanup by other tools is undone from.
//
// A snapshot on disk:
//   <root>/.cudafix/snapshots/<name>/manifest.json
//     {"name","time","root","linked":N,"copied":N,"scope":[DIST FOLDER]|null (absent: null),
//      "entries":[{"path":REL,"type":"file"|"symlink","mode":M,"size":N,
//                  "sha256":B64 (files: RECORD's urlsafe base64 form),
//                  "target":T (symlinks)}]}
//   <root>/.cudafix/snapshots/<name>/tree/<REL>   a hardlink of each file (a copy where the
//                                                 file system refuses the link: counted)
// The entries are every file a dist's RECORD (or installed-files.txt) lists inside the
// environment and every file in each dist-info folder. A scoped snapshot (`scope` a list of
// dist-info folder names, at most k_scope_max, each as resolver::is_dist_folder_name allows)
// holds those of the scope's dists alone: an uninstall deletes nothing else, and linking the
// whole environment is most of the cost of guarding one (68,937 files in a torch venv). Its
// restore changes the scope alone: the entries are put back, what the scope's dists (the same
// projects, any version installed now) list now that it did not hold goes aside, except a path a
// dist outside the scope lists too; nothing else is touched. A `scope` of another shape refuses
// the restore, and the snapshot is not listed. A manifest larger than k_manifest_max_bytes is
// not read (a sparse one costs its planter nothing at any size).
// Deleting one renames its folder to `.<name>.deleting` first (no longer listed nor restorable),
// then removes its files; a kill between leaves that folder, which the next command that takes
// the environment's lock removes, and says so, as it does a `.<name>.partial` a killed snapshot
// left. pip and uv replace a file (a new inode)
// rather than write it in place, so a hardlink keeps the old bytes; a tool that writes in place
// alters the snapshot too, which the restore finds: each file it would restore is hashed first
// and checked against the manifest (RECORD's hash, or one taken at snapshot time: where there is
// none, or two dists list the path with different hashes), and an
// altered one refuses the restore, naming it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "installer/txn/transaction.hpp"
#include "resolver/env/environment.hpp"
#include "resolver/plan/uninstall.hpp"

namespace cudafix::installer::txn {

// The ops of an owner-counted removal: folders every file of which goes are moved aside whole
// (as pip moves them), other listed files one by one, then the folders that empties removed.
// Every path is checked first to lie inside the environment, each parent's real path too, so a
// symlinked folder cannot lead a removal out of it; a path that fails refuses the whole removal,
// and so does one that resolver::protected_path protects (a scheme folder, cudafix's state).
void plan_removal_ops(const resolver::Environment& env, const resolver::Deletion& deletion, Transaction& tx);

// One file or symlink a snapshot holds, as it was when taken: what guard compares the tree
// with after its command, from memory, never from the manifest read back (its command may have
// rewritten it).
struct SnapshotEntry {
  std::string rel;  // relative to the root
  bool symlink = false;
  unsigned mode = 0644;
  std::uint64_t size = 0;
  std::string sha256;  // RECORD's form (files)
  std::string target;  // symlinks
  std::uint64_t dev = 0, ino = 0;
  std::int64_t mtime_ns = 0;
};

struct SnapshotInfo {
  std::string name;
  std::int64_t time = 0;
  std::size_t files = 0, linked = 0, copied = 0, symlinks = 0;
  std::uint64_t bytes = 0;
  // Where a hard link was refused, the files were copied instead: their bytes, and why the
  // first refusal happened ("another file system", "another mount of the same file system (a bind
  // mount)", or the link's error).
  std::uint64_t copied_bytes = 0;
  std::string copied_because;
  // The dist-info folders a scoped snapshot holds the files of; none: the whole environment.
  std::optional<std::vector<std::string>> scope;
  // take_snapshot's: every entry it wrote to the manifest (list_snapshots leaves it empty).
  std::vector<SnapshotEntry> entries;
};

inline constexpr std::size_t k_scope_max = 4096;
// A torch venv's manifest is about 14 MB (69,000 entries).
inline constexpr std::uint64_t k_manifest_max_bytes = std::uint64_t{512} << 20;

// `progress` is called with (files kept, files listed) as it goes. `scope`: indexes into
// env.dists whose files alone are kept (an empty one keeps nothing); a dist whose folder name the
// manifest's reader would refuse makes the snapshot whole instead (SnapshotInfo::scope says which).
[[nodiscard]] SnapshotInfo take_snapshot(const resolver::Environment& env, const std::string& name,
                                         const std::function<void(std::uint64_t, std::uint64_t)>& progress = {},
                                         const std::optional<std::vector<int>>& scope = std::nullopt);
[[nodiscard]] std::vector<SnapshotInfo> list_snapshots(const std::string& root);
void delete_snapshot(const std::string& root, const std::string& name);

struct RestoreCheck {
  std::vector<std::string> altered;  // snapshot files whose bytes are not the manifest's
  std::size_t restore = 0;           // files put back
  std::size_t remove = 0;            // files no snapshot entry has, moved aside
  std::size_t unchanged = 0;
  std::optional<std::vector<std::string>> scope;  // the snapshot's (SnapshotInfo::scope)
};

// Plans the restore of snapshot `name` onto the environment as `tx`'s ops. Returns what it
// found; with `altered` not empty, no op was planned.
[[nodiscard]] RestoreCheck plan_restore(const resolver::Environment& env, const std::string& name, Transaction& tx);

// A path of the environment that differs from what a snapshot holds.
struct SnapshotChange {
  std::string path;  // absolute
  std::string what;  // "was removed", "was changed", "was written in place", "was created", "was replaced by ..."
};
// What differs between `held` (take_snapshot's, in memory) and the environment now: each entry
// removed, replaced by other bytes (the same bytes under a new inode are no change) or by
// another type, and each file the dists in the snapshot's scope (all, for a whole one) list now
// that it did not hold. Sorted by path.
[[nodiscard]] std::vector<SnapshotChange> changes_since(const resolver::Environment& now, const SnapshotInfo& held);

// Plans putting back `paths` alone (absolute, each one changes_since() returned) from the
// snapshot `held` describes, into `tx`: an entry's bytes restored, a file it did not hold moved
// aside, the folders that empties removed. Nothing of the manifest on disk is read; each file
// restored from the snapshot's tree is checked against the hash taken when it was made.
[[nodiscard]] RestoreCheck plan_restore_paths(const resolver::Environment& now, const SnapshotInfo& held,
                                              const std::vector<std::string>& paths, Transaction& tx);

// Removes what killed runs left of snapshots (`.<name>.partial`, `.<name>.deleting`), each said
// through `say`. The environment's lock is held.
void tidy_snapshots(const std::string& root, const std::function<void(const std::string&)>& say);

[[nodiscard]] std::string snapshot_dir(const std::string& root, const std::string& name);

}  // namespace cudafix::installer::txn
