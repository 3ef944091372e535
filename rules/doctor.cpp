#include "rules/doctor.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <sys/stat.h>
#include <algorithm>
#include <atomic>
#include <set>
#include <unordered_map>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/requirements.hpp"
#include "resolver/env/unresolved.hpp"
#include "resolver/pep/pep508.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/knowledge.hpp"

namespace cudafix::rules {
namespace r = cudafix::resolver;

std::string_view to_string(Severity s) {
  switch (s) {
    case Severity::error:
      return "error";
    case Severity::warning:
      return "warning";
    case Severity::info:
      return "info";
  }
  return "error";
}

std::optional<Severity> severity_from(std::string_view s) {
  if (s == "error") return Severity::error;
  if (s == "warning") return Severity::warning;
  if (s == "info") return Severity::info;
  return std::nullopt;
}

const std::vector<std::string>& rule_ids() {
  static const std::vector<std::string> ids = {
      "shared-path",        "missing-files",    "metadata-only",          "mixed-cuda-major",
      "unresolved-library", "shadowed-library", "missing-dlopen-library", "unsatisfied-requirement",
      "unsatisfied-extra",  "duplicate-dist",   "hash-mismatch",          "invalid-metadata"};
  return ids;
}

namespace {

bool rule_wanted(const DoctorOptions& options, const std::string& id) {
  if (!options.select.empty() && std::find(options.select.begin(), options.select.end(), id) == options.select.end())
    return false;
  if (std::find(options.ignore.begin(), options.ignore.end(), id) != options.ignore.end()) return false;
  const auto it = options.settings.find(id);
  return it == options.settings.end() || it->second.enabled;
}

// Reinstalling a dist as it is: what brings back files it lists.
Remedy reinstall(const r::DistInfo& d) {
  return Remedy{
      "reinstall", {d.dir_name}, fmt::format("pip install --force-reinstall --no-deps {}=={}", d.name, d.version)};
}

struct Context {
  const r::Environment& env;
  const r::Knowledge& knowledge;
  const DoctorOptions& options;
  r::MarkerEnvironment markers;
  std::vector<Finding> found;
  // Every dist's Requires-Dist, parsed once (in parallel) for both requirement rules.
  std::shared_ptr<const r::ParsedRequirements> requirements;
  // soname -> the families and majors that ship it (libcudnn.so.9: cudnn 12 and 13); asked once
  // per NEEDED of every object, so indexed once here.
  std::unordered_map<std::string, std::vector<std::pair<const r::CudaFamily*, int>>> soname_index;

  void index_sonames() {
    for (const auto& [name, family] : knowledge.families)
      for (const auto& [major, m] : family.majors)
        for (const auto& soname : m.sonames) soname_index[soname].emplace_back(&family, major);
  }
  [[nodiscard]] const std::vector<std::pair<const r::CudaFamily*, int>>& families(const std::string& soname) const {
    static const std::vector<std::pair<const r::CudaFamily*, int>> none;
    const auto it = soname_index.find(soname);
    return it == soname_index.end() ? none : it->second;
  }
  [[nodiscard]] bool is_cuda(const std::string& soname) const { return soname_index.count(soname) > 0; }

  // The scan's, when it parsed them while modelling the libraries.
  void parse_requirements() {
    if (requirements) return;
    requirements =
        env.requirements
            ? env.requirements
            : std::make_shared<const r::ParsedRequirements>(r::parse_requirements(env, markers, options.threads));
  }
  [[nodiscard]] std::size_t index_of(const r::DistInfo& d) const {
    return static_cast<std::size_t>(&d - env.dists.data());
  }

  [[nodiscard]] bool allowed(const std::string& rule, const std::vector<std::string>& subjects) const {
    const auto it = options.settings.find(rule);
    if (it == options.settings.end()) return false;
    for (const auto& a : it->second.allow)
      for (const auto& s : subjects)
        if (s == a) return true;
    return false;
  }

