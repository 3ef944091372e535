// End-to-end: `cudafix doctor` on real venvs made with `python3 -m venv`, filled by their own pip
// from wheels the tests build (tests/e2e/make_wheel.py): a cu12 and a cu13 cuDNN writing the same
// nvidia/cudnn/lib, a real `pip uninstall` of one, requirement conflicts and extras chains, and
// real `pip check` on the same venvs for the verdicts it gives. Also the corpus venv (healthy).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "resolver/base/text.hpp"
#include "resolver/elf/elf_writer.hpp"
#include "resolver/env/dist_info.hpp"
#include "tests/e2e/cudafix_run.hpp"
#include "tests/support/process.hpp"

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using test::write_file;
using ::testing::HasSubstr;

using test::k_bin;
using test::k_fixtures;
using test::k_no_cache;
using test::k_python;
using test::k_source;

test::JsonRun doctor(const std::string& venv, const std::string& args = "") {
  return test::cudafix_json("doctor --venv " + shell_quote(venv) + k_no_cache + " " + args);
}

using test::fires;
using test::of_rule;

// The build machine's pip installs each wheel into a venv made without pip of its own.
void install_into(const std::string& site, const std::vector<std::string>& wheels) {
  for (const auto& w : wheels)
    ASSERT_EQ(run_shell(k_python + " -m pip install -q --no-index --no-deps --disable-pip-version-check --target " +
                        shell_quote(site) + " " + shell_quote(w))
                  .exit_code,
              0);
}

std::string joined_evidence(const json& f) {
  std::string s;
  for (const auto& e : f["evidence"]) s += e.get<std::string>() + "\n";
  return s;
}

// A venv with the shapes of a CUDA torch install, all from real wheels installed by pip:
//   nvidia-cuda-runtime 13.0.96       nvidia/cu13/lib/libcudart.so.13
//   nvidia-cudnn-cu13 9.19.0.56       nvidia/cudnn/lib/libcudnn.so.9 (fake cuDNN 9.19)
//   nvidia-cudnn-cu12 9.10.2.21       the same path, other bytes (fake cuDNN 9.14), installed last
//   torchlike 2.11.0                  torch/lib/libtorch_cuda.so NEEDs both, RPATH into nvidia/, and
//                                     torch/_C...so, an extension module, NEEDs it;
//                                     requires nvidia-cudnn-cu13==9.19.0.56 and cuda-kit[cudart]
//   cuda-kit 13.0.2                   a meta package: extra cudart -> nvidia-cuda-runtime==13.0.96,
//                                     extra cublas -> nvidia-cublas==13.1.* (not installed)
//   oldpin 1.0                        requires nvidia-cuda-runtime<13 (a conflict pip check reports),
//                                     not-installed-anywhere>=1 (missing), and a Windows-only dep
class DoctorVenv : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    venv_ = tmp_->path() + "/venv";
    const std::string v = k_fixtures + "/verify";
    std::vector<std::string> wheels;
    auto build = [&](const std::string& args) { wheels.push_back(test::make_wheel(tmp_->path(), args)); };
    build("nvidia-cuda-runtime 13.0.96 nvidia/cu13/lib/libcudart.so.13=" + v + "/cu13/libcudart.so.13");
    build("nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/cudnn/v91900/libcudnn.so.9");
    build("nvidia-cudnn-cu12 9.10.2.21 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/cudnn/v91400/libcudnn.so.9");
    build(
        "cuda-kit 13.0.2 --extra cudart --extra cublas --requires 'nvidia-cuda-runtime==13.0.96; extra == \"cudart\"' "
        "--requires 'nvidia-cublas==13.1.*; extra == \"cublas\"'");
    build("torchlike 2.11.0 torch/lib/libtorch_cuda.so=" + v +
          "/libtorch_cuda.so torch/_C.cpython-311-x86_64-linux-gnu.so=" + v + "/ext/_C.so torch/__init__.py=" + v +
          "/../wheel/gpulib/__init__.py --requires 'nvidia-cudnn-cu13==9.19.0.56; platform_system == \"Linux\"' "
          "--requires 'cuda-kit[cudart]==13.0.2'");
    build(
        "oldpin 1.0 --requires 'nvidia-cuda-runtime<13' --requires 'not-installed-anywhere>=1' "
        "--requires 'winonly; sys_platform == \"win32\"' --requires 'cuda-kit[cublas]'");
    // One install per wheel, in order: the cu12 cuDNN overwrites the cu13 one's files.
    ASSERT_NO_FATAL_FAILURE(test::make_venv(venv_, wheels));
    site_ = test::site_packages(venv_);
  }
  static void TearDownTestSuite() { delete tmp_; }

  // A copy of the venv to change (pip runs there through the copy's own interpreter).
  static std::string copy_venv(const TempDir& into) {
    const std::string dest = into.path() + "/venv";
    EXPECT_EQ(run_shell("cp -a " + shell_quote(venv_) + " " + shell_quote(dest)).exit_code, 0);
    return dest;
  }
  static std::string site_of(const std::string& venv) { return venv + site_.substr(venv_.size()); }
  // `library` copied into `dir` as SONAME.RELEASE with SONAME linked to it, as toolkits install
  // them: the release doctor reads from the real file name. Returns the folder.
  static std::string release_named_copy(const TempDir& dir, const std::string& library, const std::string& soname,
                                        const std::string& release) {
    fs::copy_file(library, dir.path() + "/" + soname + "." + release);
    fs::create_symlink(soname + "." + release, dir.path() + "/" + soname);
    return dir.path();
  }

  // `pip check`'s verdicts as (dist, requirement name, kind) triples.
  static std::set<std::string> pip_check(const std::string& venv) {
    const auto r = run_shell("env -u VIRTUAL_ENV " + shell_quote(venv + "/bin/python3") +
                             " -m pip check --disable-pip-version-check");
    std::set<std::string> out;
    for (auto line : resolver::split(r.out, '\n')) {
      const auto words = resolver::split(line, ' ');
      if (words.size() < 4) continue;
      if (line.find("which is not installed") != std::string_view::npos)
        out.insert(resolver::normalize_name(words[0]) + " missing " +
                   resolver::requirement_name(std::string(words[3])));
      else if (line.find("has requirement") != std::string_view::npos)
        out.insert(resolver::normalize_name(words[0]) + " conflict " +
                   resolver::normalize_name(resolver::requirement_name(std::string(words[4]))));
    }
    return out;
  }
  static std::set<std::string> doctor_requirement_verdicts(const json& doc) {
    std::set<std::string> out;
    for (const auto& f : of_rule(doc, "unsatisfied-requirement")) {
      const std::string msg = f["message"];
      const auto words = resolver::split(msg, ' ');
      const bool missing = msg.find("which is not installed") != std::string::npos;
      const std::string req(words[missing ? 3 : 4]);
      out.insert(resolver::normalize_name(words[0]) + (missing ? " missing " : " conflict ") +
                 resolver::requirement_name(req));
    }
    return out;
  }

  static inline TempDir* tmp_ = nullptr;
  static inline std::string venv_;
  static inline std::string site_;
};

