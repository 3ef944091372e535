#include "rules/checks/context.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;

bool rule_wanted(const DoctorOptions& options, std::string_view id) {
  if (!options.select.empty() && std::find(options.select.begin(), options.select.end(), id) == options.select.end())
    return false;
  if (std::find(options.ignore.begin(), options.ignore.end(), id) != options.ignore.end()) return false;
  const auto it = options.settings.find(std::string(id));
  return it == options.settings.end() || it->second.enabled;
}

namespace {

// A script path of Debian's package build in a RECORD of its system dist-packages
// (<prefix>/lib/python3/dist-packages): `../scripts/pip`, `scripts-3.10/distro`.
std::optional<std::string> debian_build_script(const r::DistInfo& d, const std::string& path) {
  if (!d.site_dir.ends_with("/lib/python3/dist-packages")) return std::nullopt;
  const std::string folder = r::parent_dir(path);
  const std::string scripts = r::parent_dir(d.site_dir) + "/scripts";  // ../scripts
  const bool build_dir =
      folder == scripts || (r::parent_dir(folder) == d.site_dir && r::base_name(folder).starts_with("scripts-3."));
  if (!build_dir) return std::nullopt;
  return std::string(r::base_name(path));
}

}  // namespace

std::vector<MissingGroup> missing_groups(const r::Environment& env) {
  std::vector<MissingGroup> out;
  for (std::size_t i = 0; i < env.dists.size(); ++i) {
    const r::DistInfo& d = env.dists[i];
    MissingGroup g{static_cast<int>(i), {}, {}, {}};
    for (const auto& p : env.missing[i]) {
      if (r::in_pycache(p)) continue;
      if (const auto script = debian_build_script(d, p)) {
        const std::string bin = r::join_normal(d.site_dir, "../../../bin/" + *script);
        std::error_code ec;
        g.moved_by_debian.emplace_back(p, std::filesystem::exists(bin, ec) ? bin : "");
        continue;
      }
      (r::looks_like_shared_object(r::base_name(p)) ? g.libraries : g.others).push_back(p);
    }
    if (!g.libraries.empty() || !g.others.empty() || !g.moved_by_debian.empty()) out.push_back(std::move(g));
  }
  return out;
}

Remedy reinstall(const r::DistInfo& d) {
  return Remedy{
      "reinstall", {d.dir_name}, fmt::format("pip install --force-reinstall --no-deps {}=={}", d.name, d.version)};
}

const r::DistInfo* installed(const r::Environment& env, const std::string& normalized) {
  const auto i = env.dist_index(normalized);
  return i ? &env.dists[static_cast<std::size_t>(*i)] : nullptr;
}

