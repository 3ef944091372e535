// End-to-end: `cudafix plan remove` on a real venv made with `python3 -m venv` and filled by its
// own pip, checked against what a real `pip uninstall` then removes from a copy, and against
// what doctor finds after it.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "resolver/base/text.hpp"
#include "resolver/elf/elf_writer.hpp"
#include "resolver/plan/fix.hpp"
#include "resolver/plan/provenance.hpp"
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

using test::site_packages;

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
    const std::string v = k_fixtures + "/verify";
    const std::string py = tmp_->path() + "/empty.py";
    test::write_file(py, "def main():\n    pass\n");
    const std::string text = tmp_->path() + "/note.txt";
    test::write_file(text, "cu12 only\n");
    std::vector<std::string> wheels;
    auto build = [&](const std::string& args) { wheels.push_back(test::make_wheel(tmp_->path(), args)); };
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
    ASSERT_NO_FATAL_FAILURE(test::make_venv(venv_, wheels));
    // A hostile RECORD: rows that climb out of the environment, an absolute path, and a row
    // through a symlinked folder that leads outside. Neither pip nor cudafix may touch those files.
    outside_ = tmp_->path() + "/outside";
    fs::create_directories(outside_ + "/linked");
    test::write_file(outside_ + "/victim.txt", "keep\n");
    test::write_file(outside_ + "/linked/f.txt", "keep\n");
    const std::string evil = test::make_wheel(tmp_->path(), "evil 1.0 evil/__init__.py=" + py);
    ASSERT_EQ(test::venv_pip(venv_, "install -q --no-index --no-deps " + shell_quote(evil)).exit_code, 0);
    const std::string site = site_packages(venv_);
    fs::create_directory_symlink(outside_ + "/linked", site + "/evil_link");
    std::string record = resolver::read_file(site + "/evil-1.0.dist-info/RECORD");
    record +=
        "../../../../../../../.." + outside_ + "/victim.txt,,\n" + outside_ + "/victim.txt,,\nevil_link/f.txt,,\n";
    test::write_file(site + "/evil-1.0.dist-info/RECORD", record);
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
  static std::string site_of(const std::string& venv) { return site_packages(venv); }
  static std::set<std::string> pip_uninstall_removes(const std::string& venv, const std::string& dists) {
    const auto before = tree(venv);
    const auto r = test::venv_pip(venv, "uninstall -y -q " + dists);
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
  static inline std::string outside_;
};

TEST_F(PlanVenv, PipWouldDeleteIsExactlyWhatPipUninstallRemoves) {
  for (const std::string dists : {"nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "helperpkg", "torchlike",
                                  "helperpkg torchlike", "nsdist", "shareda", "shareda sharedb", "sharedb shareda"}) {
    SCOPED_TRACE(dists);
    TempDir t;
    const std::string venv = copy_venv(t);
    const auto plan = plan_remove(venv, dists);
    ASSERT_TRUE(plan.doc.contains("pip_would_delete")) << plan.out;
    const auto predicted = absolute(venv, plan.doc["pip_would_delete"]);
    EXPECT_EQ(predicted, pip_uninstall_removes(venv, dists));
  }
}

TEST_F(PlanVenv, AHostileRecordNeverNamesAFileOutsideTheEnvironment) {
  const auto plan = plan_remove(venv_, "evil");
  ASSERT_TRUE(plan.doc.contains("pip_would_delete")) << plan.out;
  for (const char* list : {"pip_would_delete", "cudafix_would_delete"})
    for (const auto& p : absolute(venv_, plan.doc[list])) {
      EXPECT_TRUE(p.starts_with(venv_ + "/")) << list << ": " << p;
      EXPECT_FALSE(p.starts_with(outside_)) << list << ": " << p;
    }
  TempDir t;
  const std::string venv = copy_venv(t);
  pip_uninstall_removes(venv, "evil");
  EXPECT_TRUE(fs::exists(outside_ + "/victim.txt"));
  EXPECT_TRUE(fs::exists(outside_ + "/linked/f.txt"));
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

TEST(PlanRemoveDlopen, RemovingWhatADispatcherLoadsWithDlopenIsABreakOfKindDlopen) {
  TempDir t;
  const std::string v = k_fixtures + "/verify";
  const std::string core = test::make_wheel(
      t.path(), "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/cudnn/origin/libcudnn.so.9");
  // cuDNN's sub-libraries in a dist of their own: nothing NEEDs them, libcudnn.so.9 dlopens them.
  std::string subs = "cudnn-subs 1.0";
  for (const char* s : {"graph", "ops", "cnn", "adv", "heuristic", "engines_precompiled", "engines_runtime_compiled"})
    subs += fmt::format(" nvidia/cudnn/lib/libcudnn_{}.so.9={}/cu13/libcudart.so.13", s, v);
  const std::string sub_wheel = test::make_wheel(t.path(), subs);
  const std::string venv = t.path() + "/venv";
  ASSERT_NO_FATAL_FAILURE(test::make_venv(venv, {core, sub_wheel}));
  const auto plan =
      test::cudafix_json("plan remove cudnn-subs --venv " + shell_quote(venv) + k_no_cache + " --ld-library-path ''");
  EXPECT_EQ(plan.exit_code, 1);
  const auto& breaks = plan.doc["breaks"];
  // The dispatcher's own dlopens; heuristic and the engines are libcudnn_graph.so.9's, which goes too.
  std::set<std::string> sonames;
  for (const auto& b : breaks) sonames.insert(b["soname"].get<std::string>());
  EXPECT_EQ(sonames, (std::set<std::string>{"libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9",
                                            "libcudnn_adv.so.9"}))
      << breaks.dump(1);
  for (const auto& b : breaks) {
    EXPECT_EQ(b["kind"], "dlopen");
    EXPECT_EQ(b["consumer"], "nvidia/cudnn/lib/libcudnn.so.9");
    EXPECT_EQ(b["consumer_dist"], "nvidia_cudnn_cu13-9.19.0.56.dist-info");
    EXPECT_TRUE(b["after"].is_null());
  }
}

// Real wheels in one --find-links folder, and real venvs made from them by pip, in a given order:
//   runtime13   nvidia-cuda-runtime 13.0.96       nvidia/cu13/lib/libcudart.so.13
//   runtime12   nvidia-cuda-runtime-cu12 12.8.90  nvidia/cuda_runtime/lib/libcudart.so.12
//   cudnn12     nvidia-cudnn-cu12 9.10.2.21       nvidia/cudnn/lib/libcudnn.so.9 (cuDNN 9.14 bytes)
//   cudnn13     nvidia-cudnn-cu13 9.19.0.56       the same path, cuDNN 9.19 bytes
//   cublas12    nvidia-cublas-cu12 12.8.4.1       nvidia/cublas/lib/libcublas.so.12
//   torch13     torchlike 2.11.0   NEEDs libcudart.so.13 and libcudnn.so.9; requires cudnn13
//   torch12     torch12like 2.7.0  NEEDs libcudart.so.12 and libcudnn.so.9; requires cudnn12
//   jax13       jaxlike 0.8.0      NEEDs libcublas.so.13 and libcudart.so.13
class PlanFix : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    links_ = tmp_->path() + "/wheels";
    fs::create_directories(links_);
    const std::string v = k_fixtures + "/verify";
    auto build = [&](const std::string& key, const std::string& args) {
      wheels_[key] = test::make_wheel(links_, args);
    };
    build("runtime13", "nvidia-cuda-runtime 13.0.96 nvidia/cu13/lib/libcudart.so.13=" + v + "/cu13/libcudart.so.13");
    build("runtime12",
          "nvidia-cuda-runtime-cu12 12.8.90 nvidia/cuda_runtime/lib/libcudart.so.12=" + v + "/cu12/libcudart.so.12");
    build("cudnn12", "nvidia-cudnn-cu12 9.10.2.21 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/cudnn/v91400/libcudnn.so.9");
    build("cudnn13", "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/cudnn/v91900/libcudnn.so.9");
    build("cublas12",
          "nvidia-cublas-cu12 12.8.4.1 nvidia/cublas/lib/libcublas.so.12=" + v + "/cublas12/libcublas.so.12");
    build("torch13", "torchlike 2.11.0 torch/lib/libtorch_cuda.so=" + v +
                         "/libtorch_cuda.so --requires 'nvidia-cudnn-cu13==9.19.0.56'");
    build("torch12", "torch12like 2.7.0 torch/lib/libtorch_cuda.so=" + v +
                         "/torch12/libtorch_cuda.so --requires 'nvidia-cudnn-cu12==9.10.2.21'");
    build("jax13", "jaxlike 0.8.0 jaxlib/libcuconsumer.so=" + v + "/libcuconsumer.so");
    build("cudnn13old", "nvidia-cudnn-cu13 9.13.0.50 nvidia/cudnn/lib/libcudnn.so.9=" + v +
                            "/cudnn/v91400/libcudnn.so.9 nvidia/cudnn/lib/old_only.txt=" + v + "/../stamp");
    build("cublas13", "nvidia-cublas 13.1.0.3 nvidia/cu13/lib/libcublas.so.13=" + v + "/cublas13/libcublas.so.13");
    build("kit", "cuda-kit 13.0.2 --extra cublas --requires 'nvidia-cublas==13.1.0.3.*; extra == \"cublas\"'");
    build("usekit", "kituser 1.0 --requires 'cuda-kit[cublas]==13.0.2'");
  }
  static void TearDownTestSuite() { delete tmp_; }

  // A venv with the wheels installed by its own pip, in this order.
  static std::string venv(const TempDir& into, const std::vector<std::string>& keys) {
    const std::string dir = into.path() + "/venv";
    std::vector<std::string> wheels;
    for (const auto& key : keys) wheels.push_back(wheels_.at(key));
    test::make_venv(dir, wheels);
    return dir;
  }
  static std::string site(const std::string& venv) { return site_packages(venv); }
  static test::JsonRun plan_fix(const std::string& venv, const std::string& extra = "") {
    const bool own_path = extra.find("--ld-library-path") != std::string::npos;
    return test::cudafix_json("plan fix --venv " + shell_quote(venv) + k_no_cache +
                              (own_path ? " " : " --ld-library-path '' ") + extra);
  }
  static std::vector<std::string> actions(const json& doc) {
    std::vector<std::string> out;
    for (const auto& s : doc["steps"])
      out.push_back(s["action"].get<std::string>() + " " + s["name"].get<std::string>());
    return out;
  }
  static void expect_every_step_ok(const json& doc) {
    for (const auto& s : doc["steps"]) EXPECT_TRUE(s["after_step"]["ok"]) << s.dump(1);
  }

  static inline TempDir* tmp_ = nullptr;
  static inline std::string links_;
  static inline std::map<std::string, std::string> wheels_;
};

