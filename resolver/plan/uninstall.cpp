#include "resolver/plan/uninstall.hpp"

#include "resolver/env/state_folder.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline plan {
namespace {

bool exists_following_links(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool is_real_dir(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The entries of a folder (names), or nothing when it cannot be read.
std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") out.emplace_back(name);
  }
  ::closedir(d);
  return out;
}

// os.walk(root) without following symlinks: every file and symlink below (symlinks to folders
// included: pip's walk lists them as folders and never counts them as files, but they are moved
// with the folder), and every real folder below.
void walk_below(const std::string& root, std::vector<std::string>& files, std::vector<std::string>& dirs,
                std::vector<std::string>& dir_links) {
  for (const auto& name : list_dir(root)) {
    const std::string p = root + "/" + name;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      dirs.push_back(p);
      walk_below(p, files, dirs, dir_links);
    } else if (S_ISLNK(st.st_mode) && exists_following_links(p) && is_real_dir(real_path_of(p))) {
      dir_links.push_back(p);
    } else {
      files.push_back(p);
    }
  }
}

// The interpreter's bytecode tag (sys.implementation.cache_tag): "cpython-312".
std::string cache_tag(const EnvLayout& layout) {
  const std::string v = layout.python_version.value_or("3");
  std::string digits;
  for (char c : v)
    if (c != '.') digits += c;
  return "cpython-" + digits;
}

// Names of the console_scripts and gui_scripts entry points in the dist's entry_points.txt.
std::vector<std::string> script_names(const DistInfo& d) {
  std::vector<std::string> out;
  const auto text = try_read_file(d.site_dir + "/" + d.dir_name + "/entry_points.txt");
  if (!text) return out;
  bool in_scripts = false;
  for (auto line : split(*text, '\n')) {
    line = trim(line);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      in_scripts = line == "[console_scripts]" || line == "[gui_scripts]";
      continue;
    }
    if (!in_scripts) continue;
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const auto name = trim(line.substr(0, eq));
    if (!name.empty() && name.find('/') == std::string_view::npos) out.emplace_back(name);
  }
  return out;
}

bool is_real_folder(const std::string& path) { return is_real_dir(path); }

// The paths no removal deletes: the scheme roots (and the folders above them, up to the root),
// cudafix's state and the venv's core, worked out once for a removal's thousands of rows.
class ProtectedPaths {
 public:
  explicit ProtectedPaths(const EnvLayout& layout) : root_(layout.root_real) {
    for (const char* s : {"bin", "include", "lib", "lib64"}) scheme_.push_back(root_ + "/" + s);
    for (const auto& site : layout.sites)
      if (is_within(site.real, root_)) scheme_.push_back(site.real);
  }

  [[nodiscard]] std::optional<std::string> why(const std::string& path) const {
    if (!is_within(path, root_)) return std::nullopt;  // outside: the removal's own check refuses it
    if (path == root_) return std::string("is the environment's root");
    for (const auto& s : scheme_) {
      if (path == s) return fmt::format("is {}/, a scheme folder", relative_to(s, root_));
      if (is_within(s, path)) return fmt::format("holds the scheme folder {}/", relative_to(s, root_));
    }
    if (const auto what = protected_file(relative_to(path, root_)); !what.empty()) return "is " + what;
    return std::nullopt;
  }

 private:
  std::string root_;
  std::vector<std::string> scheme_;
};

}  // namespace

std::optional<std::string> protected_path(const EnvLayout& layout, const std::string& path) {
  return ProtectedPaths(layout).why(path);
}

std::string Refusal::to_string(const Environment& env) const {
  const std::string label = dist >= 0 && static_cast<std::size_t>(dist) < env.dists.size()
                                ? dist_label(env.dists[static_cast<std::size_t>(dist)])
                                : std::string("a dist");
  if (entry.empty()) return fmt::format("{}: {} {}", label, env.display(file), why);
  return fmt::format("{}: {}{} ('{}') {}", label, env.display(file), line ? fmt::format(" line {}", line) : "", entry,
                     why);
}

std::string PipPaths::of(const std::string& lexical) {
  const std::string dir = parent_dir(lexical);
  auto it = real_dirs_.find(dir);
  if (it == real_dirs_.end()) it = real_dirs_.emplace(dir, real_path_of(dir)).first;
  return join_normal(it->second, base_name(lexical));
}

