// End-to-end: `cudafix plan remove` on a real venv made with `python3 -m venv` and filled by its
// own pip, checked against what a real `pip uninstall` then removes from a copy, and against
// what doctor finds after it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>

#include "resolver/text.hpp"
#include "tests/e2e/cudafix_run.hpp"
#include "tests/support/process.hpp"

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::k_fixtures;
using test::k_no_cache;
using test::k_python;
using test::k_source;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;

// A venv shaped like a torch install, from real wheels, installed by pip in this order:
//   nvidia-cuda-runtime 13.0.96      nvidia/cu13/lib/libcudart.so.13
//   nvidia-cudnn-cu12 9.10.2.21      nvidia/cudnn/lib/libcudnn.so.9 (cuDNN 9.14 bytes),
//                                    nvidia/cudnn/__init__.py, nvidia/cudnn/lib/cu12_only.txt
//   nvidia-cudnn-cu13 9.19.0.56      the same two paths, its own bytes (installed last: on disk)
//   helperpkg 1.0                    helperpkg/__init__.py, helperpkg/sub/mod.py, a console script
//   torchlike 2.11.0                 torch/lib/libtorch_cuda.so (RPATH into nvidia/ and $ORIGIN),
//                                    torch/__init__.py; requires cuDNN cu13 and helperpkg
//   nvidia-cuda-runtime-cu13 13.0.96 torch/lib/libcudart.so.13: the same runtime, another path
//   nsdist, shareda, sharedb         plain files in shapes that test pip's folder removal
class PlanVenv : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    venv_ = tmp_->path() + "/venv";
    ASSERT_EQ(run_shell(k_python + " -m venv " + shell_quote(venv_)).exit_code, 0);
    const std::string v = k_fixtures + "/verify";
    const std::string py = tmp_->path() + "/empty.py";
    test::write_file(py, "def main():\n    pass\n");
    const std::string text = tmp_->path() + "/note.txt";
    test::write_file(text, "cu12 only\n");
    const std::string mk =
        k_python + " " + shell_quote(k_source + "/tests/e2e/make_wheel.py") + " " + shell_quote(tmp_->path());
    std::vector<std::string> wheels;
    auto build = [&](const std::string& args) {
      const auto r = run_shell(mk + " " + args);
      ASSERT_EQ(r.exit_code, 0) << r.out;
      wheels.emplace_back(resolver::trim(r.out));
    };
    build("nvidia-cuda-runtime 13.0.96 nvidia/cu13/lib/libcudart.so.13=" + v + "/cu13/libcudart.so.13");
    build("nvidia-cudnn-cu12 9.10.2.21 nvidia/cudnn/lib/libcudnn.so.9=" + v +
          "/cudnn/v91400/libcudnn.so.9 nvidia/cudnn/__init__.py=" + py + " nvidia/cudnn/lib/cu12_only.txt=" + text);
    build("nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + v +
          "/cudnn/v91900/libcudnn.so.9 nvidia/cudnn/__init__.py=" + py);
    build("helperpkg 1.0 helperpkg/__init__.py=" + py + " helperpkg/sub/__init__.py=" + py +
          " helperpkg/sub/mod.py=" + py + " --console-script helper-tool=helperpkg.sub.mod:main");
    build("torchlike 2.11.0 torch/lib/libtorch_cuda.so=" + v + "/libtorch_cuda.so torch/__init__.py=" + py +
          " --requires 'nvidia-cudnn-cu13==9.19.0.56' --requires 'helperpkg>=1'");
    build("nvidia-cuda-runtime-cu13 13.0.96 torch/lib/libcudart.so.13=" + v + "/cu13/libcudart.so.13");
    // Folders pip moves whole, leaving their emptied parent behind; and two dists in one folder.
    build("nsdist 1.0 nsdist_ns/inner/lib/x.txt=" + text + " nsdist_ns/inner/include/y.h=" + text);
    build("shareda 1.0 common_ns/a.txt=" + text + " common_ns/deep/a2.txt=" + text);
    build("sharedb 1.0 common_ns/b.txt=" + text);
    for (const auto& w : wheels) {
      const auto r = run_shell("env -u VIRTUAL_ENV " + shell_quote(venv_ + "/bin/python3") +
                               " -m pip install -q --no-index --no-deps --disable-pip-version-check " + shell_quote(w));
      ASSERT_EQ(r.exit_code, 0) << r.out;
    }
    // Imports leave __pycache__ behind, as they do in real use; pip removes this interpreter's.
    const auto r = run_shell("env -u VIRTUAL_ENV " + shell_quote(venv_ + "/bin/python3") +
                             " -c 'import helperpkg.sub.mod, nvidia.cudnn, torch'");
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  static void TearDownTestSuite() { delete tmp_; }

  static std::string copy_venv(const TempDir& into) {
    const std::string dest = into.path() + "/venv";
    EXPECT_EQ(run_shell("cp -a " + shell_quote(venv_) + " " + shell_quote(dest)).exit_code, 0);
    return dest;
  }
  static test::JsonRun plan_remove(const std::string& venv, const std::string& dists,
                                   const std::string& extra = " --ld-library-path ''") {
    return test::cudafix_json("plan remove " + dists + " --venv " + shell_quote(venv) + k_no_cache + extra);
  }
  // Every file, symlink and folder below the venv, folders with a trailing '/'.
  static std::set<std::string> tree(const std::string& venv) {
    std::set<std::string> out;
    for (auto it = fs::recursive_directory_iterator(venv); it != fs::recursive_directory_iterator(); ++it) {
      const bool dir = it->is_directory() && !it->is_symlink();
      out.insert(it->path().string() + (dir ? "/" : ""));
    }
    return out;
  }
  // A plan's path list as absolute paths (site-relative entries joined to the site folder).
  static std::set<std::string> absolute(const std::string& venv, const json& list) {
    const std::string site = site_of(venv);
    std::set<std::string> out;
    for (const auto& p : list) {
      const std::string s = p.get<std::string>();
      out.insert(s.front() == '/' ? s : site + "/" + s);
    }
    return out;
  }
  static std::string site_of(const std::string& venv) {
    for (const auto& e : fs::directory_iterator(venv + "/lib")) return e.path().string() + "/site-packages";
    return "";
  }
  static std::set<std::string> pip_uninstall_removes(const std::string& venv, const std::string& dists) {
    const auto before = tree(venv);
    const auto r = run_shell("env -u VIRTUAL_ENV " + shell_quote(venv + "/bin/python3") +
                             " -m pip uninstall -y -q --disable-pip-version-check " + dists);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    const auto after = tree(venv);
    std::set<std::string> gone;
    for (const auto& p : before)
      if (!after.count(p)) gone.insert(p);
    return gone;
  }
  static std::vector<std::string> consumers_broken(const json& breaks) {
    std::vector<std::string> out;
    for (const auto& b : breaks) out.push_back(b["consumer"].get<std::string>() + " " + b["soname"].get<std::string>());
    return out;
  }

  static inline TempDir* tmp_ = nullptr;
  static inline std::string venv_;
};

