#include "resolver/plan/dlopen_family.hpp"

#include <fmt/format.h>

#include <map>
#include <set>

#include "resolver/base/text.hpp"
#include "resolver/env/system_packages.hpp"

namespace cudafix::resolver::inline plan {
namespace {

int whose_bytes_one(const Environment& env, const std::string& real) {
  const SharedObject* o = env.object(real);
  std::vector<int> owners = o ? o->owners : env.owners_of(real);
  if (o && o->bytes_owner >= 0) return o->bytes_owner;
  if (owners.size() > 1) owners = whose_bytes(env, real, owners);
  return owners.size() == 1 ? owners.front() : -1;
}

FamilyMember place(const Environment& env, const SharedObject& front, int front_dist, DlopenResolution d) {
  FamilyMember m;
  m.front = &front;
  m.front_dist = front_dist;
  m.dlopen = std::move(d);
  const Resolution& r = m.dlopen.resolution;
  if (!r.found()) return m;  // nowhere
  m.real = real_path_of(*r.path);
  if (!env.site_of(m.real)) {
    m.place = MemberPlace::outside;
    m.release = release_in_file_name(base_name(m.real), r.name);
    return m;
  }
  const int whose = whose_bytes_one(env, m.real);
  if (whose == front_dist) {
    m.place = MemberPlace::own_dist;
  } else if (whose >= 0) {
    m.place = MemberPlace::other_dist;
    m.other_dist = whose;
  } else {
    m.place = MemberPlace::unowned;
  }
  return m;
}

// The Debian packages whose file lists name the members outside, by path or real path.
void name_packages(std::vector<FamilyMember>& members) {
  std::vector<std::string> paths;
  for (const auto& m : members)
    if (m.place == MemberPlace::outside && m.real.starts_with("/usr/")) {
      paths.push_back(*m.dlopen.resolution.path);
      paths.push_back(m.real);
    }
  if (paths.empty()) return;
  const auto owners = debian_owners("/usr", paths);
  for (auto& m : members) {
    if (m.place != MemberPlace::outside) continue;
    for (const auto& p : {*m.dlopen.resolution.path, m.real})
      if (auto it = owners.find(p); it != owners.end()) {
        m.package = it->second;
        break;
      }
  }
}

}  // namespace

std::string_view to_string(MemberPlace p) {
  switch (p) {
    case MemberPlace::own_dist:
      return "own-dist";
    case MemberPlace::nowhere:
      return "nowhere";
    case MemberPlace::other_dist:
      return "other-dist";
    case MemberPlace::unowned:
      return "unowned";
    case MemberPlace::outside:
      return "outside";
  }
  return "nowhere";
}

std::vector<FamilyMember> members_of(const Environment& env, const Knowledge& k, const SharedObject& front,
                                     bool every_group) {
  std::vector<FamilyMember> out;
  if (front.owners.empty() || front.elf.status != ElfReadStatus::ok || !front.elf.info.soname) return out;
  const int front_dist = whose_bytes_one(env, front.path);
  if (front_dist < 0) return out;
  for (auto& d : resolve_dlopens(env, k, front))
    if (every_group || d.knowledge->same_dist) out.push_back(place(env, front, front_dist, std::move(d)));
  name_packages(out);
  return out;
}

std::vector<FamilyMember> family_members(const Environment& env, const Knowledge& k) {
  std::set<std::string> fronts;
  for (const auto& [name, g] : k.dlopen)
    if (g.same_dist) fronts.insert(g.loaded_by);
  std::vector<FamilyMember> out;
  for (const auto& soname : fronts)
    for (const auto* front : env.providers(soname)) {
      if (front->elf.status != ElfReadStatus::ok || front->elf.info.soname != soname) continue;
      auto members = members_of(env, k, *front);
      out.insert(out.end(), std::make_move_iterator(members.begin()), std::make_move_iterator(members.end()));
    }
  return out;
}

std::string describe_front(const Environment& env, const FamilyMember& m) {
  return fmt::format("{} ({})", env.display(m.front->path),
                     dist_label(env.dists[static_cast<std::size_t>(m.front_dist)]));
}

std::string describe_place(const Environment& env, const FamilyMember& m) {
  const Resolution& r = m.dlopen.resolution;
  switch (m.place) {
    case MemberPlace::nowhere:
      return "nowhere";
    case MemberPlace::own_dist:
      return env.display(m.real);
    case MemberPlace::other_dist:
      return fmt::format("{} ({}'s bytes)", env.display(m.real),
                         dist_label(env.dists[static_cast<std::size_t>(m.other_dist)]));
    case MemberPlace::unowned:
      return fmt::format("{} (no dist's RECORD describes it)", env.display(m.real));
    case MemberPlace::outside: {
      std::vector<std::string> what;
      if (!m.release.empty()) what.push_back(fmt::format("release {}", m.release));
      if (!m.package.empty()) what.push_back(fmt::format("Debian package {}", m.package));
      return fmt::format("{}{}, outside the environment, by {}", *r.path,
                         what.empty() ? "" : fmt::format(" ({})", fmt::join(what, ", ")), to_string(r.kind));
    }
  }
  return "nowhere";
}

std::string runtime_error_of(const FamilyMember& m) {
  const auto& g = *m.dlopen.knowledge;
  if (m.place == MemberPlace::own_dist) return {};
  if (m.place == MemberPlace::nowhere)
    return g.missing_error.empty() ? std::string()
                                   : fmt::format("{}'s dlopen of it fails ({})", g.loaded_by, g.missing_error);
  if (g.mismatch_error.empty()) return {};
  return fmt::format(
      "{} gets another build, which fails its version check ({}) or does not link against it and is "
      "dropped, so what needs it fails",
      g.loaded_by, g.mismatch_error);
}

std::string release_in_file_name(std::string_view real_name, const std::string& soname) {
  if (!real_name.starts_with(soname) || real_name.size() <= soname.size() + 1 || real_name[soname.size()] != '.')
    return {};
  const auto so = soname.rfind(".so.");
  const std::string major = so == std::string::npos ? "" : soname.substr(so + 4) + ".";
  return major + std::string(real_name.substr(soname.size() + 1));
}

std::string expected_path(const FamilyMember& m) { return parent_dir(m.front->path) + "/" + m.dlopen.resolution.name; }

bool own_build_present(const Environment& env, const FamilyMember& m) {
  const std::string expected = expected_path(m);
  return env.object(expected) && whose_bytes_one(env, expected) == m.front_dist;
}

}  // namespace cudafix::resolver::inline plan