TEST_F(PlanFix, TheCuda13CudnnBesideACuda12TorchIsRemovedAndTheSharedLibraryKept) {
  TempDir t;
  const auto dir = venv(t, {"runtime12", "cudnn13", "cudnn12", "torch12"});  // cu12's bytes on disk
  const auto p = plan_fix(dir);
  EXPECT_EQ(p.exit_code, 0) << p.out;
  EXPECT_EQ(p.doc["target"]["cuda_major"], 12);
  EXPECT_EQ(actions(p.doc), std::vector<std::string>({"remove nvidia-cudnn-cu13"}));
  expect_every_step_ok(p.doc);
  EXPECT_THAT(p.doc["steps"][0]["keeps"], ::testing::Contains("nvidia/cudnn/lib/libcudnn.so.9"));
  EXPECT_TRUE(p.doc["needs"].empty());
  EXPECT_TRUE(p.doc["remaining"].empty()) << p.doc["remaining"].dump(1);
}

TEST_F(PlanFix, WhenTheSharedLibraryHoldsTheOtherMajorsBytesTheOwnerIsReinstalledBeforeTheRemoval) {
  TempDir t;
  const auto dir = venv(t, {"runtime12", "cudnn12", "cudnn13", "torch12"});  // cu13's bytes on disk
  const auto p = plan_fix(dir, "--find-links " + shell_quote(links_));
  EXPECT_EQ(p.exit_code, 0) << p.out;
  EXPECT_EQ(actions(p.doc), std::vector<std::string>({"reinstall nvidia-cudnn-cu12", "remove nvidia-cudnn-cu13"}));
  expect_every_step_ok(p.doc);
  EXPECT_THAT(p.doc["steps"][0]["why"].get<std::string>(), HasSubstr("holds nvidia-cudnn-cu13 9.19.0.56's bytes"));
  EXPECT_EQ(p.doc["steps"][0]["wheel"]["file"], wheels_.at("cudnn12"));
  EXPECT_TRUE(p.doc["remaining"].empty()) << p.doc["remaining"].dump(1);
}

TEST_F(PlanFix, AfterARealPipUninstallTheMetadataOnlyProviderIsReinstalledFromTheWheel) {
  TempDir t;
  const auto dir = venv(t, {"runtime12", "cudnn12", "cudnn13", "torch12"});
  ASSERT_EQ(test::venv_pip(dir, "uninstall -y -q nvidia-cudnn-cu13").exit_code, 0);
  const auto with = plan_fix(dir, "--find-links " + shell_quote(links_));
  EXPECT_EQ(with.exit_code, 0) << with.out;
  EXPECT_EQ(actions(with.doc), std::vector<std::string>({"reinstall nvidia-cudnn-cu12"}));
  expect_every_step_ok(with.doc);
  EXPECT_TRUE(with.doc["steps"][0]["simulated"]);
  EXPECT_THAT(with.doc["steps"][0]["writes"], ::testing::Contains("nvidia/cudnn/lib/libcudnn.so.9"));
  EXPECT_TRUE(with.doc["needs"].empty());
  EXPECT_TRUE(with.doc["remaining"].empty()) << with.doc["remaining"].dump(1);
  // $PIP_FIND_LINKS stands in for --find-links, as it does for pip.
  const auto from_env = test::cudafix_json("plan fix --venv " + shell_quote(dir) + k_no_cache + " --ld-library-path ''",
                                           "PIP_FIND_LINKS=" + shell_quote(links_));
  EXPECT_EQ(from_env.doc["steps"][0]["wheel"]["file"], with.doc["steps"][0]["wheel"]["file"]);
  // Without a wheel at hand the plan is the same, and says which wheel it needs.
  const auto without = plan_fix(dir);
  EXPECT_EQ(without.exit_code, 0);
  EXPECT_EQ(actions(without.doc), actions(with.doc));
  ASSERT_EQ(without.doc["needs"].size(), 1u);
  EXPECT_EQ(without.doc["needs"][0]["name"], "nvidia-cudnn-cu12");
  EXPECT_EQ(without.doc["needs"][0]["version"], "9.10.2.21");
  EXPECT_FALSE(without.doc["needs"][0]["tags"].empty());
}

// Wheels are read by cudafix's own zip reader: a libarchive that cannot be used (it is loaded
// only to write wheels) changes nothing in planning, and the wheel at hand is planned from.
TEST_F(PlanFix, WithoutAUsableLibarchiveTheWheelsAreStillReadAndPlannedFrom) {
  TempDir t;
  const auto dir = venv(t, {"runtime12", "cudnn12", "cudnn13", "torch12"});
  ASSERT_EQ(test::venv_pip(dir, "uninstall -y -q nvidia-cudnn-cu13").exit_code, 0);
  // Searched before the ld.so.cache: a libarchive.so.13 with none of libarchive's functions.
  const std::string env = "LD_LIBRARY_PATH=" + shell_quote(k_fixtures + "/nolibarchive");
  const std::string args =
      "plan fix --venv " + shell_quote(dir) + k_no_cache + " --ld-library-path '' --find-links " + shell_quote(links_);
  const auto warnings =
      test::run_shell("env -u VIRTUAL_ENV " + env + " " + shell_quote(test::k_bin) + " " + args + " 2>&1 >/dev/null");
  EXPECT_THAT(warnings.out, Not(HasSubstr("libarchive")));
  const auto p = test::cudafix_json(args, env);
  EXPECT_EQ(p.exit_code, 0) << p.out;
  EXPECT_EQ(actions(p.doc), std::vector<std::string>({"reinstall nvidia-cudnn-cu12"}));
  EXPECT_TRUE(p.doc["needs"].empty()) << p.doc.dump(1);
  ASSERT_TRUE(p.doc["steps"][0]["wheel"].is_object()) << p.doc.dump(1);
  EXPECT_EQ(p.doc["steps"][0]["wheel"]["file"], wheels_.at("cudnn12"));
}

TEST_F(PlanFix, AnUnusedCuda12CublasBesideACuda13ConsumerIsRemoved) {
  TempDir t;
  const auto dir = venv(t, {"runtime13", "cudnn13", "cublas12", "torch13"});
  const auto p = plan_fix(dir);
  EXPECT_EQ(p.doc["target"]["cuda_major"], 13);
  EXPECT_EQ(actions(p.doc), std::vector<std::string>({"remove nvidia-cublas-cu12"}));
  expect_every_step_ok(p.doc);
  EXPECT_THAT(p.doc["steps"][0]["deletes"], ::testing::Contains("nvidia/cublas/lib/libcublas.so.12"));
}

