// JSON documents (schema 1, docs/json.md): schema, command and venv first; lists sorted;
// paths relative to their site folder when one folder is unambiguous, else {"root","path"};
// bytes that are not UTF-8 replaced, with "lossy": true on the object that carries them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/json_writer.hpp"
#include "cli/text_output.hpp"
#include "installer/probe/verify.hpp"
#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/plan/fix.hpp"
#include "resolver/plan/plan.hpp"
#include "resolver/plan/why.hpp"
#include "rules/doctor.hpp"
#include "rules/rule.hpp"

namespace cudafix::cli {

// `threads` (0: one per core) write the objects.
[[nodiscard]] std::string scan_json(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                    unsigned threads = 0);
[[nodiscard]] std::string why_json(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                   const resolver::WhyReport& report);
[[nodiscard]] std::string verify_json(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                      const installer::probe::VerifyReport& report);
// `recovered`: what recovering a killed transaction wrote before the scan (docs/json.md).
[[nodiscard]] std::string doctor_json(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                      const rules::DoctorReport& report,
                                      const std::vector<std::string>& recovered = {});
// What `fix` leaves (its "left"): the errors and warnings of `report`, each as doctor's document
// has it plus "next_step" (`next` of it: the one findings_left_text shows), as one JSON array
// written into `w`, the writer of fix's document.
void write_findings_left(JsonWriter& w, const resolver::Environment& env, const resolver::Knowledge& knowledge,
                         const rules::DoctorReport& report, const NextStep& next);
// The plan documents, as they go out on their own (plan_*_json) or written whole into `w`, as the
// value of a key of the document that holds them (guard's uninstall, fix's plan).
[[nodiscard]] std::string plan_remove_json(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                           const resolver::RemovalPlan& plan);
void write_plan_remove(JsonWriter& w, const resolver::Environment& env, const resolver::Knowledge& knowledge,
                       const resolver::RemovalPlan& plan);
[[nodiscard]] std::string plan_fix_json(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                        const resolver::FixPlan& plan, const resolver::Fingerprint& fingerprint,
                                        const std::vector<std::string>& need_tags,
                                        const std::vector<std::string>& source_problems = {});
void write_plan_fix(JsonWriter& w, const resolver::Environment& env, const resolver::Knowledge& knowledge,
                    const resolver::FixPlan& plan, const resolver::Fingerprint& fingerprint,
                    const std::vector<std::string>& need_tags, const std::vector<std::string>& source_problems = {});
// `cudafix rules --json`: {"schema":1,"command":"rules","venv":ROOT|null,"rules":[{"id","severity",
// "configured_severity":S|null,"enabled","depth","summary"}]}, in the registry's order.
[[nodiscard]] std::string rules_json(const std::optional<std::string>& venv,
                                     const std::map<std::string, rules::RuleSettings>& settings);
// `cudafix explain RULE --json`: {"schema":1,"command":"explain","venv":null,"rule":ID,"severity",
// "depth","summary","document":MARKDOWN}.
[[nodiscard]] std::string explain_json(const rules::Rule& rule);
// `cudafix --json --version` and `cudafix version --json`: {"schema":1,"command":"version",
// "venv":null,"version":X}.
[[nodiscard]] std::string version_json(const std::string& version);
// A command line or a command that could not run: {"schema":1,"command":C|null,"venv":null,
// "error":MESSAGE,"exit":N}, `command` empty where the words typed name none.
[[nodiscard]] std::string error_json(const std::string& command, const std::string& message, int exit_code);

}  // namespace cudafix::cli
