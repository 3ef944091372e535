// End-to-end: what the loader will really do with a front end's dlopened family (issue 52), on
// real venvs made by pip from wheels of compiled fixtures (tests/fixtures/build.sh, verify/family):
//   - a cuDNN 9.19 wheel that lacks libcudnn_engines_precompiled.so.9 (not on disk, not in its
//     RECORD, as nvidia-cudnn-cu13 9.20.0.48 lacked its tensor-IR engines: pytorch#188892), with
//     another build's engines reachable through LD_LIBRARY_PATH or an ld.so.cache the real ldconfig
//     writes. The fake dispatcher loads libcudnn_graph.so.9, which loads its engines from its
//     RUNPATH on and checks their build, as the real ones do;
//   - a CUDA 12 torch beside a JAX CUDA 13 plugin whose objects NEED no CUDA library and whose
//     requirements name the CUDA 13 providers (marin#6947).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include "tests/e2e/cudafix_run.hpp"
#include "tests/support/process.hpp"

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string k_family = test::k_fixtures + "/verify/family";
const std::string k_multi = test::k_fixtures + "/verify/torch13multi";
const std::string k_host = k_family + "/host914";
const std::string k_fake_cuda = test::k_fixtures + "/verify/cuda/ok";
const std::string k_engines = "nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9";

// nvidia-cudnn-cu13 9.19.0.56 as NVIDIA's wheel lays it out, with or without its precompiled engines.
std::string cudnn_wheel(const std::string& dir, bool with_engines) {
  std::string args = "nvidia-cudnn-cu13 9.19.0.56";
  for (const char* own : {"libcudnn.so.9", "libcudnn_graph.so.9"})
    args += " " + shell_quote(std::string("nvidia/cudnn/lib/") + own + "=" + k_family + "/cudnn/" + own);
  if (with_engines) args += " " + shell_quote(k_engines + "=" + k_family + "/cudnn/libcudnn_engines_precompiled.so.9");
  for (const char* sub : {"ops", "cnn", "adv", "heuristic", "engines_runtime_compiled"})
    args += " " + shell_quote(std::string("nvidia/cudnn/lib/libcudnn_") + sub + ".so.9=" + k_multi +
                              "/nvidia/cudnn/lib/libcudnn_" + sub + ".so.9");
  fs::create_directories(dir);
  return test::make_wheel(dir, args);
}

// The venv of the first shape, made once: the wheel without the engines, and what it needs.
struct FamilyWheels {
  TempDir dir;
  std::string full = dir.path() + "/full", lacking = dir.path() + "/lacking";
  std::vector<std::string> installed;
  std::string cache = dir.path() + "/ld.so.cache";
  FamilyWheels() {
    cudnn_wheel(full, true);
    installed.push_back(cudnn_wheel(lacking, false));
    const std::string others = dir.path() + "/others";
    fs::create_directories(others);
    for (const std::string& args :
         {"nvidia-cuda-runtime 13.0.96 nvidia/cu13/lib/libcudart.so.13=" + test::k_fixtures +
              "/verify/cu13/libcudart.so.13",
          "nvidia-cublas 13.1.0.3 nvidia/cu13/lib/libcublas.so.13=" + k_multi +
              "/nvidia/cu13/lib/libcublas.so.13 nvidia/cu13/lib/libcublasLt.so.13=" + k_multi +
              "/nvidia/cu13/lib/libcublasLt.so.13",
          "nvidia-cuda-nvrtc 13.0.88 nvidia/cu13/lib/libnvrtc.so.13=" + k_multi + "/nvidia/cu13/lib/libnvrtc.so.13",
          "torch 2.11.0+cu130 torch/lib/libtorch_cuda.so=" + test::k_fixtures +
              "/verify/libtorch_cuda.so --requires nvidia-cudnn-cu13==9.19.0.56 --requires "
              "nvidia-cuda-runtime==13.0.96"})
      installed.push_back(test::make_wheel(others, args));
    // The host's cuDNN 9.14 engines in an ld.so.cache the real ldconfig writes.
    test::write_file(dir.path() + "/ld.so.conf", k_host + "\n");
    const auto r = run_shell("ldconfig -X -C " + shell_quote(cache) + " -f " + shell_quote(dir.path() + "/ld.so.conf"));
    EXPECT_EQ(r.exit_code, 0) << r.out;
  }
};
const FamilyWheels& family_wheels() {
  static const FamilyWheels made;
  return made;
}

std::string lacking_venv(const TempDir& t) {
  const std::string venv = t.path() + "/venv";
  test::make_venv(venv, family_wheels().installed);
  return venv;
}

