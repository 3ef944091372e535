// The loader model: which file glibc's ld.so maps for each DT_NEEDED, and why, in a Python
// process. It follows _dl_map_object (elf/dl-load.c) step by step:
//   1. a name already loaded (as a SONAME or under the name it was asked for) wins;
//   2. a name with a slash is a path;
//   3. unless the requesting object has DT_RUNPATH: DT_RPATH of the requesting object, then of
//      the object that loaded it, and on up its loader chain, then of the main executable;
//   4. LD_LIBRARY_PATH;  5. DT_RUNPATH of the requesting object;
//   6. /etc/ld.so.cache (entries in system folders skipped under DF_1_NODEFLIB);
//   7. the system folders (skipped under DF_1_NODEFLIB).
// Each folder of steps 3-5 and 7 is tried with the host's glibc-hwcaps subfolders first.
// Objects of the wrong ELF class or machine are skipped and the search goes on. $ORIGIN is the
// folder of the requesting object as it was loaded; `..` after it is resolved by the kernel,
// through symlinks, so candidate folders are compared by realpath.
// Legacy hwcaps subfolders (tls/, haswell/, glibc < 2.37) are not modelled.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "resolver/base/sharded_map.hpp"
#include "resolver/elf/elf_reader.hpp"
#include "resolver/loader/host.hpp"
#include "resolver/loader/ld_cache.hpp"

namespace cudafix::resolver::inline loader {

enum class ReasonKind { already_loaded, path, rpath, ld_library_path, runpath, ld_cache, default_path, not_found };
[[nodiscard]] std::string_view to_string(ReasonKind kind);

// One place the search looked, and what it found there.
struct SearchStep {
  std::string place;   // the candidate file path tried
  ReasonKind source;   // which search step tried it
  std::string via;     // for rpath/runpath: whose
  std::string result;  // "not found", "wrong ELF class", "found", ...
};

struct Resolution {
  std::string name;                 // the DT_NEEDED string
  std::optional<std::string> path;  // the file mapped: its folder's realpath + the name
  ReasonKind kind = ReasonKind::not_found;
  std::string via;                   // rpath/runpath: the object whose entry matched;
                                     // already_loaded: the loaded object's path
  std::vector<SearchStep> searched;  // every place looked, in order

  [[nodiscard]] bool found() const { return path.has_value(); }
};

// ELF dynamic sections by path, read once and shared (thread-safe).
class ElfCache {
 public:
  // The object at `path` (read on first use).
  const ElfRead& get(const std::string& path);
  void put(const std::string& path, ElfRead read);

 private:
  ShardedMap<std::unique_ptr<ElfRead>> by_path_;
};

struct LoaderConfig {
  HostInfo host;
  std::vector<std::string> ld_library_path;    // as the process would see it
  std::vector<std::string> preload;            // LD_PRELOAD entries
  std::optional<std::string> main_executable;  // the interpreter; none: the root is the main program
  // A what-if: files (realpaths) treated as deleted by every search, as a planned removal leaves
  // them; files a planned install writes, and the folders they need that do not exist yet.
  std::shared_ptr<const std::unordered_set<std::string>> deleted;
  std::shared_ptr<const std::unordered_set<std::string>> added;
  std::shared_ptr<const std::set<std::string>> added_dirs;
};

struct LoadedObject {
  std::string path;                // as loaded
  std::string real;                // fully resolved: the object's identity
  std::vector<std::string> names;  // names it was asked for
  const ElfInfo* elf = nullptr;
  int loader = -1;                 // index of the object that caused it to load
  std::vector<int> needed_index;   // per DT_NEEDED: the object it resolved to, or -1
  std::vector<Resolution> needed;  // per DT_NEEDED
  bool mapped_deps = false;        // its NEEDED have been resolved (or need not be)
};

// A simulated process: the link map, in load order, with the indexes ld.so's lookups need.
struct Process {
  std::vector<LoadedObject> objects;
  int main = -1;
  std::size_t load_start = 0;  // objects from here on were mapped by the latest load()
  std::unordered_map<std::string, int> by_real;
  std::unordered_map<std::string, int> by_name;  // asked-for names and SONAMEs; the first wins

  [[nodiscard]] int find_real(const std::string& real) const;

  // Undo, for trying one load after another from the same starting point without copying the
  // whole process each time: begin_trial() marks the state, rollback() returns to it.
  void begin_trial();
  void rollback();
  // Adds a name for object `index` (no-op when the name is taken), remembering it for rollback.
  void add_name(const std::string& name, int index);

