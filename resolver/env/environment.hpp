// The Environment: everything cudafix knows about one Python environment after one scan:
// its dists, which dist owns which file, which files are on disk, every ELF shared object and
// how each of its DT_NEEDED resolves in a Python process that imported the object's package.
//
// The process model: packages are imported in dependency order (a dist's requirements, extras
// followed, before the dist), so an object's NEEDED may be satisfied by a library an earlier
// import loaded (torch's libc10.so before torchvision's _C.so). Each object's resolutions come
// from the first simulated import that maps it; objects no import maps (dlopened libraries such
// as cuDNN's sub-libraries) are resolved as if dlopened after their own dist's requirements.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "resolver/base/path_index.hpp"
#include "resolver/base/text.hpp"
#include "resolver/elf/elf_store.hpp"
#include "resolver/env/dist_info.hpp"
#include "resolver/env/fs_walk.hpp"
#include "resolver/env/venv.hpp"
#include "resolver/loader/loader.hpp"

namespace cudafix::resolver::inline env {

struct SharedObject {
  std::string path;                     // absolute, real
  std::vector<int> owners;              // indices into Environment::dists
  ElfRead elf;                          // status ok: elf.info holds the dynamic section
  bool entry_point = false;             // no SONAME: an extension module or plugin, imported by path
  std::vector<Resolution> resolutions;  // one per DT_NEEDED, from the process model
  std::string context;                  // how the process model came to load it
  int loaded_in = -1;                   // the dist whose simulated import (or lone dlopen) mapped it first
  std::vector<std::string> aliases;     // symlinks in the tree that point at it
  int bytes_owner = -1;                 // simulated writes: the dist whose bytes the file holds
  bool assumed_elf = false;             // simulated writes: its dynamic section is a guess (no wheel at hand)
};

// How much of the environment a command needs: its dists' metadata alone (requirements), also
// the files and their owners, or everything with the ELF objects and the process model.
enum class ScanDepth { dists, files, full };

struct ScanOptions {
  ScanDepth depth = ScanDepth::full;
  unsigned threads = 0;                      // 0: one per core
  std::vector<std::string> ld_library_path;  // what the modelled process sees
  std::vector<std::string> preload;          // LD_PRELOAD of the modelled process
  std::optional<HostInfo> host;              // default: detect_host()
  std::optional<std::string> ld_so_cache;    // default: the host's /etc/ld.so.cache
  bool resolve = true;                       // run the process model
  // Also parse every Requires-Dist (doctor's requirement rules) while the files and libraries
  // are modelled, when there are cores to spare for it (4 or more threads).
  bool parse_requirements = false;
  // Where the walk keeps its listings and the ELF reads their answers between runs
  // (walk_cache.hpp, elf_store.hpp); empty: nowhere.
  std::string cache_dir;
};

struct ParsedRequirements;  // resolver/env/requirements.hpp

class Environment {
 public:
  EnvLayout layout;
  std::vector<DistInfo> dists;                    // sorted by normalised name, then folder name
  std::vector<std::vector<std::string>> missing;  // per dist: RECORD paths not on disk (absolute)
  // Files and symlinks on disk below the sites (from the walk), each with the dists listing it;
  // listed paths the walk did not see keep their owners apart: missing files, and compiled
  // bytecode in __pycache__ folders, which the walk does not enter (a .pyc is never a finding,
  // and skipping those folders spares a fifth of the walk).
  PathIndex on_disk;                                      // absolute path -> index into first_owner
  std::vector<std::unique_ptr<char[]>> path_arena;        // the bytes on_disk's keys point into
  std::vector<int> first_owner;                           // per walked path: a dist listing it, or -1
  std::map<std::uint32_t, std::vector<int>> more_owners;  // walked paths several dists list: all of them, sorted
  struct UnwalkedRow {
    std::uint64_t hash;  // std::hash of the absolute path
    int dist;
    std::uint32_t row;  // index into that dist's record
  };
  std::vector<UnwalkedRow> unwalked;  // sorted by (hash, dist, row)
  [[nodiscard]] std::string unwalked_path(const UnwalkedRow& u) const;
  std::vector<SharedObject> objects;  // sorted by path
  std::unordered_map<std::string, std::size_t> object_by_path;
  using NameIndex = std::unordered_map<std::string, std::vector<std::size_t>, StringHash, std::equal_to<>>;
  NameIndex objects_by_name;                                                       // SONAME, file and alias names
  NameIndex objects_needing;                                                       // DT_NEEDED -> consumers
  std::unordered_map<std::string, int, StringHash, std::equal_to<>> dist_by_name;  // normalised name -> first dist
  std::vector<Diagnostic> diagnostics;                                             // sorted by file, then line
  std::optional<std::string> main_executable;                                      // the interpreter the model runs
  std::shared_ptr<LoaderModel> loader;
  // The process model's memory: the interpreter with its NEEDED tree and LD_PRELOAD loaded, and
  // per dist, the objects importing it mapped, in order (their resolutions left out).
  std::optional<Process> base_process;
  std::vector<std::vector<LoadedObject>> imported;
  std::vector<std::vector<int>> closures;  // per dist: requirement_closure, computed once
  // Every Requires-Dist parsed with this environment's markers, when the scan was asked to.
  std::shared_ptr<const ParsedRequirements> requirements;
  std::shared_ptr<ElfCache> elf_cache;
  std::vector<std::pair<std::string, double>> timings;  // scan phases, milliseconds (for --timings)
  WalkCacheReport walk_cache;                           // how the walk used its cache
  ElfStoreReport elf_store;                             // how the ELF reads used theirs