TEST_F(PlanFix, AMissingProviderIsInstalledBeforeTheWrongMajorOneGoes) {
  TempDir t;
  // torchlike requires the cu13 cuDNN, but only the cu12 one is there, providing libcudnn.so.9.
  const auto dir = venv(t, {"runtime13", "cudnn12", "torch13"});
  const auto p = plan_fix(dir, "--find-links " + shell_quote(links_));
  EXPECT_EQ(p.exit_code, 0) << p.out;
  EXPECT_EQ(actions(p.doc), std::vector<std::string>({"install nvidia-cudnn-cu13", "remove nvidia-cudnn-cu12"}));
  expect_every_step_ok(p.doc);
  EXPECT_EQ(p.doc["steps"][0]["version"], "9.19.0.56");
  EXPECT_EQ(p.doc["steps"][0]["wheel"]["file"], wheels_.at("cudnn13"));
  // The removal keeps the library the install wrote, which the cu12 wheel also lists.
  EXPECT_THAT(p.doc["steps"][1]["keeps"], ::testing::Contains("nvidia/cudnn/lib/libcudnn.so.9"));
  EXPECT_TRUE(p.doc["remaining"].empty()) << p.doc["remaining"].dump(1);
}

TEST_F(PlanFix, AnExtrasChainPipCheckDoesNotFollowIsInstalledFromTheWheelThatMatchesIt) {
  TempDir t;
  // kituser requires cuda-kit[cublas]; cuda-kit's extra asks for nvidia-cublas==13.1.0.3.*.
  const auto dir = venv(t, {"runtime13", "cudnn13", "torch13", "kit", "usekit"});
  const auto p = plan_fix(dir, "--find-links " + shell_quote(links_));
  EXPECT_EQ(p.exit_code, 0) << p.out;
  EXPECT_EQ(actions(p.doc), std::vector<std::string>({"install nvidia-cublas"}));
  EXPECT_EQ(p.doc["steps"][0]["version"], "13.1.0.3");
  EXPECT_THAT(p.doc["steps"][0]["why"].get<std::string>(),
              HasSubstr("cuda-kit 13.0.2 requires nvidia-cublas==13.1.0.3.*"));
  expect_every_step_ok(p.doc);
}

TEST_F(PlanFix, AMetadataOnlyProviderShadowedByASystemLibraryIsInstalledAndThatIsNoBreak) {
  TempDir t, sys;
  const auto dir = venv(t, {"runtime13", "cudnn13", "torch13"});
  ASSERT_EQ(test::venv_pip(dir, "uninstall -y -q nvidia-cudnn-cu13").exit_code, 0);
  ASSERT_EQ(run_shell("cp " + shell_quote(k_fixtures + "/verify/cudnn/v91400/libcudnn.so.9") + " " +
                      shell_quote(sys.path() + "/libcudnn.so.9"))
                .exit_code,
            0);
  // torch's libcudnn.so.9 now comes from outside; the install brings it back inside.
  const auto p = plan_fix(dir, "--find-links " + shell_quote(links_) + " --ld-library-path " + shell_quote(sys.path()));
  EXPECT_EQ(p.exit_code, 0) << p.out;
  EXPECT_EQ(actions(p.doc), std::vector<std::string>({"install nvidia-cudnn-cu13"}));
  expect_every_step_ok(p.doc);
  EXPECT_TRUE(p.doc["remaining"].empty()) << p.doc["remaining"].dump(1);
}

TEST_F(PlanFix, AnInstalledProviderOfTheWrongVersionIsReplacedByTheOneRequired) {
  TempDir t;
  // torchlike pins nvidia-cudnn-cu13==9.19.0.56; 9.13.0.50 is installed.
  const auto dir = venv(t, {"runtime13", "cudnn13old", "torch13"});
  const auto p = plan_fix(dir, "--find-links " + shell_quote(links_));
  EXPECT_EQ(p.exit_code, 0) << p.out;
  ASSERT_EQ(actions(p.doc), std::vector<std::string>({"install nvidia-cudnn-cu13"}));
  const auto& step = p.doc["steps"][0];
  EXPECT_EQ(step["dist"], "nvidia_cudnn_cu13-9.13.0.50.dist-info");
  EXPECT_EQ(step["version"], "9.19.0.56");
  EXPECT_THAT(step["why"].get<std::string>(), HasSubstr("(installed: 9.13.0.50)"));
  // The old version's own files go; the library both versions write stays, rewritten.
  EXPECT_THAT(step["deletes"], ::testing::Contains("nvidia/cudnn/lib/old_only.txt"));
  EXPECT_THAT(step["deletes"], ::testing::Not(::testing::Contains("nvidia/cudnn/lib/libcudnn.so.9")));
  EXPECT_THAT(step["writes"], ::testing::Contains("nvidia/cudnn/lib/libcudnn.so.9"));
  expect_every_step_ok(p.doc);
  // Issue 36, item 5: carried out, the old version's dist-info goes whole, as pip's upgrade
  // removes it (before, it stayed, empty: pip skipped it, doctor said duplicate-dist).
  const std::string before = test::tree_of(dir);
  const auto fixed = test::cudafix_json("fix -y --no-verify --venv " + shell_quote(dir) + k_no_cache +
                                        " --ld-library-path '' --find-links " + shell_quote(links_));
  EXPECT_EQ(fixed.exit_code, 0) << fixed.out;
  EXPECT_FALSE(fs::exists(site(dir) + "/nvidia_cudnn_cu13-9.13.0.50.dist-info"));
  EXPECT_FALSE(fs::exists(site(dir) + "/nvidia/cudnn/lib/old_only.txt"));
  const auto list = test::venv_pip(dir, "list");
  EXPECT_THAT(list.out, ::testing::ContainsRegex("nvidia-cudnn-cu13 +9\\.19\\.0\\.56"));
  EXPECT_THAT(list.out, ::testing::Not(HasSubstr("invalid metadata"))) << list.out;
  const auto doctor = test::cudafix_json("doctor --venv " + shell_quote(dir) + k_no_cache);
  EXPECT_TRUE(test::of_rule(doctor.doc, "duplicate-dist").empty()) << doctor.out.substr(0, 2000);
  EXPECT_EQ(run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " rollback -y --venv " + shell_quote(dir) +
                      k_no_cache)
                .exit_code,
            0);
  EXPECT_EQ(test::tree_of(dir), before) << test::tree_diff(before, test::tree_of(dir));
}

TEST_F(PlanFix, ConsumersThatNeedDifferentMajorsStopThePlanUntilOneIsChosen) {
  TempDir t;
  const auto dir = venv(t, {"runtime12", "cudnn12", "torch12", "jax13"});
  const auto p = plan_fix(dir);
  EXPECT_EQ(p.exit_code, 1);
  const std::string problem = p.doc["problem"];
  EXPECT_THAT(problem, HasSubstr("CUDA 12: torch12like 2.7.0"));
  EXPECT_THAT(problem, HasSubstr("CUDA 13: jaxlike 0.8.0"));
  EXPECT_THAT(problem, HasSubstr("--cuda-major"));
  // Chosen: CUDA 12 keeps torch12like working; the plan says what jaxlike still lacks.
  const auto chosen = plan_fix(dir, "--cuda-major 12");
  EXPECT_EQ(chosen.exit_code, 0) << chosen.out;
  EXPECT_TRUE(chosen.doc["target"]["given"]);
  EXPECT_THAT(chosen.doc["remaining"].dump(), HasSubstr("jaxlib/libcuconsumer.so"));
}

TEST_F(PlanFix, ARemovalThatWouldBreakAConsumerIsRefusedNamingWhatBreaks) {
  TempDir t;
  const auto dir = venv(t, {"runtime12", "cudnn12", "torch12"});
  // CUDA 13 asked for: removing the cu12 runtime would leave torch12like's libcudart.so.12 nowhere.
  const auto p = plan_fix(dir, "--cuda-major 13");
  EXPECT_EQ(p.exit_code, 1);
  EXPECT_THAT(p.doc["problem"].get<std::string>(), HasSubstr("no safe order: no order can carry out remove "
                                                             "nvidia-cuda-runtime-cu12"));
  // The conflict is that one step: no order of the others makes it safe.
  ASSERT_EQ(p.doc["conflict"].size(), 1u) << p.doc["conflict"].dump(1);
  EXPECT_EQ(p.doc["conflict"][0]["name"], "nvidia-cuda-runtime-cu12");
  EXPECT_THAT(p.doc["conflict"][0]["worse"].dump(), HasSubstr("libcudart.so.12"));
  ASSERT_FALSE(p.doc["steps"].empty());
  const auto& last = p.doc["steps"].back();
  EXPECT_FALSE(last["after_step"]["ok"]);
  EXPECT_THAT(last["after_step"]["worse"].dump(), HasSubstr("libcudart.so.12"));
}

TEST_F(PlanFix, TheHealthyCorpusVenvNeedsNothing) {
  TempDir dir;
  const auto made = run_shell("zcat " + shell_quote(k_source + "/tests/data/good_torch_cu130_venv.json.gz") + " | " +
                              shell_quote(test::k_bin) + " materialize - " + shell_quote(dir.path() + "/venv"));
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const auto p = plan_fix(dir.path() + "/venv");
  EXPECT_EQ(p.exit_code, 0);
  EXPECT_EQ(p.doc["target"]["cuda_major"], 13);
  EXPECT_TRUE(p.doc["steps"].empty()) << p.doc["steps"].dump(1);
  EXPECT_TRUE(p.doc["remaining"].empty()) << p.doc["remaining"].dump(1);
}