TEST_F(DoctorVenv, RequirementVerdictsAreExactlyPipChecks) {
  const auto pip = pip_check(venv_);
  const auto d = doctor(venv_);
  EXPECT_EQ(doctor_requirement_verdicts(d.doc), pip);
  // What both must have seen: the conflict, the missing dist, and not the Windows-only one.
  EXPECT_TRUE(pip.count("oldpin conflict nvidia-cuda-runtime")) << ::testing::PrintToString(pip);
  EXPECT_TRUE(pip.count("oldpin missing not-installed-anywhere"));
  EXPECT_FALSE(pip.count("oldpin missing winonly"));
  EXPECT_EQ(d.exit_code, 1);
}

TEST_F(DoctorVenv, SelectingTheRequirementRuleGivesOnlyItsFindings) {
  const auto d = doctor(venv_, "--select unsatisfied-requirement");
  ASSERT_FALSE(fires(d.doc, "unsatisfied-requirement").empty());
  for (const auto& f : d.doc["findings"]) EXPECT_EQ(f["rule"], "unsatisfied-requirement");
  const auto none = doctor(venv_, "--ignore unsatisfied-requirement,unsatisfied-extra,shared-path");
  EXPECT_TRUE(of_rule(none.doc, "unsatisfied-requirement").empty());
}

TEST_F(DoctorVenv, ExtrasChainsPipCheckDoesNotFollowAreWarnings) {
  const auto d = doctor(venv_);
  const auto extras = fires(d.doc, "unsatisfied-extra");
  ASSERT_EQ(extras.size(), 1u) << d.doc["findings"].dump(1);
  EXPECT_EQ(extras[0]["severity"], "warning");
  EXPECT_THAT(extras[0]["message"].get<std::string>(), HasSubstr("nvidia-cublas==13.1.*"));
  EXPECT_THAT(extras[0]["message"].get<std::string>(), HasSubstr("cuda-kit[cublas]"));
  // torchlike's cuda-kit[cudart] chain is met: nvidia-cuda-runtime==13.0.96 is there.
  EXPECT_THAT(extras[0]["message"].get<std::string>(), HasSubstr("oldpin"));
  EXPECT_FALSE(pip_check(venv_).count("oldpin missing nvidia-cublas"));
}

TEST_F(DoctorVenv, TwoCudaMajorsWritingOneLibraryIsASharedPathErrorNamingWhoseBytesAreThere) {
  const auto d = doctor(venv_);
  const auto shared = fires(d.doc, "shared-path");
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0]["severity"], "error");
  EXPECT_EQ(shared[0]["dists"],
            json({"nvidia_cudnn_cu12-9.10.2.21.dist-info", "nvidia_cudnn_cu13-9.19.0.56.dist-info"}));
  const std::string ev = joined_evidence(shared[0]);
  EXPECT_THAT(ev, HasSubstr("nvidia/cudnn/lib/libcudnn.so.9: bytes on disk are nvidia-cudnn-cu12's"));
  EXPECT_THAT(
      ev, HasSubstr("`pip uninstall nvidia-cudnn-cu13` would delete all 1 shared paths, leaving nvidia-cudnn-cu12"));
  EXPECT_THAT(shared[0]["message"].get<std::string>(), HasSubstr("CUDA 12 and 13"));
  // The cu13 consumer now loads cu12 bytes: the major a consumer needs against what it gets.
  const auto mixed = fires(d.doc, "mixed-cuda-major");
  ASSERT_EQ(mixed.size(), 1u) << d.doc["findings"].dump(1);
  EXPECT_EQ(mixed[0]["severity"], "error");
  EXPECT_THAT(mixed[0]["message"].get<std::string>(), HasSubstr("torch/lib/libtorch_cuda.so needs CUDA 13"));
  EXPECT_THAT(
      joined_evidence(mixed[0]),
      HasSubstr("libcudnn.so.9 => nvidia/cudnn/lib/libcudnn.so.9 (nvidia-cudnn-cu12 9.10.2.21's bytes, CUDA 12)"));
  // The fake cuDNN ships no sub-libraries, which the real dispatcher dlopens.
  const auto dlopen = fires(d.doc, "missing-dlopen-library");
  ASSERT_EQ(dlopen.size(), 1u);
  EXPECT_EQ(dlopen[0]["severity"], "error");
  EXPECT_THAT(dlopen[0]["sonames"].dump(), HasSubstr("libcudnn_graph.so.9"));
}

TEST_F(DoctorVenv, ASystemLibraryShadowingTheMissingOneIsNamedUnderItsRootCause) {
  TempDir dir;
  const std::string venv = copy_venv(dir);
  ASSERT_EQ(test::venv_pip(venv, "uninstall -y -q nvidia-cudnn-cu12").exit_code, 0);
  // A cuDNN outside the environment on the library path: the loader falls through to it.
  const std::string outside = k_fixtures + "/verify/cudnn/v91400";
  const auto d = doctor(venv, "--ld-library-path " + shell_quote(outside));
  const auto shadowed = fires(d.doc, "shadowed-library");
  ASSERT_EQ(shadowed.size(), 1u) << d.doc["findings"].dump(1);
  EXPECT_EQ(shadowed[0]["severity"], "error");
  EXPECT_THAT(shadowed[0]["message"].get<std::string>(), HasSubstr(outside + "/libcudnn.so.9"));
  EXPECT_THAT(shadowed[0]["message"].get<std::string>(), HasSubstr("torchlike requires nvidia-cudnn-cu13==9.19.0.56"));
  int root = -1;
  for (const auto& f : fires(d.doc, "metadata-only"))
    if (f["severity"] == "error") root = f["id"];
  EXPECT_EQ(shadowed[0]["caused_by"], json({root}));
  // Without that folder nothing shadows it: the library is unresolved instead.
  EXPECT_TRUE(of_rule(doctor(venv).doc, "shadowed-library").empty());
  // The same release from outside (its real name says 9.19.0) is a warning, not an error.
  TempDir same;
  release_named_copy(same, outside + "/libcudnn.so.9", "libcudnn.so.9", "19.0");
  const auto s2 = of_rule(doctor(venv, "--ld-library-path " + shell_quote(same.path())).doc, "shadowed-library");
  ASSERT_EQ(s2.size(), 1u);
  EXPECT_EQ(s2[0]["severity"], "warning");
  EXPECT_THAT(s2[0]["message"].get<std::string>(),
              HasSubstr("the same release as the installed nvidia-cudnn-cu13 9.19.0.56"));
}

