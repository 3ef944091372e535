// The probe's parent side without a probe: the record parser, the verdict, the diagnosis on
// constructed host facts (a cgroup-denied device, an NVSwitch box, a compat libcuda), and the
// built-in error names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>

#include "installer/probe/cuda_errors.hpp"
#include "installer/probe/diagnosis.hpp"
#include "installer/probe/verify.hpp"

namespace cudafix::installer::probe {
namespace {

using ::testing::HasSubstr;

TEST(ProbeRecords, EscapedFieldsCannotForgeRecordsAndATornLastLineIsNoRecord) {
  const auto r = parse_probe_records(
      "B\tdlopen consumer\t-\n"
      "E\tdlopen consumer\t-\t0\t1500000\t-\tcannot open /x\\tE\\n.so\n"
      "M\t64768\t42\t/opt/lib\\\\libz.so.1\n"
      "B\tcuInit\t-\n"
      "E\tcuInit\t-\t1\t12");
  ASSERT_EQ(r.stages.size(), 2u);
  EXPECT_TRUE(r.stages[0].ended);
  EXPECT_FALSE(r.stages[0].ok);
  EXPECT_DOUBLE_EQ(r.stages[0].ms, 1.5);
  EXPECT_EQ(r.stages[0].detail, "cannot open /x\tE\n.so");
  ASSERT_EQ(r.mapped.size(), 1u);
  EXPECT_EQ(r.mapped[0].path, "/opt/lib\\libz.so.1");
  EXPECT_FALSE(r.stages[1].ended) << "the torn E line must not end cuInit";
  EXPECT_EQ(r.malformed.size(), 1u);
  EXPECT_FALSE(r.finished);
}

ProbeRecords all_ok_and_finished() { return parse_probe_records("B\tcuInit\t-\nE\tcuInit\t-\t1\t100\t0\t\nX\tdone\n"); }

TEST(Verdict, EveryStageOkThenDeathBySignalIsOkWithAWarning) {
  ProbeRun run;
  run.signal = SIGALRM;
  const auto v = judge(all_ok_and_finished(), run);
  EXPECT_EQ(v.outcome, Outcome::ok);
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_THAT(v.warnings[0], HasSubstr("SIGALRM"));
}

TEST(Verdict, AnUnkillableTimeoutNamesTheStageStateAndWchan) {
  ProbeRun run;
  run.timed_out = true;
  run.reaped = false;
  run.state = "D";
  run.wchan = "os_wait_sem";
  const auto v = judge(parse_probe_records("B\tcuInit\t-\n"), run);
  EXPECT_EQ(v.outcome, Outcome::timeout);
  EXPECT_EQ(v.message, "timeout at cuInit: no answer within the deadline; unkillable (state D, wchan os_wait_sem)");
}

TEST(Verdict, AFailedCallIsJudgedByItsRecordEvenWhenTheProbeExitedCleanly) {
  ProbeRun run;
  run.exit_code = 0;
  const auto v = judge(parse_probe_records("B\tcuInit\t-\nE\tcuInit\t-\t0\t5\t100\t\nX\tstopped\n"), run);
  EXPECT_EQ(v.outcome, Outcome::error);
  EXPECT_EQ(v.message, "cuInit returned 100 (CUDA_ERROR_NO_DEVICE)");
}

TEST(Verdict, DyingBetweenStagesIsACrashAfterTheLastOne) {
  ProbeRun run;
  run.signal = SIGKILL;
  const auto v = judge(parse_probe_records("B\tcuInit\t-\nE\tcuInit\t-\t1\t5\t0\t\n"), run);
  EXPECT_EQ(v.outcome, Outcome::crash);
  EXPECT_THAT(v.message, HasSubstr("after cuInit"));
}

const DiagnosisEntry* likely(const std::vector<DiagnosisEntry>& d, const std::string& fragment) {
  for (const auto& e : d)
    if (e.likely && e.cause.find(fragment) != std::string::npos) return &e;
  return nullptr;
}

FailureFacts failure(long long code, const std::string& libcuda = "") {
  FailureFacts f;
  f.outcome = Outcome::error;
  f.stage = "cuInit";
  f.code = code;
  f.libcuda_path = libcuda;
  return f;
}

HostFacts gpu_host() {
  HostFacts h;
  h.device_nodes = {{"/dev/nvidia-uvm", 0}, {"/dev/nvidia0", 0}, {"/dev/nvidiactl", 0}};
  h.kernel_module_version = "580.159.04";
  h.uvm_module_loaded = true;
  return h;
}

TEST(Diagnosis, EpermOnTheDeviceFilesPointsAtTheCgroupNotAtMissingNodes) {
  HostFacts h = gpu_host();
  h.device_nodes[1].open_errno = EPERM;
  const FailureFacts f = failure(100, "/usr/lib/libcuda.so.580.159.04");
  const auto d = diagnose(f, h);
  EXPECT_NE(likely(d, "denied"), nullptr);
  EXPECT_EQ(likely(d, "not passed into this container"), nullptr);
  EXPECT_EQ(likely(d, "CUDA_VISIBLE_DEVICES"), nullptr);
}

TEST(Diagnosis, NoDeviceFilesAtAllPointsAtTheContainer) {
  HostFacts h = gpu_host();
  h.device_nodes = {{"/dev/nvidiactl", ENOENT}};
  const auto d = diagnose(failure(100), h);
  EXPECT_NE(likely(d, "not passed into this container"), nullptr);
  EXPECT_EQ(likely(d, "denied"), nullptr);
}

TEST(Diagnosis, AnInvalidFirstCudaVisibleDevicesEntryHidesEverything) {
  HostFacts h = gpu_host();
  h.cuda_visible_devices = "gpu0,1";
  const auto d = diagnose(failure(100), h);
  const auto* e = likely(d, "CUDA_VISIBLE_DEVICES");
  ASSERT_NE(e, nullptr);
  EXPECT_THAT(e->result, HasSubstr("\"gpu0\" names no device"));
  h.cuda_visible_devices = "MIG-4b7a2c1e-53b8-5b41-a2e4-3c1e9d5f0a11";
  EXPECT_EQ(likely(diagnose(failure(100), h), "CUDA_VISIBLE_DEVICES"), nullptr);
}

TEST(Diagnosis, Error803ComparesTheCompatLibcudaWithTheKernelModule) {
  const auto d = diagnose(failure(803, "/usr/local/cuda-13.0/compat/libcuda.so.580.95.05"), gpu_host());
  const auto* e = likely(d, "another driver than the kernel module");
  ASSERT_NE(e, nullptr);
  EXPECT_THAT(e->result, HasSubstr("libcuda 580.95.05"));
  EXPECT_THAT(e->result, HasSubstr("kernel module 580.159.04"));
  EXPECT_THAT(e->result, HasSubstr("compat/"));
  // The same versions on both sides are not a mismatch.
  EXPECT_EQ(likely(diagnose(failure(803, "/usr/lib/libcuda.so.580.159.04"), gpu_host()), "another driver"), nullptr);
}

TEST(Diagnosis, Error802OnAnNvswitchBoxWithoutFabricManager) {
  HostFacts h = gpu_host();
  h.nvswitch_present = true;
  EXPECT_NE(likely(diagnose(failure(802), h), "fabric manager"), nullptr);
  h.fabric_manager_running = true;
  EXPECT_EQ(likely(diagnose(failure(802), h), "fabric manager"), nullptr);
}

TEST(Diagnosis, AStubsFolderOnTheLibraryPathIsNamed) {
  HostFacts h = gpu_host();
  h.ld_library_path = {"/usr/local/cuda/lib64/stubs", "/usr/local/nvidia/lib64"};
  const auto d = diagnose(failure(34, "/usr/local/cuda/lib64/stubs/libcuda.so"), h);
  const auto* e = likely(d, "stub");
  ASSERT_NE(e, nullptr);
  EXPECT_THAT(e->result, HasSubstr("LD_LIBRARY_PATH holds /usr/local/cuda/lib64/stubs"));
}

TEST(DriverCheck, TheKernelModuleMustReachTheMinimumDriverOfTheRuntimesMajor) {
  resolver::Knowledge k;
  k.minimum_driver[13] = "580.65.06";
  VerifyReport rep;
  rep.driver_version = 13000;
  rep.runtime_major = 13;
  HostFacts h = gpu_host();
  h.kernel_module_version = "575.57.08";
  const auto old = driver_check(rep, k, h);
  EXPECT_FALSE(old.ok);
  EXPECT_THAT(old.detail,
              HasSubstr("CUDA 13 needs driver 580.65.06 or later, and the kernel module is 575.57.08: too old"));
  h.kernel_module_version = "580.159.04";
  EXPECT_TRUE(driver_check(rep, k, h).ok);
  rep.driver_version = 12080;
  EXPECT_FALSE(driver_check(rep, k, h).ok) << "a CUDA 12.8 driver API for a CUDA 13 runtime";
}

TEST(CudaErrors, NamesComeFromTheBuiltInTables) {
  EXPECT_EQ(cu_result_name(34), "CUDA_ERROR_STUB_LIBRARY");
  EXPECT_EQ(cu_result_name(803), "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH");
  EXPECT_EQ(cudnn_status_name(4000), "CUDNN_STATUS_INTERNAL_ERROR");
  EXPECT_FALSE(cu_result_name(123456).has_value());
}

TEST(CudnnVersion, DistVersionsMapToCudnnGetVersionNumbers) {
  EXPECT_EQ(cudnn_version_number("9.19.0.56"), 91900);
  EXPECT_EQ(cudnn_version_number("9.10.2.21"), 91002);
  EXPECT_EQ(cudnn_version_number("8.9.2.26"), 8902);
  EXPECT_FALSE(cudnn_version_number("9").has_value());
}

// The GPUs the driver has that the probe did not see, each with its reason.
TEST(Diagnosis, AGpuTheDriverHasAndTheProbeDidNotSeeIsNamedWithWhyItIsHidden) {
  HostFacts h = gpu_host();
  h.driver_gpus = {{"0000:1b:00.0", 0, ""}, {"0000:1c:00.0", 1, ""}, {"0000:1d:00.0", 2, ""}};
  h.device_nodes.push_back({"/dev/nvidia2", EPERM});  // nvidia1: absent
  const std::vector<std::string> seen = {"0000:1b:00.0"};
  const auto d = hidden_devices(h, seen);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].cause, "GPU 0000:1c:00.0 has no device file here (a container given only some GPUs)");
  EXPECT_EQ(d[1].cause, "GPU 0000:1d:00.0 is hidden by a cgroup's device rule");
  EXPECT_THAT(d[1].result, ::testing::HasSubstr("open(/dev/nvidia2) failed"));
  h.cuda_visible_devices = "0";
  const auto by_env = hidden_devices(h, seen);
  ASSERT_EQ(by_env.size(), 2u);
  EXPECT_EQ(by_env[0].cause, "GPU 0000:1c:00.0 is left out of CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(by_env[0].result, "the driver has it; CUDA_VISIBLE_DEVICES=0");
  EXPECT_TRUE(hidden_devices(h, {"0000:1b:00.0", "0000:1c:00.0", "0000:1d:00.0"}).empty());
}

// On the one-GPU H200, CUDA_VISIBLE_DEVICES=1 made cuInit return CUDA_ERROR_NO_DEVICE: an index
// the driver does not have hides every GPU, as an unknown UUID does.
TEST(Diagnosis, ACudaVisibleDevicesEntryNoneOfTheDriversGpusMatchHidesEveryGpu) {
  HostFacts h = gpu_host();
  h.driver_gpus = {{"0000:00:06.0", 0, "GPU-2cb515dc-58e4-5355-4db1-09ec475ae9e7"}};
  for (const char* hides : {"1", "GPU-ffff", "GPU-2cb515dd"}) {
    h.cuda_visible_devices = hides;
    const auto d = diagnose(failure(100), h);
    const auto* e = likely(d, "CUDA_VISIBLE_DEVICES hides every GPU");
    ASSERT_NE(e, nullptr) << hides;
    EXPECT_THAT(e->result, ::testing::HasSubstr("is none of the 1 GPU the driver has (0: 0000:00:06.0 GPU-2cb5"));
  }
  for (const char* names : {"0", "GPU-2cb515dc", "GPU-2cb515dc-58e4-5355-4db1-09ec475ae9e7"}) {
    h.cuda_visible_devices = names;
    EXPECT_EQ(likely(diagnose(failure(100), h), "CUDA_VISIBLE_DEVICES hides every GPU"), nullptr) << names;
  }
}

TEST(Protocol, ADeviceRecordCarriesItsPciBusIdAndAnOlderProbesHasNone) {
  const auto r = parse_probe_records("D\t0\tNVIDIA H200\t9.0\tGPU-ab\t0000:1b:00.0\nD\t1\tOld\t8.0\tGPU-cd\n");
  ASSERT_EQ(r.devices.size(), 2u);
  EXPECT_EQ(r.devices[0].pci, "0000:1b:00.0");
  EXPECT_EQ(r.devices[1].pci, "");
  EXPECT_TRUE(r.malformed.empty());
}

}  // namespace
}  // namespace cudafix::installer::probe
