#include "resolver/env/knowledge.hpp"

#include <algorithm>

namespace cudafix::resolver::inline env {
namespace {
const SonameGroup* find_group(const std::map<std::string, SonameGroup>& groups, const std::string& soname) {
  for (const auto& [name, g] : groups)
    if (g.names(soname)) return &g;
  return nullptr;
}
}  // namespace

std::vector<std::string> SonameGroup::sonames_for(std::optional<int> major) const {
  std::vector<std::string> out = sonames;
  if (major)
    if (auto it = sonames_by_major.find(*major); it != sonames_by_major.end())
      out.insert(out.end(), it->second.begin(), it->second.end());
  return out;
}

bool SonameGroup::names(const std::string& soname) const {
  if (std::find(sonames.begin(), sonames.end(), soname) != sonames.end()) return true;
  for (const auto& [major, list] : sonames_by_major)
    if (std::find(list.begin(), list.end(), soname) != list.end()) return true;
  return false;
}

const SonameGroup* Knowledge::driver_group(const std::string& soname) const { return find_group(driver, soname); }
const SonameGroup* Knowledge::optional_group(const std::string& soname) const { return find_group(optional, soname); }
const SonameGroup* Knowledge::dlopen_group(const std::string& soname) const { return find_group(dlopen, soname); }

std::optional<std::pair<const CudaFamily*, int>> Knowledge::family_of_dist(const std::string& normalized) const {
  for (const auto& [name, f] : families)
    for (const auto& [major, m] : f.majors)
      if (std::find(m.dists.begin(), m.dists.end(), normalized) != m.dists.end()) return std::make_pair(&f, major);
  return std::nullopt;
}

std::optional<int> Knowledge::major_of_folder(const std::string& folder) const {
  std::optional<int> found;
  for (const auto& [name, f] : families)
    for (const auto& [major, m] : f.majors)
      if (std::find(m.folders.begin(), m.folders.end(), folder) != m.folders.end()) {
        if (found && *found != major) return std::nullopt;  // two majors install there
        found = major;
      }
  return found;
}

}  // namespace cudafix::resolver::inline env
