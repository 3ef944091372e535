// End-to-end: `cudafix verify` runs the real cudafix-probe against fake libcuda.so.1 and
// libcudnn.so.9 libraries built from C (tests/fixtures/fake_cuda.c, fake_cudnn.c), selected
// through the library path, and against the CUDA toolkit's real stub libcuda where installed.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <glob.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "resolver/base/text.hpp"
#include "tests/e2e/cudafix_run.hpp"
#include "tests/e2e/fake_gpu_venv.hpp"
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
using test::k_verify;

using test::fake_cuda;
using test::FakeVenv;

struct Verify {
  int exit_code = -1;
  json doc;
  std::string text;
};

// `cudafix verify` with the library path the model and the probe share; `env` prefixes the
// command (CUDA_VISIBLE_DEVICES=...).
Verify verify(const FakeVenv& venv, const std::string& library_path, const std::string& args = "",
              const std::string& env = "") {
  const std::string command_args =
      "verify --venv " + shell_quote(venv.root()) + " --ld-library-path " + shell_quote(library_path) + " " + args;
  const auto r = test::cudafix_json(command_args, env);
  Verify v{r.exit_code, r.doc, ""};
  v.text =
      run_shell("env -u VIRTUAL_ENV " + env + " " + shell_quote(k_bin) + " " + command_args + " --color never 2>&1")
          .out;
  return v;
}

// Every file's SHA-256 under a venv, cudafix's own folder and the lock aside.
std::string hashes_of(const std::string& root) {
  return run_shell("cd " + shell_quote(root) +
                   " && find . -path ./.cudafix -prune -o -path ./.lock -prune -o -type f -print0 | sort -z | "
                   "xargs -0 sha256sum")
      .out;
}

const json* stage(const json& doc, const std::string& name, int device = -1) {
  for (const auto& s : doc["stages"])
    if (s["stage"] == name && (device < 0 ? s["device"].is_null() : s["device"] == device)) return &s;
  return nullptr;
}

const json* likely_cause(const json& doc, const std::string& fragment) {
  for (const auto& d : doc["diagnosis"])
    if (d["likely"] == true && d["cause"].get<std::string>().find(fragment) != std::string::npos) return &d;
  return nullptr;
}

TEST(Verify, TwoWorkingDevicesPassEveryStageAndEveryCheck) {
  FakeVenv venv;
  const auto v = verify(venv, fake_cuda("ok"));
  EXPECT_EQ(v.exit_code, 0) << v.text;
  EXPECT_EQ(v.doc["outcome"], "ok");
  ASSERT_EQ(v.doc["devices"].size(), 2u);
  EXPECT_EQ(v.doc["devices"][1]["name"], "Fake GPU 1");
  EXPECT_EQ(v.doc["devices"][0]["compute_capability"], "9.0");
  EXPECT_EQ(v.doc["devices"][0]["uuid"], "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f");
  EXPECT_EQ(v.doc["driver_version"], 13000);
  EXPECT_EQ(v.doc["cudnn_version"], 91900);
  EXPECT_EQ(v.doc["consumer"], "torch/lib/libtorch_cuda.so");
  for (int d : {0, 1}) {
    ASSERT_NE(stage(v.doc, "cudnnCreate", d), nullptr) << "device " << d;
    EXPECT_EQ((*stage(v.doc, "cudnnCreate", d))["ok"], true);
  }
  // The cuDNN the real loader mapped is the one the model predicted, by device and inode.
  bool saw_cudnn = false;
  for (const auto& f : v.doc["loaded"]) {
    if (f["soname"] != "libcudnn.so.9") continue;
    saw_cudnn = true;
    EXPECT_EQ(f["path"], "nvidia/cudnn/lib/libcudnn.so.9");
    EXPECT_EQ(f["match"], true);
  }
  EXPECT_TRUE(saw_cudnn);
  // The three checks ran, and each passed: an empty list would pass a bare loop.
  std::set<std::string> checks;
  for (const auto& c : v.doc["checks"]) {
    checks.insert(c["check"].get<std::string>());
    EXPECT_EQ(c["ok"], true) << c.dump();
  }
  EXPECT_EQ(checks, (std::set<std::string>{"loaded files", "cuDNN version", "driver version"}));
  EXPECT_THAT(v.text, HasSubstr("cudafix verify ok"));
}

