#include "resolver/loader/loader.hpp"

#include <fmt/format.h>

#include <dirent.h>
#include <sys/stat.h>
#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>

#include <shared_mutex>

#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline loader {

std::string_view to_string(ReasonKind kind) {
  switch (kind) {
    case ReasonKind::already_loaded:
      return "already loaded";
    case ReasonKind::path:
      return "path";
    case ReasonKind::rpath:
      return "rpath";
    case ReasonKind::ld_library_path:
      return "LD_LIBRARY_PATH";
    case ReasonKind::runpath:
      return "runpath";
    case ReasonKind::ld_cache:
      return "ld.so.cache";
    case ReasonKind::default_path:
      return "default path";
    case ReasonKind::not_found:
      return "not found";
  }
  return "not found";
}

const ElfRead& ElfCache::get(const std::string& path) {
  return *by_path_.get(path, [&] { return std::make_unique<ElfRead>(read_elf_file(path)); });
}

void ElfCache::put(const std::string& path, ElfRead read) {
  by_path_.put(path, std::make_unique<ElfRead>(std::move(read)));
}

void Process::add_name(const std::string& name, int index) {
  // try_emplace: a name already there (most are) costs no node made and thrown away.
  if (by_name.try_emplace(name, index).second && trial_.active) trial_.names_added.push_back(name);
}

void Process::begin_trial() { trial_ = Trial{true, objects.size(), load_start, {}, {}}; }

void Process::rollback() {
  for (const auto& name : trial_.names_added) by_name.erase(name);
  for (auto it = trial_.names_grown.rbegin(); it != trial_.names_grown.rend(); ++it)
    objects[static_cast<std::size_t>(it->first)].names.resize(it->second);
  for (std::size_t i = trial_.objects; i < objects.size(); ++i) by_real.erase(objects[i].real);
  objects.resize(trial_.objects);
  load_start = trial_.load_start;
  trial_ = Trial{};
}

int Process::find_real(const std::string& real) const {
  auto it = by_real.find(real);
  return it == by_real.end() ? -1 : it->second;
}

LoaderModel::LoaderModel(LoaderConfig config, std::shared_ptr<ElfCache> elf_cache,
                         std::shared_ptr<const LdCache> ld_cache)
    : config_(std::move(config)), elf_cache_(std::move(elf_cache)), ld_cache_(std::move(ld_cache)) {
  for (const auto& h : config_.host.hwcaps_subdirs) search_subdirs_.push_back("/glibc-hwcaps/" + h);
  search_subdirs_.emplace_back();
}

std::shared_ptr<LoaderModel> LoaderModel::what_if(const LoaderConfig& changes) const {
  LoaderConfig config = config_;
  config.deleted = changes.deleted;
  config.added = changes.added;
  config.added_dirs = changes.added_dirs;
  auto model = std::make_shared<LoaderModel>(std::move(config), elf_cache_, ld_cache_);
  model->fs_ = fs_;
  return model;
}

// The caches below are read by every worker of the process model and written rarely
// (resolver/base/sharded_map.hpp).
const std::string* LoaderModel::real_dir(const std::string& dir) const {
  // A folder a planned install creates (a lexical path: it has no realpath yet).
  if (config_.added_dirs && !config_.added_dirs->empty()) {
    const auto it = config_.added_dirs->find(lexically_normal(dir));
    if (it != config_.added_dirs->end()) return &*it;
  }
  const auto& real = fs_->real_dirs.get(dir, [&] { return find_real_dir(dir); });
  return real ? &*real : nullptr;
}

// A folder's realpath from its parent's, which is cached: realpath(3) reads every part of the
// path again, a readlink each, and the process model asks for some 300 folders ten parts deep.
// Only a symlinked last part, or a path with "." or ".." parts, takes realpath(3).
std::optional<std::string> LoaderModel::find_real_dir(const std::string& dir) const {
  auto by_realpath = [](const std::string& path) -> std::optional<std::string> {
    char buf[PATH_MAX];
    if (::realpath(path.c_str(), buf)) return std::string(buf);
    return std::nullopt;
  };
  if (dir == "/") return dir;
  const auto slash = dir.rfind('/');
  if (dir.empty() || dir.front() != '/' || slash == std::string::npos) return by_realpath(dir);
  const std::string name = dir.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") return by_realpath(dir);
  const std::string* parent = real_dir(slash == 0 ? std::string("/") : dir.substr(0, slash));
  if (!parent) return std::nullopt;
  std::string candidate = (*parent == "/" ? std::string() : *parent) + "/" + name;
  struct stat st {};
  if (::lstat(candidate.c_str(), &st) != 0) return std::nullopt;
  return S_ISLNK(st.st_mode) ? by_realpath(candidate) : candidate;
}

