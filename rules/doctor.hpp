// `cudafix doctor`: named checks over the Environment, each producing Findings (plain data).
// Rules are switched on and tuned by the `[rules.<id>]` tables of the knowledge TOML files:
//   [rules.shared-path]
//   enabled = true              # false: the rule does not run
//   severity = "warning"        # every finding of the rule at this severity
//   allow = ["nvidia/__init__.py"]  # subjects (paths, dists, sonames) the rule stays quiet about
// One root cause is one root finding: the findings it causes name it in `caused_by`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/pep/pylock.hpp"

namespace cudafix::rules {

enum class Severity { error, warning, info };
[[nodiscard]] std::string_view to_string(Severity s);
[[nodiscard]] std::optional<Severity> severity_from(std::string_view s);

// The repair a finding suggests, as a planner goal.
struct Remedy {
  std::string action;  // "reinstall", "remove", "install", "fix-plan"
  std::vector<std::string> dists;
  std::string command;  // the next command to run
};

struct Finding {
  int id = 0;
  std::string rule;
  Severity severity = Severity::warning;
  std::string message;                // one sentence: what is wrong
  std::vector<std::string> evidence;  // the facts behind it, one per line
  std::vector<std::string> dists;     // dist-info folder names
  std::vector<std::string> paths;     // absolute
  std::vector<std::string> sonames;
  std::vector<int> caused_by;  // ids of the findings that cause this one
  std::optional<Remedy> remedy;
};

struct RuleSettings {
  bool enabled = true;
  std::optional<Severity> severity;
  std::vector<std::string> allow;
};

// Every rule id doctor knows, in registry()'s order (rules/rule.hpp).
[[nodiscard]] const std::vector<std::string>& rule_ids();

struct DoctorOptions {
  bool verify_hashes = false;
  std::vector<std::string> select;  // empty: every enabled rule
  std::vector<std::string> ignore;
  unsigned threads = 0;
  std::map<std::string, RuleSettings> settings;                                // from the TOML files
  std::function<void(std::uint64_t done, std::uint64_t total)> hash_progress;  // bytes hashed
  // What the caller's recovery refused to obey (cudafix's state not trusted): untrusted-state says it.
  std::vector<std::string> refused_recovery;
  // `doctor --lock LOCK`: the lock the lock-*-drift rules compare the environment with (none: they
  // do not run).
  std::shared_ptr<const resolver::Lock> lock;
  std::string lock_file;  // its path, for messages
};

struct DoctorReport {
  std::vector<Finding> findings;  // sorted by severity, rule, subject; ids follow that order
  int errors = 0, warnings = 0, infos = 0;
  std::uint64_t hashed_files = 0, hashed_bytes = 0;
};

// How much of the environment the rules that will run need scanned.
[[nodiscard]] resolver::ScanDepth scan_depth_for(const DoctorOptions& options);
// Whether the rules that will run read every Requires-Dist (the scan can parse them early).
[[nodiscard]] bool parses_requirements(const DoctorOptions& options);

// Throws resolver::Error for an unknown rule id in select/ignore.
[[nodiscard]] DoctorReport run_doctor(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                      const DoctorOptions& options);

}  // namespace cudafix::rules
