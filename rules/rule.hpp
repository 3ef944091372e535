// A doctor rule: its id, what it needs scanned, its documentation and its check, in one value.
// Every rule lives in its own file under rules/checks/ (as ruff keeps one file per rule) and is
// listed by `registry()`; `cudafix rules` prints the list and `cudafix explain ID` the document.
//
// A rule's document is Markdown with these sections, in this order (the self-check test
// `Rules.EveryRuleHasItsDocumentationATableRowAndAFiringTest` requires each):
//   ## What it finds / ## Why it matters / ## Severity / ## How to fix it / ## Example
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "resolver/env/environment.hpp"
#include "rules/doctor.hpp"

namespace cudafix::rules {

namespace checks {
struct Context;
}

struct Rule {
  std::string_view id;
  Severity severity;          // of its most serious findings; the document says when it gives less
  resolver::ScanDepth depth;  // how much of the environment its check reads
  bool reads_requirements;    // whether it reads every Requires-Dist (the scan can parse them early)
  // Runs before every other rule (when selected), so that their findings can name its findings
  // in `caused_by`: the root causes.
  bool root_cause;
  std::string_view summary;  // one line, for `cudafix rules`
  std::string_view doc;      // the whole document, for `cudafix explain`
  void (*check)(checks::Context&);
};

// "dists", "files", "full": how `cudafix rules` names a depth.
[[nodiscard]] std::string_view to_string(resolver::ScanDepth depth);

// Every rule, in the order rules/registry.cpp lists them (the order of `cudafix rules` and of the
// rule ids an error message lists).
[[nodiscard]] const std::vector<const Rule*>& registry();
// nullptr for an unknown id.
[[nodiscard]] const Rule* find_rule(std::string_view id);
// The registered ids closest to `id` (edit distance), best first: for "did you mean".
[[nodiscard]] std::vector<std::string> closest_rule_ids(std::string_view id, std::size_t at_most = 3);

}  // namespace cudafix::rules