namespace {

// The file system as the uninstall leaves it so far: the disk, minus what has been moved away.
class Removal {
 public:
  // With `stop`, os.removedirs() never climbs into a protected folder (owner counting).
  Removal(std::string bound, const ProtectedPaths* stop) : bound_(std::move(bound)), stop_(stop) {}

  [[nodiscard]] bool gone(const std::string& path) const {
    for (std::string p = path; p.size() > 1 && is_within(p, bound_); p = parent_dir(p))
      if (gone_files_.count(p) || gone_dirs_.count(p)) return true;
    return false;
  }
  [[nodiscard]] bool exists(const std::string& path) const { return exists_following_links(path) && !gone(path); }
  [[nodiscard]] const std::string& bound() const { return bound_; }

  // os.walk(root) as pip sees it now: every file below (symlinks to folders aside, as os.walk
  // lists them with the folders) and every folder and folder link below.
  void walk(const std::string& root, std::vector<std::string>& files, std::vector<std::string>& dirs,
            std::vector<std::string>& dir_links) const {
    std::vector<std::string> f, d, l;
    walk_below(root, f, d, l);
    for (auto& x : f)
      if (!gone(x)) files.push_back(std::move(x));
    for (auto& x : d)
      if (!gone(x)) dirs.push_back(std::move(x));
    for (auto& x : l)
      if (!gone(x)) dir_links.push_back(std::move(x));
  }

  void move_file(const std::string& path) { gone_files_.insert(path); }
  void move_dir(const std::string& root) {
    std::vector<std::string> files, dirs, links;
    walk(root, files, dirs, links);
    gone_files_.insert(files.begin(), files.end());
    gone_files_.insert(links.begin(), links.end());
    gone_dirs_.insert(dirs.begin(), dirs.end());
    gone_dirs_.insert(root);
  }
  // os.removedirs(dir): removes it while it is empty, then its parent, and so on.
  void remove_empty_dirs(std::string dir) {
    for (; is_within(dir, bound_) && dir != bound_; dir = parent_dir(dir)) {
      if (stop_ && stop_->why(dir)) return;
      const auto entries = list_dir(dir);
      if (!std::all_of(entries.begin(), entries.end(), [&](const std::string& n) { return gone(dir + "/" + n); }))
        return;
      gone_dirs_.insert(dir);
    }
  }

  [[nodiscard]] std::vector<std::string> files() const { return {gone_files_.begin(), gone_files_.end()}; }
  [[nodiscard]] std::vector<std::string> dirs() const { return {gone_dirs_.begin(), gone_dirs_.end()}; }

  [[nodiscard]] const ProtectedPaths* stop() const { return stop_; }