TEST_F(PlanFix, TheSavedPlanIsTheJsonDocumentWithAFingerprintOfWhatItTouches) {
  TempDir t;
  const auto dir = venv(t, {"runtime13", "cudnn13", "cublas12", "torch13"});
  const std::string out = t.path() + "/plan.json";
  const auto p = plan_fix(dir, "-o " + shell_quote(out));
  const auto saved = json::parse(resolver::read_file(out));
  EXPECT_EQ(saved, p.doc);
  const auto& fp = saved["fingerprint"];
  EXPECT_EQ(fp["digest"].get<std::string>().size(), 64u);
  std::set<std::string> dists;
  for (const auto& r : fp["records"]) dists.insert(r["dist"].get<std::string>());
  EXPECT_TRUE(dists.count("torchlike-2.11.0.dist-info") && dists.count("nvidia_cublas_cu12-12.8.4.1.dist-info"));
  bool stamped = false;
  for (const auto& f : fp["files"])
    if (f["path"].get<std::string>().ends_with("nvidia/cublas/lib/libcublas.so.12"))
      stamped = f["exists"] && f["ino"] != 0;
  EXPECT_TRUE(stamped) << fp.dump(1);
  // A change to a touched file changes the fingerprint.
  ASSERT_EQ(
      run_shell("touch -d '2001-01-01' " + shell_quote(site(dir) + "/nvidia/cublas/lib/libcublas.so.12")).exit_code, 0);
  EXPECT_NE(plan_fix(dir).doc["fingerprint"]["digest"], fp["digest"]);
}

}  // namespace
}  // namespace cudafix

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::k_fixtures;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;

// The hybrid users hit first: a CUDA 12 torch (pinning cuDNN, cuBLAS and the runtime of CUDA 12)
// with a CUDA 13 stack left over, the CUDA 13 cuDNN installed last so that the shared
// nvidia/cudnn/lib files hold its bytes, and a host ld.so.cache that lists a CUDA 13 cuBLASLt
// (a toolkit's). cuDNN's libcudnn_adv.so.9 dlopens the cuBLASLt of its own major.
class HybridCuda12Torch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    links_ = tmp_->path() + "/wheels";
    const std::string elf = tmp_->path() + "/elf";
    fs::create_directories(links_);
    fs::create_directories(elf);
    const std::string v = k_fixtures + "/verify";
    auto object = [&](const std::string& file, const std::string& soname, std::vector<std::string> needed,
                      std::optional<std::string> runpath) {
      resolver::ElfSpec spec;
      spec.soname = soname;
      spec.needed = std::move(needed);
      spec.runpath = std::move(runpath);
      spec.padding = file.size() * 16;  // the two majors' builds differ in size, as real ones do
      resolver::write_shared_object(elf + "/" + file, spec);
      return elf + "/" + file;
    };
    const std::string adv = "nvidia/cudnn/lib/libcudnn_adv.so.9";
    std::vector<std::pair<std::string, std::string>> builds = {
        {"runtime12",
         "nvidia-cuda-runtime-cu12 12.8.90 nvidia/cuda_runtime/lib/libcudart.so.12=" + v + "/cu12/libcudart.so.12"},
        {"cublas12", "nvidia-cublas-cu12 12.8.4.1 nvidia/cublas/lib/libcublasLt.so.12=" +
                         object("lt12.so", "libcublasLt.so.12", {}, std::nullopt)},
        {"cudnn12", "nvidia-cudnn-cu12 9.10.2.21 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/cudnn/v91400/libcudnn.so.9 " +
                        adv + "=" + object("adv12.so", "libcudnn_adv.so.9", {}, "$ORIGIN:$ORIGIN/../../cublas/lib")},
        {"torch", "torch 2.7.1+cu128 torch/lib/libtorch_cuda.so=" + v + "/torch12/libtorch_cuda.so torch/_C.so=" + v +
                      "/torch12/_C.so --requires 'nvidia-cudnn-cu12==9.10.2.21' --requires "
                      "'nvidia-cublas-cu12==12.8.4.1' --requires 'nvidia-cuda-runtime-cu12==12.8.90'"},
        {"runtime13", "nvidia-cuda-runtime 13.0.96 nvidia/cu13/lib/libcudart.so.13=" + v + "/cu13/libcudart.so.13"},
        {"cublas13", "nvidia-cublas 13.1.0.3 nvidia/cu13/lib/libcublasLt.so.13=" +
                         object("lt13.so", "libcublasLt.so.13", {}, std::nullopt) +
                         " nvidia/cu13/lib/libcublas.so.13=" +
                         object("cublas13.so", "libcublas.so.13", {"libcublasLt.so.13"}, "$ORIGIN")},
        {"cudnn13", "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/cudnn/v91900/libcudnn.so.9 " +
                        adv + "=" + object("adv13.so", "libcudnn_adv.so.9", {}, "$ORIGIN:$ORIGIN/../../cu13/lib")}};
    for (const auto& [key, args] : builds) wheels_[key] = test::make_wheel(links_, args);
    venv_ = tmp_->path() + "/venv";
    std::vector<std::string> order;
    for (const auto& [key, args] : builds) order.push_back(wheels_[key]);
    ASSERT_NO_FATAL_FAILURE(test::make_venv(venv_, order));
    // The toolkit's cuBLASLt 13, found through an ld.so.cache the real ldconfig writes.
    const std::string toolkit = tmp_->path() + "/cuda-13.0/lib";
    fs::create_directories(toolkit);
    fs::copy_file(elf + "/lt13.so", toolkit + "/libcublasLt.so.13");
    test::write_file(tmp_->path() + "/ld.so.conf", toolkit + "\n");
    cache_ = tmp_->path() + "/ld.so.cache";
    const auto built =
        run_shell("ldconfig -X -C " + shell_quote(cache_) + " -f " + shell_quote(tmp_->path() + "/ld.so.conf"));
    ASSERT_EQ(built.exit_code, 0) << built.out;
  }
  static void TearDownTestSuite() { delete tmp_; }

  static std::string copy(const TempDir& into) {
    const std::string dest = into.path() + "/venv";
    EXPECT_EQ(run_shell("cp -a " + shell_quote(venv_) + " " + shell_quote(dest)).exit_code, 0);
    return dest;
  }
  static test::JsonRun run(const std::string& args, const std::string& venv = venv_) {
    return test::cudafix_json(args + " --venv " + shell_quote(venv) + " --ld-so-cache " + shell_quote(cache_) +
                              " --ld-library-path ''");
  }
  static std::vector<std::string> actions(const json& doc) {
    std::vector<std::string> out;
    for (const auto& s : doc["steps"])
      out.push_back(s["action"].get<std::string>() + " " + s["name"].get<std::string>());
    return out;
  }

  static inline TempDir* tmp_ = nullptr;
  static inline std::string links_, venv_, cache_;
  static inline std::map<std::string, std::string> wheels_;
};

TEST_F(HybridCuda12Torch, PlanFixReinstallsTheClobberedCuda12CudnnThenRemovesTheCuda13Stack) {
  const auto plan = run("plan fix --find-links " + shell_quote(links_));
  EXPECT_EQ(plan.exit_code, 0) << plan.doc.dump(1).substr(0, 4000);
  EXPECT_TRUE(plan.doc["problem"].is_null()) << plan.doc["problem"];
  EXPECT_EQ(plan.doc["target"]["cuda_major"], 12);
  const auto steps = actions(plan.doc);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.front(), "reinstall nvidia-cudnn-cu12");
  for (const char* gone : {"remove nvidia-cudnn-cu13", "remove nvidia-cublas", "remove nvidia-cuda-runtime"})
    EXPECT_THAT(steps, ::testing::Contains(gone)) << plan.doc["steps"].dump(1);
  for (const auto& s : plan.doc["steps"]) EXPECT_TRUE(s["after_step"]["ok"]) << s.dump(1);
}

// After a real `pip uninstall nvidia-cudnn-cu13` the shared files are gone and the CUDA 12 cuDNN
// is metadata-only: the plan reinstalls it from its wheel first, then removes the CUDA 13 stack.
TEST_F(HybridCuda12Torch, AfterARealPipUninstallOfTheCuda13CudnnTheCuda12OneIsReinstalledFirst) {
  TempDir t;
  const std::string venv = copy(t);
  ASSERT_EQ(test::venv_pip(venv, "uninstall -y -q nvidia-cudnn-cu13").exit_code, 0);
  EXPECT_FALSE(fs::exists(test::site_packages(venv) + "/nvidia/cudnn/lib/libcudnn_adv.so.9"));
  const auto plan = run("plan fix --find-links " + shell_quote(links_), venv);
  EXPECT_EQ(plan.exit_code, 0) << plan.doc["problem"];
  const auto steps = actions(plan.doc);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.front(), "reinstall nvidia-cudnn-cu12");
  EXPECT_THAT(steps, ::testing::Contains("remove nvidia-cublas"));
  EXPECT_THAT(steps, ::testing::Not(::testing::Contains("remove nvidia-cudnn-cu13")));
  for (const auto& s : plan.doc["steps"]) EXPECT_TRUE(s["after_step"]["ok"]) << s.dump(1);
}

