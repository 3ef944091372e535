// `fix` hands its plan to installer/apply as resolver::plan_file_of makes it, and `apply` reads a
// saved one with resolver::parse_plan_file: both must be the same value, or the checks apply runs
// on a saved plan would not be the ones fix runs on its own.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/json_output.hpp"
#include "demo_env_json.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/example_env.hpp"
#include "resolver/plan/fix.hpp"
#include "resolver/plan/plan_file.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/knowledge.hpp"
#include "tests/support/process.hpp"

namespace cudafix::cli {
namespace {

namespace r = cudafix::resolver;
namespace fs = std::filesystem;

r::Environment scan(const std::string& dir) {
  r::ScanOptions o;
  o.ld_so_cache = "/nonexistent/ld.so.cache";
  o.threads = 2;
  return r::scan_environment(r::read_layout(dir, "--venv"), o);
}

// The demo environment with every CUDA provider's libraries deleted but one dist's in `keep`:
// plans with reinstalls, needs and evidence.
void empty_providers(const std::string& dir, std::size_t keep) {
  const r::Environment env = scan(dir);
  const r::Knowledge k = rules::builtin_knowledge();
  std::size_t n = 0;
  for (const auto& d : env.dists) {
    if (!r::is_cuda_provider(k, d) || n++ == keep) continue;
    for (const auto& row : d.record) {
      const std::string p = r::join_normal(d.site_dir, row.path);
      if (r::looks_like_shared_object(r::base_name(p))) fs::remove(p);
    }
  }
}

TEST(PlanDocument, FixsTypedPlanIsTheValueItsDocumentParsesTo) {
  test::TempDir t;
  const r::Knowledge k = rules::builtin_knowledge();
  for (std::size_t keep = 0; keep < 4; ++keep) {
    const std::string dir = t.path() + fmt::format("/env{}", keep);
    r::materialize_environment(nlohmann::json::parse(k_demo_env), dir);
    empty_providers(dir, keep);
    const r::Environment env = scan(dir);
    r::FixOptions opts;
    opts.threads = 2;
    const r::FixPlan plan = r::plan_fix(env, k, opts);
    const r::Fingerprint fp = r::fingerprint_of(env, plan);
    const std::vector<std::string> tags{"cp312-cp312-manylinux_2_28_x86_64", "py3-none-any"};
    const std::vector<std::string> problems{"a source said something"};
    const auto typed = r::plan_file_of(env, plan, fp, tags, problems);
    const auto parsed = r::parse_plan_file(plan_fix_json(env, k, plan, fp, tags, problems), "plan.json");
    SCOPED_TRACE(keep);
    EXPECT_FALSE(typed.steps.empty());
    EXPECT_EQ(typed.steps, parsed.steps);
    EXPECT_EQ(typed.fingerprint, parsed.fingerprint);
    EXPECT_TRUE(typed == parsed);
  }
}

}  // namespace
}  // namespace cudafix::cli