TEST(Verify, AMigInstanceIsReportedWithItsMigUuid) {
  FakeVenv venv;
  const auto v = verify(venv, fake_cuda("mig"));
  EXPECT_EQ(v.exit_code, 0) << v.text;
  ASSERT_EQ(v.doc["devices"].size(), 1u);
  EXPECT_EQ(v.doc["devices"][0]["uuid"], "MIG-00010203-0405-0607-0809-0a0b0c0d0e0f");
}

// The diagnosis entry whose cause holds `fragment`, likely or not.
const json* cause_entry(const json& doc, const std::string& fragment) {
  for (const auto& d : doc["diagnosis"])
    if (d["cause"].get<std::string>().find(fragment) != std::string::npos) return &d;
  return nullptr;
}

TEST(Verify, InitErrorsAreNamedAndDiagnosed) {
  FakeVenv venv;
  // The host facts the diagnosis reads, read here the same way: on a build machine there is no
  // NVIDIA kernel module, on a GPU host there is, and the verdict on each cause follows.
  const bool module_loaded = !test::run_shell("cat /proc/driver/nvidia/version 2>/dev/null").out.empty();
  const bool uvm_loaded = test::run_shell("grep -q '^nvidia_uvm ' /proc/modules").exit_code == 0;
  struct Case {
    std::string name, cause;
    bool likely;
  };
  const std::map<int, Case> cases = {
      {3, {"CUDA_ERROR_NOT_INITIALIZED", "the NVIDIA kernel module is not loaded", !module_loaded}},
      {34, {"CUDA_ERROR_STUB_LIBRARY", "stub libcuda", true}},
      {999, {"CUDA_ERROR_UNKNOWN", "the nvidia_uvm kernel module is not loaded", !uvm_loaded}},
      {802, {"CUDA_ERROR_SYSTEM_NOT_READY", "the NVIDIA kernel module is not loaded", !module_loaded}},
  };
  for (const auto& [code, expected] : cases) {
    const auto v = verify(venv, fake_cuda("init" + std::to_string(code)));
    EXPECT_EQ(v.exit_code, 1) << code;
    EXPECT_EQ(v.doc["outcome"], "error") << code;
    EXPECT_EQ(v.doc["failed_stage"], "cuInit") << code;
    const json* s = stage(v.doc, "cuInit");
    ASSERT_NE(s, nullptr);
    EXPECT_EQ((*s)["code"], code);
    EXPECT_EQ((*s)["name"], expected.name);
    const json* entry = cause_entry(v.doc, expected.cause);
    ASSERT_NE(entry, nullptr) << code << ": " << v.doc["diagnosis"].dump();
    EXPECT_EQ((*entry)["likely"], expected.likely)
        << code << " (module loaded: " << module_loaded << ", uvm: " << uvm_loaded << "): " << entry->dump();
    EXPECT_EQ(stage(v.doc, "cudnnCreate", 0), nullptr) << "the probe stops at the first failure";
  }
}

