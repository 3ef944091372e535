// What each consumer needs of CUDA, judged in one place for doctor's rules, the planner and
// `why`. A consumer is a dist that ships no CUDA libraries but uses them (torch, jax's CUDA
// plugins, cupy). It needs a major when:
// - one of its objects NEEDs a soname only that major ships (libcudart.so.13);
// - its Requires-Dist names a provider of that major (nvidia-cudnn-cu13), its marker holding
//   here; or an extra of it that an installed dist asks for does (jax[cuda13] asks
//   jax-cuda13-plugin[with-cuda], whose with-cuda extra requires nvidia-cudnn-cu13): JAX's CUDA
//   plugins NEED no CUDA library and load them all by dlopen, so their requirements are the only
//   sign of the major they were built for;
// - it is torch and torch/version.py says `cuda = '13.0'`.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/env/requirements.hpp"

namespace cudafix::resolver::inline plan {

enum class NeedBasis { needed, requires_dist, extra, build };
[[nodiscard]] std::string_view to_string(NeedBasis b);

struct ConsumerNeed {
  int dist = -1;  // the consumer, an index into env.dists (-1: given on the command line)
  int major = 0;
  std::string why;  // "torch 2.11.0: torch/lib/libtorch_cuda.so NEEDs libcudart.so.13, which only CUDA 13 ships"
  NeedBasis basis = NeedBasis::needed;
  const SharedObject* object = nullptr;  // needed: the object whose NEEDED says it
  std::string requirement;               // requires_dist, extra: the provider it names (normalised)
};

// Every need of every consumer, one line per (dist, major, soname) or requirement.
[[nodiscard]] std::vector<ConsumerNeed> consumer_needs(const Environment& env, const Knowledge& k,
                                                       const ParsedRequirements& reqs,
                                                       const MarkerEnvironment& markers);

// soname -> the CUDA majors whose families ship it.
[[nodiscard]] std::map<std::string, std::set<int>> soname_majors(const Knowledge& k);
// is_cuda_provider per dist, asked once (it reads the RECORD).
[[nodiscard]] std::vector<bool> providers_of(const Environment& env, const Knowledge& k);
// A dist without files by design, whose extras pull the real wheels (cuda-toolkit).
[[nodiscard]] bool is_meta(const Knowledge& k, const DistInfo& d);

}  // namespace cudafix::resolver::inline plan
