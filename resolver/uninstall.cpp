#include "resolver/uninstall.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

#include "resolver/text.hpp"

namespace cudafix::resolver {
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

// A path as pip's UninstallPathSet.add() records it: its folder made real, its last part kept.
std::string pip_form(const std::string& lexical) {
  return join_normal(real_path_of(parent_dir(lexical)), base_name(lexical));
}

}  // namespace

Deletion uninstall_paths(const Environment& env, const std::vector<int>& dists, OwnerCounting counting) {
  Deletion out;
  const std::set<int> removing(dists.begin(), dists.end());
  // Under owner counting, a path stays while a dist that is not being removed lists it.
  auto kept_owner = [&](const std::string& lexical) {
    if (counting == OwnerCounting::pip) return false;
    for (int o : env.owners_of(lexical))
      if (!removing.count(o)) return true;
    return false;
  };
  const std::string bound = env.layout.root_real;
  std::set<std::string> paths;  // pip's _paths
  std::set<std::string> kept;
  auto add = [&](const std::string& lexical) {
    const std::string p = pip_form(lexical);
    if (!exists_following_links(p) || !is_within(p, bound)) return false;
    if (kept_owner(lexical)) {
      kept.insert(p);
      return false;
    }
    paths.insert(p);
    return true;
  };
  const std::string tag = cache_tag(env.layout);
  std::string lexical;
  for (int di : dists) {
    const DistInfo& d = env.dists[static_cast<std::size_t>(di)];
    for (const auto& row : d.record) {
      join_normal(d.site_dir, row.path, lexical);
      add(lexical);
      if (!lexical.ends_with(".py")) continue;
      const std::string stem = lexical.substr(0, lexical.size() - 3);
      add(stem + ".pyc");
      add(stem + ".pyo");
      add(parent_dir(lexical) + "/__pycache__/" + std::string(base_name(stem)) + "." + tag + ".pyc");
    }
    if (env.layout.kind != EnvKind::site_dir)
      for (const auto& name : script_names(d)) add(env.layout.root + "/bin/" + name);
  }
  out.kept.assign(kept.begin(), kept.end());

  // compress_for_rename: folders, shortest first, whose every file is to go are moved whole.
  std::set<std::string> roots;
  for (const auto& p : paths) roots.insert(parent_dir(p));
  std::vector<std::string> by_length(roots.begin(), roots.end());
  std::stable_sort(by_length.begin(), by_length.end(),
                   [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
  std::vector<std::string> wildcards;
  std::set<std::string> files(paths.begin(), paths.end());
  std::set<std::string> dirs;
  for (const auto& root : by_length) {
    // pip compares by prefix (root + "/"), as here.
    if (std::any_of(wildcards.begin(), wildcards.end(), [&](const std::string& w) { return (root + "/").starts_with(w); }))
      continue;
    std::vector<std::string> below, subdirs, dir_links;
    walk_below(root, below, subdirs, dir_links);
    if (!std::all_of(below.begin(), below.end(), [&](const std::string& f) { return paths.count(f) > 0; })) continue;
    wildcards.push_back(root + "/");
    dirs.insert(root);
    dirs.insert(subdirs.begin(), subdirs.end());
    files.insert(below.begin(), below.end());
    files.insert(dir_links.begin(), dir_links.end());
  }

  // os.removedirs after each move: folders the removal empties go, deepest first.
  std::set<std::string> candidates;
  for (const auto& f : files) candidates.insert(parent_dir(f));
  for (const auto& d : dirs) candidates.insert(parent_dir(d));
  std::map<std::size_t, std::set<std::string>, std::greater<>> by_depth;
  auto depth = [](const std::string& p) { return static_cast<std::size_t>(std::count(p.begin(), p.end(), '/')); };
  for (const auto& c : candidates) by_depth[depth(c)].insert(c);
  while (!by_depth.empty()) {
    auto level = by_depth.begin();
    const std::set<std::string> batch = std::move(level->second);
    by_depth.erase(level);
    for (const auto& dir : batch) {
      if (dirs.count(dir) || !is_within(dir, bound) || dir == bound) continue;
      const auto entries = list_dir(dir);
      const bool emptied = std::all_of(entries.begin(), entries.end(), [&](const std::string& name) {
        const std::string p = dir + "/" + name;
        return files.count(p) > 0 || dirs.count(p) > 0;
      });
      if (!emptied) continue;
      dirs.insert(dir);
      by_depth[depth(parent_dir(dir))].insert(parent_dir(dir));
    }
  }
  out.files.assign(files.begin(), files.end());
  out.dirs.assign(dirs.begin(), dirs.end());
  return out;
}

}  // namespace cudafix::resolver
