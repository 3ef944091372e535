// The repair plan `plan fix` prints and `fix` carries out, assembled from the wheels at hand: those
// of the --find-links folders that the plan wants, then those the wheel sources (an index, the pip
// and uv caches) have for the steps still lacking one, the plan made again with them. The command
// line decides the folders and the sources and shows the result; nothing here prints: what a
// source could not give is in `source_problems`, the time each part took in `cost`.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "installer/source/sources.hpp"
#include "installer/wheel/read.hpp"
#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/plan/fix.hpp"

namespace cudafix::installer::apply {

struct FixPlanRequest {
  std::optional<int> cuda_major;  // --cuda; none: the consumers' evidence picks it
  unsigned threads = 0;
  std::vector<std::string> supported_tags;  // the environment's, best first
  std::string python_version;               // what a wheel's Requires-Python must accept
  std::vector<std::string> find_links;      // folders of wheels
  // The wheel sources for the steps the folders had no wheel for (asked once, when the plan has
  // a step); their `index_urls` empty and not `offline`: none.
  std::function<source::SourceSettings()> source_settings;
};

// What assembling the plan cost, for --timings.
struct FixPlanCost {
  double find_links_ms = 0, plan_ms = 0, fingerprint_ms = 0;
  std::size_t wheels_read = 0;  // the folders' wanted wheels and the sources', read or refused
  std::size_t dists_wanted = 0;
  WheelReadCost read;
};

// The plan's steps point into options.wheels, which a move of the whole keeps in place.
struct PlannedFix {
  resolver::FixOptions options;
  resolver::FixPlan plan;
  resolver::Fingerprint fingerprint;
  std::vector<std::string> tags;             // the tags a needed wheel may carry here
  std::vector<std::string> source_problems;  // a wanted wheel refused, a source that could not give one
  FixPlanCost cost;
};

// Throws resolver::Error where the sources would download and there is no cache folder to keep
// what they download in.
[[nodiscard]] PlannedFix make_fix_plan(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                       const FixPlanRequest& request);

}  // namespace cudafix::installer::apply