  // Adds a finding of a rule that is to run and not allowed for its subject; returns its id, or
  // -1 when it was left out.
  int add(Finding f) {
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
};

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

// ---- unsatisfied-requirement: exactly pip check's verdicts ------------------------------

void check_requirements(Context& c) {
  c.parse_requirements();
  for (const auto* d : r::visible_dists(c.env)) {
    const auto& lines = c.requirements->lines[c.index_of(*d)];
    for (std::size_t k = 0; k < lines.size(); ++k) {
      const std::string& line = d->metadata.requires_dist[k];
      const auto& parsed = lines[k];
      if (!parsed.req) {
        Finding f;
        f.rule = "invalid-metadata";
        f.severity = Severity::warning;
        f.message = fmt::format("{}: Requires-Dist '{}' is not a PEP 508 requirement", r::dist_label(*d), line);
        f.evidence = {parsed.error};
        f.dists = {d->dir_name};
        c.add(std::move(f));
        continue;
      }
      if (!parsed.applies) continue;
      const r::Requirement& req = *parsed.req;
      const r::DistInfo* dep = installed(c.env, req.normalized);
      Finding f;
      f.rule = "unsatisfied-requirement";
      f.severity = Severity::error;
      f.dists = {d->dir_name};
      if (!dep) {
        f.message = fmt::format("{} requires {}, which is not installed", r::dist_label(*d), line);
        f.remedy = Remedy{"install", {req.name}, fmt::format("pip install '{}'", without_marker(line))};
        c.add(std::move(f));
        continue;
      }
      const auto& version = c.requirements->versions[c.index_of(*dep)];
      if (!version || req.specifier.contains(*version, true)) continue;
      f.message =
          fmt::format("{} has requirement {}, but you have {} {}", r::dist_label(*d), line, dep->name, dep->version);
      f.dists.push_back(dep->dir_name);
      f.remedy = Remedy{"install", {dep->name}, "cudafix plan fix"};
      c.add(std::move(f));
    }
  }
}

// ---- unsatisfied-extra: the extras chains pip check does not follow ----------------------

// The Requires-Dist lines (indexes) that asking `dist` for `extra` adds: those whose marker
// mentions an extra and holds with this one.
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

void follow_extra(Context& c, const r::DistInfo& root, const std::string& chain, const r::DistInfo& dist,
                  const std::string& extra, std::set<std::pair<std::string, std::string>>& seen) {
  if (!seen.insert({dist.normalized, extra}).second) return;
  const bool declared = std::any_of(dist.metadata.provides_extra.begin(), dist.metadata.provides_extra.end(),
                                    [&](const std::string& e) { return r::normalize_name(e) == extra; });
  auto report = [&](std::string message, std::vector<std::string> dists) {
    Finding f;
    f.rule = "unsatisfied-extra";
    f.severity = Severity::warning;
    f.message = std::move(message);
    f.evidence = {fmt::format("chain: {}", chain)};
    f.dists = std::move(dists);
    f.remedy = Remedy{"install", {dist.name}, "cudafix plan fix"};
    c.add(std::move(f));
  };
  if (!declared) {
    report(fmt::format("{} asks for {}[{}], but {} has no extra '{}'", r::dist_label(root), dist.name, extra,
                       r::dist_label(dist), extra),
           {root.dir_name, dist.dir_name});
    return;
  }
  for (const std::size_t k : lines_of_extra(c, dist, extra)) {
    const r::Requirement& req = *c.requirements->lines[c.index_of(dist)][k].req;
    const std::string& line = dist.metadata.requires_dist[k];
    const std::string link = fmt::format("{} -> {}", chain, without_marker(line));
    const r::DistInfo* dep = installed(c.env, req.normalized);
    if (!dep) {
      report(fmt::format("{} needs {} through {}[{}], and {} is not installed", r::dist_label(root),
                         without_marker(line), dist.name, extra, req.name),
             {root.dir_name, dist.dir_name});
      continue;
    }
    const auto& version = c.requirements->versions[c.index_of(*dep)];
    if (version && !req.specifier.contains(*version, true)) {
      report(fmt::format("{} needs {} through {}[{}], but {} {} is installed", r::dist_label(root),
                         without_marker(line), dist.name, extra, dep->name, dep->version),
             {root.dir_name, dist.dir_name, dep->dir_name});
      continue;
    }
    for (const auto& e : req.extras) follow_extra(c, root, link, *dep, e, seen);
  }
}

void check_extras(Context& c) {
  c.parse_requirements();
  for (const auto* d : r::visible_dists(c.env)) {
    const auto& lines = c.requirements->lines[c.index_of(*d)];
    for (std::size_t k = 0; k < lines.size(); ++k) {
      if (!lines[k].req || !lines[k].applies || lines[k].req->extras.empty()) continue;
      const r::Requirement& req = *lines[k].req;
      const std::string& line = d->metadata.requires_dist[k];
      const r::DistInfo* dep = installed(c.env, req.normalized);
      if (!dep) continue;  // unsatisfied-requirement says so
      std::set<std::pair<std::string, std::string>> seen;
      for (const auto& e : req.extras)
        follow_extra(c, *d, fmt::format("{} -> {}", d->name, without_marker(line)), *dep, e, seen);
    }
  }
}

// ---- duplicate-dist -----------------------------------------------------------------------

void check_duplicates(Context& c) {
  std::map<std::string, std::vector<const r::DistInfo*>> by_name;
  for (const auto& d : c.env.dists)
    if (d.root != r::SiteRoot::system) by_name[d.normalized].push_back(&d);
  for (const auto& [name, dists] : by_name) {
    if (dists.size() < 2) continue;
    Finding f;
    f.rule = "duplicate-dist";
    f.severity = Severity::error;
    std::vector<std::string> labels;
    for (const auto* d : dists) {
      f.dists.push_back(d->dir_name);
      labels.push_back(fmt::format("{} in {}", d->dir_name, c.env.display(d->site_dir)));
    }
    f.message = fmt::format(
        "{} is installed {} times: {}; pip and importlib see only the first, and uninstalling "
        "deletes files the other still lists",
        name, dists.size(), fmt::join(labels, ", "));
    f.remedy = Remedy{"remove", f.dists, fmt::format("cudafix plan remove {}", dists.back()->dir_name)};
    c.add(std::move(f));
  }
}

// ---- missing-files and metadata-only ------------------------------------------------------

struct MissingGroup {
  int dist;
  std::vector<std::string> libraries, others;
};

std::vector<MissingGroup> missing_groups(const r::Environment& env) {
  std::vector<MissingGroup> out;
  for (std::size_t i = 0; i < env.dists.size(); ++i) {
    MissingGroup g{static_cast<int>(i), {}, {}};
    for (const auto& p : env.missing[i]) {
      if (r::in_pycache(p)) continue;
      (r::looks_like_shared_object(r::base_name(p)) ? g.libraries : g.others).push_back(p);
    }
    if (!g.libraries.empty() || !g.others.empty()) out.push_back(std::move(g));
  }
  return out;
}

std::size_t listed_libraries(const r::DistInfo& d) {
  return static_cast<std::size_t>(std::count_if(d.record.begin(), d.record.end(), [](const r::RecordRow& row) {
    return r::looks_like_shared_object(r::base_name(row.path));
  }));
}

// Whether the RECORD lists anything besides the dist-info folder's own files.
bool has_payload(const r::DistInfo& d) {
  return std::any_of(d.record.begin(), d.record.end(), [&](const r::RecordRow& row) {
    return row.path.substr(0, d.dir_name.size() + 1) != d.dir_name + "/";
  });
}

// Returns, per dist, the id of its metadata-only finding (for caused_by).
std::map<int, int> check_metadata_only(Context& c, const std::vector<MissingGroup>& groups, bool report) {
  std::map<int, int> ids;
  for (const auto& g : groups) {
    const auto& d = c.env.dists[static_cast<std::size_t>(g.dist)];
    if (!r::is_cuda_provider(c.knowledge, d) || g.libraries.empty() || g.libraries.size() < listed_libraries(d))
      continue;
    if (!report) continue;
    Finding f;
    f.rule = "metadata-only";
    f.severity = Severity::error;
    f.message = fmt::format(
        "{} is installed but {} gone: pip still counts it as installed and will skip `pip install` of it as "
        "already satisfied",
        r::dist_label(d),
        g.libraries.size() == 1 ? std::string("its only library is")
                                : fmt::format("all {} of its libraries are", g.libraries.size()));
    for (const auto& p : g.libraries) f.evidence.push_back(fmt::format("missing: {}", c.env.display(p)));
    f.dists = {d.dir_name};
    f.paths = g.libraries;
    f.remedy = reinstall(d);
    f.remedy->command += "   (or: cudafix plan fix)";
    ids[g.dist] = c.add(std::move(f));
  }
  if (!report) return ids;
  // Dists with no files but their dist-info: a meta package by design (cuda-toolkit, whose
  // extras pull the real wheels), or an nvidia placeholder (0.0.x) that stands in for one.
  for (const auto* d : r::visible_dists(c.env)) {
    if (has_payload(*d)) continue;
    Finding f;
    f.rule = "metadata-only";
    f.dists = {d->dir_name};
    const auto& meta = c.knowledge.meta_packages;
    if (std::find(meta.begin(), meta.end(), d->normalized) != meta.end()) {
      f.severity = Severity::info;
      f.message = fmt::format("{} has no files by design: a meta package whose extras pull in the real wheels",
                              r::dist_label(*d));
    } else if (d->normalized.rfind("nvidia-", 0) == 0 && d->version.rfind("0.0.", 0) == 0) {
      f.severity = Severity::warning;
      f.message = fmt::format("{} is a placeholder wheel with no files: the real package was never installed",
                              r::dist_label(*d));
    } else {
      continue;
    }
    c.add(std::move(f));
  }
  return ids;
}

void check_missing(Context& c, const std::vector<MissingGroup>& groups, const std::map<int, int>& metadata_only) {
  for (const auto& g : groups) {
    const auto& d = c.env.dists[static_cast<std::size_t>(g.dist)];
    for (const bool libs : {true, false}) {
      const auto& paths = libs ? g.libraries : g.others;
      if (paths.empty()) continue;
      Finding f;
      f.rule = "missing-files";
      f.severity = libs ? Severity::error : Severity::warning;
      const bool one = paths.size() == 1;
      f.message = fmt::format("{} lists {} {} that {} not on disk", r::dist_label(d), paths.size(),
                              libs ? (one ? "shared object" : "shared objects") : (one ? "other file" : "other files"),
                              one ? "is" : "are");
      for (std::size_t i = 0; i < paths.size() && i < 20; ++i) f.evidence.push_back(c.env.display(paths[i]));
      if (paths.size() > 20) f.evidence.push_back(fmt::format("... and {} more", paths.size() - 20));
      f.dists = {d.dir_name};
      f.paths = paths;
      if (auto it = metadata_only.find(g.dist); it != metadata_only.end() && it->second >= 0)
        f.caused_by = {it->second};
      f.remedy = reinstall(d);
      c.add(std::move(f));
    }
  }
}

// ---- shared-path --------------------------------------------------------------------------

void check_shared_paths(Context& c) {
  // One finding per set of owners, listing every path they share.
  std::map<std::vector<int>, std::vector<std::string>> by_owners;
  for (auto& [path, owners] : c.env.shared_paths()) {
    if (r::in_pycache(path)) continue;
    by_owners[owners].push_back(path);
  }
  for (const auto& [owners, paths] : by_owners) {
    Finding f;
    f.rule = "shared-path";
    std::vector<std::string> labels;
    std::set<int> majors;
    for (int o : owners) {
      const auto& d = c.env.dists[static_cast<std::size_t>(o)];
      f.dists.push_back(d.dir_name);
      labels.push_back(r::dist_label(d));
      if (auto m = r::major_of_dist(c.knowledge, d)) majors.insert(*m);
    }
    bool libraries = false, differ = false, harmless = true;
    for (const auto& p : paths) {
      const auto base = r::base_name(p);
      libraries = libraries || r::looks_like_shared_object(base);
      const auto& known = c.knowledge.harmless_shared_paths;
      harmless = harmless && std::find(known.begin(), known.end(), c.env.display(p)) != known.end();
      std::set<std::string> recorded;
      for (int o : owners)
        if (const auto* row = r::row_for(c.env.dists[static_cast<std::size_t>(o)], p))
          recorded.insert(fmt::format("{}/{}", row->hash, row->size_value));
      std::vector<std::string> whose;
      for (int o : r::whose_bytes(c.env, p, owners)) whose.push_back(c.env.dists[static_cast<std::size_t>(o)].name);
      differ = differ || recorded.size() > 1;
      if (f.evidence.size() < 12)
        f.evidence.push_back(fmt::format("{}: bytes on disk are {}", c.env.display(p),
                                         whose.empty() ? std::string("no owner's (neither size nor hash matches)")
                                                       : fmt::format("{}'s", fmt::join(whose, "'s and "))));
    }
    if (paths.size() > 12) f.evidence.push_back(fmt::format("... and {} more shared paths", paths.size() - 12));
    for (int o : owners) {
      const auto& d = c.env.dists[static_cast<std::size_t>(o)];
      std::vector<std::string> left;
      for (int other : owners)
        if (other != o) left.push_back(c.env.dists[static_cast<std::size_t>(other)].name);
      f.evidence.push_back(fmt::format("`pip uninstall {}` would delete all {} shared paths, leaving {} without them",
                                       d.name, paths.size(), fmt::join(left, ", ")));
    }
    const bool majors_differ = majors.size() > 1;
    f.severity = harmless                                 ? Severity::info
                 : libraries && (differ || majors_differ) ? Severity::error
                                                          : Severity::warning;
    f.message = fmt::format("{} {}{} {} written by both {}{}", paths.size(), paths.size() == 1 ? "path" : "paths",
                            libraries ? " (shared objects among them)" : "", paths.size() == 1 ? "is" : "are",
                            fmt::join(labels, " and "),
                            harmless        ? ": known harmless"
                            : majors_differ ? fmt::format(", wheels of CUDA {}", fmt::join(majors, " and "))
                            : differ        ? ", with different contents"
                                            : ", with the same contents");
    f.paths = paths;
    f.remedy = Remedy{"remove",
                      {f.dists.front()},
                      fmt::format("cudafix plan remove {}   (what removing one owner would break)",
                                  c.env.dists[static_cast<std::size_t>(owners.front())].name)};
    c.add(std::move(f));
  }
}

// ---- unresolved-library -------------------------------------------------------------------

// Sonames whose provider was a library a metadata-only dist lost: the cause to point at.
std::map<std::string, int> causes_by_soname(const std::vector<MissingGroup>& groups,
                                            const std::map<int, int>& metadata_only) {
  std::map<std::string, int> out;
  for (const auto& g : groups)
    if (auto it = metadata_only.find(g.dist); it != metadata_only.end() && it->second >= 0)
      for (const auto& p : g.libraries) out[std::string(r::base_name(p))] = it->second;
  return out;
}

void check_unresolved(Context& c, const std::vector<MissingGroup>& groups, const std::map<int, int>& metadata_only) {
  const auto cause_by_soname = causes_by_soname(groups, metadata_only);

  struct Group {
    r::UnresolvedKind kind;
    std::string text;
    std::vector<std::string> consumers;
    std::set<std::string> dists;
  };
  std::map<std::pair<std::string, int>, Group> groups_by;
  for (const auto& o : c.env.objects) {
    for (const auto& res : o.resolutions) {
      if (res.found()) continue;
      const auto e = r::explain_unresolved(c.env, c.knowledge, o, res);
      auto& g = groups_by[{res.name, static_cast<int>(e.kind)}];
      g.kind = e.kind;
      if (g.text.empty()) g.text = e.text;
      g.consumers.push_back(o.path);
      for (int owner : o.owners) g.dists.insert(c.env.dists[static_cast<std::size_t>(owner)].dir_name);
    }
  }
  for (auto& [key, g] : groups_by) {
    const std::string& soname = key.first;
    Finding f;
    f.rule = "unresolved-library";
    switch (g.kind) {
      case r::UnresolvedKind::driver_library:
      case r::UnresolvedKind::earlier_import:
      case r::UnresolvedKind::loaded_by_sibling:
        f.severity = Severity::info;
        break;
      case r::UnresolvedKind::optional_library:
      case r::UnresolvedKind::stale_build_path:
        f.severity = Severity::warning;
        break;
      case r::UnresolvedKind::unexplained:
        f.severity = c.is_cuda(soname) ? Severity::error : Severity::warning;
        break;
    }
    f.message = fmt::format("{} resolves nowhere for {} object{} ({}): {}", soname, g.consumers.size(),
                            g.consumers.size() == 1 ? "" : "s", r::to_string(g.kind), g.text);
    for (std::size_t i = 0; i < g.consumers.size() && i < 8; ++i)
      f.evidence.push_back(fmt::format("needed by {}", c.env.display(g.consumers[i])));
    if (g.consumers.size() > 8) f.evidence.push_back(fmt::format("... and {} more", g.consumers.size() - 8));
    f.paths = g.consumers;
    f.sonames = {soname};
    f.dists.assign(g.dists.begin(), g.dists.end());
    if (auto it = cause_by_soname.find(soname); it != cause_by_soname.end()) f.caused_by = {it->second};
    f.remedy = Remedy{"fix-plan", {}, fmt::format("cudafix why {}", soname)};
    c.add(std::move(f));
  }
}

// ---- mixed-cuda-major ---------------------------------------------------------------------

// The majors an object's NEEDED name unambiguously (libcudart.so.13: 13; libcudnn.so.9: none).
std::set<int> majors_needed(const Context& c, const r::SharedObject& o) {
  std::set<int> out;
  if (o.elf.status != r::ElfReadStatus::ok) return out;
  for (const auto& name : o.elf.info.needed) {
    std::set<int> majors;
    for (const auto& [family, major] : c.families(name)) majors.insert(major);
    if (majors.size() == 1) out.insert(*majors.begin());
  }
  return out;
}

void check_mixed_majors(Context& c) {
  std::set<int> needed_anywhere;
  std::set<int> provider_dists_used;  // dists whose files some object resolves to
  for (const auto& o : c.env.objects) {
    const auto needed = majors_needed(c, o);
    needed_anywhere.insert(needed.begin(), needed.end());
    std::vector<std::string> mismatches;
    std::set<int> loaded;
    for (const auto& res : o.resolutions) {
      if (!res.found() || !c.is_cuda(res.name)) continue;
      for (int owner : c.env.owners_of(*res.path)) provider_dists_used.insert(owner);
      if (!c.env.site_of(*res.path)) continue;
      int whose = -1;
      const auto major = r::major_of_file(c.env, c.knowledge, *res.path, &whose);
      if (!major) continue;
      loaded.insert(*major);
      if (!needed.empty() && !needed.count(*major))
        mismatches.push_back(fmt::format(
            "{} => {} ({}, CUDA {})", res.name, c.env.display(*res.path),
            whose < 0 ? "no dist" : r::dist_label(c.env.dists[static_cast<std::size_t>(whose)]) + "'s bytes", *major));
    }
    if (needed.size() < 2 && mismatches.empty() && loaded.size() < 2) continue;
    Finding f;
    f.rule = "mixed-cuda-major";
    f.severity = Severity::error;
    f.message =
        needed.size() > 1
            ? fmt::format("{} needs two CUDA majors at once ({})", c.env.display(o.path), fmt::join(needed, " and "))
        : !needed.empty()
            ? fmt::format("{} needs CUDA {} but loads libraries of another major", c.env.display(o.path),
                          *needed.begin())
            : fmt::format("{} would load libraries of CUDA {}", c.env.display(o.path), fmt::join(loaded, " and "));
    f.evidence = mismatches;
    f.paths = {o.path};
    for (int owner : o.owners) f.dists.push_back(c.env.dists[static_cast<std::size_t>(owner)].dir_name);
    f.remedy = Remedy{"fix-plan", {}, "cudafix plan fix"};
    c.add(std::move(f));
  }
  // Providers of a major nothing needs, whose libraries nothing loads.
  for (std::size_t i = 0; i < c.env.dists.size(); ++i) {
    const auto& d = c.env.dists[i];
    const auto fam = c.knowledge.family_of_dist(d.normalized);
    if (!fam || needed_anywhere.empty() || needed_anywhere.count(fam->second) ||
        provider_dists_used.count(static_cast<int>(i)))
      continue;
    Finding f;
    f.rule = "mixed-cuda-major";
    f.severity = Severity::warning;
    f.message = fmt::format("{} provides {} for CUDA {}, which nothing in the environment needs (it needs CUDA {})",
                            r::dist_label(d), fam->first->name, fam->second, fmt::join(needed_anywhere, " and "));
    f.dists = {d.dir_name};
    f.remedy = Remedy{"remove", {d.dir_name}, fmt::format("cudafix plan remove {}", d.name)};
    c.add(std::move(f));
  }
}

// ---- shadowed-library ---------------------------------------------------------------------

// A dist's way to a dist it depends on: a requirement of its own, or else one an extra it asks
// for brings in (torch -> cuda-toolkit[nvrtc] -> nvidia-cuda-nvrtc).
struct Route {
  std::string chain;           // "torch requires cuda-toolkit[nvrtc]==13.0.2 -> nvidia-cuda-nvrtc==13.0.88.*"
  const r::Requirement* last;  // the requirement that names the dist at the end
};

void add_routes_through_extras(const Context& c, const r::Requirement& req, const std::string& chain,
                               std::set<std::pair<std::string, std::string>>& seen, std::vector<Route>& out) {
  const r::DistInfo* dep = installed(c.env, req.normalized);
  if (!dep) return;
  for (const auto& extra : req.extras) {
    if (!seen.insert({dep->normalized, extra}).second) continue;
    for (const std::size_t k : lines_of_extra(c, *dep, extra)) {
      const r::Requirement& next = *c.requirements->lines[c.index_of(*dep)][k].req;
      out.push_back({fmt::format("{} -> {}", chain, without_marker(dep->metadata.requires_dist[k])), &next});
      add_routes_through_extras(c, next, out.back().chain, seen, out);
    }
  }
}

std::vector<Route> routes_from(const Context& c, const r::DistInfo& dist) {
  std::vector<Route> out;
  std::set<std::pair<std::string, std::string>> seen;
  const auto& lines = c.requirements->lines[c.index_of(dist)];
  for (std::size_t k = 0; k < lines.size(); ++k)
    if (lines[k].req && lines[k].applies)
      out.push_back(
          {fmt::format("{} requires {}", dist.name, without_marker(dist.metadata.requires_dist[k])), &*lines[k].req});
  for (std::size_t direct = out.size(), i = 0; i < direct; ++i) {
    const Route step = out[i];  // a copy: the vector grows below
    add_routes_through_extras(c, *step.last, step.chain, seen, out);
  }
  return out;
}

// The release in a library's real file name (libcublas.so.13.1.0.3 -> 13.1.0.3), or "".
std::string release_in_file_name(const std::string& real) {
  const std::string base(r::base_name(real));
  const auto so = base.find(".so.");
  const std::string version = so == std::string::npos ? "" : base.substr(so + 4);
  return version.find('.') == std::string::npos ? "" : version;
}

void check_shadowed(Context& c, const std::vector<MissingGroup>& groups, const std::map<int, int>& metadata_only) {
  c.parse_requirements();
  const auto cause_by_soname = causes_by_soname(groups, metadata_only);
  struct Group {
    std::string outside;
    std::string required;               // the route to a provider
    const r::Requirement* requirement;  // its last step
    std::vector<std::string> consumers;
    bool all_lone = true;  // no consumer is imported or NEEDed by anything: only a direct dlopen loads them
    std::set<std::string> dists;
  };
  std::map<std::string, Group> by_soname;
  std::map<int, std::vector<Route>> routes_of;  // per owner, found when first asked
  for (const auto& o : c.env.objects) {
    for (const auto& res : o.resolutions) {
      if (!res.found() || c.env.site_of(*res.path) || !c.is_cuda(res.name)) continue;
      // Does one of the consumer's dists require an in-environment provider of this soname,
      // directly or through extras?
      const auto& families = c.families(res.name);
      const Route* route = nullptr;
      for (int owner : o.owners) {
        const auto& routes = routes_of[owner];
        if (routes.empty()) routes_of[owner] = routes_from(c, c.env.dists[static_cast<std::size_t>(owner)]);
        for (const auto& candidate : routes_of[owner]) {
          const auto fam = c.knowledge.family_of_dist(candidate.last->normalized);
          for (const auto& [family, major] : families)
            if (fam && fam->first == family && !route) route = &candidate;
        }
        if (route) break;
      }
      if (!route) continue;
      auto& g = by_soname[res.name];
      g.outside = *res.path;
      g.required = route->chain;
      g.requirement = route->last;
      g.consumers.push_back(o.path);
      const bool lone = !o.entry_point && o.elf.status == r::ElfReadStatus::ok && o.elf.info.soname &&
                        c.env.consumers(*o.elf.info.soname).empty();
      g.all_lone = g.all_lone && lone;
      for (int owner : o.owners) g.dists.insert(c.env.dists[static_cast<std::size_t>(owner)].dir_name);
    }
  }
  for (auto& [soname, g] : by_soname) {
    Finding f;
    f.rule = "shadowed-library";
    const std::string real = r::real_path_of(g.outside);
    // The outside copy's release, from its real file name, against the installed provider's,
    // or, with none installed, against what the requirement asks for: the same release loaded
    // from elsewhere is a warning, another one (or one of unknown release) an error.
    const std::string file_version = release_in_file_name(real);
    const r::DistInfo* provider = installed(c.env, g.requirement->normalized);
    const bool same_release =
        provider && !file_version.empty() &&
        (provider->version == file_version || provider->version.rfind(file_version + ".", 0) == 0);
    const auto parsed = file_version.empty() ? std::nullopt : r::Version::parse(file_version);
    const bool asked_release = !provider && parsed && g.requirement->specifier.contains(*parsed, true);
    f.severity = same_release || asked_release || g.all_lone ? Severity::warning : Severity::error;
    f.message = fmt::format(
        "{} resolves outside the environment, to {}{}, though {}{}", soname, g.outside,
        real != g.outside ? fmt::format(" ({})", r::base_name(real)) : "", g.required,
        same_release    ? fmt::format(" (the same release as the installed {} {})", provider->name, provider->version)
        : provider      ? fmt::format(" ({} {} is installed)", provider->name, provider->version)
        : asked_release ? fmt::format(" ({} is not installed; the outside copy is {}, a release it allows)",
                                      g.requirement->name, file_version)
                        : fmt::format(" ({} is not installed)", g.requirement->normalized));
    if (g.all_lone)
      f.message +=
          "; nothing in the environment NEEDs or imports the object that asks for it, so only a direct dlopen of "
          "that object would load the outside copy";
    for (const auto& consumer : g.consumers) f.evidence.push_back(fmt::format("needed by {}", c.env.display(consumer)));
    f.paths = g.consumers;
    f.paths.push_back(g.outside);
    f.sonames = {soname};
    f.dists.assign(g.dists.begin(), g.dists.end());
    if (auto it = cause_by_soname.find(soname); it != cause_by_soname.end()) f.caused_by = {it->second};
    f.remedy = Remedy{"fix-plan", {}, fmt::format("cudafix why {}", soname)};
    c.add(std::move(f));
  }
}

// ---- missing-dlopen-library ---------------------------------------------------------------

// What brings back a library a dlopen needs: reinstalling the installed dist that lists it (its
// file is gone), else installing the one dist that provides it for its only CUDA major.
std::optional<Remedy> remedy_for_missing(const Context& c, const std::vector<MissingGroup>& groups,
                                         const std::string& soname) {
  for (const auto& g : groups)
    for (const auto& p : g.libraries)
      if (r::base_name(p) == soname) return reinstall(c.env.dists[static_cast<std::size_t>(g.dist)]);
  const auto& families = c.families(soname);
  if (families.size() != 1) return std::nullopt;
  const auto& m = families.front().first->majors.at(families.front().second);
  if (m.dists.empty()) return std::nullopt;
  return Remedy{"install", {}, fmt::format("pip install {}", m.dists.front())};
}

void check_dlopen(Context& c, const std::vector<MissingGroup>& missing_files, const std::map<int, int>& metadata_only) {
  const auto cause_by_soname = causes_by_soname(missing_files, metadata_only);
  std::set<std::string> loader_sonames;
  for (const auto& [name, g] : c.knowledge.dlopen) loader_sonames.insert(g.loaded_by);
  for (const auto& loader_soname : loader_sonames) {
    for (const auto* loader : c.env.providers(loader_soname)) {
      if (loader->elf.status != r::ElfReadStatus::ok || loader->elf.info.soname != loader_soname) continue;
      // One finding per group, naming the sonames of it that resolve nowhere.
      struct Group {
        const r::SonameGroup* knowledge = nullptr;
        std::vector<std::string> loads, missing;
      };
      std::map<std::string, Group> groups;
      for (const auto& d : r::resolve_dlopens(c.env, c.knowledge, *loader)) {
        auto& g = groups[d.group];
        g.knowledge = d.knowledge;
        g.loads.push_back(d.resolution.name);
        if (!d.resolution.found()) g.missing.push_back(d.resolution.name);
      }
      for (const auto& [name, g] : groups) {
        if (g.missing.empty()) continue;
        Finding f;
        f.rule = "missing-dlopen-library";
        f.severity = Severity::error;
        f.message = fmt::format("{} loads {} with dlopen at run time, and {} resolve{} nowhere ({})",
                                c.env.display(loader->path), fmt::join(g.loads, ", "), fmt::join(g.missing, ", "),
                                g.missing.size() == 1 ? "s" : "", g.knowledge->why);
        f.paths = {loader->path};
        f.sonames = g.missing;
        for (const auto& soname : g.missing)
          if (auto it = cause_by_soname.find(soname);
              it != cause_by_soname.end() &&
              std::find(f.caused_by.begin(), f.caused_by.end(), it->second) == f.caused_by.end())
            f.caused_by.push_back(it->second);
        if (!loader->owners.empty()) f.dists = {c.env.dists[static_cast<std::size_t>(loader->owners.front())].dir_name};
        // A library another dist provides (cuBLASLt, NVRTC) comes back from that dist; the
        // loader's own sub-libraries from reinstalling the loader's dist.
        f.remedy = remedy_for_missing(c, missing_files, g.missing.front());
        if (!f.remedy && !loader->owners.empty())
          f.remedy = reinstall(c.env.dists[static_cast<std::size_t>(loader->owners.front())]);
        if (f.remedy)
          for (const auto& d : f.remedy->dists)
            if (std::find(f.dists.begin(), f.dists.end(), d) == f.dists.end()) f.dists.push_back(d);
        c.add(std::move(f));
      }
    }
  }
}

// ---- invalid-metadata ---------------------------------------------------------------------

void check_invalid_metadata(Context& c) {
  std::map<std::string, std::vector<const r::Diagnostic*>> by_file;
  for (const auto& d : c.env.diagnostics) by_file[d.file].push_back(&d);
  for (const auto& [file, diags] : by_file) {
    Finding f;
    f.rule = "invalid-metadata";
    f.severity = Severity::warning;
    f.message = fmt::format("{}: {} problem{} (the scan went on)", c.env.display(file), diags.size(),
                            diags.size() == 1 ? "" : "s");
    for (const auto* d : diags) f.evidence.push_back(d->to_string());
    f.paths = {file};
    c.add(std::move(f));
  }
}

// ---- hash-mismatch ------------------------------------------------------------------------

void check_hashes(Context& c, DoctorReport& report) {
  struct Job {
    int dist;
    const r::RecordRow* row;
    std::string path;
  };
  std::vector<Job> jobs;
  std::uint64_t total_bytes = 0;
  std::string abs;
  for (std::size_t i = 0; i < c.env.dists.size(); ++i) {
    const auto& d = c.env.dists[i];
    for (const auto& row : d.record) {
      if (row.hash_algo() != "sha256" || row.hash.empty()) continue;  // rows without a hash are skipped
      r::join_normal(d.site_dir, row.path, abs);
      if (!r::is_within(abs, c.env.layout.root_real) && !c.env.site_of(abs)) continue;
      if (!c.env.present(abs)) continue;
      jobs.push_back({static_cast<int>(i), &row, abs});
      total_bytes += row.size_value;
    }
  }
  // Largest first, so one big library does not finish last on one core.
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.row->size() > b.row->size(); });
  std::vector<std::string> digests(jobs.size());
  std::atomic<std::uint64_t> done{0};
  r::parallel_for(jobs.size(), c.options.threads, [&](std::size_t k) {
    std::uint64_t n = 0;
    digests[k] = r::sha256_of_file(jobs[k].path, r::DigestForm::record, &n);
    const auto now = done.fetch_add(n) + n;
    if (c.options.hash_progress) c.options.hash_progress(now, total_bytes);
  });
  report.hashed_files = jobs.size();
  report.hashed_bytes = done.load();
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    const auto& j = jobs[k];
    if (digests[k] == j.row->hash) continue;
    const auto& d = c.env.dists[static_cast<std::size_t>(j.dist)];
    Finding f;
    f.rule = "hash-mismatch";
    f.severity = r::looks_like_shared_object(r::base_name(j.path)) ? Severity::error : Severity::warning;
    std::string matches;
    for (int other : c.env.owners_of(j.path)) {
      if (other == j.dist) continue;
      const auto& od = c.env.dists[static_cast<std::size_t>(other)];
      if (const auto* row = r::row_for(od, j.path); row && row->hash == digests[k])
        matches = fmt::format(": the content is {}'s (it matches that dist's RECORD)", r::dist_label(od));
    }
    f.message = fmt::format("{} does not match the hash {} recorded for it{}", c.env.display(j.path), r::dist_label(d),
                            matches);
    f.evidence = {fmt::format("RECORD sha256={}", j.row->hash),
                  fmt::format("on disk sha256={}", digests[k].empty() ? "(unreadable)" : digests[k])};
    f.dists = {d.dir_name};
    f.paths = {j.path};
    f.remedy = reinstall(d);
    c.add(std::move(f));
  }
}

