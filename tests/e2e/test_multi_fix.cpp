// End-to-end: `cudafix fix` after one real `pip uninstall` of several CUDA 13 providers of a
// torch-like venv (issue 37). The venv is made by pip from real wheels of the compiled fixtures
// (tests/fixtures/build.sh, verify/torch13multi): torch's libtorch_cuda.so with the real torch's
// DT_RPATH and NEEDED, a fake cuDNN that answers cudnnGetVersion and cudnnCreate with every
// sub-library it dlopens, a fake NCCL, cuBLAS, cuSPARSELt, the runtime and NVRTC. The probe runs
// against the fake libcuda (verify/cuda/ok). A multi-step repair must end verified after every
// step, with doctor and pip satisfied, and one rollback must give back the broken tree; a wheel
// holding another cuDNN release must be refused at its own step, naming both versions.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "resolver/base/text.hpp"
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

const std::string k_multi = test::k_fixtures + "/verify/torch13multi";
const std::string k_fake_cuda = test::k_fixtures + "/verify/cuda/ok";

// One wheel of the venv: its project name and version, and the files it installs.
struct WheelSpec {
  std::string name, version;
  std::vector<std::pair<std::string, std::string>> files;  // archive path -> fixture file
  std::vector<std::string> requires_dist;
};

// cuDNN 9.19's wheel: the dispatcher `cudnn_dir` holds (cudnn91900, or cudnn91400 for the wrong
// release) and every sub-library rules/data/knowledge.toml says it and libcudnn_graph.so.9 dlopen.
WheelSpec cudnn_wheel(const std::string& cudnn_dir) {
  WheelSpec w{"nvidia-cudnn-cu13", "9.19.0.56", {}, {}};
  w.files.emplace_back("nvidia/cudnn/lib/libcudnn.so.9", k_multi + "/" + cudnn_dir + "/libcudnn.so.9");
  for (const char* sub : {"graph", "ops", "cnn", "adv", "heuristic", "engines_precompiled", "engines_runtime_compiled"})
    w.files.emplace_back(fmt::format("nvidia/cudnn/lib/libcudnn_{}.so.9", sub),
                         fmt::format("{}/nvidia/cudnn/lib/libcudnn_{}.so.9", k_multi, sub));
  return w;
}

// The providers torch 2.11+cu130 pins, as its METADATA does, each for Linux only.
std::vector<WheelSpec> provider_wheels() {
  const auto at = [](const std::string& rel) { return std::make_pair(rel, k_multi + "/" + rel); };
  return {
      cudnn_wheel("cudnn91900"),
      {"nvidia-nccl-cu13", "2.28.9", {at("nvidia/nccl/lib/libnccl.so.2")}, {}},
      {"nvidia-cublas",
       "13.1.0.3",
       {at("nvidia/cu13/lib/libcublas.so.13"), at("nvidia/cu13/lib/libcublasLt.so.13")},
       {}},
      {"nvidia-cusparselt-cu13", "0.8.0", {at("nvidia/cusparselt/lib/libcusparseLt.so.0")}, {}},
      {"nvidia-cuda-runtime", "13.0.96", {at("nvidia/cu13/lib/libcudart.so.13")}, {}},
      {"nvidia-cuda-nvrtc", "13.0.88", {at("nvidia/cu13/lib/libnvrtc.so.13")}, {}},
  };
}

WheelSpec torch_wheel() {
  const std::string linux = "; platform_system == \"Linux\"";
  return {"torch",
          "2.11.0+cu130",
          {{"torch/lib/libtorch_cuda.so", k_multi + "/torch/lib/libtorch_cuda.so"}},
          {"nvidia-cudnn-cu13==9.19.0.56" + linux, "nvidia-nccl-cu13==2.28.9" + linux,
           "nvidia-cusparselt-cu13==0.8.0" + linux, "nvidia-cublas==13.1.0.3.*" + linux,
           "nvidia-cuda-runtime==13.0.96.*" + linux, "nvidia-cuda-nvrtc==13.0.88.*" + linux}};
}