// torch reaches most NVIDIA wheels only through cuda-toolkit's extras; uninstalling one of those
// lets the loader fall through to a system copy, which doctor must name with that chain.
TEST_F(DoctorVenv, ALibraryOnlyAnExtrasChainRequiresIsShadowedWhenItsProviderIsUninstalled) {
  TempDir dir;
  const std::string venv = copy_venv(dir);
  ASSERT_EQ(test::venv_pip(venv, "uninstall -y -q nvidia-cuda-runtime").exit_code, 0);
  const std::string chain = "torchlike requires cuda-kit[cudart]==13.0.2 -> nvidia-cuda-runtime==13.0.96";
  // A copy of unknown release on the library path: an error.
  TempDir outside;
  fs::copy_file(k_fixtures + "/verify/cu13/libcudart.so.13", outside.path() + "/libcudart.so.13");
  const auto d = doctor(venv, "--ld-library-path " + shell_quote(outside.path()));
  const auto shadowed = of_rule(d.doc, "shadowed-library");
  ASSERT_EQ(shadowed.size(), 1u) << d.doc["findings"].dump(1);
  EXPECT_EQ(shadowed[0]["severity"], "error");
  EXPECT_EQ(shadowed[0]["sonames"], json({"libcudart.so.13"}));
  EXPECT_THAT(shadowed[0]["message"].get<std::string>(), HasSubstr(outside.path() + "/libcudart.so.13"));
  EXPECT_THAT(shadowed[0]["message"].get<std::string>(), HasSubstr(chain + " (nvidia-cuda-runtime is not installed)"));
  EXPECT_THAT(joined_evidence(shadowed[0]), HasSubstr("needed by torch/lib/libtorch_cuda.so"));
  // The broken chain itself is still its own warning.
  bool chain_reported = false;
  for (const auto& f : of_rule(d.doc, "unsatisfied-extra"))
    chain_reported |= f["message"].get<std::string>().find("cuda-kit[cudart]") != std::string::npos;
  EXPECT_TRUE(chain_reported) << d.doc["findings"].dump(1);
  // The release the chain pins, by its real file name: a warning.
  TempDir pinned;
  release_named_copy(pinned, k_fixtures + "/verify/cu13/libcudart.so.13", "libcudart.so.13", "0.96");
  const auto s2 = of_rule(doctor(venv, "--ld-library-path " + shell_quote(pinned.path())).doc, "shadowed-library");
  ASSERT_EQ(s2.size(), 1u);
  EXPECT_EQ(s2[0]["severity"], "warning");
  EXPECT_THAT(s2[0]["message"].get<std::string>(),
              HasSubstr("nvidia-cuda-runtime is not installed; the outside copy is 13.0.96, a release it allows"));
  // With the runtime installed nothing falls through, whatever the library path holds.
  EXPECT_TRUE(
      of_rule(doctor(venv_, "--ld-library-path " + shell_quote(pinned.path())).doc, "shadowed-library").empty());
}

// The scenario users hit: a CUDA 12 torch with nvidia-cudnn-cu12 and nvidia-cudnn-cu13 both
// installed into nvidia/cudnn/lib (cu13 last, so its bytes are there), then a real
// `pip uninstall nvidia-cudnn-cu13`, which deletes the file cu12 still lists.
TEST(DoctorCu12Torch, BothCudnnMajorsInOneFolderThenARealUninstallOfTheCu13One) {
  TempDir tmp;
  const std::string venv = tmp.path() + "/venv";
  const std::string py = shell_quote(venv + "/bin/python3");
  const std::string v = k_fixtures + "/verify";
  std::vector<std::string> wheels;
  for (const std::string& args :
       {"nvidia-cuda-runtime-cu12 12.8.90 nvidia/cuda_runtime/lib/libcudart.so.12=" + v + "/cu12/libcudart.so.12",
        "nvidia-cudnn-cu12 9.10.2.21 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/cudnn/v91400/libcudnn.so.9",
        "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/cudnn/v91900/libcudnn.so.9",
        "torch 2.7.0 torch/lib/libtorch_cuda.so=" + v +
            "/torch12/libtorch_cuda.so torch/_C.cpython-311-x86_64-linux-gnu.so=" + v +
            "/torch12/_C.so --requires nvidia-cudnn-cu12==9.10.2.21 --requires nvidia-cuda-runtime-cu12==12.8.90"})
    wheels.push_back(test::make_wheel(tmp.path(), args));
  ASSERT_NO_FATAL_FAILURE(test::make_venv(venv, wheels));
  auto pip_check = [&] { return run_shell("env -u VIRTUAL_ENV " + py + " -m pip check --disable-pip-version-check"); };
  EXPECT_EQ(pip_check().exit_code, 0) << "pip check sees nothing wrong";
  auto d = doctor(venv);
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_TRUE(of_rule(d.doc, "unsatisfied-requirement").empty()) << "the same verdict as pip check";
  const auto shared = of_rule(d.doc, "shared-path");
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0]["severity"], "error");
  EXPECT_THAT(joined_evidence(shared[0]), HasSubstr("bytes on disk are nvidia-cudnn-cu13's"));
  const auto mixed = of_rule(d.doc, "mixed-cuda-major");
  ASSERT_EQ(mixed.size(), 1u) << d.doc["findings"].dump(1);
  EXPECT_THAT(mixed[0]["message"].get<std::string>(), HasSubstr("torch/lib/libtorch_cuda.so needs CUDA 12"));
  EXPECT_THAT(joined_evidence(mixed[0]), HasSubstr("nvidia-cudnn-cu13 9.19.0.56's bytes, CUDA 13"));

  ASSERT_EQ(run_shell("cd / && env -u VIRTUAL_ENV " + py +
                      " -m pip uninstall -y -q --disable-pip-version-check nvidia-cudnn-cu13")
                .exit_code,
            0);
  EXPECT_EQ(pip_check().exit_code, 0) << "pip check still sees nothing wrong";
  d = doctor(venv);
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_TRUE(of_rule(d.doc, "unsatisfied-requirement").empty());
  std::vector<json> roots;
  for (const auto& f : of_rule(d.doc, "metadata-only"))
    if (f["severity"] == "error") roots.push_back(f);
  ASSERT_EQ(roots.size(), 1u) << d.doc["findings"].dump(1);
  EXPECT_EQ(roots[0]["dists"], json({"nvidia_cudnn_cu12-9.10.2.21.dist-info"}));
  const int root = roots[0]["id"];
  for (const auto& rule : {"missing-files", "unresolved-library"}) {
    bool caused = false;
    for (const auto& f : of_rule(d.doc, rule)) caused = caused || f["caused_by"] == json({root});
    EXPECT_TRUE(caused) << rule << ": " << d.doc["findings"].dump(1);
  }
  EXPECT_TRUE(of_rule(d.doc, "shared-path").empty());
  EXPECT_TRUE(of_rule(d.doc, "mixed-cuda-major").empty());
}

