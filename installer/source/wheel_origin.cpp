#include "installer/source/wheel_origin.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>

#include "installer/source/find_links.hpp"
#include "installer/source/index.hpp"
#include "installer/wheel/read.hpp"
#include "resolver/base/text.hpp"
#include "resolver/pep/pep440.hpp"
#include "resolver/pep/wheel_name.hpp"

namespace cudafix::installer::source {
namespace r = cudafix::resolver;

namespace {

// A wheel file name of the dist's project and version whose tags are the ones its WHEEL file
// lists (any, where it lists none).
bool names_the_dist(const r::WheelName& w, const r::DistInfo& d) {
  if (w.normalized != d.normalized || !r::same_version(w.version, d.version)) return false;
  if (d.wheel_tags.empty()) return true;
  const std::set<std::string> want(d.wheel_tags.begin(), d.wheel_tags.end());
  const std::set<std::string> have(w.tags.begin(), w.tags.end());
  return want == have;
}

// Every row of the wheel inside the site folder and outside its dist-info is one the installed
// RECORD lists with the same hash: the dist was installed from this wheel.
bool record_matches(const r::Wheel& w, const r::DistInfo& d) {
  std::unordered_map<std::string_view, const r::RecordRow*> installed;
  for (const auto& row : d.record) installed.emplace(row.path, &row);
  const std::string own = w.dist_info + "/";
  const std::string data = w.dist_info.substr(0, w.dist_info.size() - std::string_view(".dist-info").size()) + ".data/";
  std::size_t compared = 0;
  for (const auto& row : w.record.rows) {
    if (row.path.starts_with(own) || row.path.starts_with(data)) continue;
    const auto it = installed.find(row.path);
    if (it == installed.end() || it->second->hash != row.hash || it->second->hash_algo() != row.hash_algo())
      return false;
    ++compared;
  }
  return compared > 0 || w.record.rows.size() == d.record.size();
}

// direct_url.json: a .whl with the sha256 archive_info gives; or, where it gives none (pip before
// 23.1 wrote none for a local file), the file:// URL's wheel when it is still there, read and
// confirmed by its RECORD as a --find-links wheel is.
std::optional<r::WheelOrigin> direct_origin(const r::DistInfo& d, const std::vector<std::string>& tags,
                                            std::vector<std::string>& problems) {
  if (!d.direct_url) return std::nullopt;
  const auto name = file_name_in_url(*d.direct_url);
  if (!name || !name->ends_with(".whl")) return std::nullopt;
  const auto parsed = r::parse_wheel_name(*name);
  if (!parsed || parsed->normalized != d.normalized) return std::nullopt;
  if (d.direct_url_sha256)
    return r::WheelOrigin{*name,        redact(*d.direct_url), std::nullopt, *d.direct_url_sha256,
                          std::nullopt, "direct_url.json"};
  if (!d.direct_url->starts_with("file:///")) return std::nullopt;
  const std::string path = percent_decoded(std::string_view(*d.direct_url).substr(7));
  if (path.find('\0') != std::string::npos || ::access(path.c_str(), R_OK) != 0) return std::nullopt;
  try {
    const r::Wheel w = read_wheel(path, tags);
    if (w.sha256.empty() || !names_the_dist(w.wheel_name, d) || !record_matches(w, d)) return std::nullopt;
    return r::WheelOrigin{*name,    *d.direct_url, std::nullopt,
                          w.sha256, std::nullopt,  "direct_url.json (its file, hashed)"};
  } catch (const r::Error& e) {
    problems.push_back(e.what());
    return std::nullopt;
  }
}

// The folders of cudafix's content-addressed cache (<cache>/wheels/<sha256>/).
std::vector<std::string> cache_folders(const std::string& cache_dir) {
  std::vector<std::string> out;
  if (cache_dir.empty()) return out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(cache_dir + "/wheels", ec), end; !ec && it != end; it.increment(ec))
    if (!it->path().filename().string().starts_with(".") && it->is_directory(ec)) out.push_back(it->path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The first wheel among `found` that the dist was installed from.
std::optional<r::WheelOrigin> local_origin(const r::DistInfo& d, const std::vector<r::Wheel>& found,
                                           const std::string& how) {
  for (const auto& w : found)
    if (!w.sha256.empty() && names_the_dist(w.wheel_name, d) && record_matches(w, d))
      return r::WheelOrigin{std::string(r::base_name(w.file)), std::nullopt, w.file, w.sha256, std::nullopt, how};
  return std::nullopt;
}

void from_folders(const r::Environment& env, const std::vector<std::string>& folders, const std::string& how,
                  const std::vector<std::string>& tags, Origins& out) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < env.dists.size(); ++i)
    if (!out.by_dist[i]) names.insert(env.dists[i].normalized);
  if (names.empty() || folders.empty()) return;
  FoundWheels found;
  try {
    found = find_wheels(folders, tags, &names);
  } catch (const r::Error& e) {
    out.problems.push_back(e.what());
    return;
  }
  for (const auto& diag : found.diagnostics) out.problems.push_back(diag.to_string());
  for (std::size_t i = 0; i < env.dists.size(); ++i)
    if (!out.by_dist[i]) out.by_dist[i] = local_origin(env.dists[i], found.wheels, how);
}

// The index: each dist still without an origin, by its project page.
void from_indexes(const r::Environment& env, const OriginSettings& s, Origins& out) {
  std::vector<HttpRequest> pages;
  std::vector<std::pair<std::size_t, std::string>> whose;
  for (std::size_t i = 0; i < env.dists.size(); ++i) {
    if (out.by_dist[i] || env.dists[i].root == r::SiteRoot::system) continue;
    for (const auto& index : s.index_urls) {
      HttpRequest req;
      req.url = project_url(index, env.dists[i].normalized);
      req.accept = k_simple_accept;
      pages.push_back(std::move(req));
      whose.emplace_back(i, index);
    }
  }
  if (pages.empty()) return;
  HttpClient http(s.http);
  const auto answers = http.perform(pages);
  for (std::size_t k = 0; k < answers.size(); ++k) {
    const auto& [i, index] = whose[k];
    if (out.by_dist[i] || !answers[k].ok()) continue;
    try {
      const auto page = parse_project_page(answers[k].body, answers[k].content_type, pages[k].url);
      for (const auto& f : page.files) {
        const auto w = r::parse_wheel_name(f.filename);
        if (!w || f.sha256.empty() || !names_the_dist(*w, env.dists[i])) continue;
        out.by_dist[i] =
            r::WheelOrigin{f.filename, redact(f.url), std::nullopt, f.sha256, redact(index), "index " + redact(index)};
        break;
      }
    } catch (const r::Error& e) {
      out.problems.push_back(e.what());
    }
  }
}

}  // namespace

Origins find_origins(const r::Environment& env, const OriginSettings& s) {
  Origins out;
  out.by_dist.resize(env.dists.size());
  for (std::size_t i = 0; i < env.dists.size(); ++i)
    out.by_dist[i] = direct_origin(env.dists[i], s.supported_tags, out.problems);
  from_folders(env, cache_folders(s.cache_dir), "cudafix cache " + s.cache_dir + "/wheels", s.supported_tags, out);
  for (const auto& folder : s.find_links) from_folders(env, {folder}, "--find-links " + folder, s.supported_tags, out);
  if (!s.offline && !s.index_urls.empty()) from_indexes(env, s, out);
  return out;
}

}  // namespace cudafix::installer::source
