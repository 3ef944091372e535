#include "resolver/plan/lock_env.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"
#include "resolver/pep/pep440.hpp"
#include "resolver/pep/pep508.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::resolver::inline plan {

namespace {

// The SHA-256 (hex) of the files at `paths`, hashed in parallel; empty where one cannot be read.
std::vector<std::string> hash_files(const std::vector<std::string>& paths, unsigned threads) {
  std::vector<std::string> out(paths.size());
  parallel_for(paths.size(), threads, [&](std::size_t i) { out[i] = sha256_of_file(paths[i], DigestForm::hex); });
  return out;
}

// The installed RECORD's rows inside the site folder and outside the dist-info, as sorted
// "path,hash" lines, hashed: what any installer writes alike for one wheel (scripts, whose
// shebangs name the venv, and the installer's own dist-info files are left out).
std::string record_digest_of(const DistInfo& d) {
  std::vector<std::string> rows;
  const std::string own = d.dir_name + "/";
  for (const auto& row : d.record) {
    if (row.path.starts_with("../") || row.path.starts_with(own) || row.path.ends_with(".pyc")) continue;
    rows.push_back(fmt::format("{},{}", row.path, row.hash));
  }
  std::sort(rows.begin(), rows.end());
  std::string text;
  for (const auto& r : rows) text += r + "\n";
  return sha256_hex(text);
}

// The objects each dist owns, by dist index.
std::vector<std::vector<const SharedObject*>> objects_by_dist(const Environment& env) {
  std::vector<std::vector<const SharedObject*>> out(env.dists.size());
  for (const auto& o : env.objects)
    for (const int d : o.owners)
      if (d >= 0 && static_cast<std::size_t>(d) < out.size()) out[static_cast<std::size_t>(d)].push_back(&o);
  return out;
}

LockPackage package_of(const DistInfo& d, const std::optional<WheelOrigin>& origin) {
  LockPackage p;
  p.name = d.normalized;
  p.version = d.version;
  if (d.metadata.requires_python && SpecifierSet::parse(*d.metadata.requires_python))
    p.requires_python = d.metadata.requires_python;
  if (origin) {
    LockWheel w;
    w.url = origin->url;
    w.path = origin->path;
    const std::string& given = w.url ? *w.url : *w.path;
    if (base_name(given) != origin->file_name) w.name = origin->file_name;
    w.hashes.digests = {{"sha256", origin->sha256}};
    p.wheels.push_back(std::move(w));
    p.index = origin->index;
  }
  p.cudafix.record = record_digest_of(d);
  return p;
}

// [packages.tool.cudafix]'s libraries and the resolutions that stay inside the environment.
void add_libraries(const Environment& env, const std::vector<const SharedObject*>& objects,
                   const std::map<std::string, std::string>& hashes, LockPackage& p) {
  for (const SharedObject* o : objects) {
    const auto h = hashes.find(o->path);
    if (h == hashes.end() || h->second.empty()) continue;
    p.cudafix.libraries.push_back({env.display(o->path), o->elf.info.soname, h->second, {}});
    for (const auto& r : o->resolutions) {
      if (r.path && !env.site_of(*r.path)) continue;  // the host's (glibc, the driver): not the lock's
      p.cudafix.resolutions.push_back(
          {env.display(o->path), r.name, r.path ? std::optional(env.display(*r.path)) : std::nullopt, {}});
    }
  }
}

}  // namespace