TEST_F(PlanVenv, PipWouldDeleteIsExactlyWhatPipUninstallRemoves) {
  for (const std::string dists :
       {"nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "helperpkg", "torchlike", "helperpkg torchlike", "nsdist",
        "shareda", "shareda sharedb", "sharedb shareda"}) {
    SCOPED_TRACE(dists);
    TempDir t;
    const std::string venv = copy_venv(t);
    const auto plan = plan_remove(venv, dists);
    ASSERT_TRUE(plan.doc.contains("pip_would_delete")) << plan.out;
    const auto predicted = absolute(venv, plan.doc["pip_would_delete"]);
    EXPECT_EQ(predicted, pip_uninstall_removes(venv, dists));
  }
}

TEST_F(PlanVenv, AFolderThatOnlyFolderMovesEmptyStaysBehindAsPipLeavesIt) {
  // pip moves nsdist_ns/inner/include/ and .../lib/ whole and never climbs after a folder's move.
  const auto plan = plan_remove(venv_, "nsdist");
  const auto predicted = absolute(venv_, plan.doc["pip_would_delete"]);
  const std::string site = site_of(venv_);
  EXPECT_TRUE(predicted.count(site + "/nsdist_ns/inner/lib/"));
  EXPECT_FALSE(predicted.count(site + "/nsdist_ns/inner/"));
  EXPECT_FALSE(predicted.count(site + "/nsdist_ns/"));
}

