// What every check reads and writes: the Environment, the knowledge, the options, the findings
// so far and the root causes found first. Shared by the files of rules/checks/ only.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/env/requirements.hpp"
#include "resolver/pep/pep508.hpp"
#include "resolver/plan/lock_env.hpp"
#include "rules/doctor.hpp"

namespace cudafix::rules::checks {

// Whether a rule runs: selected (or nothing selected), not ignored, and not switched off.
[[nodiscard]] bool rule_wanted(const DoctorOptions& options, std::string_view id);

// The files a dist lists that are not on disk, libraries apart (bytecode left out).
struct MissingGroup {
  int dist;
  std::vector<std::string> libraries, others;
  // Debian's system dist-packages: scripts a RECORD names under the package build's
  // `../scripts/` or `scripts-3.N/`, with where the package put them (`<prefix>/bin/NAME`), or
  // empty where it ships none. Not missing: dh-python moves them after pip wrote RECORD.
  std::vector<std::pair<std::string, std::string>> moved_by_debian;
};
[[nodiscard]] std::vector<MissingGroup> missing_groups(const resolver::Environment& env);

// Reinstalling a dist as it is: what brings back files it lists.
[[nodiscard]] Remedy reinstall(const resolver::DistInfo& d);
[[nodiscard]] const resolver::DistInfo* installed(const resolver::Environment& env, const std::string& normalized);
// A Requires-Dist line without its marker ("fsspec>=0.8.5; extra == 'x'" -> "fsspec>=0.8.5").
[[nodiscard]] std::string without_marker(const std::string& line);

struct Context {
  const resolver::Environment& env;
  const resolver::Knowledge& knowledge;
  const DoctorOptions& options;
  resolver::MarkerEnvironment markers;
  DoctorReport& report;  // the hash check adds what it hashed
  std::vector<Finding> found;
  // The files each dist lists that are gone (empty when the files were not scanned).
  std::vector<MissingGroup> groups;
  // dist index -> the id of its metadata-only finding, filled by that root-cause rule.
  std::map<int, int> metadata_only;
  // Every dist's Requires-Dist, parsed once (in parallel) for both requirement rules.
  std::shared_ptr<const resolver::ParsedRequirements> requirements;
  // soname -> the families and majors that ship it (libcudnn.so.9: cudnn 12 and 13); asked once
  // per NEEDED of every object, so indexed once here.
  std::unordered_map<std::string, std::vector<std::pair<const resolver::CudaFamily*, int>>> soname_index;

  void index_sonames();
  [[nodiscard]] const std::vector<std::pair<const resolver::CudaFamily*, int>>& families(
      const std::string& soname) const;
  [[nodiscard]] bool is_cuda(const std::string& soname) const { return soname_index.count(soname) > 0; }
  // The scan's, when it parsed them while modelling the libraries.
  void parse_requirements();
  [[nodiscard]] std::size_t index_of(const resolver::DistInfo& d) const {
    return static_cast<std::size_t>(&d - env.dists.data());
  }
  // Sonames whose provider was a library a metadata-only dist lost: the cause to point at.
  [[nodiscard]] std::map<std::string, int> causes_by_soname() const;
  [[nodiscard]] bool allowed(const std::string& rule, const std::vector<std::string>& subjects) const;
  // Adds a finding of a rule that is to run and not allowed for its subject; returns its id, or
  // -1 when it was left out.
  int add(Finding f);
  // How the environment differs from options.lock, computed once for the lock-*-drift rules
  // (its libraries hashed once); empty without a lock.
  [[nodiscard]] const std::vector<resolver::Drift>& drift();
  std::optional<std::vector<resolver::Drift>> drift_found;
};

// A finding of `rule` for one drift: its message, the package's dist, the files (absolute where
// they are on this host) and the soname; `cudafix sync LOCK` next.
[[nodiscard]] Finding drift_finding(const Context& c, const resolver::Drift& d, std::string_view rule,
                                    Severity severity);

// What a finding about one soname names, as unresolved-library and shadowed-library give it: the
// objects that need it (as evidence, at most `evidence_limit` of them), their dists, the root cause
// it has in `causes` (causes_by_soname), and `cudafix why SONAME` next.
void name_soname_consumers(const Context& c, Finding& f, const std::string& soname,
                           const std::vector<std::string>& consumers, const std::set<std::string>& dists,
                           const std::map<std::string, int>& causes, std::size_t evidence_limit);

// The Requires-Dist lines (indexes) that asking `dist` for `extra` adds: those whose marker
// mentions an extra and holds with this one.
[[nodiscard]] std::vector<std::size_t> lines_of_extra(const Context& c, const resolver::DistInfo& dist,
                                                      const std::string& extra);

}  // namespace cudafix::rules::checks