 private:
  std::string bound_;
  const ProtectedPaths* stop_ = nullptr;
  std::set<std::string> gone_files_, gone_dirs_;
};

// compress_for_rename: the folders, shortest first, every file below which is in `paths`, with a
// trailing '/'; and the paths no such folder holds.
std::vector<std::string> compress_for_rename(const Removal& fs, const std::set<std::string>& paths) {
  std::set<std::string> roots;
  for (const auto& p : paths) roots.insert(parent_dir(p));
  std::vector<std::string> by_length(roots.begin(), roots.end());
  std::stable_sort(by_length.begin(), by_length.end(),
                   [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
  std::vector<std::string> wildcards;
  auto under_wildcard = [&](const std::string& p) {
    return std::any_of(wildcards.begin(), wildcards.end(), [&](const std::string& w) { return p.starts_with(w); });
  };
  for (const auto& root : by_length) {
    if (under_wildcard(root + "/") || (fs.stop() && fs.stop()->why(root))) continue;
    std::vector<std::string> below, subdirs, dir_links;
    fs.walk(root, below, subdirs, dir_links);
    if (std::all_of(below.begin(), below.end(), [&](const std::string& f) { return paths.count(f) > 0; }))
      wildcards.push_back(root + "/");
  }
  std::vector<std::string> out = wildcards;
  for (const auto& p : paths)
    if (!under_wildcard(p)) out.push_back(p);
  return out;
}

}  // namespace

Deletion uninstall_paths(const Environment& env, const std::vector<int>& dists, OwnerCounting counting,
                         const EarlierSteps& earlier) {
  std::set<int> removing(dists.begin(), dists.end());
  removing.insert(earlier.removed.begin(), earlier.removed.end());
  // Under owner counting, a path stays while a dist that is not being removed lists it.
  auto kept_owner = [&](const std::string& lexical) {
    if (counting == OwnerCounting::pip) return false;
    if (earlier.listed.count(lexical)) return true;
    for (int o : env.owners_of(lexical))
      if (!removing.count(o)) return true;
    return false;
  };
  const ProtectedPaths guard(env.layout);
  Removal fs(env.layout.root_real, counting == OwnerCounting::cudafix ? &guard : nullptr);
  for (const auto& p : earlier.deleted) fs.move_file(p);
  std::set<std::string> kept;
  std::vector<Refusal> refused;
  PipPaths pip_paths;
  const std::string tag = cache_tag(env.layout);
  // pip uninstalls one dist after another, each seeing what the ones before it left.
  std::set<int> done;
  for (int di : dists) {
    if (!done.insert(di).second) continue;
    const DistInfo& d = env.dists[static_cast<std::size_t>(di)];
    const std::string listing = d.site_dir + "/" + d.dir_name + "/" + d.record_name();
    if (!d.record_problem.empty()) {
      refused.push_back({di, listing, 0, "", d.record_problem});
      continue;
    }
    std::set<std::string> paths;  // pip's UninstallPathSet._paths
    // Returns why the path is refused, if it is; the caller names the row (the bytecode pip adds
    // on its own is left out quietly).
    auto add = [&](const std::string& lexical) -> std::optional<std::string> {
      const std::string p = pip_paths.of(lexical);
      if (!is_within(p, fs.bound())) return std::nullopt;
      auto why = guard.why(p);
      if (!why && fs.exists(p) && is_real_folder(p)) why = "is a folder (a row names a file or a symlink)";
      if (why && counting == OwnerCounting::cudafix) return why;
      if (!fs.exists(p)) return why;
      if (kept_owner(lexical))
        kept.insert(p);
      else
        paths.insert(p);
      return why;
    };
    std::string lexical;
    for (const auto& row : d.record) {
      join_normal(d.site_dir, row.path, lexical);
      if (auto why = add(lexical)) refused.push_back({di, listing, row.line, std::string(row.path), *why});
      if (!lexical.ends_with(".py")) continue;
      const std::string stem = lexical.substr(0, lexical.size() - 3);
      (void)add(stem + ".pyc");
      (void)add(stem + ".pyo");
      (void)add(parent_dir(lexical) + "/__pycache__/" + std::string(base_name(stem)) + "." + tag + ".pyc");
    }
    if (env.layout.kind != EnvKind::site_dir)
      for (const auto& name : script_names(d))
        if (auto why = add(env.layout.root + "/bin/" + name))
          refused.push_back(
              {di, d.site_dir + "/" + d.dir_name + "/entry_points.txt", 0, "console script " + name, *why});
    // The moves, in sorted order. After a file's move os.removedirs() climbs from its folder;
    // after a folder's pip's does not (os.path.split("a/b/") has an empty tail), so a parent that
    // only a folder's move empties stays behind, empty: `ns/` of a removed `ns/sub/`, which
    // Python then imports as an empty namespace package. cudafix's climbs there too, as far as
    // the folders are empty (never into one holding another dist's files, nor a scheme root).
    auto moves = compress_for_rename(fs, paths);
    std::sort(moves.begin(), moves.end());
    for (const auto& m : moves) {
      if (m.ends_with("/")) {
        const std::string dir = m.substr(0, m.size() - 1);
        fs.move_dir(dir);
        if (counting == OwnerCounting::cudafix) fs.remove_empty_dirs(parent_dir(dir));
      } else {
        fs.move_file(m);
        fs.remove_empty_dirs(parent_dir(m));
      }
    }
  }
  Deletion out;
  for (const auto& f : fs.files())
    if (!earlier.deleted.count(f)) out.files.push_back(f);
  out.dirs = fs.dirs();
  out.kept.assign(kept.begin(), kept.end());
  out.refused = std::move(refused);
  return out;
}

}  // namespace cudafix::resolver::inline plan
