#include "resolver/env/venv.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "resolver/base/text.hpp"

namespace fs = std::filesystem;

namespace cudafix::resolver::inline env {
namespace {

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

// Whether `p` is a folder whose entries can be listed; false when there is none. A folder that
// is there but may not be looked at or listed (another user's, mode 0700) throws Error saying
// "permission denied" and whose it is: read as absent it became "no site-packages folder", "not a
// Python environment" or an environment of no dists.
bool is_listable_dir(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) {
    if (errno == EACCES || errno == EPERM) throw Error(cannot("look at", p.string(), errno));
    return false;
  }
  if (!S_ISDIR(st.st_mode)) return false;
  const int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == EACCES || errno == EPERM) throw Error(cannot("list", p.string(), errno));
    return false;
  }
  ::close(fd);
  return true;
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec) && !fs::is_directory(p, ec);
}

std::string absolute_normal(const std::string& p) {
  std::error_code ec;
  auto abs = fs::absolute(p, ec);
  return lexically_normal(ec ? p : abs.string());
}

std::string real_path(const std::string& p) {
  std::error_code ec;
  auto r = fs::canonical(p, ec);
  return ec ? p : r.string();
}

std::map<std::string, std::string> read_pyvenv_cfg(const fs::path& file) {
  std::map<std::string, std::string> out;
  const std::string text = read_file(file);
  for (auto line : split(text, '\n')) {
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    out[std::string(trim(line.substr(0, eq)))] = std::string(trim(line.substr(eq + 1)));
  }
  return out;
}

// "3.12.3" -> "3.12"
std::optional<std::string> major_minor(std::string_view v) {
  const auto parts = split(v, '.');
  if (parts.size() < 2 || parts[0].empty() || parts[1].empty()) return std::nullopt;
  return fmt::format("{}.{}", parts[0], parts[1]);
}

// The pythonX.Y folders under prefix/lib, newest first.
// "3.12.3" from "3.12.3" or uv's "3.12.3.final.0": the numeric components, at most three.
std::string release_of(const std::string& version) {
  std::string out;
  int parts = 0;
  for (auto part : split(version, '.')) {
    if (part.empty() || parts == 3 || part.find_first_not_of("0123456789") != std::string_view::npos) break;
    out += (parts++ ? "." : "") + std::string(part);
  }
  return out;
}

std::vector<std::string> python_versions_under(const fs::path& lib) {
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(lib, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("python3.", 0) != 0) continue;
    const std::string minor = name.substr(8);
    if (minor.empty() || !std::all_of(minor.begin(), minor.end(), ::isdigit)) continue;
    found.emplace_back(std::stoi(minor), name.substr(6));
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

void add_site(EnvLayout& layout, const fs::path& dir, SiteRoot root, const fs::path& prefix) {
  if (!is_listable_dir(dir)) return;
  SiteDir site{lexically_normal(dir.string()), real_path(dir.string()), root, real_path(prefix.string())};
  for (const auto& s : layout.sites)
    if (s.real == site.real) return;  // lib64 -> lib: one folder, one root
  layout.sites.push_back(std::move(site));
}

// The scheme directories of an interpreter prefix for one Python version.
void add_prefix_sites(EnvLayout& layout, const fs::path& prefix, const std::string& version, SiteRoot pure,
                      SiteRoot plat) {
  add_site(layout, prefix / "lib" / ("python" + version) / "site-packages", pure, prefix);
  add_site(layout, prefix / "lib64" / ("python" + version) / "site-packages", plat, prefix);
  // Debian's system layout.
  add_site(layout, prefix / "local" / "lib" / ("python" + version) / "dist-packages", pure, prefix);
  add_site(layout, prefix / "lib" / "python3" / "dist-packages", pure, prefix);
}

bool holds_dist_info(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.size() > 10 && name.ends_with(".dist-info")) return true;
  }
  return false;
}

}  // namespace

const SiteDir* EnvLayout::purelib() const {
  for (const auto& s : sites)
    if (s.root == SiteRoot::purelib) return &s;
  return nullptr;
}

const SiteDir* EnvLayout::platlib() const {
  for (const auto& s : sites)
    if (s.root == SiteRoot::platlib) return &s;
  return purelib();
}