TEST(DoctorMixed, AnUnusedCuda12CublasBesideACuda13ConsumerIsAWarning) {
  TempDir tmp;
  const std::string venv = tmp.path() + "/venv";
  ASSERT_EQ(run_shell(k_python + " -m venv --without-pip " + shell_quote(venv)).exit_code, 0);
  const std::string v = k_fixtures + "/verify";
  std::vector<std::string> wheels;
  for (const std::string& args :
       {"nvidia-cuda-runtime 13.0.96 nvidia/cu13/lib/libcudart.so.13=" + v + "/cu13/libcudart.so.13",
        "nvidia-cublas 13.1.0.3 nvidia/cu13/lib/libcublas.so.13=" + v + "/cublas13/libcublas.so.13",
        "nvidia-cublas-cu12 12.8.4.1 nvidia/cublas/lib/libcublas.so.12=" + v + "/cublas12/libcublas.so.12",
        "cuapp 1.0 cuapp/libcuconsumer.so=" + v + "/libcuconsumer.so"})
    wheels.push_back(test::make_wheel(tmp.path(), args));
  const std::string site = test::site_packages(venv);
  ASSERT_NO_FATAL_FAILURE(install_into(site, wheels));
  const auto d = doctor(venv);
  const auto mixed = of_rule(d.doc, "mixed-cuda-major");
  ASSERT_EQ(mixed.size(), 1u) << d.doc["findings"].dump(1);
  EXPECT_EQ(mixed[0]["severity"], "warning");
  EXPECT_EQ(mixed[0]["dists"], json({"nvidia_cublas_cu12-12.8.4.1.dist-info"}));
  EXPECT_THAT(mixed[0]["message"].get<std::string>(),
              HasSubstr("the environment mixes CUDA 12 and 13: cuapp 1.0 needs CUDA 13; this dist provides CUDA 12 and "
                        "no consumer needs it: nvidia-cublas-cu12 12.8.4.1"));
  EXPECT_EQ(mixed[0]["remedy"]["command"], "cudafix plan fix");
  // Without the CUDA 12 wheel: no finding.
  ASSERT_EQ(run_shell("rm -rf " + shell_quote(site) + "/nvidia_cublas_cu12-12.8.4.1.dist-info " + shell_quote(site) +
                      "/nvidia/cublas")
                .exit_code,
            0);
  EXPECT_TRUE(of_rule(doctor(venv).doc, "mixed-cuda-major").empty());
}

// The hybrid the other way round: a CUDA 12 torch with a CUDA 13 runtime and cuBLAS left over.
// The CUDA 13 cuBLAS NEEDs the CUDA 13 runtime, but a provider's own NEEDED is no consumer's need:
// both are listed, in one finding.
TEST(DoctorMixed, CudaThirteenLeftoversBesideACudaTwelveTorchAreListedInOneFinding) {
  TempDir tmp;
  const std::string venv = tmp.path() + "/venv";
  ASSERT_EQ(run_shell(k_python + " -m venv --without-pip " + shell_quote(venv)).exit_code, 0);
  const std::string v = k_fixtures + "/verify";
  resolver::ElfSpec cublas;
  cublas.soname = "libcublas.so.13";
  cublas.needed = {"libcudart.so.13"};
  cublas.runpath = "$ORIGIN";
  resolver::write_shared_object(tmp.path() + "/libcublas.so.13", cublas);
  std::vector<std::string> wheels;
  for (const std::string& args :
       {"nvidia-cuda-runtime-cu12 12.8.90 nvidia/cuda_runtime/lib/libcudart.so.12=" + v + "/cu12/libcudart.so.12",
        "torch12like 2.7.1 torch/lib/libtorch_cuda.so=" + v + "/torch12/libtorch_cuda.so",
        "nvidia-cuda-runtime 13.0.96 nvidia/cu13/lib/libcudart.so.13=" + v + "/cu13/libcudart.so.13",
        "nvidia-cublas 13.1.0.3 nvidia/cu13/lib/libcublas.so.13=" + tmp.path() + "/libcublas.so.13"})
    wheels.push_back(test::make_wheel(tmp.path(), args));
  const std::string site = test::site_packages(venv);
  ASSERT_NO_FATAL_FAILURE(install_into(site, wheels));
  const auto d = doctor(venv);
  const auto mixed = fires(d.doc, "mixed-cuda-major");
  ASSERT_EQ(mixed.size(), 1u) << d.doc["findings"].dump(1);
  EXPECT_EQ(mixed[0]["severity"], "warning");
  EXPECT_EQ(mixed[0]["dists"], json({"nvidia_cublas-13.1.0.3.dist-info", "nvidia_cuda_runtime-13.0.96.dist-info"}));
  EXPECT_THAT(mixed[0]["message"].get<std::string>(),
              HasSubstr("the environment mixes CUDA 12 and 13: torch12like 2.7.1 needs CUDA 12; these 2 dists provide "
                        "CUDA 13 and no consumer needs them: nvidia-cublas 13.1.0.3, nvidia-cuda-runtime 13.0.96"));
  EXPECT_THAT(joined_evidence(mixed[0]), HasSubstr("torch12like 2.7.1 needs CUDA 12: torch/lib/libtorch_cuda.so"));
}