void LoaderModel::know_real_files(const std::vector<std::string>& paths) const {
  for (const auto& path : paths) {
    fs_->real_files.put(path, path);
    const std::string dir = parent_dir(path);
    if (!dir.empty()) fs_->real_dirs.put(dir, dir);
  }
}

bool LoaderModel::dir_has(const std::string& real, const std::string& name) const {
  // In a what-if, what a planned install writes is there too: its files and its new folders.
  if (config_.added || config_.added_dirs) {
    const std::string path = real + "/" + name;
    if ((config_.added && config_.added->count(path)) || (config_.added_dirs && config_.added_dirs->count(path)))
      return true;
  }
  const auto& names = fs_->dir_entries.get(real, [&] {
    std::unordered_set<std::string> out;
    if (DIR* d = ::opendir(real.c_str())) {
      while (const dirent* e = ::readdir(d)) out.emplace(e->d_name);
      ::closedir(d);
    }
    return out;
  });
  return names.count(name) != 0;
}

const std::vector<std::string>& LoaderModel::search_folders(const std::string& list,
                                                            const std::string& object_path) const {
  // Each NEEDED of a library is searched through the same RPATH (libtorch_cuda.so lists six
  // folders), expanded once here rather than for every name.
  static thread_local std::string key;
  key.assign(object_path).push_back('\0');
  key.append(list);
  return search_folders_.get(key, [&] {
    const std::string origin = parent_dir(object_path);
    std::vector<std::string> out = split_search_path(list);
    for (auto& entry : out) entry = expand_tokens(entry, origin);
    return out;
  });
}

std::string LoaderModel::expand_tokens(std::string_view entry, std::string_view origin) const {
  std::string out;
  for (std::size_t i = 0; i < entry.size();) {
    if (entry[i] != '$') {
      out.push_back(entry[i++]);
      continue;
    }
    auto match = [&](std::string_view token) -> std::size_t {
      const auto rest = entry.substr(i + 1);
      if (rest.starts_with(token)) {
        const auto after = token.size();
        if (after == rest.size() || !(std::isalnum(static_cast<unsigned char>(rest[after])) || rest[after] == '_'))
          return 1 + after;
      }
      if (rest.size() >= token.size() + 2 && rest[0] == '{' && rest.substr(1, token.size()) == token &&
          rest[token.size() + 1] == '}')
        return 3 + token.size();
      return 0;
    };
    if (auto n = match("ORIGIN")) {
      out += origin;
      i += n;
    } else if (auto m = match("PLATFORM")) {
      out += config_.host.platform;
      i += m;
    } else if (auto k = match("LIB")) {
      out += config_.host.lib;
      i += k;
    } else {
      out.push_back(entry[i++]);
    }
  }
  return out;
}

const std::string& LoaderModel::real_file(const std::string& path) const {
  return fs_->real_files.get(path, [&] {
    // The folder's realpath is cached (a venv's 850 objects sit in 150 folders, 10 path parts
    // deep): only a symlinked last part needs a realpath of its own.
    const std::string* dir = real_dir(parent_dir(path));
    struct stat st {};
    if (dir && ::lstat(path.c_str(), &st) == 0 && !S_ISLNK(st.st_mode))
      return (*dir == "/" ? std::string() : *dir) + "/" + std::string(base_name(path));
    return real_path_of(path);
  });
}