// ---- ordering -----------------------------------------------------------------------------

const std::string& subject_of(const Finding& f) {
  if (!f.dists.empty()) return f.dists.front();
  if (!f.sonames.empty()) return f.sonames.front();
  if (!f.paths.empty()) return f.paths.front();
  return f.message;
}

void sort_and_number(std::vector<Finding>& found) {
  std::vector<std::size_t> order(found.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = found[a];
    const auto& y = found[b];
    return std::forward_as_tuple(x.severity, x.rule, subject_of(x), x.message) <
           std::forward_as_tuple(y.severity, y.rule, subject_of(y), y.message);
  });
  std::vector<int> new_id(found.size());
  for (std::size_t k = 0; k < order.size(); ++k) new_id[order[k]] = static_cast<int>(k) + 1;
  std::vector<Finding> sorted;
  for (auto i : order) {
    Finding f = std::move(found[i]);
    f.id = new_id[i];
    for (auto& cause : f.caused_by) cause = new_id[static_cast<std::size_t>(cause)];
    sorted.push_back(std::move(f));
  }
  found = std::move(sorted);
}

}  // namespace

namespace {

void check_rule_names(const DoctorOptions& options) {
  for (const auto* list : {&options.select, &options.ignore})
    for (const auto& id : *list)
      if (std::find(rule_ids().begin(), rule_ids().end(), id) == rule_ids().end())
        throw r::Error(fmt::format("unknown rule '{}'; the rules are: {}", id, fmt::join(rule_ids(), ", ")));
}

}  // namespace

