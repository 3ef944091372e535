// Text for people: root facts first, every answer with its reason in libtree's style
// ([rpath of X], [ld.so.cache], ...), colour only when asked for or on a terminal.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "installer/probe/verify.hpp"
#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/plan/fix.hpp"
#include "resolver/plan/plan.hpp"
#include "resolver/plan/why.hpp"
#include "rules/doctor.hpp"

namespace cudafix::cli {

struct Style {
  bool color = false;
  bool verbose = false;
  // -q: errors only (as pip -q prints them), no summary, warning, hint or info.
  bool quiet = false;
  [[nodiscard]] std::string bold(std::string_view s) const;
  [[nodiscard]] std::string bad(std::string_view s) const;
  [[nodiscard]] std::string warn(std::string_view s) const;
  [[nodiscard]] std::string good(std::string_view s) const;
  [[nodiscard]] std::string dim(std::string_view s) const;
};

// A path as text shows it: relative to the site folder holding it (else absolute), printable.
[[nodiscard]] std::string shown(const resolver::Environment& env, const std::string& path);
// "1 file", "2 files".
[[nodiscard]] std::string count_of(std::size_t n, std::string_view one, std::string_view many);
// "and"-joined names: "a and b", "a, b and c".
[[nodiscard]] std::string and_list(const std::vector<std::string>& names);
// A snapshot's scope as said after its file count: "" for the whole environment, else
// ", scoped to nvidia_cudnn_cu12-9.10.2.21" (each dist folder without .dist-info), or
// ", scoped to no dist".
[[nodiscard]] std::string scope_text(const std::optional<std::vector<std::string>>& scope);
[[nodiscard]] std::string reason_label(const resolver::Environment& env, const resolver::Resolution& r);
[[nodiscard]] std::string scan_text(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                    const Style& style);
[[nodiscard]] std::string why_text(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                   const resolver::WhyReport& report, const Style& style);

[[nodiscard]] std::string doctor_text(const resolver::Environment& env, const rules::DoctorReport& report,
                                      const Style& style);
// The next command for a finding, as the command that shows it judges it.
using NextStep = std::function<std::string(const rules::Finding&)>;
// The errors and warnings of `report` as doctor's text shows them (root causes first, what they
// cause nested, one blank line before each root), with `next` as each root's next step: what
// `fix` leaves.
[[nodiscard]] std::string findings_left_text(const rules::DoctorReport& report, const NextStep& next,
                                             const Style& style);
// `cudafix rules`: every rule with its default severity, the one the configuration gives it
// (`settings`), the scan depth it needs and its summary.
[[nodiscard]] std::string rules_text(const std::map<std::string, rules::RuleSettings>& settings, const Style& style);
[[nodiscard]] std::string plan_remove_text(const resolver::Environment& env, const resolver::RemovalPlan& plan,
                                           const Style& style);
[[nodiscard]] std::string plan_fix_text(const resolver::Environment& env, const resolver::FixPlan& plan,
                                        const Style& style);
[[nodiscard]] std::string verify_text(const resolver::Environment& env, const installer::probe::VerifyReport& report,
                                      const Style& style);

}  // namespace cudafix::cli
