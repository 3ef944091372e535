#include "resolver/env/requirements.hpp"

#include <stdexcept>

#include "resolver/base/parallel.hpp"

namespace cudafix::resolver::inline env {

MarkerEnvironment marker_environment_of(const EnvLayout& layout) {
  return marker_environment(layout.python_full_version.value_or(layout.python_version.value_or("3") + ".0"));
}

ParsedRequirements parse_requirements(const Environment& env, const MarkerEnvironment& markers, unsigned threads) {
  ParsedRequirements out;
  out.lines.resize(env.dists.size());
  out.versions.resize(env.dists.size());
  parallel_for(env.dists.size(), threads, [&](std::size_t i) {
    const auto& d = env.dists[i];
    out.versions[i] = Version::parse(d.version);
    for (const auto& line : d.metadata.requires_dist) {
      ParsedRequirement p;
      try {
        p.req = Requirement::parse(line);
        p.applies = !p.req->marker || p.req->marker->evaluate(markers).value_or(false);
      } catch (const std::invalid_argument& e) {
        p.error = e.what();
      }
      out.lines[i].push_back(std::move(p));
    }
  });
  return out;
}

std::vector<const DistInfo*> visible_dists(const Environment& env) {
  std::vector<const DistInfo*> out;
  for (std::size_t i = 0; i < env.dists.size(); ++i)
    if (env.dist_index(env.dists[i].normalized) == static_cast<int>(i)) out.push_back(&env.dists[i]);
  return out;
}

}  // namespace cudafix::resolver::inline env