bool LoaderModel::try_file(const std::string& file, ReasonKind source, const std::string& via, const ElfInfo* want,
                           const std::unordered_set<std::string>& gone, Resolution& out, bool record) const {
  const std::string& real = real_file(file);
  if (gone.count(real) || (config_.deleted && config_.deleted->count(real))) {
    if (record) out.searched.push_back({file, source, via, "deleted (what-if)"});
    return false;
  }
  const ElfRead& r = elf_cache_->get(real);
  if (r.status != ElfReadStatus::ok) {
    if (record)
      out.searched.push_back(
          {file, source, via, r.status == ElfReadStatus::not_elf ? "not an ELF object" : "invalid ELF"});
    return false;
  }
  const std::uint8_t klass = want ? want->elf_class : config_.host.elf_class;
  const std::uint16_t machine = want ? want->machine : config_.host.machine;
  if (r.info.elf_class != klass) {
    if (record)
      out.searched.push_back(
          {file, source, via, fmt::format("wrong ELF class (ELFCLASS{})", r.info.elf_class == 1 ? 32 : 64)});
    return false;
  }
  if (r.info.machine != machine) {
    if (record)
      out.searched.push_back({file, source, via, fmt::format("wrong machine ({})", machine_name(r.info.machine))});
    return false;
  }
  if (record) out.searched.push_back({file, source, via, "found"});
  out.path = file;
  out.kind = source;
  out.via = via;
  return true;
}

std::optional<std::string> LoaderModel::try_dir(const std::string& dir, const std::string& name, ReasonKind source,
                                                const std::string& via, const ElfInfo* want,
                                                const std::unordered_set<std::string>& gone, Resolution& out,
                                                bool record) const {
  static const std::string k_current = ".";
  const std::string& folder = dir.empty() ? k_current : dir;
  // A folder with no glibc-hwcaps entry (nearly all), on disk or planned, skips its subfolders'
  // lookups.
  const std::string* folder_real = real_dir(folder);
  const bool skip_hwcaps = !folder_real || !dir_has(*folder_real, "glibc-hwcaps");
  std::string subfolder;
  for (const auto& sub : search_subdirs_) {
    if (skip_hwcaps && !sub.empty()) continue;
    if (!sub.empty()) subfolder.assign(folder).append(sub);
    const std::string& candidate_dir = sub.empty() ? folder : subfolder;
    const std::string* real = sub.empty() ? folder_real : real_dir(candidate_dir);
    if (!real || !dir_has(*real, name)) {
      if (sub.empty())
        if (record)
          out.searched.push_back({candidate_dir + "/" + name, source, via, real ? "not found" : "no such folder"});
      continue;
    }
    const std::string file = (*real == "/" ? std::string() : *real) + "/" + name;
    if (try_file(file, source, via, want, gone, out, record)) return file;
  }
  return std::nullopt;
}

Resolution LoaderModel::resolve(const Process& p, int requester, const std::string& name,
                                const std::unordered_set<std::string>& gone) const {
  // Every place looked matters only when nothing is found: search quietly first, and again
  // taking notes when the quiet search fails (a few dozen names in a venv).
  Resolution r = resolve(p, requester, name, gone, false);
  if (r.found()) return r;  // moved out: `found ? r : ...` copied every found answer, three strings
  return resolve(p, requester, name, gone, true);
}