test::JsonRun cudafix(const std::string& args, const std::string& venv) {
  return test::cudafix_json(args + " --venv " + shell_quote(venv));
}

std::string text_of(const std::string& args, const std::string& venv) {
  return run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " " + args + " --color never --venv " +
                   shell_quote(venv) + " 2>&1")
      .out;
}

TEST(DlopenFamily, AnEngineTheWheelNeverShippedResolvingToAnotherBuildIsNamedWithTheErrorItCauses) {
  TempDir t;
  const std::string venv = lacking_venv(t);
  // Through LD_LIBRARY_PATH: another build's engines answer the graph library's dlopen.
  const auto d = cudafix("doctor --ld-so-cache /dev/null --ld-library-path " + shell_quote(k_host), venv);
  EXPECT_EQ(d.exit_code, 1);
  const auto found = test::fires(d.doc, "foreign-sublibrary");
  ASSERT_EQ(found.size(), 1u) << d.doc["findings"].dump(1);
  const std::string msg = found[0]["message"];
  EXPECT_EQ(found[0]["severity"], "error");
  EXPECT_THAT(msg, HasSubstr("nvidia/cudnn/lib/libcudnn_graph.so.9 (nvidia-cudnn-cu13 9.19.0.56) loads "
                             "libcudnn_engines_precompiled.so.9 with dlopen, which resolves to " +
                             k_host +
                             "/libcudnn_engines_precompiled.so.9 (release 9.14.0), outside the environment, "
                             "by LD_LIBRARY_PATH"));
  EXPECT_THAT(msg, HasSubstr("CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH"));
  EXPECT_THAT(found[0]["evidence"].dump(), HasSubstr("nvidia-cudnn-cu13 9.19.0.56 does not ship " + k_engines));
  EXPECT_EQ(found[0]["sonames"], json({"libcudnn_engines_precompiled.so.9"}));
  EXPECT_EQ(found[0]["remedy"]["command"], "pip install --force-reinstall --no-deps nvidia-cudnn-cu13==9.19.0.56");
  EXPECT_TRUE(test::of_rule(d.doc, "missing-dlopen-library").empty()) << "it resolves: somewhere else";

  // Through ld.so.cache: the same finding, by the cache.
  const auto by_cache = cudafix("doctor --ld-so-cache " + shell_quote(family_wheels().cache), venv);
  const auto cached = test::fires(by_cache.doc, "foreign-sublibrary");
  ASSERT_EQ(cached.size(), 1u) << by_cache.doc["findings"].dump(1);
  EXPECT_THAT(cached[0]["message"].get<std::string>(), HasSubstr("outside the environment, by ld.so.cache"));
  // With no other copy it resolves nowhere: missing-dlopen-library's, with the loading error.
  const auto nowhere = cudafix("doctor --ld-so-cache /dev/null --ld-library-path ''", venv);
  EXPECT_TRUE(test::of_rule(nowhere.doc, "foreign-sublibrary").empty());
  const auto missing = test::fires(nowhere.doc, "missing-dlopen-library");
  ASSERT_EQ(missing.size(), 1u) << nowhere.doc["findings"].dump(1);
  EXPECT_EQ(missing[0]["sonames"], json({"libcudnn_engines_precompiled.so.9"}));

  // `why` follows the dlopen edge from where the front end is.
  const auto why = cudafix(
      "why libcudnn_engines_precompiled.so.9 --ld-so-cache /dev/null --ld-library-path " + shell_quote(k_host), venv);
  ASSERT_EQ(why.doc["dlopened_by"].size(), 1u) << why.doc.dump(1);
  EXPECT_EQ(why.doc["dlopened_by"][0]["front"], "nvidia/cudnn/lib/libcudnn_graph.so.9");
  EXPECT_EQ(why.doc["dlopened_by"][0]["place"], "outside");
  EXPECT_EQ(why.doc["dlopened_by"][0]["release"], "9.14.0");
  const std::string text = text_of(
      "why libcudnn_engines_precompiled.so.9 --ld-so-cache /dev/null --ld-library-path " + shell_quote(k_host), venv);
  EXPECT_THAT(text, HasSubstr("needed by: no DT_NEEDED names it; it is dlopened"));
  EXPECT_THAT(text, HasSubstr("dlopened by (knowledge):\n    nvidia/cudnn/lib/libcudnn_graph.so.9 (nvidia-cudnn-cu13 "
                              "9.19.0.56) [cudnn9_graph]"));
  EXPECT_THAT(text, HasSubstr("not to its own dist's build"));
  EXPECT_THAT(text, Not(HasSubstr("needed by: nothing in the environment")));
}

