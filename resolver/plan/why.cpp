#include "resolver/plan/why.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <set>

#include "resolver/base/text.hpp"
#include "resolver/env/requirements.hpp"

namespace cudafix::resolver::inline plan {
namespace {

int owner_of(const SharedObject& o) { return o.owners.empty() ? -1 : o.owners.front(); }

NeededNode build_tree(const Process& p, int index, const Resolution& how, std::set<int>& seen, int depth) {
  NeededNode node;
  node.resolution = how;
  if (index < 0) return node;
  if (!seen.insert(index).second || depth > 32) {
    node.repeated = true;
    return node;
  }
  // Below the top, an object an earlier load brought in is not expanded: its tree is not part
  // of this load (and would repeat the whole process).
  if (depth > 0 && how.kind == ReasonKind::already_loaded) return node;
  const auto& lo = p.objects[static_cast<std::size_t>(index)];
  for (std::size_t k = 0; k < lo.needed.size(); ++k)
    node.children.push_back(build_tree(p, lo.needed_index[k], lo.needed[k], seen, depth + 1));
  return node;
}

bool tree_resolves(const NeededNode& n) {
  if (!n.resolution.found()) return false;
  for (const auto& c : n.children)
    if (!tree_resolves(c)) return false;
  return true;
}

std::optional<std::string> find_object_path(const Environment& env, const std::string& query) {
  std::vector<std::string> tries{query};
  for (const auto& s : env.layout.sites) tries.push_back(s.real + "/" + query);
  for (const auto& t : tries) {
    std::error_code ec;
    if (!std::filesystem::exists(t, ec)) continue;
    const std::string real = real_path_of(t);
    if (env.object(real)) return real;
  }
  return std::nullopt;
}

// The process in which `object` gets loaded, as the model has it, and the object's index there.
std::pair<Process, int> process_with(const Environment& env, const SharedObject& object) {
  Process p = env.process_for(owner_of(object));
  const int idx = env.loader->load(p, object.path);
  return {std::move(p), idx};
}

// The front ends the knowledge says dlopen `soname`, each with how it resolves it from there.
std::vector<FamilyMember> dlopeners(const Environment& env, const Knowledge& k, const std::string& soname) {
  std::set<std::string> fronts;
  for (const auto& [name, g] : k.dlopen)
    if (g.names(soname)) fronts.insert(g.loaded_by);
  std::vector<FamilyMember> out;
  for (const auto& front_soname : fronts)
    for (const auto* front : env.providers(front_soname))
      for (auto& m : members_of(env, k, *front, true))
        if (m.dlopen.resolution.name == soname) out.push_back(std::move(m));
  return out;
}

// The consumers whose requirements name a dist that provides `soname` here.
std::vector<ConsumerNeed> requirers(const Environment& env, const Knowledge& k,
                                    const std::vector<const SharedObject*>& providers) {
  std::set<std::string> provider_dists;
  for (const auto* p : providers)
    for (int d : p->owners) provider_dists.insert(env.dists[static_cast<std::size_t>(d)].normalized);
  if (provider_dists.empty()) return {};
  const MarkerEnvironment markers = marker_environment_of(env.layout);
  const ParsedRequirements reqs = parse_requirements(env, markers, 0);
  std::vector<ConsumerNeed> out;
  for (auto& n : consumer_needs(env, k, reqs, markers))
    if (!n.requirement.empty() && provider_dists.count(n.requirement)) out.push_back(std::move(n));
  return out;
}

}  // namespace

WhyReport explain(const Environment& env, const Knowledge& k, const std::string& query) {
  WhyReport report;
  report.query = query;
  report.is_path = query.find('/') != std::string::npos;
  if (report.is_path) {
    const auto path = find_object_path(env, query);
    if (!path)
      throw Error(fmt::format("{} is not an ELF shared object of the environment at {}", query, env.layout.root));
    const SharedObject* subject = env.object(*path);
    report.subject = subject;
    auto [p, idx] = process_with(env, *subject);
    std::set<int> seen;
    Resolution self;
    self.name = std::string(base_name(subject->path));
    self.path = subject->path;
    self.kind = ReasonKind::path;
    report.tree = build_tree(p, idx, self, seen, 0);
    const std::string soname = subject->elf.status == ElfReadStatus::ok && subject->elf.info.soname
                                   ? *subject->elf.info.soname
                                   : std::string(base_name(subject->path));
    for (const auto* c : env.consumers(soname)) {
      WhyConsumer wc{c, {}, std::nullopt};
      for (const auto& r : c->resolutions)
        if (r.name == soname) wc.resolution = r;
      report.consumers.push_back(std::move(wc));
    }
    report.dlopened_by = dlopeners(env, k, soname);
    report.required_by = requirers(env, k, {subject});
    report.resolves = subject->elf.status == ElfReadStatus::ok && tree_resolves(*report.tree);
    return report;
  }

  report.providers = env.providers(query);
  bool all = true;
  for (const auto* c : env.consumers(query)) {
    WhyConsumer wc{c, {}, std::nullopt};
    for (const auto& r : c->resolutions)
      if (r.name == query) wc.resolution = r;
    if (wc.resolution.found()) {
      auto [p, idx] = process_with(env, *c);
      if (idx >= 0) wc.fallback = env.loader->resolve(p, idx, query, {real_path_of(*wc.resolution.path)});
      if (!report.tree) {
        std::set<int> seen;
        const int target = p.find_real(real_path_of(*wc.resolution.path));
        report.tree = build_tree(p, target, wc.resolution, seen, 0);
      }
    }
    all &= wc.resolution.found();
    report.consumers.push_back(std::move(wc));
  }
  report.dlopened_by = dlopeners(env, k, query);
  report.required_by = requirers(env, k, report.providers);
  for (const auto& m : report.dlopened_by) all &= m.dlopen.resolution.found();
  if (report.consumers.empty() && report.dlopened_by.empty()) {
    // Nothing in the environment NEEDs or dlopens it: how a dlopen by name from Python would fare.
    Process p = env.process_for(-1);
    Resolution r = env.loader->resolve(p, p.main, query);
    if (r.found()) {
      Process q = p;
      const int idx = env.loader->load(q, *r.path);
      std::set<int> seen;
      report.tree = build_tree(q, idx, r, seen, 0);
    }
    all = r.found();
    report.standalone = std::move(r);
  }
  report.resolves = all;
  return report;
}

}  // namespace cudafix::resolver::inline plan