// Installed the other way round (the CUDA 12 cuDNN last, so its bytes are on disk): nothing needs
// reinstalling, and the CUDA 13 cuDNN goes with owner counting, keeping every shared file.
TEST_F(HybridCuda12Torch, WithTheCuda12CudnnInstalledLastTheCuda13StackIsRemovedKeepingTheSharedFiles) {
  TempDir t;
  const std::string venv = t.path() + "/venv";
  std::vector<std::string> order;
  for (const char* key : {"runtime13", "cublas13", "cudnn13", "runtime12", "cublas12", "cudnn12", "torch"})
    order.push_back(wheels_.at(key));
  ASSERT_NO_FATAL_FAILURE(test::make_venv(venv, order));
  const auto plan = run("plan fix --find-links " + shell_quote(links_), venv);
  EXPECT_EQ(plan.exit_code, 0) << plan.doc["problem"];
  const auto steps = actions(plan.doc);
  EXPECT_THAT(steps, ::testing::Not(::testing::Contains("reinstall nvidia-cudnn-cu12")));
  for (const char* gone : {"remove nvidia-cudnn-cu13", "remove nvidia-cublas", "remove nvidia-cuda-runtime"})
    EXPECT_THAT(steps, ::testing::Contains(gone)) << plan.doc["steps"].dump(1);
  for (const auto& s : plan.doc["steps"]) {
    EXPECT_TRUE(s["after_step"]["ok"]) << s.dump(1);
    if (s["name"] == "nvidia-cudnn-cu13") {
      // Its dist-info alone goes: every cuDNN path is listed by the CUDA 12 cuDNN too.
      for (const auto& d : s["deletes"])
        EXPECT_THAT(d.get<std::string>(), ::testing::StartsWith("nvidia_cudnn_cu13-9.19.0.56.dist-info/"));
      EXPECT_EQ(s["keeps"], json({"nvidia/cudnn/lib/libcudnn.so.9", "nvidia/cudnn/lib/libcudnn_adv.so.9"}));
    }
  }
}

TEST_F(HybridCuda12Torch, OwnerCountedRemovalOfTheCuda13CudnnBreaksNothingAndPipsWayDoes) {
  const auto plan = run("plan remove nvidia-cudnn-cu13");
  // pip deletes the shared cuDNN files: torch's libcudnn.so.9 resolves nowhere.
  EXPECT_EQ(plan.doc["safe"], false);
  EXPECT_EQ(plan.exit_code, 1) << "exit 1 exactly when pip's uninstall breaks something";
  bool torch_breaks = false;
  for (const auto& b : plan.doc["breaks"]) torch_breaks = torch_breaks || b["soname"] == "libcudnn.so.9";
  EXPECT_TRUE(torch_breaks) << plan.doc["breaks"].dump(1);
  // Owner-counted, no byte of the shared files changes: nothing breaks, and the ld.so.cache entry
  // a cuDNN file found before is still found.
  EXPECT_TRUE(plan.doc["breaks_with_cudafix"].empty()) << plan.doc["breaks_with_cudafix"].dump(1);
  EXPECT_EQ(plan.doc["safe_with_cudafix"], true);
}

}  // namespace
}  // namespace cudafix

