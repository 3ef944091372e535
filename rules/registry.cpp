#include <algorithm>
#include <numeric>

#include "rules/rule.hpp"

namespace cudafix::rules {

namespace checks {
// One definition in each rules/checks/<id>.cpp.
extern const Rule shared_path, missing_files, metadata_only, mixed_cuda_major, unresolved_library, shadowed_library,
    missing_dlopen_library, unsatisfied_requirement, unsatisfied_extra, duplicate_dist, hash_mismatch,
    unreadable_record, invalid_metadata, untrusted_state;
}  // namespace checks

const std::vector<const Rule*>& registry() {
  static const std::vector<const Rule*> rules = {&checks::shared_path,
                                                 &checks::missing_files,
                                                 &checks::metadata_only,
                                                 &checks::mixed_cuda_major,
                                                 &checks::unresolved_library,
                                                 &checks::shadowed_library,
                                                 &checks::missing_dlopen_library,
                                                 &checks::unsatisfied_requirement,
                                                 &checks::unsatisfied_extra,
                                                 &checks::duplicate_dist,
                                                 &checks::hash_mismatch,
                                                 &checks::unreadable_record,
                                                 &checks::invalid_metadata,
                                                 &checks::untrusted_state};
  return rules;
}

std::string_view to_string(resolver::ScanDepth depth) {
  switch (depth) {
    case resolver::ScanDepth::dists:
      return "dists";
    case resolver::ScanDepth::files:
      return "files";
    case resolver::ScanDepth::full:
      return "full";
  }
  return "full";
}

const Rule* find_rule(std::string_view id) {
  for (const auto* rule : registry())
    if (rule->id == id) return rule;
  return nullptr;
}

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> closest_rule_ids(std::string_view id, std::size_t at_most) {
  std::vector<std::pair<std::size_t, std::string_view>> scored;
  for (const auto* rule : registry()) {
    // A word of the id typed alone ("shadowed", or misspelt: "shadowd") is as close as a typo.
    std::size_t distance = edit_distance(id, rule->id);
    if (!id.empty() && rule->id.find(id) != std::string_view::npos) distance = std::min<std::size_t>(distance, 1);
    for (std::size_t start = 0; start < rule->id.size();) {
      const auto dash = std::min(rule->id.find('-', start), rule->id.size());
      distance = std::min(distance, 1 + edit_distance(id, rule->id.substr(start, dash - start)));
      start = dash + 1;
    }
    scored.emplace_back(distance, rule->id);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (const auto& [distance, rid] : scored)
    if (out.size() < at_most && distance <= std::max<std::size_t>(3, rid.size() / 3)) out.emplace_back(rid);
  return out;
}

}  // namespace cudafix::rules
