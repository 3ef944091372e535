// Why a probe failed: for each failure, the causes that fit it and the check that tells them
// apart, run on this host and reported with its result. Host facts are gathered once, as a plain
// value, so the reasoning can be tested with any host.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "installer/probe/verdict.hpp"

namespace cudafix::installer::probe {

struct DeviceNode {
  std::string path;
  int open_errno = 0;  // of open(O_RDWR): 0 opened, EPERM/EACCES denied (cgroup), ENOENT absent
};

// A GPU the kernel driver knows (/proc/driver/nvidia/gpus/<pci>/information).
struct DriverGpu {
  std::string pci;   // "0000:1b:00.0", lower case as the probe writes it
  int minor = -1;    // "Device Minor": its /dev/nvidiaN
  std::string uuid;  // "GPU UUID"
};

struct HostFacts {
  std::optional<std::string> cuda_visible_devices;   // unset: nullopt
  std::vector<DriverGpu> driver_gpus;                // empty where /proc/driver/nvidia is not visible
  std::vector<DeviceNode> device_nodes;              // /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidiaN
  std::optional<std::string> kernel_module_version;  // /proc/driver/nvidia/version: "580.159.04"
  bool uvm_module_loaded = false;                    // nvidia_uvm in /proc/modules
  bool nvswitch_present = false;                     // /dev/nvidia-nvswitch* or /proc/driver/nvidia-nvswitch
  bool fabric_manager_running = false;               // a process named nv-fabricmanager
  std::vector<std::string> ld_library_path;          // what the probe ran with
};

[[nodiscard]] HostFacts gather_host_facts(const std::vector<std::string>& ld_library_path);

// What the probe and the model said, as far as the diagnosis needs it.
struct FailureFacts {
  Outcome outcome = Outcome::ok;
  std::string stage;                  // the failing stage's name ("cuInit")
  std::optional<long long> code;      // its CUresult / cudnnStatus_t
  std::string libcuda_path;           // the libcuda.so.1 the probe loaded (empty: none)
  std::string detail;                 // the failing stage's detail (dlerror text)
  std::optional<int> driver_version;  // cuDriverGetVersion: 13000 for CUDA 13.0
  std::optional<int> runtime_major;   // the environment's cudart major
  std::optional<int> signal;
  std::string timeout_state, timeout_wchan;
};

struct DiagnosisEntry {
  std::string cause;    // a possible cause
  std::string check;    // what was looked at to tell it apart
  std::string result;   // what that showed
  bool likely = false;  // the check points at this cause
};

[[nodiscard]] std::vector<DiagnosisEntry> diagnose(const FailureFacts& failure, const HostFacts& host);
// The GPUs the kernel driver has that the probe did not see (`seen`: the PCI bus ids it reported),
// each with why: left out of CUDA_VISIBLE_DEVICES, its /dev/nvidiaN absent (a container given
// only some devices), or denied (a cgroup's device rule). Empty when every GPU was seen.
[[nodiscard]] std::vector<DiagnosisEntry> hidden_devices(const HostFacts& host, const std::vector<std::string>& seen);
// Whether the driver is older than the environment's runtime (the driver API has no code for it).
[[nodiscard]] DiagnosisEntry driver_age(const FailureFacts& failure);

// "580.159.04" from a libcuda file name (libcuda.so.580.159.04); empty when it carries none.
[[nodiscard]] std::string libcuda_file_version(const std::string& path);
// 13000 -> "13.0".
[[nodiscard]] std::string cuda_version_text(int version);

}  // namespace cudafix::installer::probe
