// End-to-end: `cudafix rules`, `cudafix explain`, the pointer doctor's text gives to them, and the
// message for a command that does not exist; on real venvs made with `python3 -m venv`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>
#include <string>

#include "tests/e2e/cudafix_run.hpp"
#include "tests/support/process.hpp"

namespace cudafix {
namespace {

using nlohmann::json;
using test::k_bin;
using test::k_source;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using test::write_file;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A bare venv (no pip in it): rules and explain read only its cudafix.toml.
std::string bare_venv(const TempDir& dir) {
  const std::string venv = dir.path() + "/venv";
  EXPECT_EQ(run_shell(test::k_python + " -m venv --without-pip " + shell_quote(venv)).exit_code, 0);
  return venv;
}

// The ids doctor accepts, from its own error message for one it does not.
std::vector<std::string> doctor_rule_ids(const std::string& venv) {
  const auto r = run_shell(shell_quote(k_bin) + " doctor --venv " + shell_quote(venv) + " --select nope 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  const auto at = r.out.find("the rules are: ");
  EXPECT_NE(at, std::string::npos) << r.out;
  std::vector<std::string> ids;
  std::string rest = r.out.substr(at + 15);
  while (!rest.empty() && (rest.back() == '\n')) rest.pop_back();
  for (std::size_t start = 0; start <= rest.size();) {
    const auto comma = rest.find(", ", start);
    ids.push_back(rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 2;
  }
  return ids;
}

TEST(RulesCommand, ListsEveryRuleDoctorRunsWithItsDefaultAndConfiguredSeverity) {
  TempDir dir;
  const std::string venv = bare_venv(dir);
  write_file(venv + "/cudafix.toml",
             "[rules.shared-path]\nseverity = \"warning\"\n[rules.unsatisfied-extra]\nenabled = false\n");
  const auto listed = test::cudafix_json("rules --venv " + shell_quote(venv));
  ASSERT_EQ(listed.exit_code, 0);
  EXPECT_EQ(listed.doc["command"], "rules");
  EXPECT_EQ(listed.doc["venv"], venv);
  std::vector<std::string> ids;
  for (const auto& r : listed.doc["rules"]) {
    ids.push_back(r["id"]);
    EXPECT_FALSE(r["summary"].get<std::string>().empty()) << r.dump();
    const std::string id = r["id"];
    if (id == "shared-path") {
      EXPECT_EQ(r["configured_severity"], "warning");
      EXPECT_EQ(r["severity"], "error");
    } else if (id == "unsatisfied-extra") {
      EXPECT_EQ(r["enabled"], false);
      EXPECT_EQ(r["severity"], "warning");
    } else {
      EXPECT_TRUE(r["configured_severity"].is_null()) << r.dump();
      EXPECT_EQ(r["enabled"], true) << r.dump();
    }
  }
  EXPECT_EQ(ids, doctor_rule_ids(venv));
  EXPECT_EQ(ids.size(), 19u);  // 16, and the three lock-*-drift rules doctor runs under --lock

  // The text says the same, a line per rule.
  const auto text = run_shell(shell_quote(k_bin) + " rules --color never --venv " + shell_quote(venv));
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_THAT(text.out, ::testing::ContainsRegex("\nshared-path +error +warning +files +Paths that two"));
  EXPECT_THAT(text.out, ::testing::ContainsRegex("\nunsatisfied-extra +warning +off +dists "));
  EXPECT_THAT(text.out, ::testing::ContainsRegex("\nmetadata-only +error +- +files "));

  // Without an environment (nothing on PATH, no --venv) it still answers, from the defaults.
  const auto bare = run_shell("cd / && env -i PATH=/nonexistent HOME=" + shell_quote(dir.path()) + " " +
                              shell_quote(k_bin) + " rules --json");
  ASSERT_EQ(bare.exit_code, 0) << bare.out;
  const auto doc = json::parse(bare.out);
  EXPECT_TRUE(doc["venv"].is_null());
  for (const auto& r : doc["rules"]) EXPECT_TRUE(r["configured_severity"].is_null()) << r.dump();
}

TEST(ExplainCommand, PrintsEveryRulesWholeDocument) {
  TempDir dir;
  const std::string venv = bare_venv(dir);
  const auto listed = test::cudafix_json("rules --venv " + shell_quote(venv));
  ASSERT_EQ(listed.exit_code, 0);
  for (const auto& r : listed.doc["rules"]) {
    const std::string id = r["id"];
    const auto text = run_shell(shell_quote(k_bin) + " explain " + id);
    ASSERT_EQ(text.exit_code, 0) << id;
    EXPECT_THAT(text.out, StartsWith("# " + id + "\n"));
    for (const char* section :
         {"## What it finds", "## Why it matters", "## Severity", "## How to fix it", "## Example"})
      EXPECT_THAT(text.out, HasSubstr(std::string("\n") + section + "\n")) << id;
    // The example shows the rule's own finding.
    EXPECT_THAT(text.out, HasSubstr("[" + id + "] #1 ")) << id;
    const auto j = test::cudafix_json("explain " + id);
    EXPECT_EQ(j.doc["document"], text.out) << id;
    EXPECT_EQ(j.doc["summary"], r["summary"]) << id;
  }
}

TEST(ExplainCommand, AnUnknownRuleExitsTwoNamingTheClosestIds) {
  const auto typo = run_shell(shell_quote(k_bin) + " explain shadowd-library 2>&1");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.out, HasSubstr("cudafix: error: unknown rule 'shadowd-library'; did you mean shadowed-library?"));
  const auto word = run_shell(shell_quote(k_bin) + " explain metadata 2>&1");
  EXPECT_EQ(word.exit_code, 2);
  EXPECT_THAT(word.out, HasSubstr("did you mean metadata-only"));
  const auto misspelt_word = run_shell(shell_quote(k_bin) + " explain shadowd 2>&1");
  EXPECT_EQ(misspelt_word.exit_code, 2);
  EXPECT_THAT(misspelt_word.out, HasSubstr("did you mean shadowed-library"));
  const auto nothing = run_shell(shell_quote(k_bin) + " explain zzzzzzzz 2>&1");
  EXPECT_EQ(nothing.exit_code, 2);
  EXPECT_THAT(nothing.out, HasSubstr("unknown rule 'zzzzzzzz'; `cudafix rules` lists them"));
  EXPECT_THAT(nothing.out, ::testing::Not(HasSubstr("did you mean")));
}

TEST(CommandLine, AnUnknownCommandIsNamedWithTheCommandsThereAre) {
  const auto top = run_shell(shell_quote(k_bin) + " frobnicate 2>&1");
  EXPECT_EQ(top.exit_code, 2);
  EXPECT_THAT(top.out, HasSubstr("cudafix: error: unknown command 'frobnicate'; the commands are: scan, why, doctor, "
                                 "verify, plan, rules, explain, remove, install, apply, fix, sync, lock, history, "
                                 "rollback, snapshot, guard, demo"));
  // After options that take a value, and inside `plan`.
  const auto after = run_shell(shell_quote(k_bin) + " --venv /tmp --threads 2 frob 2>&1");
  EXPECT_EQ(after.exit_code, 2);
  EXPECT_THAT(after.out, HasSubstr("unknown command 'frob';"));
  const auto plan = run_shell(shell_quote(k_bin) + " plan frob 2>&1");
  EXPECT_EQ(plan.exit_code, 2);
  EXPECT_THAT(plan.out, HasSubstr("unknown command 'frob' of 'plan'; the commands are: remove, fix"));
}

TEST(DoctorText, EachRulesFirstFindingPointsAtItsDocument) {
  TempDir dir;
  const std::string venv = dir.path() + "/demo";
  const auto made = run_shell(shell_quote(k_bin) + " materialize " + shell_quote(k_source + "/cli/demo_env.json") +
                              " " + shell_quote(venv));
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const auto j = test::cudafix_json("doctor --venv " + shell_quote(venv) + test::k_no_cache);
  std::set<std::string> shown;  // the rules of findings text shows without -v
  for (const auto& f : j.doc["findings"])
    if (f["severity"] != "info") shown.insert(f["rule"]);
  ASSERT_GE(shown.size(), 3u) << j.doc["findings"].dump(1);
  const auto text =
      run_shell(shell_quote(k_bin) + " doctor --color never --venv " + shell_quote(venv) + test::k_no_cache);
  for (const auto& rule : shown) {
    const std::string pointer = "see: cudafix explain " + rule + "\n";
    const auto first = text.out.find(pointer);
    EXPECT_NE(first, std::string::npos) << rule << "\n" << text.out;
    EXPECT_EQ(text.out.find(pointer, first + 1), std::string::npos) << rule << " is pointed at twice";
    // After the rule's first finding, not before it.
    EXPECT_LT(text.out.find("[" + rule + "]"), first) << rule;
  }
}

}  // namespace
}  // namespace cudafix
