// The plan document on disk (`cudafix plan fix -o PLAN.json`, read back by `cudafix apply`), as
// one typed value. A plan file is hostile input like anything else in an environment: anyone who
// can write it can edit it, so it is parsed strictly, and `apply` then binds every step to the
// environment as it is now (cli/write_commands.cpp) rather than trusting what the file says.
//
// The format, schema 1 (docs/json.md gives each field's meaning; cli/plan_json.cpp writes it):
//   {"schema":1, "command":"plan fix", "venv":STRING|null,
//    "ok":BOOL, "problem":STRING|null,
//    "fingerprint":{"digest":HEX64, "records":[{"dist":STRING,"sha256":STRING}],
//                   "files":[{"path":PATH,"exists":BOOL,"dev":U64,"ino":U64,"size":U64,"mtime_ns":I64}]},
//    "target":{"cuda_major":INT|null, "given":BOOL, "evidence":[{"dist":STRING|null,"cuda_major":INT,"why":STRING}]},
//    "steps":[{"action":"remove"|"reinstall"|"install", "dist":STRING|null, "name":STRING, "version":STRING,
//              "wheel":{"file":STRING|null, "sha256":STRING, "source":STRING, "url":STRING|null,
//                       "objects":[{"path":STRING,"soname":STRING|null,"needed":[STRING],
//                                   "rpath":STRING|null,"runpath":STRING|null}],
//                       "read":{"bytes":U64,"of":U64}|null}|null,
//              "why":STRING, "simulated":BOOL, "deletes":[PATH], "keeps":[PATH], "writes":[PATH],
//              "after_step":{"ok":BOOL,"worse":[BREAK]}}],
//    "needs":[{"name":STRING,"version":STRING,"tags":[STRING],"why":STRING}],
//    "remaining":[STRING],
//    "conflict":[{"action":ACTION,"name":STRING,"version":STRING,"why":STRING,"worse":[BREAK]}],
//    "source_problems":[STRING]}
//   PATH  = a string (relative to the one site folder, absolute outside it; a folder ends in '/')
//           or {"root":"purelib"|"platlib"|"system","path":STRING} where there are several sites
//   BREAK = {"consumer":PATH,"consumer_dist":STRING|null,"soname":STRING,"kind":"needed"|"dlopen",
//            "before":PATH,"after":PATH|null,"after_version":STRING|null,"why":STRING}
//   Any object may also carry "lossy":true (a string in it had bytes that were not UTF-8).
//
// Every field is required and of its type; a field this schema lacks is refused by name, as is
// any other schema (fields are only ever added by a new schema: an older cudafix must not carry
// out a plan it half understands). Messages name the file and the field as a path:
// "plan.json: steps[1].action: expected a string, got number".
//
// Limits: the file is at most k_plan_file_max bytes (16 MiB: a plan for a torch environment is
// well under 1 MiB) and nests at most k_plan_max_depth arrays and objects (the format nests 6;
// nlohmann's parser keeps its own stack, but every nested level costs memory and the tree is
// freed level by level), both checked before the text is parsed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "resolver/env/environment.hpp"
#include "resolver/plan/fix.hpp"