std::string build(const std::string& dir, const WheelSpec& w) {
  std::string args = w.name + " " + w.version;
  for (const auto& [arc, src] : w.files) args += " " + shell_quote(arc + "=" + src);
  for (const auto& r : w.requires_dist) args += " --requires " + shell_quote(r);
  return test::make_wheel(dir, args);
}

// The providers a user removes with one `pip uninstall`; a case removes the first 2, 3 or 4.
// cuSPARSELt is in each: this build machine's ld.so.cache has a CUDA 13 toolkit with cuDNN,
// NCCL and cuBLAS (the real loader reads it, whatever --ld-so-cache tells the model), but no
// cuSPARSELt, so without it a torch whose tree is incomplete would still load here.
const std::vector<std::string> k_removable = {"nvidia-cudnn-cu13", "nvidia-cusparselt-cu13", "nvidia-cublas",
                                              "nvidia-nccl-cu13"};

// The wheels, built once per process: `good` holds every wheel, `wrong_release` the same but
// for a cuDNN wheel named 9.19.0.56 whose dispatcher is cuDNN 9.14's (91400).
struct Wheels {
  TempDir dir;
  std::string good = dir.path() + "/wheels", wrong_release = dir.path() + "/wrong-release";
  std::vector<std::string> installed;  // what the venv is made of, in pip's order
  Wheels() {
    fs::create_directories(good);
    fs::create_directories(wrong_release);
    for (const auto& w : provider_wheels()) {
      const std::string file = build(good, w);
      installed.push_back(file);
      if (w.name != "nvidia-cudnn-cu13") fs::copy_file(file, wrong_release + "/" + fs::path(file).filename().string());
    }
    installed.push_back(build(good, torch_wheel()));
    build(wrong_release, cudnn_wheel("cudnn91400"));
  }
};
const Wheels& wheels() {
  static const Wheels made;
  return made;
}

// A fresh venv with every wheel installed by pip (make_venv copies the first one it made), then
// the first `removed` of k_removable taken out by one real `pip uninstall` (none: a healthy venv).
std::string broken_venv(const TempDir& t, int removed) {
  const std::string venv = t.path() + "/venv";
  test::make_venv(venv, wheels().installed);
  const auto check = test::venv_pip(venv, "check");
  EXPECT_EQ(check.exit_code, 0) << "the venv before the uninstall: " << check.out;
  std::string names;
  for (int i = 0; i < removed; ++i) names += " " + k_removable[static_cast<std::size_t>(i)];
  if (removed == 0) return venv;
  const auto r = test::venv_pip(venv, "uninstall -y -q" + names);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return venv;
}

// `cudafix ARGS --venv V --json`, the host's ld.so.cache out of the answers.
test::JsonRun cudafix(const std::string& args, const std::string& venv) {
  return test::cudafix_json(args + " --venv " + shell_quote(venv) + test::k_no_cache);
}

// `fix` with the probe's verification on the fake driver.
test::JsonRun fix(const std::string& links, const std::string& venv) {
  return cudafix("fix -y --find-links " + shell_quote(links) + " --ld-library-path " + shell_quote(k_fake_cuda), venv);
}

class MultiFix : public ::testing::TestWithParam<int> {};

// The plan's labels ("install nvidia-cudnn-cu13 9.19.0.56"), in order.
std::vector<std::string> labels_of(const json& plan) {
  std::vector<std::string> out;
  for (const auto& st : plan["steps"])
    out.push_back(fmt::format("{} {} {}", st["action"].get<std::string>(), st["name"].get<std::string>(),
                              st["version"].get<std::string>()));
  return out;
}