EnvLayout read_layout(const std::string& dir_in, const std::string& found_by) {
  // Resolved once, here: a venv given through a symlink is planned, staged and changed at the
  // one real path, so that no later check finds a path of one spelling outside the other.
  const std::string dir = real_path(absolute_normal(dir_in));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) throw Error(fmt::format("{}: no such folder ({})", dir, found_by));
    throw Error(cannot("look at", dir, errno));
  }
  if (!S_ISDIR(st.st_mode)) throw Error(fmt::format("{} is not a directory ({})", dir, found_by));
  if (!is_listable_dir(dir)) throw Error(fmt::format("{} is not a directory ({})", dir, found_by));
  EnvLayout layout;
  layout.found_by = found_by;
  layout.root = dir;
  layout.root_real = real_path(dir);
  const fs::path root(dir);

  if (is_file(root / "pyvenv.cfg")) {
    layout.kind = EnvKind::venv;
    const auto cfg = read_pyvenv_cfg(root / "pyvenv.cfg");
    if (auto it = cfg.find("home"); it != cfg.end()) layout.home = it->second;
    if (auto it = cfg.find("include-system-site-packages"); it != cfg.end())
      layout.include_system_site_packages = it->second == "true" || it->second == "True";
    for (const char* key : {"version_info", "version"})
      if (auto it = cfg.find(key); it != cfg.end() && !layout.python_version) {
        layout.python_version = major_minor(it->second);
        layout.python_full_version = release_of(it->second);
      }
  } else if (is_dir(root / "lib") || is_dir(root / "bin")) {
    layout.kind = EnvKind::prefix;
  } else if (holds_dist_info(root) || root.filename() == "site-packages" || root.filename() == "dist-packages") {
    layout.kind = EnvKind::site_dir;
    // A site dir at <prefix>/lib/pythonX.Y/site-packages may list files in <prefix>/bin.
    fs::path bound = root;
    if (root.parent_path().filename().string().rfind("python", 0) == 0 &&
        root.parent_path().parent_path().filename().string().rfind("lib", 0) == 0)
      bound = root.parent_path().parent_path().parent_path();
    layout.sites.push_back({dir, real_path(dir), SiteRoot::platlib, real_path(bound.string())});
    return layout;
  } else {
    throw Error(fmt::format(
        "{} is not a Python environment: no pyvenv.cfg, no lib/pythonX.Y/site-packages, no *.dist-info", dir));
  }

  if (!layout.python_version) {
    const auto versions = python_versions_under(root / "lib");
    if (!versions.empty()) layout.python_version = versions.front();
  }
  if (!layout.python_version)
    throw Error(fmt::format("{}: cannot tell the Python version (no version in pyvenv.cfg, no lib/python3.N)", dir));
  add_prefix_sites(layout, root, *layout.python_version, SiteRoot::purelib, SiteRoot::platlib);
  if (layout.sites.empty())
    throw Error(fmt::format("{}: no site-packages folder under lib/python{}", dir, *layout.python_version));

  if (layout.kind == EnvKind::prefix) {
    const fs::path marker = root / "lib" / ("python" + *layout.python_version) / "EXTERNALLY-MANAGED";
    if (is_file(marker)) layout.externally_managed = marker.string();
  }
  if (layout.kind == EnvKind::venv && layout.include_system_site_packages && layout.home) {
    const fs::path base_prefix = fs::path(*layout.home).parent_path();
    add_prefix_sites(layout, base_prefix, *layout.python_version, SiteRoot::system, SiteRoot::system);
  }
  return layout;
}

EnvLayout locate_environment(const LocateRequest& req) {
  if (req.venv_option) return read_layout(*req.venv_option, "--venv");
  if (req.python_option) {
    const auto found = find_python(*req.python_option, req.lookup);
    return read_layout(found.prefix, found.found_by);
  }
  if (req.virtual_env && !req.virtual_env->empty()) return read_layout(*req.virtual_env, "$VIRTUAL_ENV");
  if (const auto found = python_on_path(req.lookup)) return read_layout(found->prefix, found->found_by);
  throw Error(
      "no Python environment found: give --venv DIR or -p PYTHON, activate a venv ($VIRTUAL_ENV), "
      "or put its python3 on PATH");
}

}  // namespace cudafix::resolver::inline env