// The real CUDA 13 torch venv with a CUDA 12 cuDNN dist-info left beside it, listing the same
// nvidia/cudnn/lib files: the leftover is the hybrid, though its paths hold the right bytes.
TEST(DoctorCorpus, ALeftoverCuda12CudnnDistInfoSharingTheCuda13FilesIsTheHybrid) {
  TempDir dir;
  const std::string venv = dir.path() + "/venv";
  const auto made = run_shell("zcat " + shell_quote(k_source + "/tests/data/good_torch_cu130_venv.json.gz") + " | " +
                              shell_quote(k_bin) + " materialize - " + shell_quote(venv));
  ASSERT_EQ(made.exit_code, 0) << made.out;
  EXPECT_TRUE(of_rule(doctor(venv).doc, "mixed-cuda-major").empty()) << "the healthy venv is no hybrid";
  const std::string site = venv + "/lib/python3.12/site-packages";
  const std::string leftover = site + "/nvidia_cudnn_cu12-9.10.2.21.dist-info";
  write_file(leftover + "/METADATA", "Metadata-Version: 2.1\nName: nvidia-cudnn-cu12\nVersion: 9.10.2.21\n");
  std::string record;
  for (const char* lib : {"libcudnn.so.9", "libcudnn_adv.so.9", "libcudnn_cnn.so.9", "libcudnn_ops.so.9"})
    record += std::string("nvidia/cudnn/lib/") + lib + ",sha256=AAAA,1\n";
  write_file(leftover + "/RECORD", record + "nvidia_cudnn_cu12-9.10.2.21.dist-info/METADATA,,\n");
  const auto d = doctor(venv);
  const auto mixed = fires(d.doc, "mixed-cuda-major");
  ASSERT_EQ(mixed.size(), 1u) << d.doc["findings"].dump(1);
  EXPECT_EQ(mixed[0]["dists"], json({"nvidia_cudnn_cu12-9.10.2.21.dist-info"}));
  EXPECT_THAT(mixed[0]["message"].get<std::string>(), HasSubstr("torch 2.11.0"));
  EXPECT_THAT(
      mixed[0]["message"].get<std::string>(),
      HasSubstr("need CUDA 13; this dist provides CUDA 12 and no consumer needs it: nvidia-cudnn-cu12 9.10.2.21"));
}

// cuDNN's engine library reaches cuBLASLt and NVRTC only through dlopen, by the sonames of the CUDA
// major it was built for. Real wheels, installed with pip into a venv without pip of its own:
//   nvidia-cudnn-cu13   nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9, RUNPATH into cu13/lib
//   nvidia-cudnn-cu12   the same soname, RUNPATH into nvidia/cublas/lib and nvidia/cuda_nvrtc/lib
//   nvidia-cublas, nvidia-cuda-nvrtc (CUDA 13) and their -cu12 namesakes
TEST(DoctorDlopen, CudnnEnginesNeedTheCublasLtAndNvrtcOfTheirOwnCudaMajor) {
  TempDir tmp;
  const std::string elf = tmp.path() + "/elf";
  fs::create_directories(elf);
  auto object = [&](const std::string& file, const std::string& soname, std::optional<std::string> runpath = {}) {
    resolver::ElfSpec spec;
    spec.soname = soname;
    spec.runpath = std::move(runpath);
    spec.padding = file.size();  // the two engine builds differ in size, as real ones do
    resolver::write_shared_object(elf + "/" + file, spec);
    return elf + "/" + file;
  };
  const std::string engines = "nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9";
  const std::string e13 = object("e13.so", "libcudnn_engines_precompiled.so.9", "$ORIGIN:$ORIGIN/../../cu13/lib");
  const std::string e12 = object("engines12.so", "libcudnn_engines_precompiled.so.9",
                                 "$ORIGIN:$ORIGIN/../../cublas/lib:$ORIGIN/../../cuda_nvrtc/lib");
  std::map<std::string, std::string> wheels;
  for (const auto& [key, args] : std::vector<std::pair<std::string, std::string>>{
           {"cudnn13", "nvidia-cudnn-cu13 9.19.0.56 " + engines + "=" + e13},
           {"cudnn12", "nvidia-cudnn-cu12 9.10.2.21 " + engines + "=" + e12},
           {"cublas13",
            "nvidia-cublas 13.1.0.3 nvidia/cu13/lib/libcublasLt.so.13=" + object("lt13.so", "libcublasLt.so.13")},
           {"nvrtc13",
            "nvidia-cuda-nvrtc 13.0.88 nvidia/cu13/lib/libnvrtc.so.13=" + object("rtc13.so", "libnvrtc.so.13")},
           {"cublas12", "nvidia-cublas-cu12 12.8.4.1 nvidia/cublas/lib/libcublasLt.so.12=" +
                            object("lt12.so", "libcublasLt.so.12")},
           {"nvrtc12", "nvidia-cuda-nvrtc-cu12 12.8.93 nvidia/cuda_nvrtc/lib/libnvrtc.so.12=" +
                           object("rtc12.so", "libnvrtc.so.12")}})
    wheels[key] = test::make_wheel(tmp.path(), args);
  auto make_venv = [&](const std::string& name, const std::vector<std::string>& keys) {
    const std::string venv = tmp.path() + "/" + name;
    std::vector<std::string> chosen;
    for (const auto& k : keys) chosen.push_back(wheels.at(k));
    test::make_venv(venv, chosen);
    return venv;
  };

  // CUDA 13 cuDNN with CUDA 13 cuBLAS and NVRTC: everything it dlopens is there.
  const std::string v13 = make_venv("v13", {"cudnn13", "cublas13", "nvrtc13"});
  EXPECT_TRUE(of_rule(doctor(v13).doc, "missing-dlopen-library").empty()) << doctor(v13).doc["findings"].dump(1);
  // The dry run of removing NVRTC names that dlopen, and only it: cuBLASLt stays found, by the
  // major of the loader in the simulated environment too.
  const auto plan = test::cudafix_json("plan remove nvidia-cuda-nvrtc --venv " + shell_quote(v13) + k_no_cache);
  EXPECT_EQ(plan.exit_code, 1);
  ASSERT_EQ(plan.doc["breaks"].size(), 1u) << plan.doc["breaks"].dump(1);
  EXPECT_EQ(plan.doc["breaks"][0]["kind"], "dlopen");
  EXPECT_EQ(plan.doc["breaks"][0]["soname"], "libnvrtc.so.13");
  EXPECT_EQ(plan.doc["breaks"][0]["consumer"], engines);
  // A real uninstall of cuBLAS: nothing NEEDs it, so only the dlopen table sees the break.
  ASSERT_EQ(test::venv_pip(v13, "uninstall -y -q nvidia-cublas").exit_code, 0);
  const auto after = doctor(v13);
  EXPECT_EQ(after.exit_code, 1);
  const auto gone = of_rule(after.doc, "missing-dlopen-library");
  ASSERT_EQ(gone.size(), 1u) << after.doc["findings"].dump(1);
  EXPECT_EQ(gone[0]["severity"], "error");
  EXPECT_EQ(gone[0]["sonames"], json({"libcublasLt.so.13"}));
  EXPECT_EQ(gone[0]["paths"], json({engines}));
  EXPECT_THAT(gone[0]["message"].get<std::string>(), HasSubstr("loads libcublasLt.so.13, libnvrtc.so.13 with dlopen"));
  // The library comes back from the dist that provides it, not from reinstalling cuDNN.
  EXPECT_EQ(gone[0]["remedy"]["command"], "pip install nvidia-cublas");

  // CUDA 12 cuDNN beside CUDA 13 cuBLAS and NVRTC: it asks for the .so.12 names, which nothing provides.
  const std::string v12 = make_venv("v12", {"cudnn12", "cublas13", "nvrtc13"});
  const auto wrong = of_rule(doctor(v12).doc, "missing-dlopen-library");
  ASSERT_EQ(wrong.size(), 1u);
  EXPECT_EQ(wrong[0]["sonames"], json({"libcublasLt.so.12", "libnvrtc.so.12"}));
  EXPECT_EQ(wrong[0]["remedy"]["command"], "pip install nvidia-cublas-cu12");
  ASSERT_EQ(test::venv_pip(v12, "install -q --no-index --no-deps " + shell_quote(wheels["cublas12"]) + " " +
                                    shell_quote(wheels["nvrtc12"]))
                .exit_code,
            0);
  EXPECT_TRUE(of_rule(doctor(v12).doc, "missing-dlopen-library").empty());
}