// 2, 3 and 4 providers removed at once (cuDNN and cuSPARSELt, then cuBLAS, then NCCL): `fix` installs each
// again, is verified after every step, and leaves doctor and pip satisfied; one rollback gives
// back the broken tree, file for file.
TEST_P(MultiFix, OneUninstallOfSeveralProvidersIsFixedVerifiedAfterEveryStepAndRolledBack) {
  const int removed = GetParam();
  TempDir t;
  const std::string venv = broken_venv(t, removed);
  const std::string broken = test::tree_of(venv);

  auto fixed = fix(wheels().good, venv);
  ASSERT_EQ(fixed.exit_code, 0) << fixed.out.substr(0, 4000);
  // Every removed provider is installed again, and nothing else is done.
  const auto labels = labels_of(fixed.doc["plan"]);
  EXPECT_EQ(labels.size(), static_cast<std::size_t>(removed)) << fixed.doc["plan"].dump(1).substr(0, 3000);
  for (int i = 0; i < removed; ++i) {
    const std::string& name = k_removable[static_cast<std::size_t>(i)];
    EXPECT_EQ(std::count_if(labels.begin(), labels.end(),
                            [&](const std::string& l) { return l.starts_with("install " + name + " "); }),
              1)
        << name << " in " << json(labels).dump();
  }
  EXPECT_EQ(fixed.doc["verified"], true);
  EXPECT_EQ(fixed.doc["cudnn"]["version"], 91900);
  // One verification per step, each passing, judged against a baseline taken before the first.
  auto& verification = fixed.doc["verification"];
  EXPECT_TRUE(verification.is_object()) << "no verification in fix's JSON: " << fixed.out.substr(0, 2000);
  if (verification.is_object()) {
    EXPECT_TRUE(verification["baseline"].is_object()) << verification.dump(1).substr(0, 2000);
    auto& steps = verification["steps"];
    EXPECT_EQ(steps.size(), labels.size()) << steps.dump(1).substr(0, 3000);
    for (std::size_t i = 0; i < steps.size() && steps.is_array(); ++i) {
      EXPECT_EQ(steps[i]["step"], i + 1) << steps[i].dump(1);
      EXPECT_EQ(steps[i]["label"], labels[i]) << steps[i].dump(1);
      EXPECT_EQ(steps[i]["ok"], true) << steps[i].dump(1).substr(0, 2000);
    }
  }
  EXPECT_EQ(fixed.doc["after"]["errors"], 0) << fixed.doc["after"].dump();

  // Judges that are not fix: doctor finds nothing, pip's metadata check passes.
  auto doctor = cudafix("doctor", venv);
  EXPECT_EQ(doctor.exit_code, 0) << doctor.doc["findings"].dump(1).substr(0, 3000);
  EXPECT_EQ(doctor.doc["summary"]["errors"], 0) << doctor.doc["findings"].dump(1).substr(0, 3000);
  const auto check = test::venv_pip(venv, "check");
  EXPECT_EQ(check.exit_code, 0) << check.out;

  const auto undone = cudafix("rollback -y", venv);
  EXPECT_EQ(undone.exit_code, 0) << undone.out.substr(0, 2000);
  const std::string after_rollback = test::tree_of(venv);
  EXPECT_EQ(after_rollback, broken) << test::tree_diff(broken, after_rollback);
}

INSTANTIATE_TEST_SUITE_P(Providers, MultiFix, ::testing::Values(2, 3, 4),
                         [](const auto& p) { return std::to_string(p.param) + "Removed"; });

// The four providers removed, and the cuDNN wheel at hand is named nvidia-cudnn-cu13 9.19.0.56
// but holds cuDNN 9.14's bytes: fix refuses at the step that installs it, naming that step, the
// version it loaded and the one the dist means, and leaves the venv as it was, file for file.
TEST(MultiFixWrongRelease, AWrongReleaseCudnnWheelIsRefusedAtItsStepNamingBothVersionsAndTheVenvIsAsBefore) {
  TempDir t;
  const std::string venv = broken_venv(t, 4);
  const std::string broken = test::tree_of(venv);
  // The step that installs cuDNN, as the plan orders it.
  const auto plan = cudafix("plan fix --find-links " + shell_quote(wheels().wrong_release), venv);
  ASSERT_EQ(plan.exit_code, 0) << plan.out.substr(0, 3000);
  const auto labels = labels_of(plan.doc);
  const auto at = std::find(labels.begin(), labels.end(), "install nvidia-cudnn-cu13 9.19.0.56");
  ASSERT_NE(at, labels.end()) << json(labels).dump();
  const auto k = at - labels.begin() + 1;

  auto refused = fix(wheels().wrong_release, venv);
  EXPECT_EQ(refused.exit_code, 1) << refused.out.substr(0, 3000);
  EXPECT_EQ(refused.doc["undone"], true);
  const std::string error = refused.doc["error"].is_string() ? refused.doc["error"].get<std::string>() : "";
  EXPECT_THAT(error,
              HasSubstr(fmt::format("verification after step {} (install nvidia-cudnn-cu13 9.19.0.56) failed", k)));
  EXPECT_THAT(error, HasSubstr("91400"));
  EXPECT_THAT(error, HasSubstr("91900"));
  const std::string now = test::tree_of(venv);
  EXPECT_EQ(now, broken) << test::tree_diff(broken, now);
}

