// The plan document's strict parser (resolver/plan/plan_file.hpp): one typed value from a whole,
// well-formed schema 1 document; anything else refused with the file and the field named, and
// never with nlohmann's own exception text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/plan/plan_file.hpp"
#include "tests/support/paths.hpp"

namespace cudafix::resolver {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

json a_break() {
  return {{"consumer", "torch/lib/libtorch_cuda.so"},
          {"consumer_dist", "torch-2.11.0.dist-info"},
          {"soname", "libcudnn.so.9"},
          {"kind", "needed"},
          {"before", "nvidia/cudnn/lib/libcudnn.so.9"},
          {"after", nullptr},
          {"after_version", nullptr},
          {"why", "resolves nowhere"}};
}

// A document as `plan fix -o` writes it, with one field of every shape.
json a_plan() {
  json wheel = {{"file", "/w/nvidia_cudnn_cu12-9.10.2.21-py3-none-any.whl"},
                {"sha256", std::string(64, 'a')},
                {"source", "/w"},
                {"url", nullptr},
                {"objects",
                 {{{"path", "nvidia/cudnn/lib/libcudnn.so.9"},
                   {"soname", "libcudnn.so.9"},
                   {"needed", {"libc.so.6"}},
                   {"rpath", nullptr},
                   {"runpath", "$ORIGIN"}}}},
                {"read", nullptr}};
  json reinstall = {{"action", "reinstall"},
                    {"dist", "nvidia_cudnn_cu12-9.10.2.21.dist-info"},
                    {"name", "nvidia-cudnn-cu12"},
                    {"version", "9.10.2.21"},
                    {"wheel", wheel},
                    {"why", "its files hold another major's bytes"},
                    {"simulated", true},
                    {"deletes", json::array()},
                    {"keeps", json::array()},
                    {"writes", {"nvidia/cudnn/lib/libcudnn.so.9"}},
                    {"after_step", {{"ok", true}, {"worse", json::array()}}}};
  json remove = {{"action", "remove"},
                 {"dist", "nvidia_cudnn_cu13-9.19.0.56.dist-info"},
                 {"name", "nvidia-cudnn-cu13"},
                 {"version", "9.19.0.56"},
                 {"wheel", nullptr},
                 {"why", "provides CUDA 13"},
                 {"simulated", true},
                 {"deletes", {"nvidia_cudnn_cu13-9.19.0.56.dist-info/", {{"root", "platlib"}, {"path", "x.txt"}}}},
                 {"keeps", {"nvidia/cudnn/lib/libcudnn.so.9"}},
                 {"writes", json::array()},
                 {"after_step", {{"ok", true}, {"worse", {a_break()}}}}};
  return {
      {"schema", 1},
      {"command", "plan fix"},
      {"venv", "/v"},
      {"ok", true},
      {"problem", nullptr},
      {"fingerprint",
       {{"digest", std::string(64, '0')},
        {"records", {{{"dist", "torch-2.11.0.dist-info"}, {"sha256", std::string(64, '1')}}}},
        {"files",
         {{{"path", "nvidia/cudnn/lib/libcudnn.so.9"},
           {"exists", true},
           {"dev", 2049},
           {"ino", 12},
           {"size", 100},
           {"mtime_ns", 1700000000000000000}}}}}},
      {"target",
       {{"cuda_major", 12}, {"given", false}, {"evidence", {{{"dist", nullptr}, {"cuda_major", 12}, {"why", "w"}}}}}},
      {"steps", {reinstall, remove}},
      {"needs", {{{"name", "n"}, {"version", "1"}, {"tags", {"py3-none-any"}}, {"why", "w"}}}},
      {"remaining", {"r"}},
      {"conflict", {{{"action", "remove"}, {"name", "n"}, {"version", "1"}, {"why", "w"}, {"worse", {a_break()}}}}},
      {"source_problems", json::array()}};
}

std::string refusal(const std::string& text) {
  try {
    (void)parse_plan_file(text, "plan.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}
std::string refusal(const json& doc) { return refusal(doc.dump()); }
std::string refusal(const char* text) { return refusal(std::string(text)); }

TEST(PlanFile, AWholeDocumentIsOneTypedValue) {
  const PlanFile p = parse_plan_file(a_plan().dump(), "plan.json");
  EXPECT_TRUE(p.ok);
  EXPECT_EQ(p.venv, "/v");
  EXPECT_EQ(p.cuda_major, 12);
  ASSERT_EQ(p.steps.size(), 2u);
  EXPECT_EQ(p.steps[0].action, StepAction::reinstall);
  ASSERT_TRUE(p.steps[0].wheel);
  EXPECT_EQ(p.steps[0].wheel->file, "/w/nvidia_cudnn_cu12-9.10.2.21-py3-none-any.whl");
  EXPECT_EQ(p.steps[0].wheel->objects.at(0).runpath, "$ORIGIN");
  EXPECT_EQ(p.steps[1].action, StepAction::remove);
  EXPECT_EQ(p.steps[1].dist, "nvidia_cudnn_cu13-9.19.0.56.dist-info");
  ASSERT_EQ(p.steps[1].deletes.size(), 2u);
  EXPECT_EQ(p.steps[1].deletes[1], (PlanPath{SiteRoot::platlib, "x.txt"}));
  EXPECT_EQ(p.steps[1].worse.at(0).soname, "libcudnn.so.9");
  EXPECT_FALSE(p.steps[1].worse.at(0).after);
  EXPECT_EQ(p.fingerprint.files.at(0).mtime_ns, 1700000000000000000);
  EXPECT_EQ(step_label(p.steps[1]), "remove nvidia-cudnn-cu13 9.19.0.56");
}

TEST(PlanFile, OnlySchemaOneIsRead) {
  auto doc = a_plan();
  doc["schema"] = 2;
  EXPECT_EQ(refusal(doc),
            "plan.json: schema: schema 2 is not one this version of cudafix reads (it reads schema 1 only)");
  doc["schema"] = "1";
  EXPECT_EQ(refusal(doc), "plan.json: schema: expected the number 1, got string");
  doc.erase("schema");
  EXPECT_EQ(refusal(doc), "plan.json: schema: required field missing");
}

TEST(PlanFile, AFieldOfTheWrongTypeIsNamedWithItsPath) {
  auto doc = a_plan();
  doc["steps"][1]["action"] = 7;
  EXPECT_EQ(refusal(doc), "plan.json: steps[1].action: expected a string, got number");
  doc = a_plan();
  doc["ok"] = "yes";
  EXPECT_EQ(refusal(doc), "plan.json: ok: expected a boolean, got string");
  doc = a_plan();
  doc["fingerprint"]["files"][0]["dev"] = -1;
  EXPECT_EQ(refusal(doc), "plan.json: fingerprint.files[0].dev: expected an unsigned integer, got -1");
  doc = a_plan();
  doc["fingerprint"]["files"][0]["ino"] = 1.5;
  EXPECT_EQ(refusal(doc), "plan.json: fingerprint.files[0].ino: expected an unsigned integer, got number");
  doc = a_plan();
  doc["steps"][0]["wheel"]["objects"][0]["needed"][0] = nullptr;
  EXPECT_EQ(refusal(doc), "plan.json: steps[0].wheel.objects[0].needed[0]: expected a string, got null");
  doc = a_plan();
  doc["steps"][1]["deletes"][1]["root"] = "elsewhere";
  EXPECT_THAT(refusal(doc), HasSubstr("plan.json: steps[1].deletes[1].root: \"elsewhere\" is not a site folder"));
  doc = a_plan();
  doc["steps"][0]["action"] = "format";
  EXPECT_THAT(refusal(doc), HasSubstr("plan.json: steps[0].action: \"format\" is not an action"));
  doc = a_plan();
  doc["steps"] = {{{"action", "remove"}}, 3};
  EXPECT_EQ(refusal(doc), "plan.json: steps[0].dist: required field missing");
  doc["steps"] = {3};
  EXPECT_EQ(refusal(doc), "plan.json: steps[0]: expected an object, got number");
}

// A wheel's hash is joined into the wheel cache's paths: a path in its place (which made apply
// touch a file outside the environment) is refused before anything is looked up.
TEST(PlanFile, AWheelsHashThatIsNotASha256IsRefused) {
  auto doc = a_plan();
  doc["steps"][0]["wheel"]["sha256"] = "../../outside";
  EXPECT_EQ(refusal(doc), "plan.json: steps[0].wheel.sha256: not a SHA-256 (64 lowercase hex digits)");
  doc["steps"][0]["wheel"]["sha256"] = std::string(63, 'a') + "/";
  EXPECT_EQ(refusal(doc), "plan.json: steps[0].wheel.sha256: not a SHA-256 (64 lowercase hex digits)");
}

TEST(PlanFile, ARequiredFieldMissingIsNamed) {
  auto doc = a_plan();
  doc.erase("fingerprint");
  EXPECT_EQ(refusal(doc), "plan.json: fingerprint: required field missing");
  doc = a_plan();
  doc["fingerprint"].erase("digest");
  EXPECT_EQ(refusal(doc), "plan.json: fingerprint.digest: required field missing");
  doc = a_plan();
  doc["steps"][0]["after_step"].erase("ok");
  EXPECT_EQ(refusal(doc), "plan.json: steps[0].after_step.ok: required field missing");
}

TEST(PlanFile, AnUnknownFieldIsNamedAndRefused) {
  auto doc = a_plan();
  doc["steps"][1]["force"] = true;
  EXPECT_EQ(refusal(doc), "plan.json: steps[1].force: unknown field (schema 1 has no such field here)");
  doc = a_plan();
  doc["extra"] = json::object();
  EXPECT_EQ(refusal(doc), "plan.json: extra: unknown field (schema 1 has no such field here)");
  // What the JSON writer adds to an object holding a string that was not UTF-8 is no unknown field.
  doc = a_plan();
  doc["steps"][1]["lossy"] = true;
  EXPECT_EQ(refusal(doc), "(accepted)");
  doc["steps"][1]["lossy"] = 1;
  EXPECT_EQ(refusal(doc), "plan.json: steps[1].lossy: expected a boolean, got number");
}

TEST(PlanFile, ADocumentOtherThanAPlanIsRefused) {
  auto doc = a_plan();
  doc["command"] = "plan remove";
  EXPECT_THAT(refusal(doc), HasSubstr("plan.json: command: \"plan remove\" is not a plan"));
  EXPECT_EQ(refusal("[1]"), "plan.json: (the document): expected an object, got array");
}

TEST(PlanFile, APlanThatFoundNoSafeOrderParsesAsOne) {
  auto doc = a_plan();
  doc["ok"] = false;
  doc["problem"] = "no safe order";
  const PlanFile p = parse_plan_file(doc.dump(), "plan.json");
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.problem, "no safe order");
}

TEST(PlanFile, TextThatIsNotJsonIsRefusedInCudafixsWords) {
  const std::string why = refusal(a_plan().dump().substr(0, 100));
  EXPECT_THAT(why, HasSubstr("plan.json: not JSON: parse error at line 1, column 101"));
  EXPECT_THAT(why, Not(HasSubstr("json.exception")));
  EXPECT_THAT(refusal(""), HasSubstr("plan.json: not JSON:"));
  // A number past a double's range is nlohmann's out_of_range, not its parse_error (fuzz_plan
  // found it: tests/fuzz/regressions/plan-number-overflow ended in std::terminate).
  EXPECT_EQ(refusal("[1e999]"), "plan.json: not JSON: number overflow parsing '1e999'");
  EXPECT_THAT(refusal(read_file(test::source_dir() + "/tests/fuzz/regressions/plan-number-overflow")),
              HasSubstr("plan.json: not JSON: number overflow parsing"));
  // The token quoted is cut.
  EXPECT_LT(refusal("[1" + std::string(100000, '0') + "]").size(), 400u);
}

TEST(PlanFile, DeepNestingAndSizeAreBoundedBeforeParsing) {
  // nlohmann's parser keeps its own stack, but each level costs a heap node: a 16 MiB file of
  // brackets would be gigabytes of them.
  EXPECT_EQ(refusal(std::string(100000, '[')), "plan.json: nested deeper than 32 levels (a plan document nests 6)");
  auto doc = a_plan();
  json deep = json::array();
  for (int i = 0; i < 40; ++i) deep = json::array({deep});
  doc["steps"][0]["why"] = deep;
  EXPECT_THAT(refusal(doc), HasSubstr("nested deeper than 32 levels"));
  // Brackets inside strings are text, not nesting.
  doc = a_plan();
  doc["steps"][0]["why"] = std::string(1000, '[') + "\\\"[";
  EXPECT_EQ(refusal(doc), "(accepted)");
  doc["steps"][0]["why"] = std::string(k_plan_file_max, 'x');
  EXPECT_THAT(refusal(doc), HasSubstr("more than a plan document may hold (16777216 bytes)"));
}

TEST(PlanFile, APlanPathIsMadeAbsoluteInItsSiteFolder) {
  Environment env;
  env.layout.sites.push_back(
      {"/v/lib/python3.12/site-packages", "/v/lib/python3.12/site-packages", SiteRoot::purelib, "/v"});
  EXPECT_EQ(absolute_path(env, {std::nullopt, "a/b.py"}), "/v/lib/python3.12/site-packages/a/b.py");
  EXPECT_EQ(absolute_path(env, {std::nullopt, "a.dist-info/"}), "/v/lib/python3.12/site-packages/a.dist-info/");
  EXPECT_EQ(absolute_path(env, {SiteRoot::purelib, "a/b.py"}), "/v/lib/python3.12/site-packages/a/b.py");
  EXPECT_EQ(absolute_path(env, {std::nullopt, "/etc/passwd"}), "/etc/passwd");
  EXPECT_THROW((void)absolute_path(env, {SiteRoot::system, "a"}), Error);
}

}  // namespace
}  // namespace cudafix::resolver
