#include "resolver/env/egg_info.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline env {
namespace {

namespace fs = std::filesystem;

// "PyYAML-6.0-py3.11.egg-info" -> {"PyYAML", "6.0"}; "cryptography.egg-info" -> {"cryptography", ""}.
std::pair<std::string, std::string> split_egg_name(std::string_view name) {
  const auto dot = name.rfind('.');
  const std::string_view stem = name.substr(0, dot);
  const auto dash = stem.find('-');
  if (dash == std::string_view::npos) return {std::string(stem), ""};
  std::string_view version = stem.substr(dash + 1);
  if (const auto py = version.find("-py"); py != std::string_view::npos) version = version.substr(0, py);
  return {std::string(stem.substr(0, dash)), std::string(version)};
}

// A RECORD line for one path, quoted as Python's csv module quotes it.
void add_record_line(std::string& record, std::string_view path) {
  if (path.find_first_of(",\"\r\n") == std::string_view::npos) {
    record.append(path).append(",,\n");
    return;
  }
  record += '"';
  for (char c : path) record.append(c == '"' ? "\"\"" : std::string(1, c));
  record += "\",,\n";
}

void take_metadata(ReadDistInfo& out, std::string_view pkg_info, const std::string& file) {
  auto parsed = parse_metadata(pkg_info, file);
  out.dist.metadata = std::move(parsed.metadata);
  for (auto& diag : parsed.diagnostics) out.diagnostics.push_back(std::move(diag));
}

// `from_name`: the name and version the entry's own name gives (NAME.egg-link holds no version).
void finish_identity(DistInfo& d, const std::pair<std::string, std::string>& from_name) {
  const auto& [name, version] = from_name;
  d.name = d.metadata.name.empty() ? name : d.metadata.name;
  d.version = d.metadata.version.empty() ? version : d.metadata.version;
  d.normalized = normalize_name(d.name);
  for (const auto& line : d.metadata.requires_dist) d.requirements.push_back(requirement_ref(line));
}

// The rows of an egg-info folder: installed-files.txt's paths relative to the site folder, then
// the folder's own files it does not list.
void read_egg_rows(ReadDistInfo& out, const fs::path& dir, const std::string& dir_name) {
  DistInfo& d = out.dist;
  std::string record;
  std::set<std::string> listed;
  const auto list_file = (dir / "installed-files.txt").string();
  if (auto text = try_read_file(list_file)) {
    d.has_record = true;
    std::size_t line_no = 0;
    for (auto line : split(*text, '\n')) {
      ++line_no;
      line = trim(line);
      if (line.empty()) continue;
      if (line.front() == '/') {
        out.diagnostics.push_back({list_file, line_no, std::nullopt,
                                   fmt::format("absolute path {} ignored (the list holds paths relative to the "
                                               "egg-info folder)",
                                               line)});
        continue;
      }
      std::string rel = lexically_normal(dir_name + "/" + std::string(line));
      if (listed.insert(rel).second) add_record_line(record, rel);
    }
  }
  std::error_code ec;
  std::vector<std::string> own;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) own.push_back(dir_name + "/" + it->path().filename().string());
  std::sort(own.begin(), own.end());
  for (const auto& rel : own)
    if (listed.insert(rel).second) add_record_line(record, rel);
  auto parsed = parse_record(std::move(record), list_file);
  d.record = std::move(parsed.rows);
  d.record_storage = std::move(parsed.storage);
  for (auto& diag : parsed.diagnostics) out.diagnostics.push_back(std::move(diag));
}

