// What an uninstall deletes, computed without touching anything.
//
// pip's way (pip/_internal/req/req_uninstall.py, unchanged from pip 21 to 25):
//   - every RECORD row of the dist, joined to the folder holding the dist-info, its folder made
//     real (realpath) and its last part kept (a symlink is removed, not its target); a row is
//     taken only when os.path.exists() holds (so a dangling symlink stays) and only inside the
//     environment (pip refuses the rest);
//   - for each `.py` row: its `.pyc` and `.pyo` siblings and `__pycache__/<stem>.<cache tag>.pyc`
//     of the running interpreter (cpython-312), where they exist;
//   - `bin/<name>` of each console_scripts and gui_scripts entry point;
//   - compress_for_rename: a folder every file below which is to go is moved away whole, with
//     whatever empty folders and symlinks to folders it holds;
//   - the moves go in sorted order; each file's move ends in os.removedirs() of its folder, so the
//     folders above that are empty at that moment go too, up to the first that still holds
//     something; a folder's move does not (pip passes it with a trailing '/'), so a parent that
//     only a folder's move empties stays behind, empty.
// cudafix's way is the same with owner counting: a path another kept dist's RECORD lists stays;
// and after a folder's move too it removes the folders above that are then empty, which pip
// leaves (an empty `ns/` would stay importable as a namespace package).
//
// Rows are not taken at their word. A RECORD row (or a console script) that names a scheme root
// (the environment's root, bin/, include/, lib/, lib64, lib/pythonX.Y, a site folder), any real
// folder (a row names a file or a symlink), cudafix's own state (.cudafix/, cudafix.toml, .lock)
// or the venv's core (pyvenv.cfg, bin/python*) is refused: listed in `Deletion::refused`, and
// never deleted the cudafix way (pip's way still shows what pip would do with it). A dist whose
// RECORD cannot be read (DistInfo::record_problem) is refused whole. Under owner counting the
// folders os.removedirs() empties stop below the scheme roots too.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "resolver/env/environment.hpp"

namespace cudafix::resolver::inline plan {

enum class OwnerCounting { pip, cudafix };

// The form pip's UninstallPathSet gives a listed path: its folder made real (realpath), its last
// part kept. Each folder is resolved once (a RECORD lists thousands of files in a few folders).
class PipPaths {
 public:
  [[nodiscard]] std::string of(const std::string& lexical);

 private:
  std::unordered_map<std::string, std::string> real_dirs_;
};

// Why a removal must never delete `path` (absolute, its folder real): it is a scheme root or lies
// above one, it is cudafix's state or the venv's core; nothing when it may go.
[[nodiscard]] std::optional<std::string> protected_path(const EnvLayout& layout, const std::string& path);

// A row of a dist that a removal will not take, or the dist's whole RECORD (`line` 0, `entry`
// empty) when it cannot be read.
struct Refusal {
  int dist = -1;           // index into env.dists
  std::string file;        // the RECORD (or entry_points.txt) that lists it, absolute
  std::uint32_t line = 0;  // its line in `file`; 0 for the whole file
  std::string entry;       // the row's path as written, or "console script NAME"
  std::string why;
  // "torch 2.11.0: RECORD line 12 ('.'): names site-packages, a scheme root"
  [[nodiscard]] std::string to_string(const Environment& env) const;
};

struct Deletion {
  std::vector<std::string> files;  // files and symlinks, absolute, sorted
  std::vector<std::string> dirs;   // folders removed, absolute, sorted
  std::vector<std::string> kept;   // cudafix: listed paths that stay because a kept dist lists them
  std::vector<Refusal> refused;    // rows (or whole RECORDs) of the removed dists that are refused
};

// Where a removal happens in a plan: after earlier steps removed dists, deleted files and
// installed dists that list paths of their own.
struct EarlierSteps {
  std::set<int> removed;                   // dists gone already: their listing keeps nothing
  std::set<std::string> deleted;           // files gone already
  std::unordered_set<std::string> listed;  // paths that installed dists list: owner counting keeps them
};

// What uninstalling `dists` (indexes into env.dists, in the order pip is given them) deletes, the
// pip way or the cudafix way.
[[nodiscard]] Deletion uninstall_paths(const Environment& env, const std::vector<int>& dists, OwnerCounting counting,
                                       const EarlierSteps& earlier = {});

}  // namespace cudafix::resolver::inline plan