Resolution LoaderModel::resolve(const Process& p, int requester, const std::string& name,
                                const std::unordered_set<std::string>& gone, bool record) const {
  Resolution out;
  out.name = name;
  // 1. Already loaded, by a name it was asked for or its SONAME.
  auto already = [&](const LoadedObject& o) {
    out.path = o.path;
    out.kind = ReasonKind::already_loaded;
    out.via = o.path;
  };
  if (gone.empty()) {
    if (auto it = p.by_name.find(name); it != p.by_name.end()) {
      already(p.objects[static_cast<std::size_t>(it->second)]);
      return out;
    }
  } else {
    for (const auto& o : p.objects) {
      if (gone.count(o.real)) continue;
      bool match = std::find(o.names.begin(), o.names.end(), name) != o.names.end() || o.path == name;
      if (!match && o.elf && o.elf->soname && *o.elf->soname == name) match = true;
      if (match) {
        already(o);
        return out;
      }
    }
  }
  const LoadedObject* req = requester >= 0 ? &p.objects[static_cast<std::size_t>(requester)] : nullptr;
  const ElfInfo* want = req ? req->elf : nullptr;
  // 2. A path.
  if (name.find('/') != std::string::npos) {
    try_file(name, ReasonKind::path, "", want, gone, out, record);
    return out;
  }
  const LoadedObject* main = p.main >= 0 ? &p.objects[static_cast<std::size_t>(p.main)] : nullptr;
  auto search_list = [&](const LoadedObject& owner, const std::string& list, ReasonKind source) -> bool {
    for (const auto& dir : search_folders(list, owner.path))
      if (try_dir(dir, name, source, owner.path, want, gone, out, record)) return true;
    return false;
  };
  // 3. RPATH of the loader chain, then of the main executable.
  if (!req || !req->elf || !req->elf->runpath) {
    bool did_main = false;
    for (const LoadedObject* l = req; l;
         l = l->loader >= 0 ? &p.objects[static_cast<std::size_t>(l->loader)] : nullptr) {
      if (l->elf && l->elf->effective_rpath() && search_list(*l, *l->elf->effective_rpath(), ReasonKind::rpath))
        return out;
      did_main |= (l == main);
    }
    if (!did_main && main && main->elf && main->elf->effective_rpath() &&
        search_list(*main, *main->elf->effective_rpath(), ReasonKind::rpath))
      return out;
  }
  // 4. LD_LIBRARY_PATH.
  for (const auto& dir : config_.ld_library_path)
    if (try_dir(dir, name, ReasonKind::ld_library_path, "", want, gone, out, record)) return out;
  // 5. RUNPATH of the requesting object.
  if (req && req->elf && req->elf->runpath && search_list(*req, *req->elf->runpath, ReasonKind::runpath)) return out;
  const LoadedObject* flags_owner = req ? req : main;
  const bool nodeflib = flags_owner && flags_owner->elf && flags_owner->elf->nodeflib();
  // 6. ld.so.cache.
  if (ld_cache_) {
    const auto klass = want ? want->elf_class : config_.host.elf_class;
    const auto machine = want ? want->machine : config_.host.machine;
    if (auto cached = ld_cache_->lookup(name, machine, klass, config_.host.hwcaps_subdirs)) {
      bool in_system = false;
      for (const auto& d : config_.host.default_dirs) in_system |= is_within(*cached, d);
      if (nodeflib && in_system) {
        if (record) out.searched.push_back({*cached, ReasonKind::ld_cache, "", "skipped: DF_1_NODEFLIB"});
      } else if (try_file(*cached, ReasonKind::ld_cache, "", want, gone, out, record)) {
        return out;
      }
    } else {
      if (record) out.searched.push_back({name, ReasonKind::ld_cache, "", fmt::format("not in {}", ld_cache_->file())});
    }
  }
  // 7. The system folders.
  if (nodeflib) {
    if (record) out.searched.push_back({"", ReasonKind::default_path, "", "skipped: DF_1_NODEFLIB"});
  } else {
    for (const auto& dir : config_.host.default_dirs)
      if (try_dir(dir, name, ReasonKind::default_path, "", want, gone, out, record)) return out;
  }
  out.path.reset();
  out.kind = ReasonKind::not_found;
  return out;
}

int LoaderModel::add_object(Process& p, const std::string& path, const std::string& name, int loader) const {
  const std::string& real = real_file(path);
  if (const int existing = p.find_real(real); existing >= 0) {
    auto& names = p.objects[static_cast<std::size_t>(existing)].names;
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      if (p.trial_.active && static_cast<std::size_t>(existing) < p.trial_.objects)
        p.trial_.names_grown.emplace_back(existing, names.size());
      names.push_back(name);
    }
    p.add_name(name, existing);
    return existing;
  }
  const ElfRead& r = elf_cache_->get(real);
  if (r.status != ElfReadStatus::ok) return -1;
  const int index = static_cast<int>(p.objects.size());
  LoadedObject o;
  o.path = path;
  o.real = real;
  o.names.push_back(name);
  o.elf = &r.info;
  o.loader = loader;
  p.by_real.emplace(real, index);
  p.add_name(name, index);
  p.add_name(path, index);
  if (r.info.soname) p.add_name(*r.info.soname, index);
  p.objects.push_back(std::move(o));
  return index;
}

