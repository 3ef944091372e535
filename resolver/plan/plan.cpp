#include "resolver/plan/plan.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

#include "resolver/base/text.hpp"
#include "resolver/env/requirements.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::resolver::inline plan {
namespace {

bool inside(const Environment& env, const std::string& path) {
  return env.site_of(path) != nullptr || is_within(path, env.layout.root_real);
}

// Who provides a file inside the environment: its owning dist (whose bytes are on disk, for a
// shared path), that dist's version and CUDA major.
struct ProviderId {
  std::string dist;  // "name version", or empty when no dist owns the file
  std::string version;
  std::optional<int> major;
};

ProviderId provider_before(const Environment& env, const Knowledge& k, const std::string& path) {
  ProviderId id;
  int owner = -1;
  id.major = major_of_file(env, k, path, &owner);
  if (owner < 0) {
    const auto owners = env.owners_of(path);
    if (owners.size() == 1) owner = owners.front();
  }
  if (owner >= 0) {
    const auto& d = env.dists[static_cast<std::size_t>(owner)];
    id.dist = dist_label(d);
    id.version = d.version;
  }
  return id;
}

// In a simulated environment the ownership index is gone; objects still name their owners, and
// the ones a simulated step wrote name whose bytes they hold. A file nothing wrote holds the
// bytes it held before.
ProviderId provider_after(const Environment& before, const Environment& env, const Knowledge& k,
                          const std::string& path) {
  ProviderId id;
  const SharedObject* o = env.object(path);
  if (o && o->bytes_owner < 0 && before.object(path)) return provider_before(before, k, path);
  if (o && !o->owners.empty()) {
    const auto& d = env.dists[static_cast<std::size_t>(o->bytes_owner >= 0 ? o->bytes_owner : o->owners.front())];
    id.dist = dist_label(d);
    id.version = d.version;
    id.major = major_of_dist(k, d);
  } else if (const SiteDir* site = env.site_of(path)) {
    id.major = k.major_of_folder(relative_to(parent_dir(path), site->real));
  }
  return id;
}

std::string describe(const ProviderId& id) {
  std::string s = id.dist.empty() ? "no dist" : id.dist;
  if (id.major) s += fmt::format(", CUDA {}", *id.major);
  return s;
}

// A move from one provider to another is no worse when it keeps the major and version, or, in a
// repair toward a target major, when it moves to that major or did not start on it.
bool no_worse(const ProviderId& was, const ProviderId& now, std::optional<int> target) {
  if (was.major == now.major && was.version == now.version) return true;
  return target && (now.major == target || was.major != target);
}

// Whether `a` is worse than `b` for a required soname, and why; nullopt when it is not.
std::optional<Break> judge(const Environment& before, const Environment& after, const Knowledge& k,
                           std::optional<int> target, const Resolution& b, const Resolution& a) {
  if (!b.found()) return std::nullopt;  // already broken: the change cannot make it worse
  Break out;
  out.soname = b.name;
  out.before = *b.path;
  // Resolved paths are their folder's realpath plus the name: equal strings are one file.
  if (a.found() && *a.path == *b.path) {
    const SharedObject* o = after.object(*a.path);
    if (!o || o->bytes_owner < 0) return std::nullopt;
  }
  const std::string b_real = real_path_of(*b.path);
  const auto& deleted = after.loader->config().deleted;
  // What happened to the file it had: deleted, or no longer loaded by the import that brought it.
  const std::string lost =
      deleted && deleted->count(b_real)
          ? fmt::format("{} is deleted", before.display(*b.path))
          : fmt::format("{} stays, but it was found {} and is not any more", before.display(*b.path),
                        b.kind == ReasonKind::already_loaded ? "already loaded by an earlier import"
                                                             : fmt::format("through [{}]", to_string(b.kind)));
  if (!a.found()) {
    out.why = fmt::format("{}, and {} resolves nowhere else", lost, b.name);
    return out;
  }
  const std::string a_real = real_path_of(*a.path);
  if (a_real == b_real) {
    // The same file; a step may have written other bytes into it.
    const SharedObject* o = after.object(a_real);
    if (!o || o->bytes_owner < 0) return std::nullopt;
    const ProviderId was = provider_before(before, k, b_real);
    const ProviderId now = provider_after(before, after, k, a_real);
    if (no_worse(was, now, target)) return std::nullopt;
    out.after = *a.path;
    out.after_version = now.version;
    out.why = fmt::format("{} would hold {}'s bytes ({}) instead of {}'s", before.display(*b.path), now.dist,
                          describe(now), was.dist.empty() ? "no dist" : was.dist);
    return out;
  }
  out.after = *a.path;
  const bool was_inside = inside(before, b_real);
  const bool is_inside = inside(after, a_real);
  if (!is_inside) {
    out.after_version = version_from_file_name(a_real);
    if (!was_inside && out.after_version == version_from_file_name(b_real)) return std::nullopt;
    out.why = fmt::format("{}; the loader falls through to {} [{}]{}", lost, a_real, to_string(a.kind),
                          was_inside ? ", outside the environment" : "");
    if (out.after_version) out.why += fmt::format(" (version {})", *out.after_version);
    return out;
  }
  if (!was_inside) return std::nullopt;  // from outside the environment into it: better
  const ProviderId was = provider_before(before, k, b_real);
  const ProviderId now = provider_after(before, after, k, a_real);
  if (no_worse(was, now, target)) return std::nullopt;
  if (!now.version.empty()) out.after_version = now.version;
  out.why = fmt::format("{}; it would resolve to {} ({}) instead of {} ({})", lost, after.display(a_real),
                        describe(now), before.display(b_real), describe(was));
  return out;
}

bool required(const Knowledge& k, const std::string& soname) {
  return !k.driver_group(soname) && !k.optional_group(soname);
}

bool exists_no_follow(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::vector<LeftBehind> left_behind(const Environment& env, const std::set<int>& removing,
                                    const std::set<std::string>& deleted) {
  std::vector<LeftBehind> out;
  // Only dists that list a deleted path can lose files (deleted paths are in pip's form, whose
  // folders are real, as the scan's are).
  std::set<int> affected;
  for (const auto& p : deleted)
    for (int o : env.owners_of(p))
      if (!removing.count(o)) affected.insert(o);
  PipPaths pip_paths;
  std::string abs;
  for (const int dist_index : affected) {
    const auto di = static_cast<std::size_t>(dist_index);
    const DistInfo& d = env.dists[di];
    const std::string own_info = d.site_dir + "/" + d.dir_name;
    LeftBehind l;
    l.dist = static_cast<int>(di);
    std::size_t present = 0;
    for (const auto& row : d.record) {
      join_normal(d.site_dir, row.path, abs);
      if (is_within(abs, own_info) || in_pycache(abs)) continue;
      if (!env.present(abs) && !exists_no_follow(abs)) continue;
      ++present;
      if (deleted.count(pip_paths.of(abs))) l.paths.push_back(abs);
    }
    if (l.paths.empty()) continue;
    std::sort(l.paths.begin(), l.paths.end());
    l.paths.erase(std::unique(l.paths.begin(), l.paths.end()), l.paths.end());
    l.metadata_only = l.paths.size() == present;
    out.push_back(std::move(l));
  }
  return out;
}

std::vector<RequirementBreak> requirement_breaks(const Environment& env, const std::set<int>& removing,
                                                 unsigned threads) {
  std::vector<RequirementBreak> out;
  std::map<std::string, int> removed_by_name;
  for (int d : removing) removed_by_name.emplace(env.dists[static_cast<std::size_t>(d)].normalized, d);
  std::set<std::string> kept_names;
  for (std::size_t d = 0; d < env.dists.size(); ++d)
    if (!removing.count(static_cast<int>(d))) kept_names.insert(env.dists[d].normalized);
  const ParsedRequirements parsed = parse_requirements(env, marker_environment_of(env.layout), threads);
  for (const DistInfo* d : visible_dists(env)) {
    const auto di = static_cast<std::size_t>(d - env.dists.data());
    if (removing.count(static_cast<int>(di))) continue;
    for (std::size_t k = 0; k < parsed.lines[di].size(); ++k) {
      const auto& line = parsed.lines[di][k];
      if (!line.req || !line.applies) continue;
      const auto it = removed_by_name.find(line.req->normalized);
      if (it == removed_by_name.end() || kept_names.count(line.req->normalized)) continue;
      // Met before (pip check's verdict), unmet after: what the removal breaks.
      const auto& version = parsed.versions[static_cast<std::size_t>(it->second)];
      if (version && !line.req->specifier.contains(*version, true)) continue;
      out.push_back({static_cast<int>(di), d->metadata.requires_dist[k], it->second});
    }
  }
  return out;
}

}  // namespace

std::optional<std::string> version_from_file_name(const std::string& path) {
  const std::string_view name = base_name(path);
  const auto at = name.find(".so.");
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view rest = name.substr(at + 4);
  // The soname's own number alone (libcudnn.so.9) says nothing about the release.
  if (rest.find('.') == std::string_view::npos || rest.find_first_not_of("0123456789.") != std::string_view::npos)
    return std::nullopt;
  return std::string(rest);
}

std::vector<Break> worse_resolutions(const Environment& before, const Environment& after, const Knowledge& k,
                                     std::optional<int> target) {
  std::vector<Break> out;
  std::set<std::string> dlopen_loaders;
  for (const auto& [name, g] : k.dlopen) dlopen_loaders.insert(g.loaded_by);
  for (const auto& ao : after.objects) {
    const SharedObject* bo = before.object(ao.path);
    if (!bo) continue;
    auto add = [&](std::optional<Break> b, RequiredBy kind) {
      if (!b) return;
      b->consumer = ao.path;
      b->consumer_dist = bo->owners.empty() ? -1 : bo->owners.front();
      b->kind = kind;
      out.push_back(std::move(*b));
    };
    const std::size_t n = std::min(ao.resolutions.size(), bo->resolutions.size());
    for (std::size_t i = 0; i < n; ++i)
      if (required(k, bo->resolutions[i].name))
        add(judge(before, after, k, target, bo->resolutions[i], ao.resolutions[i]), RequiredBy::needed);
    if (ao.elf.status != ElfReadStatus::ok || !ao.elf.info.soname || !dlopen_loaders.count(*ao.elf.info.soname))
      continue;
    // A file nothing wrote holds the bytes it held before; a written one, its writer's.
    const auto was = resolve_dlopens(before, k, *bo);
    const auto now = resolve_dlopens(
        after, k, ao, ao.bytes_owner >= 0 ? bytes_identity(after, k, ao) : bytes_identity(before, k, *bo));
    for (const auto& w : was) {
      const auto it = std::find_if(now.begin(), now.end(), [&](const DlopenResolution& d) {
        return d.group == w.group && d.resolution.name == w.resolution.name;
      });
      // The new bytes (another major's build) open other sonames: this one is no longer required.
      // Nothing asked at all means the loader no longer loads: each one it opened is lost.
      if (it == now.end() && !now.empty()) continue;
      Resolution nothing;
      nothing.name = w.resolution.name;
      add(judge(before, after, k, target, w.resolution, it == now.end() ? nothing : it->resolution),
          RequiredBy::dlopen);
    }
  }
  std::sort(out.begin(), out.end(), [](const Break& a, const Break& b) {
    return std::tie(a.consumer, a.soname) < std::tie(b.consumer, b.soname);
  });
  return out;
}

RemovalPlan plan_removal(const Environment& env, const Knowledge& k, const std::vector<int>& dists, unsigned threads) {
  RemovalPlan plan;
  const std::set<int> removing(dists.begin(), dists.end());
  plan.removing.assign(removing.begin(), removing.end());
  auto outcome = [&](OwnerCounting counting) {
    Outcome o;
    o.deletion = uninstall_paths(env, dists, counting);
    WhatIf change;
    change.removed_dists = plan.removing;
    change.deleted.insert(o.deletion.files.begin(), o.deletion.files.end());
    const Environment after = simulate(env, change, threads);
    o.breaks = worse_resolutions(env, after, k);
    o.left = left_behind(env, removing, std::set<std::string>(o.deletion.files.begin(), o.deletion.files.end()));
    return o;
  };
  plan.pip = outcome(OwnerCounting::pip);
  // Without shared paths both ways delete the same files: one simulation is enough.
  Deletion owner_counted = uninstall_paths(env, dists, OwnerCounting::cudafix);
  if (owner_counted.files == plan.pip.deletion.files) {
    plan.cudafix = plan.pip;
    plan.cudafix.deletion = std::move(owner_counted);
  } else {
    plan.cudafix = outcome(OwnerCounting::cudafix);
  }
  plan.requirement_breaks = requirement_breaks(env, removing, threads);
  return plan;
}

}  // namespace cudafix::resolver::inline plan