// The egg-info folder `setup.py develop` left in the project a link points at, for its name and
// version: at the project's top or under src/.
std::optional<fs::path> develop_egg_info(const fs::path& project, const std::string& normalized) {
  for (const auto& where : {project, project / "src"}) {
    std::error_code ec;
    for (fs::directory_iterator it(where, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (n.ends_with(".egg-info") && normalize_name(split_egg_name(n).first) == normalized && it->is_directory(ec))
        return it->path();
    }
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> requires_txt_to_requires_dist(std::string_view text) {
  std::vector<std::string> out;
  std::string extra, marker;
  for (auto raw : split(text, '\n')) {
    const auto line = trim(raw);
    if (line.empty() || line.front() == '#') continue;
    if (line.front() == '[' && line.back() == ']') {
      const auto section = line.substr(1, line.size() - 2);
      const auto colon = section.find(':');
      extra = std::string(trim(section.substr(0, colon)));
      marker = colon == std::string_view::npos ? "" : std::string(trim(section.substr(colon + 1)));
      continue;
    }
    std::string condition;
    if (!extra.empty() && !marker.empty())
      condition = fmt::format("({}) and extra == \"{}\"", marker, extra);
    else if (!extra.empty())
      condition = fmt::format("extra == \"{}\"", extra);
    else
      condition = marker;
    out.push_back(condition.empty() ? std::string(line) : fmt::format("{}; {}", line, condition));
  }
  return out;
}

bool is_dist_entry(std::string_view name) {
  return name.ends_with(".dist-info") || name.ends_with(".egg-info") || name.ends_with(".egg-link");
}

ReadDistInfo read_egg_info(const std::string& site_dir, const std::string& name, SiteRoot root,
                           ReadRecord with_record) {
  ReadDistInfo out;
  DistInfo& d = out.dist;
  d.dir_name = name;
  d.site_dir = site_dir;
  d.root = root;
  const fs::path path = fs::path(site_dir) / name;
  std::error_code ec;
  if (name.ends_with(".egg-link")) {
    d.format = DistFormat::egg_link;
    const auto text = try_read_file(path);
    const auto first = text ? trim(split(*text, '\n').front()) : std::string_view();
    if (first.empty()) {
      out.diagnostics.push_back({path.string(), std::nullopt, std::nullopt,
                                 "missing, unreadable or empty; the development install's project folder is unknown"});
    } else {
      d.develop_path = std::string(first);
    }
    const std::pair<std::string, std::string> from_name{name.substr(0, name.size() - 9), ""};  // ".egg-link"
    const std::string guess = normalize_name(from_name.first);
    if (!d.develop_path.empty()) {
      if (const auto info = develop_egg_info(d.develop_path, guess)) {
        if (auto pkg = try_read_file(*info / "PKG-INFO")) take_metadata(out, *pkg, (*info / "PKG-INFO").string());
        if (auto req = try_read_file(*info / "requires.txt"))
          d.metadata.requires_dist = requires_txt_to_requires_dist(*req);
      }
    }
    finish_identity(d, from_name);
    return out;
  }
  if (!fs::is_directory(path, ec)) {
    d.format = DistFormat::egg_info_file;
    if (auto text = try_read_file(path))
      take_metadata(out, *text, path.string());
    else
      out.diagnostics.push_back(
          {path.string(), std::nullopt, std::nullopt, "unreadable; name and version taken from the file name"});
    finish_identity(d, split_egg_name(name));
    return out;
  }
  d.format = DistFormat::egg_info;
  if (auto text = try_read_file(path / "PKG-INFO")) {
    take_metadata(out, *text, (path / "PKG-INFO").string());
  } else {
    out.diagnostics.push_back({(path / "PKG-INFO").string(), std::nullopt, std::nullopt,
                               "missing or unreadable; name and version taken from the folder name"});
  }
  // PKG-INFO of setuptools' egg-info carries no Requires-Dist; requires.txt does.
  if (auto text = try_read_file(path / "requires.txt"); text && d.metadata.requires_dist.empty())
    d.metadata.requires_dist = requires_txt_to_requires_dist(*text);
  if (d.metadata.provides_extra.empty())
    for (const auto& line : d.metadata.requires_dist)
      if (const auto at = line.find("extra == \""); at != std::string::npos) {
        const auto start = at + 10;
        std::string e = line.substr(start, line.find('"', start) - start);
        if (std::find(d.metadata.provides_extra.begin(), d.metadata.provides_extra.end(), e) ==
            d.metadata.provides_extra.end())
          d.metadata.provides_extra.push_back(std::move(e));
      }
  finish_identity(d, split_egg_name(name));
  if (with_record == ReadRecord::yes) read_egg_rows(out, path, name);
  return out;
}

}  // namespace cudafix::resolver::inline env