int LoaderModel::preload(Process& p, const LoadedObject& earlier) const {
  if (const int existing = p.find_real(earlier.real); existing >= 0) {
    for (const auto& name : earlier.names) p.add_name(name, existing);
    return existing;
  }
  const int index = static_cast<int>(p.objects.size());
  LoadedObject o;
  o.path = earlier.path;
  o.real = earlier.real;
  o.names = earlier.names;
  o.elf = earlier.elf;
  o.loader = p.main;
  o.mapped_deps = true;
  p.by_real.emplace(o.real, index);
  for (const auto& name : o.names) p.add_name(name, index);
  p.add_name(o.path, index);
  if (o.elf && o.elf->soname) p.add_name(*o.elf->soname, index);
  p.objects.push_back(std::move(o));
  return index;
}

void LoaderModel::map_dependencies(Process& p, std::size_t from) const {
  // Breadth-first over NEEDED, as _dl_map_object_deps does: every NEEDED of one object is mapped
  // before any NEEDED of the objects it brought in.
  for (std::size_t i = from; i < p.objects.size(); ++i) {
    if (p.objects[i].mapped_deps) continue;
    p.objects[i].mapped_deps = true;
    // In the ELF cache, which outlives the process: add_object may move p.objects, not this.
    const std::vector<std::string>& wanted = p.objects[i].elf->needed;
    p.objects[i].needed.reserve(wanted.size());
    p.objects[i].needed_index.reserve(wanted.size());
    for (const auto& name : wanted) {
      Resolution r = resolve(p, static_cast<int>(i), name);
      const int idx = r.found() ? add_object(p, *r.path, name, static_cast<int>(i)) : -1;
      p.objects[i].needed.push_back(std::move(r));
      p.objects[i].needed_index.push_back(idx);
    }
  }
}

bool LoaderModel::runs_in(const Process& p, const std::string& path) const {
  const ElfRead& r = elf_cache_->get(real_file(path));
  if (r.status != ElfReadStatus::ok) return true;  // add_object refuses it
  const ElfInfo* main = p.main >= 0 ? p.objects[static_cast<std::size_t>(p.main)].elf : nullptr;
  const std::uint8_t klass = main ? main->elf_class : config_.host.elf_class;
  const std::uint16_t machine = main ? main->machine : config_.host.machine;
  if (klass == 0 || machine == 0) return true;  // a host not told: nothing to compare with
  return r.info.elf_class == klass && r.info.machine == machine;
}

int LoaderModel::load(Process& p, const std::string& path) const {
  const bool as_main = p.objects.empty();
  const std::size_t first_new = p.objects.size();
  p.load_start = first_new;
  // glibc's open_verify refuses an object of another class or machine before mapping anything
  // ("wrong ELF class", "ELF file's machine"), whoever dlopens it: an aarch64 extension in an
  // x86-64 process maps nothing, and its NEEDED are never searched for among the host's libraries.
  if (!runs_in(p, path)) return -1;
  const int root = add_object(p, path, path, as_main ? -1 : p.main);
  if (root < 0 || static_cast<std::size_t>(root) < first_new) return root;  // dlopen of a loaded object
  if (as_main) {
    p.main = root;
    add_dynamic_loader(p);
  }
  map_dependencies(p, first_new);
  return root;
}

void LoaderModel::add_dynamic_loader(Process& p) const {
  // ld.so is in every link map from the start, under its SONAME (ld-linux-x86-64.so.2), so
  // libc's NEEDED of it is always "already loaded".
  if (config_.host.ld_so.empty()) return;
  const int i = add_object(p, config_.host.ld_so, config_.host.ld_so, p.main);
  if (i >= 0) p.objects[static_cast<std::size_t>(i)].mapped_deps = true;
}

Process LoaderModel::start_process() const {
  Process p;
  if (config_.main_executable) {
    // The kernel runs the resolved file, so $ORIGIN of the interpreter is its real folder.
    const std::string exe = real_path_of(*config_.main_executable);
    p.main = add_object(p, exe, exe, -1);
  }
  add_dynamic_loader(p);
  // LD_PRELOAD objects are mapped after the main program and before its NEEDED.
  for (const auto& pre : config_.preload) {
    if (pre.empty()) continue;
    if (pre.find('/') != std::string::npos) {
      add_object(p, pre, pre, p.main);
      continue;
    }
    Resolution r = resolve(p, p.main, pre);
    if (r.found()) add_object(p, *r.path, pre, p.main);
  }
  map_dependencies(p, 0);
  p.load_start = p.objects.size();
  return p;
}

}  // namespace cudafix::resolver::inline loader