TEST(Verify, NoDeviceWithAnEmptyCudaVisibleDevicesBlamesIt) {
  FakeVenv venv;
  const auto v = verify(venv, fake_cuda("init100"), "", "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ((*stage(v.doc, "cuInit"))["name"], "CUDA_ERROR_NO_DEVICE");
  const json* d = likely_cause(v.doc, "CUDA_VISIBLE_DEVICES hides every GPU");
  ASSERT_NE(d, nullptr) << v.doc["diagnosis"].dump();
  EXPECT_THAT((*d)["result"].get<std::string>(), HasSubstr("set and empty"));

  // Unset, the variable is not what hides the devices; the missing device files are.
  const auto unset = verify(venv, fake_cuda("init100"), "", "-u CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(likely_cause(unset.doc, "CUDA_VISIBLE_DEVICES"), nullptr);
  EXPECT_NE(likely_cause(unset.doc, "device files were not passed"), nullptr);
}

TEST(Verify, AHangInCuInitIsATimeoutAtThatStageAndVerifyStillReturns) {
  FakeVenv venv;
  const auto v = verify(venv, fake_cuda("hang"), "--timeout 1");
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.doc["outcome"], "timeout");
  EXPECT_EQ(v.doc["failed_stage"], "cuInit");
  EXPECT_EQ((*stage(v.doc, "cuInit"))["returned"], false);
  EXPECT_EQ(v.doc["probe"]["timed_out"], true);
  EXPECT_EQ(v.doc["probe"]["reaped"], true);
  EXPECT_NE(likely_cause(v.doc, "cuInit did not return"), nullptr);
  EXPECT_THAT(v.text, HasSubstr("timeout at cuInit"));
}

TEST(Verify, ACrashInCuInitIsACrashWithItsSignal) {
  FakeVenv venv;
  const auto v = verify(venv, fake_cuda("crash"));
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.doc["outcome"], "crash");
  EXPECT_EQ(v.doc["failed_stage"], "cuInit");
  EXPECT_EQ(v.doc["probe"]["signal"], "SIGSEGV");
  EXPECT_THAT(v.doc["message"].get<std::string>(), HasSubstr("SIGSEGV"));
}

TEST(Verify, CudnnCreateFailingIsAnErrorAtThatStageOnThatDevice) {
  FakeVenv venv("create_fails");
  const auto v = verify(venv, fake_cuda("ok"));
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.doc["outcome"], "error");
  EXPECT_EQ(v.doc["failed_stage"], "cudnnCreate on device 0");
  const json* s = stage(v.doc, "cudnnCreate", 0);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ((*s)["code"], 4000);
  EXPECT_EQ((*s)["name"], "CUDNN_STATUS_INTERNAL_ERROR");
  EXPECT_EQ((*stage(v.doc, "cuInit"))["ok"], true);
}

TEST(Verify, ALibraryTimerKillingTheProbeAtExitIsOkWithAWarning) {
  FakeVenv venv;
  const auto v = verify(venv, fake_cuda("alarm_at_exit"));
  EXPECT_EQ(v.exit_code, 0) << v.text;
  EXPECT_EQ(v.doc["outcome"], "ok");
  EXPECT_EQ(v.doc["probe"]["signal"], "SIGALRM");
  ASSERT_EQ(v.doc["warnings"].size(), 1u);
  EXPECT_THAT(v.doc["warnings"][0].get<std::string>(), HasSubstr("SIGALRM"));
}

TEST(Verify, ALibraryIntervalTimerInterruptingTheProbeChangesNothing) {
  FakeVenv venv;
  const auto v = verify(venv, fake_cuda("alarm_interval"));
  EXPECT_EQ(v.exit_code, 0) << v.text;
  EXPECT_EQ(v.doc["outcome"], "ok");
  EXPECT_EQ((*stage(v.doc, "cudnnDestroy", 1))["ok"], true);
}

TEST(Verify, NoLibcudaIsNoDriverExit3) {
  FakeVenv venv;
  const auto v = verify(venv, k_verify + "/cu13");  // a folder without libcuda.so.1
  EXPECT_EQ(v.exit_code, 3);
  EXPECT_EQ(v.doc["outcome"], "no-driver");
  EXPECT_THAT(v.doc["message"].get<std::string>(), HasSubstr("libcuda.so.1"));
  EXPECT_NE(likely_cause(v.doc, "no libcuda.so.1 on the loader's path"), nullptr);
}