TEST_F(DoctorVenv, HashesNameTheOwnerWhoseRecordTheBytesMatch) {
  const auto d = doctor(venv_, "--verify-hashes");
  const auto mismatches = fires(d.doc, "hash-mismatch");
  ASSERT_EQ(mismatches.size(), 1u) << d.doc["findings"].dump(1);
  EXPECT_EQ(mismatches[0]["severity"], "error");
  EXPECT_EQ(mismatches[0]["dists"], json({"nvidia_cudnn_cu13-9.19.0.56.dist-info"}));
  EXPECT_THAT(mismatches[0]["message"].get<std::string>(), HasSubstr("the content is nvidia-cudnn-cu12 9.10.2.21's"));
  EXPECT_GT(d.doc["hashed"]["files"].get<int>(), 10);
  // Without the flag nothing is hashed.
  EXPECT_TRUE(of_rule(doctor(venv_).doc, "hash-mismatch").empty());
}

TEST_F(DoctorVenv, WithoutAUsableLibcryptoHashingFailsSayingWhyAndAScanDoesNotNeedIt) {
  // Searched before the ld.so.cache: a libcrypto.so.3 with none of OpenSSL's functions.
  const std::string env = "LD_LIBRARY_PATH=" + shell_quote(k_fixtures + "/nolibcrypto");
  const std::string where = " --venv " + shell_quote(venv_) + k_no_cache + " --ld-library-path ''";
  const auto hashed =
      run_shell("env -u VIRTUAL_ENV " + env + " " + shell_quote(k_bin) + " doctor --verify-hashes" + where + " 2>&1");
  EXPECT_EQ(hashed.exit_code, 2);
  EXPECT_THAT(hashed.out, HasSubstr("cannot compute SHA-256: libcrypto.so.3 has no EVP_sha256"));
  // A scan hashes nothing, so it never loads libcrypto (linked, it loaded at every start).
  const auto scan = test::cudafix_json("scan" + where, env);
  EXPECT_EQ(scan.exit_code, 0) << scan.out;
  EXPECT_EQ(scan.doc["command"], "scan");
}

TEST_F(DoctorVenv, HashingShowsAProgressBarOnATerminalAndNoneOtherwise) {
  const std::string cmd = "env -u VIRTUAL_ENV " + shell_quote(k_bin) +
                          " doctor --verify-hashes --select hash-mismatch --venv " + shell_quote(venv_) + k_no_cache;
  // script(1) gives the command a pseudo-terminal, as a user's shell would.
  const auto tty = run_shell("script -qec " + shell_quote(cmd) + " /dev/null");
  EXPECT_THAT(tty.out, HasSubstr("hashing ["));
  EXPECT_THAT(tty.out, HasSubstr("100%"));
  const auto piped = run_shell(cmd + " 2>&1 | cat");
  EXPECT_THAT(piped.out, ::testing::Not(HasSubstr("hashing [")));
  EXPECT_THAT(piped.out, HasSubstr("hash-mismatch"));
}

TEST_F(DoctorVenv, AfterARealPipUninstallOfOneOwnerTheSurvivorIsMetadataOnlyAndOneRootExplainsIt) {
  TempDir dir;
  const std::string venv = copy_venv(dir);
  const auto un = test::venv_pip(venv, "uninstall -y -q nvidia-cudnn-cu12");
  ASSERT_EQ(un.exit_code, 0) << un.out;
  ASSERT_FALSE(fs::exists(site_of(venv) + "/nvidia/cudnn/lib/libcudnn.so.9")) << "pip deleted the shared file";
  // pip check sees nothing new: nvidia-cudnn-cu13 is still "installed".
  EXPECT_FALSE(pip_check(venv).count("torchlike missing nvidia-cudnn-cu13"));

  const auto d = doctor(venv);
  EXPECT_EQ(d.exit_code, 1);
  std::vector<json> roots;
  for (const auto& f : of_rule(d.doc, "metadata-only"))
    if (f["severity"] == "error") roots.push_back(f);
  ASSERT_EQ(roots.size(), 1u) << d.doc["findings"].dump(1);
  EXPECT_EQ(roots[0]["severity"], "error");
  EXPECT_EQ(roots[0]["dists"], json({"nvidia_cudnn_cu13-9.19.0.56.dist-info"}));
  EXPECT_TRUE(roots[0]["caused_by"].empty());
  const int root = roots[0]["id"];
  const auto missing = fires(d.doc, "missing-files");
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0]["caused_by"], json({root}));
  bool unresolved = false;
  for (const auto& f : fires(d.doc, "unresolved-library"))
    if (f["sonames"] == json({"libcudnn.so.9"})) {
      unresolved = true;
      EXPECT_EQ(f["severity"], "error");
      EXPECT_EQ(f["caused_by"], json({root}));
    }
  EXPECT_TRUE(unresolved);
  EXPECT_TRUE(of_rule(d.doc, "shared-path").empty()) << "one owner is left";
  // Text: the root first, its consequences nested under it, and the command to run next.
  const auto text = run_shell("env -u VIRTUAL_ENV " + shell_quote(k_bin) + " doctor --color never --venv " +
                              shell_quote(venv) + k_no_cache)
                        .out;
  EXPECT_THAT(text, HasSubstr("error[metadata-only]"));
  EXPECT_THAT(text, HasSubstr("    └ error[missing-files]"));
  EXPECT_THAT(text, HasSubstr("    └ error[unresolved-library]"));
  EXPECT_THAT(text, HasSubstr("next: pip install --force-reinstall --no-deps nvidia-cudnn-cu13==9.19.0.56"));
}

