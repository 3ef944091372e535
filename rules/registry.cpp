#include "rules/rule.hpp"

#include "resolver/base/closest.hpp"

namespace cudafix::rules {

namespace checks {
// One definition in each rules/checks/<id>.cpp.
extern const Rule shared_path, missing_files, metadata_only, mixed_cuda_major, unresolved_library, shadowed_library,
    missing_dlopen_library, foreign_sublibrary, unsatisfied_requirement, unsatisfied_extra, duplicate_dist,
    hash_mismatch, unreadable_record, invalid_metadata, untrusted_state, foreign_object, lock_package_drift,
    lock_file_drift, lock_verdict_drift;
}  // namespace checks

const std::vector<const Rule*>& registry() {
  static const std::vector<const Rule*> rules = {&checks::shared_path,        &checks::missing_files,
                                                 &checks::metadata_only,      &checks::mixed_cuda_major,
                                                 &checks::unresolved_library, &checks::foreign_object,
                                                 &checks::shadowed_library,   &checks::missing_dlopen_library,
                                                 &checks::foreign_sublibrary, &checks::unsatisfied_requirement,
                                                 &checks::unsatisfied_extra,  &checks::duplicate_dist,
                                                 &checks::hash_mismatch,      &checks::unreadable_record,
                                                 &checks::invalid_metadata,   &checks::untrusted_state,
                                                 &checks::lock_package_drift, &checks::lock_file_drift,
                                                 &checks::lock_verdict_drift};
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

std::vector<std::string> closest_rule_ids(std::string_view id, std::size_t at_most) {
  std::vector<std::string> ids;
  for (const auto* rule : registry()) ids.emplace_back(rule->id);
  return resolver::closest_names(id, ids, at_most);
}

}  // namespace cudafix::rules
