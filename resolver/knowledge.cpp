#include "resolver/knowledge.hpp"

#include <algorithm>

namespace cudafix::resolver {
namespace {
const SonameGroup* find_group(const std::map<std::string, SonameGroup>& groups, const std::string& soname) {
  for (const auto& [name, g] : groups)
    if (std::find(g.sonames.begin(), g.sonames.end(), soname) != g.sonames.end()) return &g;
  return nullptr;
}
}  // namespace

const SonameGroup* Knowledge::driver_group(const std::string& soname) const { return find_group(driver, soname); }
const SonameGroup* Knowledge::optional_group(const std::string& soname) const { return find_group(optional, soname); }
const SonameGroup* Knowledge::dlopen_group(const std::string& soname) const { return find_group(dlopen, soname); }

}  // namespace cudafix::resolver
