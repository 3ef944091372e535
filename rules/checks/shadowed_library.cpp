// shadowed-library: CUDA libraries that resolve outside the environment though the consumer requires a provider inside
// it. The rule's document below is what `cudafix explain shadowed-library` prints.
#include <fmt/format.h>

#include <set>

#include "resolver/base/text.hpp"
#include "resolver/env/requirements.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

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

void check(Context& c) {
  c.parse_requirements();
  const auto cause_by_soname = c.causes_by_soname();
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
    // A copy only a direct dlopen of a lone object would load is a fact, not something to act on.
    f.severity = g.all_lone ? Severity::info : same_release || asked_release ? Severity::warning : Severity::error;
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
    f.paths = {g.outside};  // after the consumers
    name_soname_consumers(c, f, soname, g.consumers, g.dists, cause_by_soname, g.consumers.size());
    c.add(std::move(f));
  }
}

}  // namespace

extern const Rule shadowed_library;
const Rule shadowed_library{
    "shadowed-library",
    Severity::error,
    r::ScanDepth::full,
    true,
    false,
    "CUDA libraries that resolve outside the environment though the consumer requires a provider inside it.",
    R"md(# shadowed-library

CUDA libraries that resolve outside the environment though the consumer requires a provider inside it.

## What it finds
A CUDA-family NEEDED that the loader model resolves to a file outside the environment (the
host's ld.so.cache, LD_LIBRARY_PATH, a system folder) while the consumer's dist requires a dist
that provides it, directly or through an extras chain (torch -> cuda-toolkit[cudnn] ->
nvidia-cudnn-cu13). It compares the outside copy's release (from its real file name) with the
installed provider's.

## Why it matters
This is the silent failure: torch imports, but runs on the system's cuDNN 9.1 instead of the
9.19 it was built and tested with, because the wheel's copy is gone or never came. The symptoms
are a `torch.backends.cudnn.version()` you did not expect, missing kernels, or crashes deep
inside a convolution.

## Severity
- error: the outside copy is another release than the provider the dist requires, or its
  release cannot be told;
- warning: the outside copy is the same release as the installed provider, or a release the
  requirement allows with no provider installed;
- info: nothing in the environment NEEDs or imports the object that asks for it (a
  libcusolverMg.so.12 no import loads): only a direct dlopen of that object would load the outside
  copy (shown with `-v` and in `--json`).

## How to fix it
Reinstall the provider the consumer requires (`cudafix plan fix`, or `pip install
--force-reinstall --no-deps` of it); `cudafix why SONAME` shows the search path that found the
outside copy. Do not fix it with LD_LIBRARY_PATH: that hides the missing provider from the next
user of the environment.

## Example
```console
$ cudafix doctor --select shadowed-library
error[shadowed-library] #1 libcudnn.so.9 resolves outside the environment, to /usr/local/cuda-13.0/lib/libcudnn.so.9, though torch requires nvidia-cudnn-cu13==9.19.0.56 (nvidia-cudnn-cu13 9.19.0.56 is installed)
      needed by torch/lib/libtorch_cuda.so
    next: cudafix why libcudnn.so.9
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