r::ScanDepth scan_depth_for(const DoctorOptions& options) {
  check_rule_names(options);
  auto depth = r::ScanDepth::dists;
  for (const auto& id : rule_ids()) {
    if (!rule_wanted(options, id)) continue;
    if (id == "unresolved-library" || id == "invalid-metadata" || id == "mixed-cuda-major" ||
        id == "shadowed-library" || id == "missing-dlopen-library")
      return r::ScanDepth::full;
    if (id != "unsatisfied-requirement" && id != "unsatisfied-extra" && id != "duplicate-dist")
      depth = r::ScanDepth::files;
  }
  return depth;
}

bool parses_requirements(const DoctorOptions& options) {
  return rule_wanted(options, "unsatisfied-requirement") || rule_wanted(options, "unsatisfied-extra") ||
         rule_wanted(options, "shadowed-library");
}

DoctorReport run_doctor(const r::Environment& env, const r::Knowledge& knowledge, const DoctorOptions& options) {
  check_rule_names(options);
  auto wanted = [&](const std::string& id) { return rule_wanted(options, id); };
  Context c{env, knowledge, options, r::marker_environment_of(env.layout), {}, {}, {}};
  c.index_sonames();
  DoctorReport report;
  const bool files_scanned = scan_depth_for(options) != r::ScanDepth::dists;
  const auto groups = files_scanned ? missing_groups(env) : std::vector<MissingGroup>{};
  const auto metadata_only =
      files_scanned ? check_metadata_only(c, groups, wanted("metadata-only")) : std::map<int, int>{};
  if (wanted("unsatisfied-requirement")) check_requirements(c);
  if (wanted("unsatisfied-extra")) check_extras(c);
  if (wanted("duplicate-dist")) check_duplicates(c);
  if (wanted("missing-files")) check_missing(c, groups, metadata_only);
  if (wanted("shared-path")) check_shared_paths(c);
  if (wanted("unresolved-library")) check_unresolved(c, groups, metadata_only);
  if (wanted("mixed-cuda-major")) check_mixed_majors(c);
  if (wanted("shadowed-library")) check_shadowed(c, groups, metadata_only);
  if (wanted("missing-dlopen-library")) check_dlopen(c, groups, metadata_only);
  if (wanted("invalid-metadata")) check_invalid_metadata(c);
  if (wanted("hash-mismatch") && options.verify_hashes) check_hashes(c, report);
  sort_and_number(c.found);
  report.findings = std::move(c.found);
  for (const auto& f : report.findings) {
    if (f.severity == Severity::error) ++report.errors;
    if (f.severity == Severity::warning) ++report.warnings;
    if (f.severity == Severity::info) ++report.infos;
  }
  return report;
}