TEST(DlopenFamily, VerifyShowsTheEngineTheRealLoaderMappedFromTheOtherBuild) {
  TempDir t;
  const std::string venv = lacking_venv(t);
  const std::string path = shell_quote(k_fake_cuda + ":" + k_host);
  const auto v = cudafix("verify --ld-library-path " + path, venv);
  EXPECT_EQ(v.exit_code, 1) << v.out.substr(0, 2000);
  bool mismatch = false;
  for (const auto& s : v.doc["stages"])
    if (s["stage"] == "cudnnCreate") mismatch = s["name"] == "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH";
  EXPECT_TRUE(mismatch) << v.doc["stages"].dump(1);
  json engines, graph;
  for (const auto& f : v.doc["loaded"]) {
    if (f["soname"] == "libcudnn_engines_precompiled.so.9") engines = f;
    if (f["soname"] == "libcudnn_graph.so.9") graph = f;
  }
  ASSERT_FALSE(engines.is_null()) << v.doc["loaded"].dump(1);
  EXPECT_EQ(engines["family"], true);
  EXPECT_EQ(engines["path"], k_host + "/libcudnn_engines_precompiled.so.9.14.0");
  EXPECT_EQ(engines["version"], "9.14.0");
  EXPECT_TRUE(engines["dist"].is_null());
  ASSERT_FALSE(graph.is_null());
  EXPECT_EQ(graph["dist"], "nvidia-cudnn-cu13");
  EXPECT_EQ(graph["version"], "9.19.0.56");
  // With no other copy on the library path, the graph library's dlopen keeps nothing: the member
  // is named from the model, as not in the process.
  const auto alone = cudafix("verify --ld-library-path " + shell_quote(k_fake_cuda), venv);
  EXPECT_EQ(alone.exit_code, 1);
  json unmapped;
  for (const auto& f : alone.doc["loaded"])
    if (f["soname"] == "libcudnn_engines_precompiled.so.9") unmapped = f;
  ASSERT_FALSE(unmapped.is_null()) << alone.doc["loaded"].dump(1);
  EXPECT_TRUE(unmapped["path"].is_null());
  EXPECT_EQ(unmapped["family"], true);
  EXPECT_FALSE(unmapped["model"].is_null()) << unmapped.dump();
  const std::string text = text_of("verify --ld-library-path " + path, venv);
  EXPECT_THAT(text, HasSubstr("loaded from the cuDNN family"));
  EXPECT_THAT(text, HasSubstr(k_host + "/libcudnn_engines_precompiled.so.9.14.0 (outside the environment, release "
                                       "9.14.0)"));
}

TEST(DlopenFamily, FixRestoresTheEngineFromAWheelThatHoldsItAndSaysWhenTheWheelLacksIt) {
  TempDir t;
  const std::string venv = lacking_venv(t);
  const std::string cache = " --ld-so-cache " + shell_quote(family_wheels().cache);
  // The only wheel at hand is the one that lacks it: nothing to reinstall from, and said so.
  const auto lacking = cudafix("plan fix --find-links " + shell_quote(family_wheels().lacking) + cache, venv);
  EXPECT_TRUE(lacking.doc["steps"].empty()) << lacking.doc.dump(1);
  EXPECT_THAT(lacking.doc["remaining"].dump(), HasSubstr("does not hold " + k_engines)) << lacking.doc.dump(1);
  // A wheel that holds it: the dist is reinstalled from it, verified, and the environment is whole.
  const auto fixed = cudafix("fix -y --find-links " + shell_quote(family_wheels().full) + cache +
                                 " --ld-library-path " + shell_quote(k_fake_cuda),
                             venv);
  EXPECT_EQ(fixed.exit_code, 0) << fixed.out.substr(0, 3000);
  const std::string site = test::site_packages(venv);
  EXPECT_TRUE(fs::exists(site + "/" + k_engines));
  const auto after = cudafix("doctor" + cache, venv);
  EXPECT_TRUE(test::of_rule(after.doc, "foreign-sublibrary").empty()) << after.doc["findings"].dump(1);
  EXPECT_TRUE(test::of_rule(after.doc, "missing-dlopen-library").empty()) << after.doc["findings"].dump(1);
  EXPECT_EQ(test::venv_pip(venv, "check").exit_code, 0);
  const auto v = cudafix("verify --ld-library-path " + shell_quote(k_fake_cuda), venv);
  EXPECT_EQ(v.exit_code, 0) << v.out.substr(0, 2000);
}