TEST_F(DoctorVenv, DuplicateDistsAndMissingFilesAndHostileRecords) {
  TempDir dir;
  const std::string venv = copy_venv(dir);
  const std::string site = site_of(venv);
  // A second dist-info of one project, and a RECORD row escaping the environment.
  fs::copy(site + "/oldpin-1.0.dist-info", site + "/oldpin-0.9.dist-info", fs::copy_options::recursive);
  write_file(site + "/oldpin-0.9.dist-info/RECORD", "../../../../../etc/passwd,,\noldpin-0.9.dist-info/METADATA,,\n");
  fs::remove(site + "/torch/__init__.py");
  const auto d = doctor(venv);
  const auto dup = fires(d.doc, "duplicate-dist");
  ASSERT_EQ(dup.size(), 1u);
  EXPECT_EQ(dup[0]["severity"], "error");
  EXPECT_THAT(dup[0]["message"].get<std::string>(), HasSubstr("oldpin is installed 2 times"));
  bool escaped = false;
  for (const auto& f : fires(d.doc, "invalid-metadata"))
    escaped = escaped || joined_evidence(f).find("escapes the environment") != std::string::npos;
  EXPECT_TRUE(escaped) << d.doc["findings"].dump(1);
  const auto missing = of_rule(d.doc, "missing-files");
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0]["severity"], "warning") << "a .py file, not a library";
  EXPECT_EQ(missing[0]["paths"], json({"torch/__init__.py"}));
  // The untouched venv has none of these.
  const auto clean = doctor(venv_);
  EXPECT_TRUE(of_rule(clean.doc, "duplicate-dist").empty());
  EXPECT_TRUE(of_rule(clean.doc, "missing-files").empty());
  EXPECT_TRUE(of_rule(clean.doc, "invalid-metadata").empty());
}

TEST_F(DoctorVenv, RulesFilesSwitchTuneAndAllowAndABadOneIsAnErrorWithItsLine) {
  TempDir dir;
  write_file(dir.path() + "/rules.toml",
             "[rules.unsatisfied-extra]\nenabled = false\n\n[rules.shared-path]\nseverity = \"info\"\n\n"
             "[rules.unsatisfied-requirement]\nallow = [\"oldpin\"]\n\n[rules.mixed-cuda-major]\nenabled = false\n\n"
             "[rules.missing-dlopen-library]\nenabled = false\n");
  const auto d = doctor(venv_, "--rules " + shell_quote(dir.path() + "/rules.toml"));
  EXPECT_TRUE(of_rule(d.doc, "unsatisfied-extra").empty());
  EXPECT_TRUE(of_rule(d.doc, "unsatisfied-requirement").empty());
  ASSERT_EQ(of_rule(d.doc, "shared-path").size(), 1u);
  EXPECT_EQ(of_rule(d.doc, "shared-path")[0]["severity"], "info");
  EXPECT_EQ(d.exit_code, 0) << d.doc["findings"].dump(1);

  write_file(dir.path() + "/bad.toml", "[rules.shared-path]\nseverity = \"fatal\"\n");
  const auto bad = run_shell(shell_quote(k_bin) + " doctor --venv " + shell_quote(venv_) + " --rules " +
                             shell_quote(dir.path() + "/bad.toml") + " 2>&1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.out, HasSubstr("bad.toml:2: rules.shared-path.severity must be"));
  write_file(dir.path() + "/unknown.toml", "\n[rules.no-such-rule]\nenabled = true\n");
  const auto unknown = run_shell(shell_quote(k_bin) + " doctor --venv " + shell_quote(venv_) + " --rules " +
                                 shell_quote(dir.path() + "/unknown.toml") + " 2>&1");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.out, HasSubstr("unknown.toml:2: unknown rule 'no-such-rule'"));
  write_file(dir.path() + "/major.toml",
             "[dlopen.mine]\nwhy = \"x\"\nby = \"libx.so.1\"\nsonames_by_major = { twelve = [\"liby.so.12\"] }\n");
  const auto major = run_shell(shell_quote(k_bin) + " doctor --venv " + shell_quote(venv_) + " --rules " +
                               shell_quote(dir.path() + "/major.toml") + " 2>&1");
  EXPECT_EQ(major.exit_code, 2);
  EXPECT_THAT(major.out, HasSubstr("major.toml:4: [dlopen.mine] sonames_by_major: 'twelve' is not a CUDA major"));
  // A table no reader knows (a typo of [sources]) is named, not ignored: in a --rules file and in
  // the environment's own cudafix.toml alike, with each table a file may carry.
  write_file(dir.path() + "/typo.toml", "[rules.shared-path]\nseverity = \"info\"\n\n[source]\nindex_url = \"x\"\n");
  const auto typo = run_shell(shell_quote(k_bin) + " doctor --venv " + shell_quote(venv_) + " --rules " +
                              shell_quote(dir.path() + "/typo.toml") + " 2>&1");
  EXPECT_EQ(typo.exit_code, 2) << typo.out;
  EXPECT_THAT(typo.out, HasSubstr("typo.toml:4: unknown table [source]; the tables are driver, optional, dlopen, "
                                  "family, minimum_driver, harmless, meta, rules, transactions, sources"));
  const auto select = run_shell(shell_quote(k_bin) + " doctor --venv " + shell_quote(venv_) + " --select nope 2>&1");
  EXPECT_EQ(select.exit_code, 2);
  EXPECT_THAT(select.out, HasSubstr("unknown rule 'nope'"));
}