void merge_rule_settings(std::string_view text, const std::string& source, std::map<std::string, RuleSettings>& into) {
  const toml::table doc = parse_toml(text, source);
  const auto* node = doc.get("rules");
  if (!node) return;
  auto where = [&](const toml::node& n) { return fmt::format("{}:{}", source, n.source().begin.line); };
  const auto* table = node->as_table();
  if (!table) throw r::Error(fmt::format("{}: [rules] must be a table of rules", where(*node)));
  for (const auto& [key, value] : *table) {
    const std::string id(key.str());
    if (std::find(rule_ids().begin(), rule_ids().end(), id) == rule_ids().end())
      throw r::Error(
          fmt::format("{}: unknown rule '{}'; the rules are: {}", where(value), id, fmt::join(rule_ids(), ", ")));
    const auto* t = value.as_table();
    if (!t) throw r::Error(fmt::format("{}: [rules.{}] must be a table", where(value), id));
    RuleSettings& s = into[id];
    if (const auto* en = t->get("enabled")) {
      if (!en->is_boolean()) throw r::Error(fmt::format("{}: rules.{}.enabled must be true or false", where(*en), id));
      s.enabled = en->as_boolean()->get();
    }
    if (const auto* sev = t->get("severity")) {
      const auto v = sev->value<std::string>();
      const auto parsed = v ? severity_from(*v) : std::nullopt;
      if (!parsed)
        throw r::Error(
            fmt::format("{}: rules.{}.severity must be \"error\", \"warning\" or \"info\"", where(*sev), id));
      s.severity = parsed;
    }
    if (const auto* allow = t->get("allow")) {
      const auto* list = allow->as_array();
      if (!list) throw r::Error(fmt::format("{}: rules.{}.allow must be a list of strings", where(*allow), id));
      for (const auto& item : *list) {
        const auto v = item.value<std::string>();
        if (!v) throw r::Error(fmt::format("{}: rules.{}.allow must be a list of strings", where(item), id));
        s.allow.push_back(*v);
      }
    }
  }
}

}  // namespace cudafix::rules