TEST_F(PlanVenv, TheDryRunChangesNothing) {
  const auto before = tree(venv_);
  const auto plan = plan_remove(venv_, "nvidia-cudnn-cu12 helperpkg torchlike");
  // Nothing left needs cuDNN, but pip would still leave cu13's cuDNN installed without files.
  EXPECT_EQ(plan.exit_code, 1);
  EXPECT_TRUE(plan.doc["breaks"].empty()) << plan.doc["breaks"].dump(1);
  EXPECT_EQ(plan.doc["left_metadata_only"], json({"nvidia_cudnn_cu13-9.19.0.56.dist-info"}));
  EXPECT_TRUE(plan.doc["safe_with_cudafix"]);
  EXPECT_EQ(tree(venv_), before);
}

TEST_F(PlanVenv, PipUninstallOfTheCuda12CudnnBreaksTheCuda13ConsumerButOwnerCountingDoesNot) {
  const auto plan = plan_remove(venv_, "nvidia-cudnn-cu12");
  EXPECT_EQ(plan.exit_code, 1);
  EXPECT_FALSE(plan.doc["safe"]);
  EXPECT_TRUE(plan.doc["safe_with_cudafix"]);
  const auto& breaks = plan.doc["breaks"];
  ASSERT_EQ(breaks.size(), 1u) << breaks.dump(1);
  EXPECT_EQ(breaks[0]["consumer"], "torch/lib/libtorch_cuda.so");
  EXPECT_EQ(breaks[0]["consumer_dist"], "torchlike-2.11.0.dist-info");
  EXPECT_EQ(breaks[0]["soname"], "libcudnn.so.9");
  EXPECT_EQ(breaks[0]["kind"], "needed");
  EXPECT_EQ(breaks[0]["before"], "nvidia/cudnn/lib/libcudnn.so.9");
  EXPECT_TRUE(breaks[0]["after"].is_null());
  EXPECT_EQ(plan.doc["left_metadata_only"], json({"nvidia_cudnn_cu13-9.19.0.56.dist-info"}));
  EXPECT_TRUE(plan.doc["left_metadata_only_with_cudafix"].empty());
  EXPECT_TRUE(plan.doc["breaks_with_cudafix"].empty());
  // Owner counting deletes what only cu12 lists and keeps what cu13 lists too.
  const auto cudafix = absolute(venv_, plan.doc["cudafix_would_delete"]);
  const std::string site = site_of(venv_);
  EXPECT_TRUE(cudafix.count(site + "/nvidia/cudnn/lib/cu12_only.txt"));
  EXPECT_FALSE(cudafix.count(site + "/nvidia/cudnn/lib/libcudnn.so.9"));
  EXPECT_FALSE(cudafix.count(site + "/nvidia/cudnn/__init__.py"));
  EXPECT_THAT(plan.doc["cudafix_keeps"], ::testing::Contains("nvidia/cudnn/lib/libcudnn.so.9"));
  EXPECT_TRUE(plan.doc["requirement_breaks"].empty());
}