// Each probe spawn costs the driver's initialisation. Steps that only add files (the providers
// one `pip uninstall` removed) are probed once together, after the last of them; a reinstall,
// which replaces files, is probed on its own. Each step keeps its entry, with the probe that
// checked it; a wrong-release cuDNN among added files is still laid at its own step's door.
TEST(MultiFixProbes, StepsThatOnlyAddFilesAreProbedOnceTogetherAndAReinstallOnItsOwn) {
  const auto probes_of = [](const json& doc) {
    std::set<std::string> distinct;
    for (const auto& s : doc["verification"]["steps"]) distinct.insert(s["probe"].dump());
    return distinct.size();
  };
  {
    TempDir t;
    const std::string venv = broken_venv(t, 4);
    auto fixed = fix(wheels().good, venv);
    ASSERT_EQ(fixed.exit_code, 0) << fixed.out.substr(0, 3000);
    EXPECT_EQ(fixed.doc["verification"]["steps"].size(), 4U);
    EXPECT_EQ(probes_of(fixed.doc), 1U) << fixed.doc["verification"].dump(1).substr(0, 3000);
  }
  {
    TempDir t;
    const std::string venv = broken_venv(t, 1);  // cuDNN uninstalled: its install only adds files
    // One of cuBLAS's libraries gone: it is reinstalled, replacing the files it still has.
    fs::remove(test::site_packages(venv) + "/nvidia/cu13/lib/libcublasLt.so.13");
    auto fixed = fix(wheels().good, venv);
    ASSERT_EQ(fixed.exit_code, 0) << fixed.out.substr(0, 3000);
    const auto labels = labels_of(fixed.doc["plan"]);
    ASSERT_EQ(labels.size(), 2U) << json(labels).dump();
    EXPECT_EQ(std::count_if(labels.begin(), labels.end(),
                            [](const std::string& l) { return l.starts_with("reinstall nvidia-cublas "); }),
              1)
        << json(labels).dump();
    EXPECT_EQ(probes_of(fixed.doc), 2U) << fixed.doc["verification"].dump(1).substr(0, 3000);
  }
  {
    TempDir t;
    const std::string venv = broken_venv(t, 4);
    auto refused = fix(wheels().wrong_release, venv);
    EXPECT_EQ(refused.exit_code, 1) << refused.out.substr(0, 3000);
    const std::string error = refused.doc["error"].is_string() ? refused.doc["error"].get<std::string>() : "";
    EXPECT_THAT(error, HasSubstr("(install nvidia-cudnn-cu13 9.19.0.56) failed"));
    EXPECT_THAT(error, HasSubstr("one probe after step 4 checked them together"));
    EXPECT_EQ(probes_of(refused.doc), 1U);
    for (const auto& s : refused.doc["verification"]["steps"])
      EXPECT_EQ(s["ok"], s["label"] != "install nvidia-cudnn-cu13 9.19.0.56") << s["label"];
  }
}

