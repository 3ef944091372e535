// The planner's judgement of a change: which required resolutions it makes worse, and the dry
// run of a removal (`cudafix plan remove`).
//
// A resolution is required when a kept object NEEDs the soname or a known dlopen loads it;
// driver and optional system sonames (libcuda.so.1, libibverbs.so.1) are not. It gets worse
// when the file it resolved to before is not what it resolves to after and
//   - it resolves nowhere now;
//   - it resolved inside the environment and now resolves outside it;
//   - the new provider inside the environment is another CUDA major or another version.
// A switch to another in-environment provider of the same major and version is no break.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/plan/uninstall.hpp"

namespace cudafix::resolver::inline plan {

enum class RequiredBy { needed, dlopen };

struct Break {
  std::string consumer;    // the object that asks (absolute path)
  int consumer_dist = -1;  // its owner in the environment before the change, or -1
  std::string soname;
  RequiredBy kind = RequiredBy::needed;
  std::string before;                        // the file it resolved to (absolute)
  std::optional<std::string> after;          // what it resolves to afterwards, or nothing
  std::optional<std::string> after_version;  // the new provider's version, where known
  std::string why;
};

// Every required resolution of an object in `after` that is worse than in `before`, sorted by
// consumer, then soname. With a target CUDA major (a repair plan), a move to a provider of that
// major is no break, and a move away from one is.
[[nodiscard]] std::vector<Break> worse_resolutions(const Environment& before, const Environment& after,
                                                   const Knowledge& k, std::optional<int> target = std::nullopt);

struct RequirementBreak {
  int dist = -1;            // the kept dist whose Requires-Dist goes unmet (index before the change)
  std::string requirement;  // the Requires-Dist line
  int removed = -1;         // the removed dist it needed
};

struct LeftBehind {
  int dist = -1;                   // a kept dist (index before the change)
  std::vector<std::string> paths;  // its listed files the removal deletes
  bool metadata_only = false;      // every file it had on disk outside its dist-info goes
};

struct Outcome {
  Deletion deletion;
  std::vector<Break> breaks;
  std::vector<LeftBehind> left;  // kept dists that lose files, sorted by dist
  // No row of the removed dists is refused (Deletion::refused), nothing required breaks, no
  // requirement goes unmet, and no kept dist is left metadata-only (pip would call it installed
  // and skip it ever after, even where nothing needs it today).
  [[nodiscard]] bool safe(const std::vector<RequirementBreak>& requirement_breaks) const {
    return deletion.refused.empty() && breaks.empty() && requirement_breaks.empty() &&
           std::none_of(left.begin(), left.end(), [](const LeftBehind& l) { return l.metadata_only; });
  }
};

struct RemovalPlan {
  std::vector<int> removing;  // indexes into env.dists, sorted
  Outcome pip;                // `pip uninstall`
  Outcome cudafix;            // owner-counted removal
  std::vector<RequirementBreak> requirement_breaks;
  [[nodiscard]] bool safe() const { return pip.safe(requirement_breaks); }
  [[nodiscard]] bool safe_with_cudafix() const { return cudafix.safe(requirement_breaks); }
};

// The dry run of removing `dists`, both ways.
[[nodiscard]] RemovalPlan plan_removal(const Environment& env, const Knowledge& k, const std::vector<int>& dists,
                                       unsigned threads = 0);

// The version a library's real file name carries (libcudnn.so.9.14.0 -> "9.14.0"), if any.
[[nodiscard]] std::optional<std::string> version_from_file_name(const std::string& path);

}  // namespace cudafix::resolver::inline plan