namespace cudafix {
namespace {

// Every file's hash under a venv, cudafix's own folder and the lock aside.
std::string hashes_of(const std::string& venv) { return test::tree_of(venv); }

// The plan carried out by cudafix itself: one transaction, then judged by doctor and by pip, and
// undone by rollback to the very bytes it started from.
TEST_F(HybridCuda12Torch, ApplyCarriesOutTheSavedPlanAndRollbackUndoesItByteForByte) {
  test::TempDir t;
  const std::string venv = copy(t);
  const std::string before = hashes_of(venv);
  const std::string plan_file = t.path() + "/plan.json";
  const auto plan = run("plan fix --find-links " + shell_quote(links_) + " -o " + shell_quote(plan_file), venv);
  ASSERT_EQ(plan.exit_code, 0) << plan.doc["problem"];
  // Each step's name respelled as a wheel file escapes it (NVIDIA_CUDNN_CU12): apply binds it all
  // the same, and names every step as pip list does, by the dist's METADATA Name.
  json doc = json::parse(resolver::read_file(plan_file));
  std::vector<std::string> as_pip_names_them;
  for (auto& st : doc["steps"]) {
    std::string name = st["name"];
    as_pip_names_them.push_back(st["action"].get<std::string>() + " " + name + " " + st["version"].get<std::string>());
    std::replace(name.begin(), name.end(), '-', '_');
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
    st["name"] = name;
  }
  test::write_file(plan_file, doc.dump());
  const auto applied = run("apply " + shell_quote(plan_file) + " -y --no-verify", venv);
  ASSERT_EQ(applied.exit_code, 0) << applied.out;
  EXPECT_EQ(applied.doc["steps"], json(as_pip_names_them));
  EXPECT_EQ(applied.doc["verified"], false);
  // doctor finds no mixed majors and no shared paths left (this fixture's fake dispatcher has no
  // RUNPATH for its sub-libraries: that error is the fixture's, before and after); pip sees the
  // CUDA 13 stack gone and its checks pass.
  const auto doctor = run("doctor", venv);
  for (const auto& f : doctor.doc["findings"])
    EXPECT_TRUE(f["rule"] != "mixed-cuda-major" && f["rule"] != "shared-path") << f.dump(1);
  const auto list = test::venv_pip(venv, "list --format json");
  for (const char* gone : {"nvidia-cudnn-cu13", "nvidia-cublas", "nvidia-cuda-runtime"})
    EXPECT_THAT(list.out, ::testing::Not(HasSubstr("\"" + std::string(gone) + "\""))) << gone;
  EXPECT_EQ(test::venv_pip(venv, "check").exit_code, 0);
  // The reinstalled cuDNN's files are its wheel's bytes, and pip lists them under its name.
  const auto show = test::venv_pip(venv, "show -v -f nvidia-cudnn-cu12");
  EXPECT_THAT(show.out, HasSubstr("nvidia/cudnn/lib/libcudnn_adv.so.9"));
  EXPECT_THAT(show.out, HasSubstr("Installer: cudafix"));
  // A plan made before is refused once the environment changed (here: by the apply itself).
  const auto again = run("apply " + shell_quote(plan_file) + " -y --no-verify", venv);
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_THAT(again.out, HasSubstr("the environment changed since the plan was made"));
  // And one rollback gives every byte back.
  const auto back = run("rollback -y", venv);
  ASSERT_EQ(back.exit_code, 0) << back.out;
  EXPECT_TRUE(hashes_of(venv) == before) << "the tree differs after the rollback";
  // pip can uninstall what cudafix installed.
  ASSERT_EQ(run("apply " + shell_quote(plan_file) + " -y --no-verify", venv).exit_code, 0);
  EXPECT_EQ(test::venv_pip(venv, "uninstall -y -q nvidia-cudnn-cu12").exit_code, 0);
  EXPECT_FALSE(fs::exists(test::site_packages(venv) + "/nvidia/cudnn/lib/libcudnn_adv.so.9"));
}

// A plan carried to another folder is for the environment it was made in: apply takes the plan's
// venv (not the python3 found there), says so, and history counts the plan's steps and the files
// apart. Applied once, the plan no longer matches: the refusal names three differences, the count
// of the rest, and the command that makes a new plan on a line of its own.
TEST_F(HybridCuda12Torch, ApplyFromAnotherFolderTakesThePlansVenvAndARefusalEndsWithTheWayOut) {
  test::TempDir t;
  const std::string venv = copy(t);
  const std::string plan_file = t.path() + "/plan.json";
  const auto plan = run("plan fix --find-links " + shell_quote(links_) + " -o " + shell_quote(plan_file), venv);
  ASSERT_EQ(plan.exit_code, 0) << plan.doc["problem"];
  const std::size_t steps = plan.doc["steps"].size();
  ASSERT_GE(steps, 2u);
  const std::string elsewhere = t.path() + "/elsewhere";
  fs::create_directories(elsewhere);
  // No --venv, no VIRTUAL_ENV: the python3 on PATH would be the system's.
  const std::string apply = "cd " + shell_quote(elsewhere) + " && env -u VIRTUAL_ENV " + shell_quote(test::k_bin) +
                            " apply ../plan.json -y --no-verify --color never --ld-so-cache " + shell_quote(cache_) +
                            " --ld-library-path '' 2>&1";
  const auto applied = run_shell(apply);
  ASSERT_EQ(applied.exit_code, 0) << applied.out;
  EXPECT_THAT(applied.out, HasSubstr("this plan is for " + venv + "\n"));
  EXPECT_THAT(applied.out, HasSubstr(fmt::format("applied {} steps (", steps)));
  const auto history = run("history", venv);
  ASSERT_EQ(history.doc["transactions"].size(), 1u);
  const auto& tx = history.doc["transactions"][0];
  EXPECT_EQ(tx["steps"], steps);
  EXPECT_GT(tx["files"].get<std::size_t>(), steps);
  // Applied again: refused, short, with the way out on its own line.
  const auto again = run_shell(apply);
  EXPECT_EQ(again.exit_code, 2) << again.out;
  EXPECT_THAT(again.out, ::testing::ContainsRegex("the environment changed since the plan was made \\([0-9]+ "
                                                  "differences\\); nothing was changed:\n"));
  EXPECT_THAT(again.out, ::testing::ContainsRegex("\n  \\.\\.\\. and [0-9]+ more\n"));
  EXPECT_THAT(again.out, HasSubstr("\nmake a new plan: cudafix plan fix --venv " + venv + " -o ../plan.json\n"));
  std::size_t listed = 0, longest = 0;
  for (const auto line : resolver::split(again.out, '\n')) {
    longest = std::max(longest, line.size());
    listed += line.starts_with("  ") && !line.starts_with("  ...") ? 1 : 0;
  }
  EXPECT_EQ(listed, 3u) << again.out;
  EXPECT_LT(longest, 400u) << again.out;
  // --venv says otherwise: the plan's venv is named beside the one it is applied to.
  test::TempDir other;
  const std::string second = copy(other);
  const auto to_other = run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " apply " +
                                  shell_quote(plan_file) + " -y --no-verify --venv " + shell_quote(second) +
                                  " --ld-so-cache " + shell_quote(cache_) + " --ld-library-path '' 2>&1");
  EXPECT_THAT(to_other.out, HasSubstr("this plan is for " + venv + "; applying it to " + second + " (--venv)"));
}

// `fix`: the seed case on a real venv. pip's uninstall of the CUDA 13 cuDNN took the files the
// CUDA 12 one lists; fix reinstalls it from the wheel folder as one transaction, says what doctor
// found before and after and which finding it leaves (the fixture's), with that finding's next
// step; a second fix has no step, and says it repairs none of what doctor still finds.
bool host_has_a_gpu_driver() { return run_shell("ldconfig -p | grep -q 'libcuda.so.1 '").exit_code == 0; }

TEST_F(PlanFix, FixRepairsAMetadataOnlyProviderAndNamesTheFindingItLeaves) {
  TempDir t;
  const auto dir = venv(t, {"runtime12", "cudnn12", "cudnn13", "torch12"});
  ASSERT_EQ(test::venv_pip(dir, "uninstall -y -q nvidia-cudnn-cu13").exit_code, 0);
  const std::string broken = hashes_of(dir);
  const std::string args =
      " --venv " + shell_quote(dir) + k_no_cache + " --ld-library-path '' --find-links " + shell_quote(links_);
  const auto run_text = [&](const std::string& cmd) {
    return run_shell("env -u VIRTUAL_ENV -u PIP_FIND_LINKS " + shell_quote(test::k_bin) + " " + cmd + args +
                     " --color never </dev/null 2>&1");
  };
  // The dry run shows the plan and changes nothing; so does a run with no -y and no terminal.
  const auto dry = run_text("fix --dry-run");
  EXPECT_EQ(dry.exit_code, 0) << dry.out;
  EXPECT_THAT(dry.out, HasSubstr("1. reinstall nvidia-cudnn-cu12 9.10.2.21"));
  EXPECT_THAT(dry.out, HasSubstr("dry run: nothing was changed"));
  EXPECT_THAT(dry.out, HasSubstr("fix names the findings its steps leave once it has carried them out"));
  const auto unasked = run_text("fix");
  EXPECT_EQ(unasked.exit_code, 2) << unasked.out;
  EXPECT_THAT(unasked.out, HasSubstr("give -y (there is no terminal to ask on)"));
  EXPECT_TRUE(hashes_of(dir) == broken) << "a dry run or an unconfirmed fix changed the venv";

  // --no-verify: the same on a host with a GPU driver as on one without (the verdict of a
  // verification is FixWithoutADriverIsDoneButUnverifiedAndExits4's, and the GPU machine's).
  const auto fixed = test::cudafix_json("fix -y --no-verify" + args);
  EXPECT_EQ(fixed.exit_code, 0) << fixed.out;
  EXPECT_EQ(fixed.doc["changed"], true);
  EXPECT_EQ(fixed.doc["verified"], false);
  EXPECT_EQ(fixed.doc["steps"], json({"reinstall nvidia-cudnn-cu12 9.10.2.21"}));
  EXPECT_THAT(fixed.doc["before"]["error_rules"], ::testing::Contains("metadata-only"));
  // What is left is the fixture's: its fake cuDNN lacks the sub-libraries the real one dlopens.
  EXPECT_EQ(fixed.doc["after"]["error_rules"], json({"missing-dlopen-library"})) << fixed.doc["after"].dump();
  // fix names it as left, with its next step, in the same facts as doctor's own document.
  const auto doctor = test::cudafix_json("doctor" + args);
  std::vector<json> errors;
  for (const auto& f : doctor.doc["findings"])
    if (f["severity"] == "error") errors.push_back(f);
  ASSERT_EQ(errors.size(), 1u) << doctor.out;
  ASSERT_EQ(fixed.doc["left"].size(), 1u) << fixed.doc["left"].dump(1);
  const json& left = fixed.doc["left"][0];
  EXPECT_EQ(left["rule"], "missing-dlopen-library");
  EXPECT_EQ(left["severity"], "error");
  EXPECT_EQ(left["message"], errors[0]["message"]);
  EXPECT_EQ(left["dists"], errors[0]["dists"]);
  // doctor's remedy is the reinstall fix has just done: the rule's document is the next step.
  EXPECT_THAT(errors[0]["remedy"]["command"].get<std::string>(), HasSubstr("--force-reinstall"));
  EXPECT_EQ(left["next_step"], "cudafix explain missing-dlopen-library");
  // pip agrees: the files are back under their dist, and its checks pass.
  EXPECT_TRUE(fs::exists(site(dir) + "/nvidia/cudnn/lib/libcudnn.so.9"));
  EXPECT_THAT(test::venv_pip(dir, "show -f nvidia-cudnn-cu12").out, HasSubstr("nvidia/cudnn/lib/libcudnn.so.9"));
  EXPECT_EQ(test::venv_pip(dir, "check").exit_code, 0);
  const auto again = test::cudafix_json("fix -y" + args);
  EXPECT_EQ(again.exit_code, 0) << again.out;
  EXPECT_EQ(again.doc["changed"], false);
  EXPECT_EQ(again.doc["after"], fixed.doc["after"]);
  ASSERT_EQ(again.doc["left"].size(), 1u) << again.out;
  EXPECT_EQ(again.doc["left"][0]["message"], left["message"]);
  EXPECT_EQ(again.doc["left"][0]["next_step"], errors[0]["remedy"]["command"]);
  // Its text says so, not "nothing to do": the finding, and the next step doctor's text gives.
  const auto again_text = run_text("fix -y");
  EXPECT_EQ(again_text.exit_code, 0) << again_text.out;
  EXPECT_THAT(again_text.out, ::testing::Not(HasSubstr("nothing to do")));
  EXPECT_THAT(again_text.out, HasSubstr("fix has no step for " + dir +
                                        " (doctor: 1 error (missing-dlopen-library), 0 "
                                        "warnings); it does not repair this finding:"));
  EXPECT_THAT(again_text.out, HasSubstr("error[missing-dlopen-library] #1 " + errors[0]["message"].get<std::string>()));
  EXPECT_THAT(again_text.out, HasSubstr("next: " + again.doc["left"][0]["next_step"].get<std::string>()));
  // The fix is one transaction: rolled back, the venv is as pip left it.
  const auto back = run_text("rollback -y");
  ASSERT_EQ(back.exit_code, 0) << back.out;
  EXPECT_TRUE(hashes_of(dir) == broken) << "the rollback of fix did not give the broken venv back";
  // The text of the same fix: the finding it leaves, indented under its summary, with its next step.
  const auto text = run_text("fix -y --no-verify");
  EXPECT_EQ(text.exit_code, 0) << text.out;
  EXPECT_THAT(text.out, HasSubstr("  after:  1 error (missing-dlopen-library), 0 warnings\n"
                                  "  left: 1 finding that fix does not repair:\n"
                                  "    error[missing-dlopen-library] #1 " +
                                  errors[0]["message"].get<std::string>()));
  EXPECT_THAT(text.out, HasSubstr("        next: " + left["next_step"].get<std::string>() + "\n"));
}

// An error outside fix's scope (the /usr case: a requirement of a dist that provides no CUDA
// library, on a real pip venv): fix has no step, and says so rather than "nothing to do": the
// finding, with doctor's next step, in text and in JSON; nothing is written.
TEST(FixLeaves, ARequirementErrorNoStepRepairsIsNamedWithItsNextStepAndNothingChanges) {
  TempDir t;
  test::write_file(t.path() + "/init.py", "x = 1\n");
  const std::string wheel =
      test::make_wheel(t.path(), "needy 1.0 needy/__init__.py=" + t.path() + "/init.py --requires 'absentdep>=2'");
  const std::string v = t.path() + "/venv";
  ASSERT_NO_FATAL_FAILURE(test::make_venv(v, {wheel}));
  const std::string before = test::tree_of(v);
  const std::string args = " --venv " + shell_quote(v) + k_no_cache + " --ld-library-path ''";
  const auto text =
      run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " fix -y --color never" + args + " </dev/null 2>&1");
  EXPECT_EQ(text.exit_code, 0) << text.out;
  EXPECT_THAT(text.out, ::testing::Not(HasSubstr("nothing to do"))) << text.out;
  EXPECT_THAT(text.out, HasSubstr("fix has no step for " + v + " (doctor: 1 error (unsatisfied-requirement)"));
  EXPECT_THAT(text.out, HasSubstr("error[unsatisfied-requirement] #1 needy 1.0 requires absentdep>=2, which is not "
                                  "installed\n    next: pip install 'absentdep>=2'\n"));
  for (const char* flags : {"fix -y", "fix --dry-run"}) {
    const auto j = test::cudafix_json(flags + args);
    EXPECT_EQ(j.exit_code, 0) << flags << ": " << j.out;
    EXPECT_EQ(j.doc["changed"], false) << flags;
    std::vector<json> errors;
    for (const auto& f : j.doc["left"])
      if (f["severity"] == "error") errors.push_back(f);
    ASSERT_EQ(errors.size(), 1u) << flags << ": " << j.doc["left"].dump(1);
    EXPECT_EQ(errors[0]["rule"], "unsatisfied-requirement");
    EXPECT_EQ(errors[0]["message"], "needy 1.0 requires absentdep>=2, which is not installed");
    EXPECT_EQ(errors[0]["next_step"], "pip install 'absentdep>=2'");
  }
  EXPECT_EQ(test::tree_of(v), before) << test::tree_diff(before, test::tree_of(v));
}