namespace cudafix::resolver::inline plan {

inline constexpr std::size_t k_plan_file_max = 16u << 20;
inline constexpr std::size_t k_plan_max_depth = 32;
inline constexpr int k_plan_schema = 1;

// A path as plan documents write it.
struct PlanPath {
  std::optional<SiteRoot> root;  // given as {root, path}: relative to that site folder
  std::string path;              // otherwise relative to the one site folder, or absolute
  bool operator==(const PlanPath&) const = default;
};

struct PlanBreak {
  PlanPath consumer;
  std::optional<std::string> consumer_dist;
  std::string soname;
  RequiredBy kind = RequiredBy::needed;
  PlanPath before;
  std::optional<PlanPath> after;
  std::optional<std::string> after_version;
  std::string why;
  bool operator==(const PlanBreak&) const = default;
};

struct PlanObject {
  std::string path;
  std::optional<std::string> soname;
  std::vector<std::string> needed;
  std::optional<std::string> rpath, runpath;
  bool operator==(const PlanObject&) const = default;
};

struct PlanWheel {
  std::optional<std::string> file;
  std::string sha256;
  std::string source;
  std::optional<std::string> url;
  std::vector<PlanObject> objects;
  std::optional<std::pair<std::uint64_t, std::uint64_t>> read;  // (bytes, of)
  bool operator==(const PlanWheel&) const = default;
};

struct PlanStep {
  StepAction action = StepAction::remove;
  std::optional<std::string> dist;  // a dist-info folder's name
  std::string name;
  std::string version;
  std::optional<PlanWheel> wheel;
  std::string why;
  bool simulated = true;
  std::vector<PlanPath> deletes, keeps, writes;
  bool ok = true;  // after_step.ok
  std::vector<PlanBreak> worse;
  bool operator==(const PlanStep&) const = default;
};

struct PlanFileStamp {
  PlanPath path;
  bool exists = false;
  std::uint64_t dev = 0, ino = 0, size = 0;
  std::int64_t mtime_ns = 0;
  bool operator==(const PlanFileStamp&) const = default;
};

struct PlanFingerprint {
  std::string digest;
  std::vector<std::pair<std::string, std::string>> records;  // (dist-info folder, RECORD's SHA-256)
  std::vector<PlanFileStamp> files;
  bool operator==(const PlanFingerprint&) const = default;
};

struct PlanEvidence {
  std::optional<std::string> dist;
  int cuda_major = 0;
  std::string why;
  bool operator==(const PlanEvidence&) const = default;
};

struct PlanNeed {
  std::string name, version;
  std::vector<std::string> tags;
  std::string why;
  bool operator==(const PlanNeed&) const = default;
};

struct PlanConflict {
  StepAction action = StepAction::remove;
  std::string name, version, why;
  std::vector<PlanBreak> worse;
  bool operator==(const PlanConflict&) const = default;
};

struct PlanFile {
  std::optional<std::string> venv;
  bool ok = false;
  std::optional<std::string> problem;
  PlanFingerprint fingerprint;
  std::optional<int> cuda_major;
  bool target_given = false;
  std::vector<PlanEvidence> evidence;
  std::vector<PlanStep> steps;
  std::vector<PlanNeed> needs;
  std::vector<std::string> remaining;
  std::vector<PlanConflict> conflict;
  std::vector<std::string> source_problems;
  bool operator==(const PlanFile&) const = default;
};

// The plan document in `text`, checked whole; throws Error "NAME: FIELD: what is wrong".
[[nodiscard]] PlanFile parse_plan_file(std::string_view text, std::string_view name);

// The plan `plan_fix` made, as the one typed value parse_plan_file reads back from its document
// (cli/plan_json.cpp writes it from the same arguments): each path in the form the document
// gives it (plan_path_of), each dist by its dist-info folder, so that `fix` carries out its own
// plan through the very checks `apply` runs on a saved one, without reading its document back.
// `need_tags`: the tags a needed wheel may carry; `source_problems`: what the wheel sources said.
[[nodiscard]] PlanFile plan_file_of(const Environment& env, const FixPlan& plan, const Fingerprint& fingerprint,
                                    const std::vector<std::string>& need_tags,
                                    const std::vector<std::string>& source_problems);

// An absolute path as a plan document writes it: relative to its site folder ("." for the
// folder itself; {root, path} where the environment has several), else as it is. absolute_path
// gives it back.
[[nodiscard]] PlanPath plan_path_of(const Environment& env, const std::string& abs);

// The file at `path`, at most k_plan_file_max bytes; throws Error naming it.
[[nodiscard]] std::string read_plan_file(const std::string& path);

// A plan path made absolute in `env` (a folder keeps its trailing '/'); throws Error for a site
// folder the environment lacks.
[[nodiscard]] std::string absolute_path(const Environment& env, const PlanPath& p);

// "remove torch 2.11.0": how the prompt, the verification and messages name a step.
[[nodiscard]] std::string step_label(const PlanStep& step);

}  // namespace cudafix::resolver::inline plan