LockOfEnvironment lock_of(const Environment& env, const LockRequest& request) {
  LockOfEnvironment out;
  out.lock.created_by = request.created_by;
  if (env.layout.python_version) out.lock.requires_python = fmt::format("=={}.*", *env.layout.python_version);
  const auto by_dist = objects_by_dist(env);
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < env.dists.size(); ++i)
    if (env.dists[i].format == DistFormat::dist_info)
      for (const SharedObject* o : by_dist[i])
        if (o->elf.status == ElfReadStatus::ok) paths.push_back(o->path);
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  const auto digests = hash_files(paths, request.threads);
  std::map<std::string, std::string> hashes;
  for (std::size_t i = 0; i < paths.size(); ++i) hashes[paths[i]] = digests[i];
  for (std::size_t i = 0; i < env.dists.size(); ++i) {
    const DistInfo& d = env.dists[i];
    if (d.format != DistFormat::dist_info || d.root == SiteRoot::system) {
      out.left_out.push_back(fmt::format("{}: {}", dist_label(d),
                                         d.root == SiteRoot::system ? "the system's site folder, not the environment's"
                                                                    : "no wheel's dist-info (egg-info)"));
      continue;
    }
    const std::optional<WheelOrigin> none;
    LockPackage p = package_of(d, i < request.origins.size() ? request.origins[i] : none);
    add_libraries(env, by_dist[i], hashes, p);
    out.lock.packages.push_back(std::move(p));
  }
  sort_lock(out.lock);
  return out;
}

namespace {

// Whether a lock package applies here: no marker, or one true for `markers` (one that cannot be
// evaluated counts as applying: the drift then says so rather than hides it).
bool applies(const LockPackage& p, const MarkerEnvironment& markers) {
  if (!p.marker) return true;
  try {
    return Marker::parse(*p.marker).evaluate(markers).value_or(true);
  } catch (const std::exception&) {
    return true;
  }
}

// The absolute path a site-relative lock path names in the dist's site folder (or the first
// site); nullopt when the text is no clean relative path (a lock is hostile input: a path that
// climbs out is never joined).
std::optional<std::string> in_site(const Environment& env, const std::optional<int>& dist, const std::string& rel) {
  if (!is_clean_relative(rel)) return std::nullopt;
  if (dist) return join_normal(env.dists[static_cast<std::size_t>(*dist)].site_dir, rel);
  if (env.layout.sites.empty()) return std::nullopt;
  return join_normal(env.layout.sites.front().real, rel);
}

void package_drift(const Environment& env, const LockPackage& p, std::optional<int> dist, std::vector<Drift>& out) {
  const DistInfo& d = env.dists[static_cast<std::size_t>(*dist)];
  if (p.version && !same_version(*p.version, d.version))
    out.push_back({DriftKind::version,
                   p.name,
                   dist,
                   *p.version,
                   d.version,
                   {},
                   std::nullopt,
                   fmt::format("{} is {} here, {} in the lock", p.name, d.version, *p.version)});
  std::vector<std::string> missing;
  for (const auto& m : env.missing[static_cast<std::size_t>(*dist)]) missing.push_back(env.display(m));
  const bool other_record = p.cudafix.record && *p.cudafix.record != record_digest_of(d);
  if (!missing.empty() || (other_record && same_version(p.version.value_or(d.version), d.version))) {
    std::string why = other_record ? "its RECORD is not the locked wheel's (another build of it is installed)" : "";
    if (!missing.empty())
      why += fmt::format(
          "{}{} of its files are missing: {}", why.empty() ? "" : "; ", missing.size(),
          fmt::join(missing.begin(), missing.begin() + std::min<std::ptrdiff_t>(5, std::ssize(missing)), ", "));
    out.push_back({DriftKind::files, p.name, dist, p.cudafix.record.value_or(""), record_digest_of(d), missing,
                   std::nullopt, fmt::format("{}'s files differ from the locked wheel's: {}", p.name, why)});
  }
}

// Each locked library's bytes, hashed now, against the lock.
void library_drift(const Environment& env, const Lock& lock, const std::vector<std::optional<int>>& dists,
                   unsigned threads, std::vector<Drift>& out) {
  struct Want {
    std::size_t package;
    const LockLibrary* library;
    std::string abs;
  };
  std::vector<Want> wants;
  for (std::size_t i = 0; i < lock.packages.size(); ++i) {
    if (!dists[i]) continue;
    for (const auto& l : lock.packages[i].cudafix.libraries)
      if (const auto abs = in_site(env, dists[i], l.path)) wants.push_back({i, &l, *abs});
  }
  std::vector<std::string> paths;
  for (const auto& w : wants) paths.push_back(w.abs);
  const auto now = hash_files(paths, threads);
  for (std::size_t k = 0; k < wants.size(); ++k) {
    const auto& [i, l, abs] = wants[k];
    if (now[k] == l->sha256) continue;
    const std::string lib =
        fmt::format("{}'s {}{}", lock.packages[i].name, l->path, l->soname ? fmt::format(" ({})", *l->soname) : "");
    out.push_back({DriftKind::library_bytes,
                   lock.packages[i].name,
                   dists[i],
                   l->sha256,
                   now[k],
                   {l->path},
                   l->soname,
                   now[k].empty() ? fmt::format("{} is gone (locked sha256 {})", lib, l->sha256)
                                  : fmt::format("{} holds other bytes than the locked ones (sha256 {}, locked {})", lib,
                                                now[k], l->sha256)});
  }
}

// A verdict recorded in the lock holds only while the consumer resolves the cuDNN it was
// verified with: what can be told without the GPU.
void verdict_drift(const Environment& env, const Lock& lock, std::vector<Drift>& out) {
  for (const auto& v : lock.verified) {
    if (!v.cudnn_path) continue;
    const auto consumer = in_site(env, std::nullopt, v.consumer);
    const SharedObject* o = consumer ? env.object(*consumer) : nullptr;
    std::optional<std::string> now;
    std::string soname = std::string(base_name(*v.cudnn_path));
    if (o)
      for (const auto& r : o->resolutions)
        if (r.name.starts_with("libcudnn.so")) {
          soname = r.name;
          if (r.path) now = env.display(*r.path);
        }
    if (o && now == v.cudnn_path) continue;
    const std::string found = !o ? "the consumer is gone" : now ? "it now resolves " + *now : "it now resolves nowhere";
    out.push_back({DriftKind::verdict,
                   "",
                   std::nullopt,
                   *v.cudnn_path,
                   now.value_or(""),
                   {v.consumer},
                   soname,
                   fmt::format("the verdict recorded for device {} no longer holds: {} was verified with {} for {}, "
                               "{}",
                               v.device, v.consumer, *v.cudnn_path, soname, found)});
  }
}

}  // namespace