// With no driver the probe stops at libcuda.so.1 and loads nothing of the environment: the loaded
// files were not compared, and verify must not say "ok" of them. -q says the verdict alone.
TEST(Verify, WithNoDriverTheLoadedFilesCheckIsSkippedNeverOk) {
  FakeVenv venv;
  const auto v = verify(venv, k_verify + "/cu13");
  EXPECT_EQ(v.exit_code, 3);
  for (const auto& c : v.doc["checks"]) EXPECT_NE(c["check"], "loaded files") << c.dump();
  const json* skipped = nullptr;
  for (const auto& s : v.doc["stages"])
    if (s["stage"] == "loaded files") skipped = &s;
  ASSERT_NE(skipped, nullptr) << v.doc["stages"].dump(1);
  EXPECT_EQ((*skipped)["skipped"], true);
  EXPECT_THAT((*skipped)["detail"].get<std::string>(), HasSubstr("the probe loaded nothing of the environment"));
  EXPECT_THAT(v.text, ::testing::Not(HasSubstr("ok   loaded files")));
  EXPECT_THAT(v.text, ::testing::ContainsRegex("skip +- +loaded files: not compared"));
  const auto quiet =
      run_shell("env -u VIRTUAL_ENV " + shell_quote(k_bin) + " verify -q --color never --venv " +
                shell_quote(venv.root()) + " --ld-library-path " + shell_quote(k_verify + "/cu13") + " 2>&1");
  EXPECT_EQ(quiet.exit_code, 3);
  EXPECT_THAT(quiet.out, ::testing::StartsWith("cudafix verify no driver: "));
  EXPECT_THAT(quiet.out, ::testing::Not(HasSubstr("stages")));
  EXPECT_THAT(quiet.out, ::testing::Not(HasSubstr("skip")));
}

TEST(Verify, ADriverOlderThanTheRuntimeFailsTheDriverCheck) {
  FakeVenv venv;
  const auto v = verify(venv, fake_cuda("driver_12_8"));
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.doc["outcome"], "error");
  EXPECT_EQ(v.doc["failed_check"], "driver version");
  EXPECT_EQ(v.doc["runtime_major"], 13);
  EXPECT_NE(likely_cause(v.doc, "driver is older than the environment's CUDA runtime"), nullptr);
}

TEST(Verify, ACudnnLoadedBehindTheModelsBackIsNamedWithBothPathsAndVersions) {
  // The fake driver dlopens another libcudnn.so.9 (9.14) in cuInit; the consumer's NEEDED then
  // binds to it by soname instead of the venv's 9.19.
  FakeVenv venv;
  const auto v = verify(venv, fake_cuda("preload_cudnn"));
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.doc["failed_check"], "loaded files");
  EXPECT_EQ(v.doc["cudnn_version"], 91400);
  const std::string detail = v.doc["checks"][0]["detail"];
  EXPECT_THAT(detail, HasSubstr("cudnn/v91400/libcudnn.so.9"));
  EXPECT_THAT(detail, HasSubstr("nvidia/cudnn/lib/libcudnn.so.9 (nvidia-cudnn-cu13 9.19.0.56)"));
  bool version_check_failed = false;
  for (const auto& c : v.doc["checks"])
    if (c["check"] == "cuDNN version") {
      version_check_failed = c["ok"] == false;
      EXPECT_THAT(c["detail"].get<std::string>(), HasSubstr("91900"));
    }
  EXPECT_TRUE(version_check_failed);
}

TEST(Verify, AMetadataOnlyCudnnFallingThroughToAnOutsideOneIsReported) {
  // pip uninstall of a cuDNN that shared nvidia/cudnn/lib: the dist-info stays, the library is
  // gone, and the loader finds another libcudnn.so.9 on the library path.
  FakeVenv venv("v91900", /*with_cudnn_files=*/false);
  const auto v = verify(venv, fake_cuda("ok") + ":" + k_verify + "/cudnn/v91400");
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.doc["failed_check"], "cuDNN version");
  std::string detail;
  for (const auto& c : v.doc["checks"])
    if (c["check"] == "cuDNN version") detail = c["detail"];
  EXPECT_THAT(detail, HasSubstr("outside the environment"));
  EXPECT_THAT(detail, HasSubstr("torch requires nvidia-cudnn-cu13==9.19.0.56"));
  EXPECT_THAT(detail, HasSubstr("version mismatch, 91400 loaded"));
}