// Where no GPU driver can be loaded, fix does the work and says it could not verify it: exit 4.
TEST_F(PlanFix, FixWithoutADriverIsDoneButUnverifiedAndExits4) {
  if (host_has_a_gpu_driver()) GTEST_SKIP() << "a GPU driver is installed: the no-driver exit code cannot be seen";
  TempDir t;
  const auto dir = venv(t, {"runtime12", "cudnn12", "cudnn13", "torch12"});
  ASSERT_EQ(test::venv_pip(dir, "uninstall -y -q nvidia-cudnn-cu13").exit_code, 0);
  const auto fixed = test::cudafix_json("fix -y --venv " + shell_quote(dir) + k_no_cache +
                                        " --ld-library-path '' --find-links " + shell_quote(links_));
  EXPECT_EQ(fixed.exit_code, 4) << fixed.out;
  EXPECT_EQ(fixed.doc["changed"], true);
  EXPECT_EQ(fixed.doc["verified"], false);
  EXPECT_TRUE(fs::exists(site(dir) + "/nvidia/cudnn/lib/libcudnn.so.9"));
}

TEST_F(PlanFix, FixWithoutTheWheelItNeedsChangesNothingAndNamesTheWheel) {
  TempDir t;
  const auto dir = venv(t, {"runtime12", "cudnn12", "cudnn13", "torch12"});
  ASSERT_EQ(test::venv_pip(dir, "uninstall -y -q nvidia-cudnn-cu13").exit_code, 0);
  const std::string broken = hashes_of(dir);
  const auto r = test::cudafix_json("fix -y --venv " + shell_quote(dir) + k_no_cache + " --ld-library-path ''");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(r.doc["error"], "no wheel for nvidia-cudnn-cu12 9.10.2.21");
  EXPECT_EQ(r.doc["changed"], false);
  EXPECT_TRUE(hashes_of(dir) == broken);
}

TEST_F(HybridCuda12Torch, FixRemovesTheCuda13StackKeepingEveryByteTheCuda12OneNeeds) {
  test::TempDir t;
  const std::string venv = copy(t);
  const auto fixed = run("fix -y --no-verify --find-links " + shell_quote(links_), venv);
  ASSERT_EQ(fixed.exit_code, 0) << fixed.out;
  EXPECT_EQ(fixed.doc["changed"], true);
  EXPECT_THAT(fixed.doc["before"]["error_rules"], ::testing::Contains("shared-path"));
  EXPECT_THAT(fixed.doc["after"]["error_rules"], ::testing::Not(::testing::Contains("shared-path")));
  // The CUDA 12 cuDNN's files hold its own wheel's bytes, each compared with the wheel's member
  // by Python's zipfile (not by cudafix's reading of a RECORD).
  EXPECT_EQ(test::venv_pip(venv, "check").exit_code, 0);
  const auto same =
      run_shell(test::k_python + " -c " +
                shell_quote("import os, sys, zipfile\n"
                            "site, whl = sys.argv[1:3]\n"
                            "z = zipfile.ZipFile(whl)\n"
                            "files = [n for n in z.namelist() if '.dist-info/' not in n and not n.endswith('/')]\n"
                            "bad = [n for n in files if open(os.path.join(site, n), 'rb').read() != z.read(n)]\n"
                            "print(len(files), 'files compared; differ:', bad)\n"
                            "sys.exit(1 if bad or not files else 0)\n") +
                " " + shell_quote(test::site_packages(venv)) + " " + shell_quote(wheels_.at("cudnn12")) + " 2>&1");
  EXPECT_EQ(same.exit_code, 0) << same.out;
  EXPECT_THAT(same.out, HasSubstr("2 files compared")) << same.out;
  const auto again = run("fix -y --no-verify --find-links " + shell_quote(links_), venv);
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_EQ(again.doc["changed"], false) << again.out;
}

}  // namespace
}  // namespace cudafix

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;

// A saved plan edited by hand, or by anything that can write the file: `apply` parses it
// strictly (resolver/plan/plan_file.hpp) and replays every step on the environment as it is now
// before it writes anything. Each edit is refused with the field named, no signal, the venv hash
// for hash as before and nothing outside it touched.
class ApplyHostilePlan : public HybridCuda12Torch {
 protected:
  struct Refused {
    int exit_code = -1;
    std::string error;
  };

  // A copy of the venv and its plan, `edit`ed, then applied with -y.
  Refused apply_edited(const std::function<void(json&, const std::string& venv)>& edit) {
    venv_copy_ = copy(t_);
    plan_file_ = t_.path() + "/plan.json";
    const auto plan =
        run("plan fix --find-links " + shell_quote(links_) + " -o " + shell_quote(plan_file_), venv_copy_);
    EXPECT_EQ(plan.exit_code, 0) << plan.out.substr(0, 2000);
    json doc = json::parse(resolver::read_file(plan_file_));
    EXPECT_GE(doc["steps"].size(), 2u) << doc["steps"].dump(1);
    edit(doc, venv_copy_);
    test::write_file(plan_file_, doc.dump());
    return apply_file();
  }
  Refused apply_file() {
    const std::string before = test::tree_of(venv_copy_);
    const auto r = run("apply " + shell_quote(plan_file_) + " -y --no-verify", venv_copy_);
    EXPECT_LT(r.exit_code, 128) << "killed by a signal";
    const std::string after = test::tree_of(venv_copy_);
    EXPECT_TRUE(after == before) << "the venv changed:\n" << test::tree_diff(before, after);
    EXPECT_EQ(canaries_.changes(), "");
    return {r.exit_code, r.doc.value("error", r.out)};
  }

  // What an attacker who read the format does after editing the steps: every path they list
  // stamped afresh and the digest recomputed, so that only apply's replay stands between the
  // edit and the disk.
  static void restamp(json& doc, const std::string& venv) {
    const std::string site = test::site_packages(venv);
    std::set<std::string> touched;
    for (const auto& st : doc["steps"])
      for (const char* list : {"deletes", "keeps", "writes"})
        for (const auto& p : st[list]) {
          const std::string s = p.get<std::string>();
          if (!s.ends_with("/")) touched.insert(s.starts_with("/") ? s : site + "/" + s);
        }
    resolver::Fingerprint fp;
    for (const auto& r : doc["fingerprint"]["records"]) fp.records.emplace_back(r["dist"], r["sha256"]);
    json files = json::array();
    for (const auto& p : touched) {
      resolver::FileStamp f;
      f.path = p;
      struct stat st {};
      if (::lstat(p.c_str(), &st) == 0) {
        f.exists = true;
        f.dev = st.st_dev;
        f.ino = st.st_ino;
        f.size = static_cast<std::uint64_t>(st.st_size);
        f.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
      }
      files.push_back({{"path", p.starts_with(site + "/") ? p.substr(site.size() + 1) : p},
                       {"exists", f.exists},
                       {"dev", f.dev},
                       {"ino", f.ino},
                       {"size", f.size},
                       {"mtime_ns", f.mtime_ns}});
      fp.files.push_back(f);
    }
    doc["fingerprint"]["files"] = files;
    doc["fingerprint"]["digest"] = resolver::digest_of(fp);
  }
  static json& first_removal(json& doc) {
    for (auto& st : doc["steps"])
      if (st["action"] == "remove") return st;
    ADD_FAILURE() << "no removal in " << doc["steps"].dump(1);
    return doc["steps"][0];
  }
  static std::string index_of(const json& doc, const json& step) {
    for (std::size_t i = 0; i < doc["steps"].size(); ++i)
      if (&doc["steps"][i] == &step) return std::to_string(i);
    return "?";
  }

