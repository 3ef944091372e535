#include "resolver/plan/consumer_needs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::resolver::inline plan {
namespace {

// torch/version.py: `cuda = '13.0'` (or `cuda: Optional[str] = '13.0'`).
std::optional<std::pair<int, std::string>> torch_cuda_version(const Environment& env) {
  for (const auto& site : env.layout.sites) {
    const auto text = try_read_file(site.real + "/torch/version.py");
    if (!text) continue;
    for (auto line : split(*text, '\n')) {
      line = trim(line);
      if (!line.starts_with("cuda")) continue;
      const auto q = line.find_first_of("'\"");
      if (q == std::string_view::npos) continue;
      const auto e = line.find(line[q], q + 1);
      if (e == std::string_view::npos) continue;
      const std::string value(line.substr(q + 1, e - q - 1));
      if (auto m = to_number<int>(split(value, '.').front())) return std::make_pair(*m, value);
    }
  }
  return std::nullopt;
}

void needs_by_needed(const Environment& env, const Knowledge& k, const std::vector<bool>& provider,
                     std::vector<ConsumerNeed>& out) {
  const auto majors = soname_majors(k);
  std::set<std::tuple<int, int, std::string>> seen;  // (dist, major, soname): one line each
  for (const auto& o : env.objects) {
    if (o.owners.empty() || o.elf.status != ElfReadStatus::ok) continue;
    const int d = o.owners.front();
    if (provider[static_cast<std::size_t>(d)]) continue;
    for (const auto& n : o.elf.info.needed) {
      const auto it = majors.find(n);
      if (it == majors.end() || it->second.size() != 1) continue;  // libcudnn.so.9: both majors
      const int m = *it->second.begin();
      if (!seen.insert({d, m, n}).second) continue;
      out.push_back({d,
                     m,
                     fmt::format("{}: {} NEEDs {}, which only CUDA {} ships",
                                 dist_label(env.dists[static_cast<std::size_t>(d)]), env.display(o.path), n, m),
                     NeedBasis::needed,
                     &o,
                     {}});
    }
  }
}

// The provider requirements of `dist` under `extra` (asked for by `asker`'s line `asked`).
void needs_of_extra(const Environment& env, const Knowledge& k, const MarkerEnvironment& markers, int dist,
                    const std::string& extra, const std::string& asked, std::vector<ConsumerNeed>& out) {
  const DistInfo& d = env.dists[static_cast<std::size_t>(dist)];
  MarkerEnvironment with_extra = markers;
  with_extra["extra"] = extra;
  for (const auto& line : d.metadata.requires_dist) {
    try {
      const Requirement r = Requirement::parse(line);
      if (!r.marker || !r.marker->mentions_extra() || !r.marker->evaluate(with_extra).value_or(false)) continue;
      if (!is_provider_name(k, r.normalized)) continue;
      const auto m = major_of_provider_name(k, r.normalized);
      if (!m) continue;
      out.push_back({dist, *m,
                     fmt::format("{} requires {} (CUDA {}) under its extra {}, which {} asks for", dist_label(d), line,
                                 *m, extra, asked),
                     NeedBasis::extra, nullptr, r.normalized});
    } catch (const std::invalid_argument&) {
      continue;  // doctor reports it (invalid-metadata)
    }
  }
}

void needs_by_requirements(const Environment& env, const Knowledge& k, const std::vector<bool>& provider,
                           const ParsedRequirements& reqs, const MarkerEnvironment& markers,
                           std::vector<ConsumerNeed>& out) {
  std::set<std::pair<int, std::string>> extras_followed;
  for (std::size_t d = 0; d < env.dists.size(); ++d) {
    const DistInfo& dist = env.dists[d];
    if (provider[d] || is_meta(k, dist)) continue;
    for (std::size_t i = 0; i < reqs.lines[d].size(); ++i) {
      const auto& line = reqs.lines[d][i];
      if (!line.req || !line.applies) continue;
      if (const auto dep = env.dist_index(line.req->normalized);
          dep && !provider[static_cast<std::size_t>(*dep)] && !is_meta(k, env.dists[static_cast<std::size_t>(*dep)]))
        for (const auto& extra : line.req->extras)
          if (extras_followed.insert({*dep, normalize_name(extra)}).second)
            needs_of_extra(env, k, markers, *dep, normalize_name(extra),
                           fmt::format("{} ({})", dist_label(dist), dist.metadata.requires_dist[i]), out);
      if (!is_provider_name(k, line.req->normalized)) continue;
      const auto m = major_of_provider_name(k, line.req->normalized);
      if (!m) continue;
      out.push_back({static_cast<int>(d), *m,
                     fmt::format("{} requires {} (CUDA {})", dist_label(dist), dist.metadata.requires_dist[i], *m),
                     NeedBasis::requires_dist, nullptr, line.req->normalized});
    }
  }
}

}  // namespace

std::string_view to_string(NeedBasis b) {
  switch (b) {
    case NeedBasis::needed:
      return "needed";
    case NeedBasis::requires_dist:
      return "requires-dist";
    case NeedBasis::extra:
      return "extra";
    case NeedBasis::build:
      return "build";
  }
  return "needed";
}

std::map<std::string, std::set<int>> soname_majors(const Knowledge& k) {
  std::map<std::string, std::set<int>> out;
  for (const auto& [name, family] : k.families)
    for (const auto& [major, m] : family.majors)
      for (const auto& s : m.sonames) out[s].insert(major);
  return out;
}

std::vector<bool> providers_of(const Environment& env, const Knowledge& k) {
  std::vector<bool> out(env.dists.size());
  for (std::size_t d = 0; d < env.dists.size(); ++d) out[d] = is_cuda_provider(k, env.dists[d]);
  return out;
}

bool is_meta(const Knowledge& k, const DistInfo& d) {
  return std::find(k.meta_packages.begin(), k.meta_packages.end(), d.normalized) != k.meta_packages.end();
}

std::vector<ConsumerNeed> consumer_needs(const Environment& env, const Knowledge& k, const ParsedRequirements& reqs,
                                         const MarkerEnvironment& markers) {
  std::vector<ConsumerNeed> out;
  const auto provider = providers_of(env, k);
  needs_by_needed(env, k, provider, out);
  needs_by_requirements(env, k, provider, reqs, markers, out);
  if (auto tv = torch_cuda_version(env))
    if (auto d = env.dist_index("torch"))
      out.push_back(
          {*d, tv->first, fmt::format("torch/version.py: cuda = '{}'", tv->second), NeedBasis::build, nullptr, {}});
  return out;
}

}  // namespace cudafix::resolver::inline plan