std::vector<Drift> lock_drift(const Environment& env, const Lock& lock, const MarkerEnvironment& markers,
                              unsigned threads) {
  std::vector<Drift> out;
  std::vector<std::optional<int>> dists(lock.packages.size());
  std::set<std::string> locked;
  for (std::size_t i = 0; i < lock.packages.size(); ++i) {
    const LockPackage& p = lock.packages[i];
    if (!applies(p, markers)) continue;
    locked.insert(p.name);
    dists[i] = env.dist_index(p.name);
    if (!dists[i]) {
      out.push_back({DriftKind::missing,
                     p.name,
                     std::nullopt,
                     p.version.value_or(""),
                     "",
                     {},
                     std::nullopt,
                     fmt::format("{} {} is locked and not installed", p.name, p.version.value_or("(any version)"))});
      continue;
    }
    package_drift(env, p, dists[i], out);
  }
  for (std::size_t i = 0; i < env.dists.size(); ++i) {
    const DistInfo& d = env.dists[i];
    if (d.root == SiteRoot::system || locked.contains(d.normalized)) continue;
    out.push_back({DriftKind::unlocked,
                   d.normalized,
                   static_cast<int>(i),
                   "",
                   d.version,
                   {},
                   std::nullopt,
                   fmt::format("{} {} is installed and not in the lock", d.normalized, d.version)});
  }
  library_drift(env, lock, dists, threads, out);
  verdict_drift(env, lock, out);
  return out;
}

}  // namespace cudafix::resolver::inline plan
