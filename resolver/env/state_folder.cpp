#include "resolver/env/state_folder.hpp"

#include <dirent.h>
#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>

#include "resolver/base/text.hpp"
#include "resolver/env/dist_info.hpp"

namespace cudafix::resolver::inline env {
namespace {

bool all_digits(std::string_view s, std::size_t from, std::size_t count) {
  if (count == 0 || from + count > s.size()) return false;
  for (std::size_t i = from; i < from + count; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

// The path of a RECORD row: the first CSV field, unquoted.
std::string row_path(std::string_view line) {
  if (!line.empty() && line.front() == '"') {
    std::string out;
    for (std::size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out += '"';
        ++i;
      } else if (line[i] == '"') {
        break;
      } else {
        out += line[i];
      }
    }
    return out;
  }
  return std::string(line.substr(0, line.find(',')));
}

}  // namespace

bool is_transaction_id(std::string_view id) {
  // YYYYMMDDTHHMMSS.mmm-PID-N, as installer/txn/transaction.cpp's new_id() writes it.
  if (id.size() > 64 || id.size() < 23 || !all_digits(id, 0, 8) || id[8] != 'T' || !all_digits(id, 9, 6) ||
      id[15] != '.' || !all_digits(id, 16, 3) || id[19] != '-')
    return false;
  const auto dash = id.find('-', 20);
  if (dash == std::string_view::npos) return false;
  return all_digits(id, 20, dash - 20) && all_digits(id, dash + 1, id.size() - dash - 1);
}

bool is_snapshot_name(std::string_view name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
  });
}

bool is_dist_folder_name(std::string_view name) {
  if (name.empty() || name.size() > 255) return false;
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front())) return false;
  if (!name.ends_with(".dist-info") && !name.ends_with(".egg-info") && !name.ends_with(".egg-link")) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.' || c == '+' || c == '!'; });
}

std::string protected_file(std::string_view rel) {
  if (rel == ".cudafix" || rel.starts_with(".cudafix/")) return "cudafix's own state (.cudafix/)";
  if (rel == "cudafix.toml") return "cudafix's settings (cudafix.toml)";
  if (rel == ".lock") return "the environment's lock (.lock)";
  if (rel == "pyvenv.cfg") return "the venv's pyvenv.cfg";
  if (rel.starts_with("bin/python") && rel.find('/', 4) == std::string_view::npos)
    return fmt::format("the environment's interpreter ({})", rel);
  return {};
}

std::string state_folder_problem(const std::string& root) {
  for (const std::string& folder : {root + "/.cudafix", root + "/.cudafix/tx"}) {
    struct stat st {};
    if (::lstat(folder.c_str(), &st) != 0) continue;
    if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a folder (a symlink or a file put there)", folder);
    if (st.st_uid != ::geteuid() && st.st_uid != 0)
      return fmt::format("{} belongs to uid {}, neither this user ({}) nor root", folder, st.st_uid, ::geteuid());
    if ((st.st_mode & 022) != 0)
      return fmt::format("{} may be written by others (mode {:o}); cudafix makes it 0700", folder, st.st_mode & 07777);
  }
  return {};
}

std::vector<std::string> records_listing_protected(const EnvLayout& layout, std::size_t limit) {
  std::vector<std::string> out;
  for (const auto& site : layout.sites) {
    if (site.root == SiteRoot::system) continue;
    DIR* d = ::opendir(site.path.c_str());
    if (d == nullptr) continue;
    while (const dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (!name.ends_with(".dist-info")) continue;
      const std::string record = site.path + "/" + std::string(name) + "/RECORD";
      const auto text = try_read_file(record, k_max_dist_info_file_bytes);
      if (!text) continue;
      for (const auto line : split(*text, '\n')) {
        const std::string path = row_path(line);
        if (path.empty()) continue;
        const std::string abs = join_normal(site.path, path);
        if (!is_within(abs, layout.root) || abs == layout.root) continue;
        if (!is_protected_path(abs.substr(layout.root.size() + 1))) continue;
        if (out.size() < limit) out.push_back(fmt::format("{}: {}", record, path.substr(0, 256)));
      }
    }
    ::closedir(d);
  }
  return out;
}

}  // namespace cudafix::resolver::inline env