TEST(Verify, WithoutAConsumerTheEnvironmentsOwnCudnnIsLoadedByThePathTheModelGives) {
  FakeVenv venv;
  fs::remove_all(venv.site() + "/torch-2.11.0.dist-info");
  fs::remove(venv.site() + "/torch/lib/libtorch_cuda.so");
  const auto v = verify(venv, fake_cuda("one_device"));
  EXPECT_EQ(v.exit_code, 0) << v.text;
  EXPECT_TRUE(v.doc["consumer"].is_null());
  const json* s = stage(v.doc, "dlopen cuDNN");
  ASSERT_NE(s, nullptr) << v.doc["stages"].dump();
  EXPECT_THAT((*s)["detail"].get<std::string>(), HasSubstr("nvidia/cudnn/lib/libcudnn.so.9"));
  EXPECT_EQ(v.doc["cudnn_version"], 91900);
  EXPECT_EQ((*stage(v.doc, "cudnnCreate", 0))["ok"], true);
}

TEST(Verify, WithoutCudnnInTheEnvironmentItsStagesAreSkippedAndSaySo) {
  TempDir dir;
  write_file(dir.path() + "/venv/pyvenv.cfg", "home = /usr/bin\nversion = 3.12.3\n");
  fs::create_directories(dir.path() + "/venv/lib/python3.12/site-packages");
  const auto r = run_shell("env -u VIRTUAL_ENV " + shell_quote(k_bin) + " verify --json --venv " +
                           shell_quote(dir.path() + "/venv") + " --ld-library-path " + shell_quote(fake_cuda("ok")));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const auto doc = json::parse(r.out);
  EXPECT_EQ(doc["outcome"], "ok");
  const json* skipped = nullptr;
  for (const auto& s : doc["stages"])
    if (s["stage"] == "cudnnCreate") skipped = &s;
  ASSERT_NE(skipped, nullptr);
  EXPECT_EQ((*skipped)["skipped"], true);
  EXPECT_THAT((*skipped)["detail"].get<std::string>(), HasSubstr("no libcudnn.so.9 in the environment"));
}

TEST(Verify, TheToolkitsRealStubLibcudaReports34AndItsPath) {
  glob_t g{};
  ::glob("/usr/local/cuda*/lib64/stubs/libcuda.so", 0, nullptr, &g);
  std::string stub = g.gl_pathc ? g.gl_pathv[0] : "";
  ::globfree(&g);
  if (stub.empty()) GTEST_SKIP() << "no CUDA toolkit stub libcuda.so on this machine";
  FakeVenv venv;
  TempDir lib;
  fs::create_symlink(stub, lib.path() + "/libcuda.so.1");
  const auto v = verify(venv, lib.path());
  EXPECT_EQ(v.exit_code, 1) << v.text;
  ASSERT_TRUE(v.doc.contains("stages") && v.doc.contains("libcuda_real")) << v.doc.dump() << "\n" << v.text;
  const json* failed = nullptr;
  for (const auto& s : v.doc["stages"])
    if (s.value("ok", true) == false) failed = &s;  // a skipped stage has no "ok"
  ASSERT_NE(failed, nullptr) << v.text;
  EXPECT_EQ((*failed)["code"], 34) << v.text;
  EXPECT_EQ((*failed)["name"], "CUDA_ERROR_STUB_LIBRARY");
  EXPECT_EQ(v.doc["libcuda_real"], fs::canonical(stub).string()) << v.text;
  const json* d = likely_cause(v.doc, "stub libcuda");
  ASSERT_NE(d, nullptr);
  EXPECT_THAT((*d)["result"].get<std::string>(), HasSubstr(fs::canonical(stub).string()));
}