std::string without_marker(const std::string& line) {
  const auto semi = line.find(';');
  std::string s = line.substr(0, semi);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

void Context::index_sonames() {
  for (const auto& [name, family] : knowledge.families)
    for (const auto& [major, m] : family.majors)
      for (const auto& soname : m.sonames) soname_index[soname].emplace_back(&family, major);
}

const std::vector<std::pair<const r::CudaFamily*, int>>& Context::families(const std::string& soname) const {
  static const std::vector<std::pair<const r::CudaFamily*, int>> none;
  const auto it = soname_index.find(soname);
  return it == soname_index.end() ? none : it->second;
}

void Context::parse_requirements() {
  if (requirements) return;
  requirements =
      env.requirements
          ? env.requirements
          : std::make_shared<const r::ParsedRequirements>(r::parse_requirements(env, markers, options.threads));
}

std::map<std::string, int> Context::causes_by_soname() const {
  std::map<std::string, int> out;
  for (const auto& g : groups)
    if (auto it = metadata_only.find(g.dist); it != metadata_only.end() && it->second >= 0)
      for (const auto& p : g.libraries) out[std::string(r::base_name(p))] = it->second;
  return out;
}

bool Context::allowed(const std::string& rule, const std::vector<std::string>& subjects) const {
  const auto it = options.settings.find(rule);
  if (it == options.settings.end()) return false;
  for (const auto& a : it->second.allow)
    for (const auto& s : subjects)
      if (s == a) return true;
  return false;
}

void name_soname_consumers(const Context& c, Finding& f, const std::string& soname,
                           const std::vector<std::string>& consumers, const std::set<std::string>& dists,
                           const std::map<std::string, int>& causes, std::size_t evidence_limit) {
  for (std::size_t i = 0; i < consumers.size() && i < evidence_limit; ++i)
    f.evidence.push_back(fmt::format("needed by {}", c.env.display(consumers[i])));
  if (consumers.size() > evidence_limit)
    f.evidence.push_back(fmt::format("... and {} more", consumers.size() - evidence_limit));
  f.paths.insert(f.paths.begin(), consumers.begin(), consumers.end());
  f.sonames = {soname};
  f.dists.assign(dists.begin(), dists.end());
  if (auto it = causes.find(soname); it != causes.end()) f.caused_by = {it->second};
  f.remedy = Remedy{"fix-plan", {}, fmt::format("cudafix why {}", soname)};
}

int Context::add(Finding f) {
  if (!rule_wanted(options, f.rule)) return -1;
  std::vector<std::string> subjects = f.sonames;
  for (const auto& p : f.paths) subjects.push_back(env.display(p));
  for (const auto& d : f.dists) subjects.push_back(d);
  for (const auto& d : f.dists) {
    const auto dash = d.find('-');
    subjects.push_back(r::normalize_name(d.substr(0, dash)));
  }
  if (allowed(f.rule, subjects)) return -1;
  if (auto it = options.settings.find(f.rule); it != options.settings.end() && it->second.severity)
    f.severity = *it->second.severity;
  f.id = static_cast<int>(found.size());
  found.push_back(std::move(f));
  return found.back().id;
}

std::vector<std::size_t> lines_of_extra(const Context& c, const r::DistInfo& dist, const std::string& extra) {
  r::MarkerEnvironment env = c.markers;
  env["extra"] = extra;
  std::vector<std::size_t> out;
  const auto& lines = c.requirements->lines[c.index_of(dist)];
  for (std::size_t k = 0; k < lines.size(); ++k) {
    if (!lines[k].req) continue;  // reported as invalid-metadata by the requirement check
    const auto& marker = lines[k].req->marker;
    if (marker && marker->mentions_extra() && marker->evaluate(env).value_or(false)) out.push_back(k);
  }
  return out;
}

}  // namespace cudafix::rules::checks

namespace cudafix::rules::checks {

const std::vector<resolver::Drift>& Context::drift() {
  if (!drift_found)
    drift_found = options.lock ? resolver::lock_drift(env, *options.lock, markers, options.threads)
                               : std::vector<resolver::Drift>{};
  return *drift_found;
}

Finding drift_finding(const Context& c, const resolver::Drift& d, std::string_view rule, Severity severity) {
  Finding f;
  f.rule = std::string(rule);
  f.severity = severity;
  f.message = d.message;
  if (!d.locked.empty()) f.evidence.push_back("locked: " + d.locked);
  if (!d.found.empty()) f.evidence.push_back("found: " + d.found);
  f.evidence.push_back("lock: " + c.options.lock_file);
  if (d.dist) {
    const resolver::DistInfo& dist = c.env.dists[static_cast<std::size_t>(*d.dist)];
    f.dists = {dist.dir_name};
    for (const auto& p : d.files)
      f.paths.push_back(resolver::is_clean_relative(p) ? resolver::join_normal(dist.site_dir, p) : p);
  } else {
    for (const auto& p : d.files)
      f.paths.push_back(resolver::is_clean_relative(p) && !c.env.layout.sites.empty()
                            ? resolver::join_normal(c.env.layout.sites.front().real, p)
                            : p);
  }
  if (d.soname) f.sonames = {*d.soname};
  f.remedy = Remedy{"sync", {}, "cudafix sync " + c.options.lock_file};
  return f;
}

}  // namespace cudafix::rules::checks