// A CUDA 12 torch and JAX's CUDA 13 plugin, which NEEDs no CUDA library: its requirements are what
// says it needs CUDA 13, for doctor as for the planner.
TEST(DlopenFamily, APluginThatLoadsCudaByDlopenNeedsWhatItsRequirementsSayForDoctorAndThePlanAlike) {
  TempDir t;
  const std::string v = test::k_fixtures + "/verify";
  const std::string wheels = t.path() + "/wheels";
  fs::create_directories(wheels);
  std::vector<std::string> installed;
  for (const std::string& args :
       {"nvidia-cuda-runtime-cu12 12.8.90 nvidia/cuda_runtime/lib/libcudart.so.12=" + v + "/cu12/libcudart.so.12",
        "nvidia-cudnn-cu12 9.10.2.21 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/hybrid/cudnn12/libcudnn.so.9",
        "torch 2.7.1+cu128 torch/lib/libtorch_cuda.so=" + v +
            "/torch12/libtorch_cuda.so --requires nvidia-cudnn-cu12==9.10.2.21",
        "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/hybrid/cudnn13/libcudnn.so.9",
        "nvidia-cublas 13.1.0.3 nvidia/cu13/lib/libcublas.so.13=" + v + "/cublas13/libcublas.so.13",
        "jax-cuda13-plugin 0.8.0 jax_plugins/xla_cuda13/xla_cuda_plugin.so=" + k_family +
            "/jax_plugins/xla_cuda13/xla_cuda_plugin.so --requires 'nvidia-cudnn-cu13>=9.8,<10' --requires "
            "'nvidia-cublas>=13'"})
    installed.push_back(test::make_wheel(wheels, args));
  const std::string venv = t.path() + "/venv";
  test::make_venv(venv, installed);
  const auto d = cudafix("doctor --ld-so-cache /dev/null", venv);
  std::string all;
  for (const auto& f : test::of_rule(d.doc, "mixed-cuda-major")) all += f["message"].get<std::string>() + "\n";
  EXPECT_THAT(all, Not(HasSubstr("no consumer needs"))) << all;
  EXPECT_THAT(all, HasSubstr("the consumers need different CUDA majors: torch 2.7.1+cu128 needs CUDA 12; "
                             "jax-cuda13-plugin 0.8.0 needs CUDA 13"));
  json disagree;
  for (const auto& f : test::of_rule(d.doc, "mixed-cuda-major"))
    if (f["message"].get<std::string>().find("consumers need different") != std::string::npos) disagree = f;
  ASSERT_FALSE(disagree.is_null());
  EXPECT_THAT(disagree["evidence"].dump(),
              HasSubstr("jax-cuda13-plugin 0.8.0 needs CUDA 13: jax-cuda13-plugin 0.8.0 requires nvidia-cudnn-cu13"));
  // The plan refuses to choose, naming the same consumers by the same majors.
  const auto plan = cudafix("plan fix --ld-so-cache /dev/null", venv);
  const std::string problem = plan.doc["problem"];
  EXPECT_THAT(problem, HasSubstr("the consumers need different CUDA majors (CUDA 12: torch 2.7.1+cu128; CUDA 13: "
                                 "jax-cuda13-plugin 0.8.0)"));
  std::set<std::pair<std::string, int>> by_doctor, by_plan;
  for (const auto& e : disagree["evidence"]) {
    const std::string line = e;
    by_doctor.insert({line.substr(0, line.find(' ')), std::stoi(line.substr(line.find(" needs CUDA ") + 12))});
  }
  for (const auto& e : plan.doc["target"]["evidence"]) {
    std::string dist = e["dist"];
    dist = dist.substr(0, dist.find('-'));
    std::replace(dist.begin(), dist.end(), '_', '-');
    by_plan.insert({dist, e["cuda_major"].get<int>()});
  }
  EXPECT_EQ(by_doctor.size(), 2u);
  EXPECT_EQ(by_plan, by_doctor) << plan.doc["target"].dump(1);
  // `why` of the shared dispatcher shows who requires which provider of it.
  const auto why = cudafix("why libcudnn.so.9 --ld-so-cache /dev/null", venv);
  std::set<std::string> requirers;
  for (const auto& r : why.doc["required_by"]) requirers.insert(r["dist"]);
  EXPECT_TRUE(requirers.count("jax_cuda13_plugin-0.8.0.dist-info")) << why.doc["required_by"].dump(1);
  EXPECT_TRUE(requirers.count("torch-2.7.1+cu128.dist-info")) << why.doc["required_by"].dump(1);
}

}  // namespace
}  // namespace cudafix
