// Every dist's Requires-Dist, parsed once, and pip's view of what is installed: shared by
// doctor's requirement rules (pip check's verdicts) and the planner (what a removal leaves unmet).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "resolver/env/environment.hpp"
#include "resolver/pep/pep440.hpp"
#include "resolver/pep/pep508.hpp"

namespace cudafix::resolver::inline env {

struct ParsedRequirement {
  std::optional<Requirement> req;
  std::string error;     // why the line is no PEP 508 requirement
  bool applies = false;  // its marker holds here, with no extra asked for (pip check's reading)
};

struct ParsedRequirements {
  std::vector<std::vector<ParsedRequirement>> lines;  // per dist, per Requires-Dist line
  std::vector<std::optional<Version>> versions;       // per dist: its version, when PEP 440
};

// The markers of the environment's interpreter (its full version when pyvenv.cfg gives it).
[[nodiscard]] MarkerEnvironment marker_environment_of(const EnvLayout& layout);
// Parses every dist's Requires-Dist and evaluates its marker, in parallel.
[[nodiscard]] ParsedRequirements parse_requirements(const Environment& env, const MarkerEnvironment& markers,
                                                    unsigned threads);
// The dists pip sees: the first of each name, in the order of the site folders.
[[nodiscard]] std::vector<const DistInfo*> visible_dists(const Environment& env);

}  // namespace cudafix::resolver::inline env