// A step can break what worked without the consumer noticing: an install whose cuDNN sub-library
// NEEDs a library found nowhere leaves torch's whole tree loading (cuDNN opens its sub-libraries
// only when used), yet cuDNN, checked at the baseline, can no longer be. The install is refused
// against the baseline, naming the sub-library and what it lacks, and the venv is as before.
TEST(MultiFixWorseThanBefore, AnInstallThatBreaksCudnnsSubLibraryIsRefusedAgainstTheBaseline) {
  TempDir t;
  const std::string venv = broken_venv(t, 0);
  const std::string before = test::tree_of(venv);
  auto w = cudnn_wheel("cudnn91900");
  for (auto& [arc, src] : w.files)
    if (arc.ends_with("libcudnn_graph.so.9")) src = k_multi + "/graph_needs_nowhere/libcudnn_graph.so.9";
  const std::string wheel = build(t.path(), w);
  auto r = cudafix("install -y " + shell_quote(wheel) + " --ld-library-path " + shell_quote(k_fake_cuda), venv);
  EXPECT_EQ(r.exit_code, 1) << r.out.substr(0, 3000);
  const std::string error = r.doc["error"].is_string() ? r.doc["error"].get<std::string>() : "";
  EXPECT_THAT(error, HasSubstr("nvidia-cudnn-cu13 9.19.0.56) failed"));
  EXPECT_THAT(error, HasSubstr("nvidia/cudnn/lib/libcudnn_graph.so.9"));
  EXPECT_THAT(error, HasSubstr("libnowhere.so.1"));
  EXPECT_THAT(error, HasSubstr("as before the step"));
  const auto& v = r.doc["verification"];
  ASSERT_TRUE(v.is_object()) << r.out.substr(0, 2000);
  EXPECT_EQ(v["baseline"]["cudnn_version"], 91900) << v["baseline"].dump(1).substr(0, 2000);
  const std::string now = test::tree_of(venv);
  EXPECT_EQ(now, before) << test::tree_diff(before, now);
}

// A sub-library a reinstall leaves out, which the process then finds outside the venv, in the
// host's ld.so.cache (this build machine's CUDA toolkit has cuDNN): cuDNN still works with the
// fakes, but the venv's libcudnn_heuristic.so.9 now comes from outside it. Refused, by name.
TEST(MultiFixWorseThanBefore, ASubLibraryAReinstallDropsAndTheHostThenProvidesIsRefused) {
  const auto host = run_shell("ldconfig -p | grep -m1 'libcudnn_heuristic.so.9 '");
  if (host.out.find("=>") == std::string::npos) GTEST_SKIP() << "no cuDNN in this host's ld.so.cache";
  const std::string host_file(resolver::trim(host.out.substr(host.out.find("=>") + 2)));
  TempDir t;
  const std::string venv = broken_venv(t, 0);
  const std::string before = test::tree_of(venv);
  auto w = cudnn_wheel("cudnn91900");
  std::erase_if(w.files, [](const auto& f) { return f.first.ends_with("libcudnn_heuristic.so.9"); });
  const std::string wheel = build(t.path(), w);
  auto r = cudafix("install -y " + shell_quote(wheel) + " --ld-library-path " + shell_quote(k_fake_cuda), venv);
  EXPECT_EQ(r.exit_code, 1) << r.out.substr(0, 3000);
  const std::string error = r.doc["error"].is_string() ? r.doc["error"].get<std::string>() : "";
  EXPECT_THAT(error, HasSubstr("loads libcudnn_heuristic.so.9"));
  EXPECT_THAT(error, HasSubstr(", outside it"));
  EXPECT_THAT(error, HasSubstr(resolver::real_path_of(host_file)));
  const std::string now = test::tree_of(venv);
  EXPECT_EQ(now, before) << test::tree_diff(before, now);
}