TEST_F(PlanVenv, ThePredictionMatchesWhatDoctorFindsAfterTheRealUninstall) {
  TempDir t;
  const std::string venv = copy_venv(t);
  pip_uninstall_removes(venv, "nvidia-cudnn-cu12");
  const auto d = test::cudafix_json("doctor --venv " + shell_quote(venv) + k_no_cache + " --ld-library-path ''");
  std::set<std::string> metadata_only, unresolved;
  for (const auto& f : d.doc["findings"]) {
    if (f["rule"] == "metadata-only") metadata_only.insert(f["dists"][0].get<std::string>());
    if (f["rule"] == "unresolved-library" && f["severity"] == "error")
      for (const auto& s : f["sonames"]) unresolved.insert(s.get<std::string>());
  }
  EXPECT_EQ(metadata_only, std::set<std::string>({"nvidia_cudnn_cu13-9.19.0.56.dist-info"})) << d.out;
  EXPECT_EQ(unresolved, std::set<std::string>({"libcudnn.so.9"})) << d.out;
}

TEST_F(PlanVenv, AFallbackOutsideTheEnvironmentIsABreakWithItsVersion) {
  TempDir sys;
  ASSERT_EQ(run_shell("cp " + shell_quote(k_fixtures + "/verify/cudnn/v91400/libcudnn.so.9") + " " +
                      shell_quote(sys.path() + "/libcudnn.so.9.14.0") + " && ln -s libcudnn.so.9.14.0 " +
                      shell_quote(sys.path() + "/libcudnn.so.9"))
                .exit_code,
            0);
  const auto plan = plan_remove(venv_, "nvidia-cudnn-cu12", " --ld-library-path " + shell_quote(sys.path()));
  const auto& breaks = plan.doc["breaks"];
  ASSERT_EQ(breaks.size(), 1u) << breaks.dump(1);
  EXPECT_EQ(breaks[0]["after"], sys.path() + "/libcudnn.so.9");
  EXPECT_EQ(breaks[0]["after_version"], "9.14.0");
  EXPECT_THAT(breaks[0]["why"].get<std::string>(), HasSubstr("outside the environment"));
}

TEST_F(PlanVenv, ASwitchToAnotherProviderOfTheSameMajorAndVersionIsNoBreak) {
  // libtorch_cuda.so's RPATH tries nvidia/cu13/lib before $ORIGIN (torch/lib), which holds the
  // same runtime from nvidia-cuda-runtime-cu13 13.0.96.
  const auto plan = plan_remove(venv_, "nvidia-cuda-runtime");
  EXPECT_TRUE(plan.doc["breaks"].empty()) << plan.doc["breaks"].dump(1);
  EXPECT_TRUE(plan.doc["safe"]);
  EXPECT_EQ(plan.exit_code, 0);
}

TEST_F(PlanVenv, AKeptDistsUnmetRequirementIsARequirementBreak) {
  const auto plan = plan_remove(venv_, "helperpkg");
  EXPECT_EQ(plan.exit_code, 1);
  EXPECT_TRUE(plan.doc["breaks"].empty());
  ASSERT_EQ(plan.doc["requirement_breaks"].size(), 1u);
  EXPECT_EQ(plan.doc["requirement_breaks"][0]["dist"], "torchlike-2.11.0.dist-info");
  EXPECT_EQ(plan.doc["requirement_breaks"][0]["requirement"], "helperpkg>=1");
  EXPECT_EQ(plan.doc["requirement_breaks"][0]["removed"], "helperpkg-1.0.dist-info");
  // Removing the dependent along with it leaves nothing unmet.
  EXPECT_EQ(plan_remove(venv_, "helperpkg torchlike").exit_code, 0);
}

TEST_F(PlanVenv, ADistThatIsNotInstalledIsAnErrorNamingIt) {
  const auto plan = plan_remove(venv_, "helperpkg no-such-dist");
  EXPECT_EQ(plan.exit_code, 2);
  EXPECT_THAT(plan.doc["error"].get<std::string>(), HasSubstr("not installed"));
  EXPECT_THAT(plan.doc["error"].get<std::string>(), HasSubstr("no-such-dist"));
}

}  // namespace
}  // namespace cudafix