 private:
  struct Trial {
    bool active = false;
    std::size_t objects = 0;
    std::size_t load_start = 0;
    std::vector<std::string> names_added;
    std::vector<std::pair<int, std::size_t>> names_grown;  // (object, size of its names before)
  } trial_;
  friend class LoaderModel;
};

class LoaderModel {
 public:
  LoaderModel(LoaderConfig config, std::shared_ptr<ElfCache> elf_cache, std::shared_ptr<const LdCache> ld_cache);
  // The same model in a what-if (`deleted`, `added` and `added_dirs` of the config replaced),
  // sharing every cache: a what-if changes nothing on disk.
  [[nodiscard]] std::shared_ptr<LoaderModel> what_if(const LoaderConfig& changes) const;

  // A process running the main executable, with its NEEDED tree and LD_PRELOAD loaded.
  [[nodiscard]] Process start_process() const;
  // dlopen(path) into the process (or, in an empty process, `ld.so path`): maps the object and
  // its NEEDED tree breadth-first. Returns the root's index, or -1 when `path` is no ELF object
  // or one of another ELF class or machine than the process's (runs_in), which maps nothing.
  int load(Process& process, const std::string& path) const;
  // Whether the object at `path` is of the process's ELF class and machine (its main program's,
  // else the host's), as ld.so requires of every object it maps; true when either is unknown.
  [[nodiscard]] bool runs_in(const Process& process, const std::string& path) const;
  // Puts an object into the process as an earlier load (in another process) left it, under the
  // names it was asked for, without resolving its NEEDED again. Its resolutions are not copied.
  int preload(Process& process, const LoadedObject& earlier) const;
  // How `requester` would resolve `name` now, without loading; files whose realpath is in
  // `gone` are treated as deleted (the fallback question).
  [[nodiscard]] Resolution resolve(const Process& process, int requester, const std::string& name,
                                   const std::unordered_set<std::string>& gone = {}) const;

  // Regular files already known to be their own realpath, as is each one's folder: what a walk
  // finds that starts at a realpath and follows no symlink. The model then takes no lstat for
  // them (one per object, each a lookup of a path ten parts deep).
  void know_real_files(const std::vector<std::string>& paths) const;

  [[nodiscard]] const LoaderConfig& config() const { return config_; }
  [[nodiscard]] ElfCache& elf_cache() const { return *elf_cache_; }
  [[nodiscard]] const std::shared_ptr<ElfCache>& shared_elf_cache() const { return elf_cache_; }
  [[nodiscard]] const std::shared_ptr<const LdCache>& shared_ld_cache() const { return ld_cache_; }

 private:
  [[nodiscard]] Resolution resolve(const Process& process, int requester, const std::string& name,
                                   const std::unordered_set<std::string>& gone, bool record) const;
  std::optional<std::string> try_dir(const std::string& dir, const std::string& name, ReasonKind source,
                                     const std::string& via, const ElfInfo* want,
                                     const std::unordered_set<std::string>& gone, Resolution& out, bool record) const;
  bool try_file(const std::string& file, ReasonKind source, const std::string& via, const ElfInfo* want,
                const std::unordered_set<std::string>& gone, Resolution& out, bool record) const;
  [[nodiscard]] std::string expand_tokens(std::string_view entry, std::string_view origin) const;
  // The folders of a DT_RPATH or DT_RUNPATH `list` of the object at `object_path`, tokens
  // expanded: made once for each object and list.
  [[nodiscard]] const std::vector<std::string>& search_folders(const std::string& list,
                                                               const std::string& object_path) const;
  [[nodiscard]] const std::string* real_dir(const std::string& dir) const;
  [[nodiscard]] std::optional<std::string> find_real_dir(const std::string& dir) const;
  [[nodiscard]] const std::string& real_file(const std::string& path) const;
  [[nodiscard]] bool dir_has(const std::string& real, const std::string& name) const;
  int add_object(Process& process, const std::string& path, const std::string& name, int loader) const;
  void map_dependencies(Process& process, std::size_t from) const;
  void add_dynamic_loader(Process& process) const;

  LoaderConfig config_;
  std::vector<std::string> search_subdirs_;  // in each search folder: its glibc-hwcaps folders, best first, then itself
  std::shared_ptr<ElfCache> elf_cache_;
  std::shared_ptr<const LdCache> ld_cache_;
  // What the file system answered (realpaths, folder listings): shared with the what-if models
  // made from this one, since a what-if deletes nothing on disk.
  struct FileSystemCache {
    ShardedMap<std::optional<std::string>> real_dirs;
    ShardedMap<std::unordered_set<std::string>> dir_entries;
    ShardedMap<std::string> real_files;
  };
  std::shared_ptr<FileSystemCache> fs_ = std::make_shared<FileSystemCache>();
  // search_folders' answers, by the object's path and the list.
  mutable ShardedMap<std::vector<std::string>> search_folders_;
};

}  // namespace cudafix::resolver::inline loader