// torch's library a symlink to a file outside the venv: the consumer's tree is then no library
// of the venv's, yet what the install writes is opened all the same, and a sub-library that
// cannot open is refused after the last step.
TEST(MultiFixWorseThanBefore, WhatAStepWroteIsOpenedEvenWhereTheConsumersTreeDoesNotReachIt) {
  TempDir t;
  const std::string venv = broken_venv(t, 0);
  const std::string torch = test::site_packages(venv) + "/torch/lib/libtorch_cuda.so";
  fs::create_directories(t.path() + "/outside");
  fs::rename(torch, t.path() + "/outside/libtorch_cuda.so");
  fs::create_symlink(t.path() + "/outside/libtorch_cuda.so", torch);
  const std::string before = test::tree_of(venv);
  auto w = cudnn_wheel("cudnn91900");
  for (auto& [arc, src] : w.files)
    if (arc.ends_with("libcudnn_graph.so.9")) src = k_multi + "/graph_needs_nowhere/libcudnn_graph.so.9";
  auto r =
      cudafix("install -y " + shell_quote(build(t.path(), w)) + " --ld-library-path " + shell_quote(k_fake_cuda), venv);
  EXPECT_EQ(r.exit_code, 1) << r.out.substr(0, 3000);
  const std::string error = r.doc["error"].is_string() ? r.doc["error"].get<std::string>() : "";
  EXPECT_THAT(error, HasSubstr("opens nvidia/cudnn/lib/libcudnn_graph.so.9: expected opens: the transaction wrote it"));
  EXPECT_THAT(error, HasSubstr("libnowhere.so.1"));
  const std::string now = test::tree_of(venv);
  EXPECT_EQ(now, before) << test::tree_diff(before, now);
}

// A plugin the install writes that lacks only an optional transport's library (nvshmem's MPI
// bootstrap needs libmpi.so.40, loaded only when MPI is used) cannot open, and that is no fault
// of the install: it is verified and kept, the plugin said not to open and why.
TEST(MultiFixWorseThanBefore, AWrittenPluginLackingOnlyAnOptionalTransportDoesNotFailTheInstall) {
  TempDir t;
  const std::string venv = broken_venv(t, 0);
  const WheelSpec w{
      "nvidia-nvshmem-cu13",
      "3.4.5",
      {{"nvidia/nvshmem/lib/nvshmem_bootstrap_mpi.so.3", k_multi + "/nvidia/nvshmem/lib/nvshmem_bootstrap_mpi.so.3"}},
      {}};
  auto r =
      cudafix("install -y " + shell_quote(build(t.path(), w)) + " --ld-library-path " + shell_quote(k_fake_cuda), venv);
  EXPECT_EQ(r.exit_code, 0) << r.out.substr(0, 3000);
  bool seen = false;
  for (const auto& l : r.doc["verification"]["steps"][0]["probe"]["libraries"])
    if (l["path"] == "nvidia/nvshmem/lib/nvshmem_bootstrap_mpi.so.3") {
      seen = true;
      EXPECT_EQ(l["opened"], false) << l.dump();
      EXPECT_EQ(l["optional"], true) << l.dump();
      EXPECT_THAT(l["missing"].get<std::string>(), HasSubstr("libmpi.so.40")) << l.dump();
    }
  EXPECT_TRUE(seen) << r.out.substr(0, 3000);
}

// A driver whose cuInit fails at the baseline, before any library of the venv is asked for, can
// verify nothing: a correct repair goes on unverified (exit 4, as with no driver), saying why,
// rather than being undone for the driver's fault.
TEST(MultiFixWorseThanBefore, ADriverFailingAtTheBaselineLeavesACorrectRepairUnverifiedNotUndone) {
  TempDir t;
  const std::string venv = broken_venv(t, 2);
  auto r = cudafix("fix -y --find-links " + shell_quote(wheels().good) + " --ld-library-path " +
                       shell_quote(test::k_fixtures + "/verify/cuda/init999"),
                   venv);
  EXPECT_EQ(r.exit_code, 4) << r.out.substr(0, 3000);
  EXPECT_EQ(r.doc["verified"], false);
  EXPECT_EQ(r.doc["verification"]["unverified"], true);
  EXPECT_THAT(r.doc["verification"]["unverified_why"].get<std::string>(), HasSubstr("cuInit"));
  EXPECT_EQ(r.doc["after"]["errors"], 0) << r.doc["after"].dump();
}

}  // namespace
}  // namespace cudafix