// cudafix may start itself again with glibc's malloc tuned (cli/main.cpp); the probe it runs must
// still see exactly the GLIBC_TUNABLES the user gave, or none.
TEST(Verify, TheProbeRunsWithTheCallersGlibcTunables) {
  FakeVenv venv;
  TempDir out;
  const std::string file = out.path() + "/env";
  for (const std::string tunables : {"", "glibc.malloc.check=0", "glibc.malloc.hugetlb=0"}) {
    const std::string env =
        (tunables.empty() ? "-u GLIBC_TUNABLES" : "GLIBC_TUNABLES=" + tunables) + " FAKE_ENV_FILE=" + shell_quote(file);
    const auto v = verify(venv, fake_cuda("record_env"), "", env);
    EXPECT_EQ(v.exit_code, 0) << v.text;
    std::ifstream in(file);
    const std::string seen((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(seen, tunables.empty() ? "(unset)" : tunables);
  }
}

TEST(Verify, TheProbeLinksNothingButLibc) {
  const std::string probe = fs::path(k_bin).parent_path() / "cudafix-probe";
  const auto r = run_shell("readelf -d " + shell_quote(probe) + " | grep NEEDED");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("[libc.so.6]"));
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST(Verify, LdSoCacheOptionIsRefusedBecauseTheRealLoaderReadsTheHostsCache) {
  FakeVenv venv;
  const auto r =
      run_shell(shell_quote(k_bin) + " verify --venv " + shell_quote(venv.root()) + " --ld-so-cache /dev/null 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("--ld-so-cache cannot be used with verify"));
}

// A step whose live verification fails is undone whole: a wheel whose cuDNN cannot create a
// handle, installed with the verification on, exits 1, says which check failed, and leaves the
// environment as it was, file for file; the same install of a good cuDNN is verified and kept.
TEST(VerifyAfterAStep, AFailedVerificationUndoesTheInstallAndExitsOne) {
  FakeVenv venv;
  TempDir w;
  const auto listing = [&] { return hashes_of(venv.root()); };
  const std::string before = listing();
  const auto install = [&](const std::string& cudnn) {
    const std::string wheel = test::make_wheel(
        w.path() + "/" + cudnn, "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + k_verify + "/cudnn/" +
                                    cudnn + "/libcudnn.so.9");
    return run_shell("env -u VIRTUAL_ENV " + shell_quote(k_bin) + " install " + shell_quote(wheel) + " -y --venv " +
                     shell_quote(venv.root()) + " --ld-library-path " + shell_quote(fake_cuda("ok")) + " 2>&1");
  };
  fs::create_directories(w.path() + "/create_fails");
  fs::create_directories(w.path() + "/v91900");
  const auto bad = install("create_fails");
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("verification after step 1 (nvidia-cudnn-cu13 9.19.0.56) failed"));
  EXPECT_THAT(bad.out, HasSubstr("every change was undone"));
  EXPECT_EQ(listing(), before);
  const auto good = install("v91900");
  EXPECT_EQ(good.exit_code, 0) << good.out;
  EXPECT_THAT(good.out, HasSubstr("verified on the GPU"));
}

// `fix` with the live check: a cuDNN whose handle creation fails is rolled back, file for file;
// the good one is verified and its version said.
TEST(FixVerified, AStepWhoseVerificationFailsIsUndoneAndTheGoodWheelIsVerified) {
  FakeVenv venv("v91900", false);  // nvidia-cudnn-cu13 metadata-only
  TempDir w;
  const auto listing = [&] { return hashes_of(venv.root()); };
  const std::string before = listing();
  const auto fix = [&](const std::string& cudnn) {
    const std::string folder = w.path() + "/" + cudnn;
    fs::create_directories(folder);
    test::make_wheel(folder, "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + k_verify + "/cudnn/" +
                                 cudnn + "/libcudnn.so.9");
    return test::cudafix_json("fix -y --find-links " + shell_quote(folder) + " --venv " + shell_quote(venv.root()) +
                              " --ld-library-path " + shell_quote(fake_cuda("ok")) + test::k_no_cache);
  };
  const auto bad = fix("create_fails");
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  EXPECT_EQ(bad.doc["undone"], true);
  EXPECT_THAT(bad.doc["error"].get<std::string>(),
              HasSubstr("verification after step 1 (reinstall nvidia-cudnn-cu13 9.19.0.56) failed"));
  EXPECT_EQ(listing(), before);
  const auto good = fix("v91900");
  ASSERT_EQ(good.exit_code, 0) << good.out;
  EXPECT_EQ(good.doc["verified"], true);
  EXPECT_EQ(good.doc["cudnn"]["version"], 91900);
  EXPECT_THAT(good.doc["cudnn"]["path"].get<std::string>(), HasSubstr("nvidia/cudnn/lib/libcudnn.so.9"));
  EXPECT_THAT(good.doc["before"]["error_rules"], ::testing::Contains("metadata-only"));
  // What is left is the fixture's: its fake cuDNN lacks the sub-libraries the real one dlopens.
  EXPECT_EQ(good.doc["after"]["error_rules"], json({"missing-dlopen-library"})) << good.doc["after"].dump();
}

// --- every device on its own, and NCCL across them -----------------------------------------

TEST(VerifyDevices, EachDeviceIsReportedWithItsPciBusIdAndOneFailingDeviceIsNamedWhileTheOthersGoOn) {
  FakeVenv venv;
  const auto four = verify(venv, fake_cuda("four_devices"));
  ASSERT_EQ(four.exit_code, 0) << four.text;
  ASSERT_EQ(four.doc["devices"].size(), 4u);
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(four.doc["devices"][d]["pci_bus_id"], fmt::format("0000:{:02x}:00.0", 0x1b + d));
    EXPECT_EQ(four.doc["devices"][d]["ok"], true);
    EXPECT_TRUE(stage(four.doc, "cudnnCreate", d)) << d;
  }
  EXPECT_THAT(four.text, HasSubstr("device 3  Fake GPU 3, compute capability 9.0, GPU-"));
  EXPECT_THAT(four.text, HasSubstr(", PCI 0000:1e:00.0  ok"));

  const auto one_bad = verify(venv, fake_cuda("ctx_fails_on1"));
  EXPECT_EQ(one_bad.exit_code, 1) << one_bad.text;
  EXPECT_EQ(one_bad.doc["message"], "cuDevicePrimaryCtxRetain on device 1 returned 2 (CUDA_ERROR_OUT_OF_MEMORY)");
  EXPECT_EQ(one_bad.doc["devices"][1]["ok"], false);
  EXPECT_EQ(one_bad.doc["devices"][1]["failed_stage"], "cuDevicePrimaryCtxRetain on device 1");
  // Device 0 was still checked through to its cuDNN handle; device 1 was left out after it failed.
  EXPECT_EQ(one_bad.doc["devices"][0]["ok"], true);
  const json* create0 = stage(one_bad.doc, "cudnnCreate", 0);
  ASSERT_TRUE(create0);
  EXPECT_EQ((*create0)["ok"], true);
  EXPECT_FALSE(stage(one_bad.doc, "cudnnCreate", 1));
  EXPECT_THAT(one_bad.text, HasSubstr("FAILED at cuDevicePrimaryCtxRetain on device 1"));
}

TEST(VerifyDevices, CudaVisibleDevicesIsShownAsTheProbeSawIt) {
  FakeVenv venv;
  const auto v =
      verify(venv, fake_cuda("one_device"), "", "CUDA_VISIBLE_DEVICES=GPU-00010203-0405-0607-0809-0a0b0c0d0e0f");
  EXPECT_EQ(v.exit_code, 0) << v.text;
  EXPECT_EQ(v.doc["cuda_visible_devices"], "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f");
  EXPECT_THAT(v.text, HasSubstr("visible   CUDA_VISIBLE_DEVICES=GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"));
}

TEST(VerifyNccl, AnAllReduceAcrossBothDevicesWithTheEnvironmentsNcclChecksTheSumAndTheVersion) {
  FakeVenv venv("v91900", true, "v22809");
  TempDir t;
  const std::string env_file = t.path() + "/nvls";
  const auto v = verify(venv, fake_cuda("ok"), "--nccl", "FAKE_NCCL_ENV_FILE=" + shell_quote(env_file));
  ASSERT_EQ(v.exit_code, 0) << v.text;
  for (const char* s : {"dlopen libnccl.so.2", "ncclGetVersion", "ncclCommInitAll", "ncclAllReduce", "nccl sum"}) {
    const json* st = stage(v.doc, s);
    ASSERT_TRUE(st) << s;
    EXPECT_EQ((*st)["ok"], true) << s;
  }
  EXPECT_EQ((*stage(v.doc, "nccl sum"))["detail"], "1024 floats summed over 2 devices: 3 each, as expected");
  EXPECT_EQ(v.doc["nccl_version"], 22809);
  EXPECT_THAT(v.doc["nccl"].get<std::string>(), HasSubstr("nvidia/nccl/lib/libnccl.so.2"));
  bool version_checked = false;
  for (const auto& c : v.doc["checks"])
    if (c["check"] == "NCCL version") {
      version_checked = true;
      EXPECT_EQ(c["ok"], true) << c.dump();
      EXPECT_THAT(c["detail"].get<std::string>(), HasSubstr("(nvidia-nccl-cu13 2.28.9)"));
    }
  EXPECT_TRUE(version_checked);
  // The NCCL mapped is the one the model predicted, and NVLink multicast was off.
  bool nccl_compared = false;
  for (const auto& f : v.doc["loaded"])
    if (f["soname"] == "libnccl.so.2") nccl_compared = f["match"] == true;
  EXPECT_TRUE(nccl_compared) << v.doc["loaded"].dump();
  EXPECT_EQ(resolver::try_read_file(env_file).value_or("(not written)"), "0");
}

TEST(VerifyNccl, AWrongSumAFailedInitAHangAndAnotherVersionEachFailNamingWhat) {
  const auto run = [](const std::string& nccl, const std::string& args = "--nccl") {
    FakeVenv venv("v91900", true, nccl);
    return verify(venv, fake_cuda("ok"), args);
  };
  const auto wrong = run("wrong");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_EQ(wrong.doc["message"], "nccl sum failed: device 0 element 0 is 4, not the sum 3");
  const auto init = run("init5");
  EXPECT_EQ(init.exit_code, 1);
  EXPECT_EQ(init.doc["message"], "ncclCommInitAll returned 5 (ncclInvalidUsage)");
  const auto hang = run("hang", "--nccl --timeout 2");
  EXPECT_EQ(hang.exit_code, 1);
  EXPECT_EQ(hang.doc["outcome"], "timeout");
  EXPECT_THAT(hang.doc["message"].get<std::string>(), HasSubstr("timeout at ncclCommInitAll"));
  const auto other = run("v22700");
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_EQ(other.doc["failed_check"], "NCCL version");
}

TEST(VerifyNccl, OnOneVisibleGpuTheAllReduceIsSkippedSayingItNeedsTwo) {
  FakeVenv venv("v91900", true, "v22809");
  const auto v = verify(venv, fake_cuda("one_device"), "--nccl");
  EXPECT_EQ(v.exit_code, 0) << v.text;
  EXPECT_FALSE(stage(v.doc, "ncclCommInitAll"));
  bool said = false;
  for (const auto& s : v.doc["stages"])
    if (s.value("skipped", false) && s["stage"] == "ncclAllReduce")
      said = s["detail"] == "an all-reduce needs two or more GPUs; 1 visible";
  EXPECT_TRUE(said) << v.doc["stages"].dump();
}

}  // namespace
}  // namespace cudafix