  TempDir t_;
  test::Canaries canaries_{t_.path() + "/outside"};
  std::string venv_copy_, plan_file_;
};

// The issue's case: a step's dist changed to another one while its name and version, which the
// prompt shows, stay. Before, the prompt said "remove nvidia-cudnn-cu13 9.19.0.56" and torch went.
TEST_F(ApplyHostilePlan, AStepWhoseDistWasChangedIsRefusedBeforeItsPromptAndNothingMoves) {
  std::string at;
  const auto r = apply_edited([&](json& doc, const std::string& venv) {
    json& st = first_removal(doc);
    at = index_of(doc, st);
    st["dist"] = "torch-2.7.1+cu128.dist-info";
    st["deletes"] = {"torch-2.7.1+cu128.dist-info/", "torch/lib/libtorch_cuda.so", "torch/_C.so"};
    restamp(doc, venv);
  });
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.error, HasSubstr("plan.json: steps[" + at + "]: says remove "));
  EXPECT_THAT(r.error, HasSubstr("but its dist torch-2.7.1+cu128.dist-info is torch 2.7.1+cu128"));
  EXPECT_TRUE(fs::exists(test::site_packages(venv_copy_) + "/torch/lib/libtorch_cuda.so"));
}

TEST_F(ApplyHostilePlan, AStepWhoseDeletesWereChangedIsRefusedNamingThePath) {
  std::string at;
  const auto r = apply_edited([&](json& doc, const std::string& venv) {
    json& st = first_removal(doc);
    at = index_of(doc, st);
    st["deletes"].push_back("torch/lib/libtorch_cuda.so");
    restamp(doc, venv);
  });
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.error,
              HasSubstr("plan.json: steps[" + at + "].deletes: lists torch/lib/libtorch_cuda.so, which remove"));
}

TEST_F(ApplyHostilePlan, AStepNamingAPathOrADistOutsideTheVenvIsRefused) {
  std::string at;
  auto r = apply_edited([&](json& doc, const std::string& venv) {
    json& st = first_removal(doc);
    at = index_of(doc, st);
    st["deletes"].push_back(canaries_.dir() + "/canary.txt");
    st["deletes"].push_back(canaries_.dir() + "/folder/");
    restamp(doc, venv);
  });
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.error, HasSubstr("steps[" + at + "].deletes: lists " + canaries_.dir() +
                                 "/canary.txt (outside the environment)"));
  // A dist named by a path that climbs out.
  json doc = json::parse(resolver::read_file(plan_file_));
  first_removal(doc)["dist"] = "../../../outside/folder";
  test::write_file(plan_file_, doc.dump());
  r = apply_file();
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.error, HasSubstr("steps[" + at + "].dist: ../../../outside/folder is not installed in"));
}

// A step that is exactly what removing its dist deletes, fingerprinted as the planner would,
// but that breaks what torch needs: the replay's simulation judges it and apply refuses it.
TEST_F(ApplyHostilePlan, AStepTheReplayJudgesUnsafeIsRefusedNamingWhatItBreaks) {
  const auto r = apply_edited([&](json& doc, const std::string& venv) {
    const auto removal = run("plan remove nvidia-cuda-runtime-cu12", venv);
    json st = doc["steps"][1];
    st["dist"] = "nvidia_cuda_runtime_cu12-12.8.90.dist-info";
    st["name"] = "nvidia-cuda-runtime-cu12";
    st["version"] = "12.8.90";
    st["deletes"] = removal.doc["cudafix_would_delete"];
    st["keeps"] = removal.doc["cudafix_keeps"];
    doc["steps"].insert(doc["steps"].begin(), st);
    restamp(doc, venv);
  });
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(
      r.error,
      HasSubstr("plan.json: steps[0] (remove nvidia-cuda-runtime-cu12 12.8.90) is unsafe in this environment now: "));
  EXPECT_THAT(r.error, HasSubstr("libcudart.so.12"));
}

// A reinstall's wheel swapped for another project's, its SHA-256 made to match: the wheel must be
// the project and version the step (and the prompt) names.
TEST_F(ApplyHostilePlan, AStepWhoseWheelIsAnotherProjectsIsRefused) {
  const auto r = apply_edited([&](json& doc, const std::string&) {
    json& wheel = doc["steps"][0]["wheel"];
    wheel["file"] = wheels_.at("torch");
    wheel["sha256"] = resolver::sha256_of_file(wheels_.at("torch"), resolver::DigestForm::hex);
  });
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.error, HasSubstr("plan.json: steps[0].wheel: " + wheels_.at("torch") +
                                 " is torch 2.7.1+cu128, not the step's nvidia-cudnn-cu12 9.10.2.21"));
}

TEST_F(ApplyHostilePlan, ASchemaOtherThanOneIsRefusedSayingWhichThisVersionReads) {
  const auto r = apply_edited([](json& doc, const std::string&) { doc["schema"] = 2; });
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.error, HasSubstr("plan.json: schema: schema 2 is not one this version of cudafix reads (it reads "
                                 "schema 1 only)"));
}

TEST_F(ApplyHostilePlan, APlanWithoutItsFingerprintIsRefusedByName) {
  const auto r = apply_edited([](json& doc, const std::string&) { doc.erase("fingerprint"); });
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.error, HasSubstr("plan.json: fingerprint: required field missing"));
  EXPECT_THAT(r.error, ::testing::Not(HasSubstr("json.exception")));
}

TEST_F(ApplyHostilePlan, AnEditedFingerprintIsRefused) {
  auto r = apply_edited([](json& doc, const std::string&) { doc["fingerprint"]["files"].erase(0); });
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.error, HasSubstr("plan.json: fingerprint.digest: not the digest of the fingerprint's records"));
}

TEST_F(ApplyHostilePlan, APlanThatPlanningSaidCannotBeCarriedOutIsRefused) {
  const auto r = apply_edited([](json& doc, const std::string&) {
    doc["ok"] = false;
    doc["problem"] = "no safe order: no order can carry out remove nvidia-cublas";
  });
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.error, HasSubstr("plan.json: ok: false: planning found no safe order, so it cannot be carried out: "
                                 "no safe order: no order can carry out remove nvidia-cublas"));
}

TEST_F(ApplyHostilePlan, AFieldOfTheWrongTypeIsRefusedByItsPath) {
  auto r = apply_edited([](json& doc, const std::string&) { doc["steps"][1]["action"] = 7; });
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.error, HasSubstr("plan.json: steps[1].action: expected a string, got number"));
  json doc = json::parse(resolver::read_file(plan_file_));
  doc["steps"][1]["action"] = "remove";
  doc["steps"][0]["wheel"]["sha256"] = json::array();
  test::write_file(plan_file_, doc.dump());
  r = apply_file();
  EXPECT_THAT(r.error, HasSubstr("plan.json: steps[0].wheel.sha256: expected a string, got array"));
  doc["steps"][0]["wheel"]["sha256"] = std::string(64, '0');
  doc["fingerprint"]["files"][0]["ino"] = "12";
  test::write_file(plan_file_, doc.dump());
  r = apply_file();
  EXPECT_THAT(r.error, HasSubstr("plan.json: fingerprint.files[0].ino: expected an unsigned integer, got string"));
}

TEST_F(ApplyHostilePlan, AnUnknownFieldIsNamedAndRefused) {
  const auto r = apply_edited([](json& doc, const std::string&) { doc["steps"][1]["force"] = true; });
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.error, HasSubstr("plan.json: steps[1].force: unknown field"));
}

TEST_F(ApplyHostilePlan, AHugeOrDeeplyNestedFileIsRefusedWithoutACrash) {
  venv_copy_ = copy(t_);
  plan_file_ = t_.path() + "/plan.json";
  test::write_file(plan_file_, std::string(100000, '['));
  auto r = apply_file();
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.error, HasSubstr("plan.json: nested deeper than 32 levels"));
  test::write_file(plan_file_, "{\"schema\":1,\"why\":\"" + std::string(17 << 20, 'x') + "\"}");
  r = apply_file();
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.error, HasSubstr("plan.json: larger than a plan document may be (16777216 bytes)"));
}

}  // namespace
}  // namespace cudafix
