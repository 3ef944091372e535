// Which installed dists' files a rollback must leave, and which of the dists a transaction
// installed pip has installed again over the same files (installer/txn/rollback_owners.hpp).
#include "installer/txn/rollback_owners.hpp"

#include <dirent.h>

#include <map>
#include <string_view>
#include <vector>

#include "resolver/base/text.hpp"
#include "resolver/env/dist_info.hpp"

namespace cudafix::installer::txn {

namespace {

// A dist-info's bookkeeping that pip writes afresh at each install (pip's, not the wheel's): the
// installer's name, RECORD itself, whether it was asked for by name, and where it came from.
bool pip_bookkeeping(std::string_view name) {
  return name == "INSTALLER" || name == "RECORD" || name == "REQUESTED" || name == "direct_url.json";
}

}  // namespace

RollbackOwners rollback_owners(const resolver::EnvLayout& layout, const JournalRead& done) {
  std::set<std::string> touched, left_files;
  for (const auto& op : done.ops)
    for (const std::string* p : {&op.from, &op.to, &op.path})
      if (!p->empty()) touched.insert(*p);
  for (const auto& l : done.left) {
    touched.insert(l.path);
    if (l.type == LeftType::file) left_files.insert(l.path);
  }
  const auto touched_within = [&](const std::string& folder) {
    if (touched.count(folder)) return true;
    const auto it = touched.lower_bound(folder + "/");
    return it != touched.end() && it->starts_with(folder + "/");
  };
  RollbackOwners out;
  for (const auto& site : layout.sites) {
    if (site.root == resolver::SiteRoot::system || !resolver::is_within(site.real, layout.root_real)) continue;
    DIR* d = ::opendir(site.real.c_str());
    if (d == nullptr) continue;
    std::vector<std::string> dist_infos;
    while (const dirent* e = ::readdir(d))
      if (std::string_view(e->d_name).ends_with(".dist-info")) dist_infos.emplace_back(e->d_name);
    ::closedir(d);
    for (const auto& name : dist_infos) {
      const std::string folder = site.real + "/" + name;
      const auto text = resolver::try_read_file(folder + "/RECORD", resolver::k_max_dist_info_file_bytes);
      if (!text) continue;
      const auto record = resolver::parse_record(*text, folder + "/RECORD");
      std::vector<std::string> paths;
      for (const auto& row : record.rows) {
        std::string abs = resolver::join_normal(site.real, row.path);
        if (resolver::is_within(abs, layout.root_real) && abs != layout.root_real) paths.push_back(std::move(abs));
      }
      if (!touched_within(folder)) {
        out.others.insert(paths.begin(), paths.end());
        continue;
      }
      // `done`'s own dist, installed again since: the same dist when its RECORD lists nothing
      // but files `done` left (whose bytes the rollback checks one by one), its own bookkeeping
      // and bytecode.
      bool same = true;
      for (const auto& p : paths)
        same = same &&
               (left_files.count(p) || (resolver::parent_dir(p) == folder && pip_bookkeeping(resolver::base_name(p))) ||
                resolver::in_pycache(p));
      if (same) out.reinstalled.insert(folder);
    }
  }
  return out;
}

}  // namespace cudafix::installer::txn