  // On disk: from the walk, or for __pycache__ contents, from the file system.
  [[nodiscard]] bool present(std::string_view path) const;
  // The dists whose RECORD lists `path` (absolute, normalised); empty when none.
  [[nodiscard]] std::vector<int> owners_of(const std::string& path) const;
  // Paths more than one dist lists, sorted, with their owners.
  [[nodiscard]] std::vector<std::pair<std::string, std::vector<int>>> shared_paths() const;
  // The site folder holding `path` (absolute, real), or null for a path outside every site.
  [[nodiscard]] const SiteDir* site_of(std::string_view path) const;
  // The display form of a path: relative to the site dir holding it, else absolute.
  [[nodiscard]] std::string display(const std::string& path) const;
  [[nodiscard]] const SharedObject* object(const std::string& path) const;
  [[nodiscard]] std::optional<int> dist_index(std::string_view normalized_name) const;
  // Objects whose SONAME or file name is `soname`.
  [[nodiscard]] std::vector<const SharedObject*> providers(const std::string& soname) const;
  // Objects with `soname` among their DT_NEEDED.
  [[nodiscard]] std::vector<const SharedObject*> consumers(const std::string& soname) const;
  // The dists a dist requires (extras followed) that are installed, transitively, in import order.
  [[nodiscard]] std::vector<int> requirement_closure(int dist) const;
  // A process that has imported the requirements of `dist` (or of nothing, for -1).
  [[nodiscard]] Process process_for(int dist) const;
  // The same, with what each dist of the closure imported given by `imported_of`: its objects,
  // put in place as that import left them, or null for a dist to import afresh.
  [[nodiscard]] Process process_for(int dist,
                                    const std::function<const std::vector<LoadedObject>*(int)>& imported_of) const;
};

// A what-if for the planner: some dists uninstalled and some files deleted; some dists added and
// some files written (installed, or restored by a reinstall).
struct WhatIf {
  std::vector<int> removed_dists;           // indexes into the scanned Environment's dists
  std::unordered_set<std::string> deleted;  // absolute paths, as the scan names them (real folders)
  std::vector<DistInfo> added_dists;        // dists installed (from their wheels)
  struct Written {
    std::string path;  // absolute
    int dist = -1;     // whose bytes: an index into the scanned dists, or, with `added`, into added_dists
    bool added = false;
    std::optional<ElfInfo> elf;  // its dynamic section when known (from the wheel, or the file on disk)
  };
  std::vector<Written> written;
};

// The environment as it would be after `change`, with the process model run again on it: the
// removed dists are gone, deleted files are absent from every search, kept dists list deleted
// files as missing. The walk and the ownership index are not carried over (on_disk, owners_of
// and shared_paths answer for nothing); objects keep their owners, renumbered.
[[nodiscard]] Environment simulate(const Environment& before, const WhatIf& change, unsigned threads = 0);

// Scans the environment. Broken inputs become diagnostics; throws Error only when the
// environment cannot be read at all.
[[nodiscard]] Environment scan_environment(const EnvLayout& layout, const ScanOptions& options = {});

}  // namespace cudafix::resolver::inline env