TEST(DoctorCorpus, TheHealthyCu13VenvHasNoProblemAndEveryExplainedFactIsInfo) {
  TempDir dir;
  const std::string venv = dir.path() + "/venv";
  const auto made = run_shell("zcat " + shell_quote(k_source + "/tests/data/good_torch_cu130_venv.json.gz") + " | " +
                              shell_quote(k_bin) + " materialize - " + shell_quote(venv));
  ASSERT_EQ(made.exit_code, 0) << made.out;
  // A CUDA 13 cuBLAS and nvJitLink outside the environment, in an ld.so.cache made by the real
  // ldconfig: what the GPU machine's cache offers from its toolkit. libcusolverMg.so.12, which
  // nothing in the venv NEEDs or imports and whose RUNPATH does not reach nvidia/cu13/lib's
  // cuBLAS, would load them only if dlopened directly.
  TempDir outside;
  for (const char* soname : {"libcublas.so.13", "libcublasLt.so.13", "libnvJitLink.so.13"}) {
    resolver::ElfSpec spec;
    spec.soname = soname;
    resolver::write_shared_object(outside.path() + "/" + soname, spec);
  }
  write_file(outside.path() + "/ld.so.conf", outside.path() + "\n");
  const std::string cache = outside.path() + "/ld.so.cache";
  const auto built =
      run_shell("ldconfig -X -C " + shell_quote(cache) + " -f " + shell_quote(outside.path() + "/ld.so.conf"));
  ASSERT_EQ(built.exit_code, 0) << built.out;
  const std::string args = "--ld-so-cache " + shell_quote(cache);
  const auto d = test::cudafix_json("doctor --venv " + shell_quote(venv) + " " + args);
  EXPECT_EQ(d.exit_code, 0) << d.doc["findings"].dump(1);
  EXPECT_EQ(d.doc["summary"]["errors"], 0);
  EXPECT_EQ(d.doc["summary"]["warnings"], 0) << d.doc["findings"].dump(1);
  // The facts are there, as info, each with its explanation.
  const auto lone = fires(d.doc, "shadowed-library");
  for (const auto& f : lone) {
    EXPECT_EQ(f["severity"], "info") << f.dump();
    EXPECT_THAT(f["message"].get<std::string>(), HasSubstr("only a direct dlopen of that object would load"));
    EXPECT_THAT(f["message"].get<std::string>(), HasSubstr(outside.path()));
  }
  bool optional = false;
  for (const auto& f : of_rule(d.doc, "unresolved-library")) {
    EXPECT_EQ(f["severity"], "info") << f.dump();
    optional = optional || f["message"].get<std::string>().find("(optional-library)") != std::string::npos;
  }
  EXPECT_TRUE(optional) << "the nvshmem and cufile transports' RDMA, MPI and UCX libraries are optional";
  // cuda-toolkit is metadata-only by design: info, not an error.
  bool toolkit = false;
  for (const auto& f : of_rule(d.doc, "metadata-only"))
    toolkit = toolkit ||
              (f["severity"] == "info" && f["message"].get<std::string>().find("cuda-toolkit") != std::string::npos);
  EXPECT_TRUE(toolkit);
  // A first run on a healthy venv ends "no problems found", the facts one -v away.
  const auto text = run_shell(shell_quote(k_bin) + " doctor --color never --venv " + shell_quote(venv) + " " + args);
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_THAT(text.out, HasSubstr(": 0 errors, 0 warnings, "));
  EXPECT_THAT(text.out, HasSubstr("explained findings (info) not shown; -v shows them"));
  EXPECT_THAT(text.out, HasSubstr("\nno problems found\n"));
}

// A wheel carrying an object built for another machine (an aarch64 extension in an x86-64 venv,
// or the reverse on an aarch64 host), installed by the venv's own pip, which takes a
// py3-none-any wheel whatever it holds; and a dist that bundles a 32-bit helper beside its own
// machine's library, as debugpy does. doctor names the foreign objects with their machines and
// the environment's, and never searches the host's libraries for their NEEDED.
TEST(DoctorForeignObject, AnObjectOfAnotherMachineIsNamedAndNeverResolvedAgainstTheHost) {
  TempDir tmp;
#if defined(__x86_64__)
  const std::uint16_t other = 183;  // EM_AARCH64
  const std::string other_name = "aarch64 (64-bit)", here_name = "x86_64 (64-bit)";
#else
  const std::uint16_t other = 62;  // EM_X86_64
  const std::string other_name = "x86_64 (64-bit)", here_name = "aarch64 (64-bit)";
#endif
  resolver::ElfSpec foreign;
  foreign.machine = other;
  foreign.needed = {"libc.so.6", "libarmdep.so.1"};
  resolver::write_shared_object(tmp.path() + "/native.so", foreign);
  resolver::ElfSpec own;  // the host's machine: the writer's default is x86-64
#if !defined(__x86_64__)
  own.machine = 183;
#endif
  resolver::write_shared_object(tmp.path() + "/own.so", own);
  resolver::ElfSpec helper32 = own;
  helper32.elf_class = 1;
  helper32.machine = 3;  // EM_386
  resolver::write_shared_object(tmp.path() + "/helper32.so", helper32);
  const std::string armonly =
      test::make_wheel(tmp.path(), "armonly 1.0 armonly/_native.so=" + tmp.path() + "/native.so");
  const std::string bundle = test::make_wheel(tmp.path(), "bundle 2.0 bundle/_own.so=" + tmp.path() + "/own.so" +
                                                              " bundle/attach_x86.so=" + tmp.path() + "/helper32.so");
  const std::string venv = tmp.path() + "/venv";
  test::make_venv(venv, {armonly, bundle});
  const std::string object = test::site_packages(venv) + "/armonly/_native.so";
  ASSERT_TRUE(fs::exists(object));

  const auto d = doctor(venv);
  EXPECT_EQ(d.exit_code, 1) << d.doc["findings"].dump(1);
  const auto found = fires(d.doc, "foreign-object");
  ASSERT_EQ(found.size(), 2u) << d.doc["findings"].dump(1);
  const auto& f = found[0]["dists"][0] == "armonly-1.0.dist-info" ? found[0] : found[1];
  const auto& h = &f == &found[0] ? found[1] : found[0];
  EXPECT_EQ(f["severity"], "error");
  const std::string message = f["message"];
  EXPECT_THAT(message, HasSubstr("armonly/_native.so is built for " + other_name));
  EXPECT_THAT(message, HasSubstr("this environment's interpreter is " + here_name));
  EXPECT_THAT(message, HasSubstr("(armonly 1.0)"));
  EXPECT_EQ(f["paths"], json::array({"armonly/_native.so"}));
  EXPECT_THAT(joined_evidence(f), HasSubstr("object: " + fs::canonical(object).string() + ", " + other_name));
  EXPECT_THAT(joined_evidence(f), HasSubstr("installed by armonly 1.0 (armonly-1.0.dist-info)"));
  EXPECT_EQ(f["remedy"]["command"], "pip install --force-reinstall --no-deps armonly==1.0");
  // The bundled 32-bit helper beside the dist's own library: named, as info.
  EXPECT_EQ(h["severity"], "info") << h.dump();
  EXPECT_EQ(h["dists"], json::array({"bundle-2.0.dist-info"}));
  EXPECT_THAT(h["message"].get<std::string>(), HasSubstr("bundle/attach_x86.so is built for i386 (32-bit)"));

  // Its NEEDED are never searched for among the host's libraries: no unresolved-library noise
  // for libc.so.6 (the host's is of the wrong machine) or its own dependency.
  for (const auto& u : of_rule(d.doc, "unresolved-library"))
    EXPECT_THAT(u.dump(), ::testing::Not(HasSubstr("_native.so"))) << u.dump(1);
  const auto scan = test::cudafix_json("scan --venv " + shell_quote(venv) + k_no_cache);
  EXPECT_EQ(scan.doc["summary"]["unresolved_needed"], 0) << scan.out.substr(0, 4000);
}

}  // namespace
}  // namespace cudafix
