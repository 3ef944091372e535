#include "resolver/env/system_packages.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string_view>

#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline env {
namespace {

// Debian policy 5.6.1: lower case letters, digits, + - and ., starting with a letter or digit.
bool is_package_name(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9'))) return false;
  for (const char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.')) return false;
  return true;
}

// "python3-userpath.list" or "libc6:amd64.list" -> the package's name; "" for anything else.
std::string package_of_list(std::string_view file) {
  if (!file.ends_with(".list")) return "";
  std::string_view name = file.substr(0, file.size() - 5);
  name = name.substr(0, name.find(':'));
  return is_package_name(name) ? std::string(name) : "";
}

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

}  // namespace

std::map<std::string, std::string> debian_owners(const std::string& prefix, const std::vector<std::string>& paths) {
  std::map<std::string, std::string> out;
  if (base_name(prefix) != "usr" || paths.empty()) return out;
  const std::string system_root = parent_dir(prefix);  // "/" or the chroot's root
  const std::string info = join_normal(system_root, "var/lib/dpkg/info");
  // The database's lines are relative to the system root.
  std::map<std::string, std::string, std::less<>> wanted;  // line -> path
  for (const auto& p : paths)
    if (p.starts_with(prefix + "/")) wanted.emplace(p.substr(system_root == "/" ? 0 : system_root.size()), p);
  const int dir_fd = ::open(info.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (dir_fd < 0) return out;
  std::unique_ptr<DIR, DirCloser> dir(::fdopendir(dir_fd));
  if (!dir) {
    ::close(dir_fd);
    return out;
  }
  std::size_t entries = 0;
  while (const dirent* e = ::readdir(dir.get())) {
    // Every package has several files there (.md5sums, .postinst, ...): entries, not lists, bound.
    if (wanted.empty() || ++entries > 8 * k_max_dpkg_lists) break;
    const std::string package = package_of_list(e->d_name);
    if (package.empty()) continue;
    const auto text = try_read_file_at(::dirfd(dir.get()), e->d_name, k_max_dpkg_list_bytes);
    if (!text) continue;
    for (std::string_view rest = *text; !rest.empty();) {
      const auto nl = rest.find('\n');
      const std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
      if (const auto it = wanted.find(line); it != wanted.end()) {
        out.emplace(it->second, package);
        wanted.erase(it);
      }
    }
  }
  return out;
}

}  // namespace cudafix::resolver::inline env
