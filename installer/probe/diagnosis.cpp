#include "installer/probe/diagnosis.hpp"

#include "resolver/base/text.hpp"
#include "resolver/plan/plan.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <regex>

namespace cudafix::installer::probe {
namespace {

std::string read_text_or_empty(const std::string& path) { return resolver::try_read_file(path).value_or(""); }

std::vector<std::string> dir_names(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) out.emplace_back(e->d_name);
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool is_gpu_node(const std::string& name) {
  return name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
         std::all_of(name.begin() + 6, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int open_errno(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return errno;
  ::close(fd);
  return 0;
}

bool process_running(const std::string& comm) {
  for (const auto& pid : dir_names("/proc")) {
    if (pid.empty() || pid[0] < '0' || pid[0] > '9') continue;
    std::string c = read_text_or_empty("/proc/" + pid + "/comm");
    if (!c.empty() && c.back() == '\n') c.pop_back();
    if (c == comm) return true;
  }
  return false;
}

std::string errno_text(int e) {
  if (e == 0) return "opens";
  return fmt::format("{} ({})",
                     e == EPERM    ? "EPERM"
                     : e == EACCES ? "EACCES"
                     : e == ENOENT ? "ENOENT"
                                   : "error",
                     std::strerror(e));
}

bool denied(int e) { return e == EPERM || e == EACCES; }

std::string nodes_text(const HostFacts& h) {
  if (h.device_nodes.empty()) return "no /dev/nvidia* device files";
  std::string out;
  for (const auto& n : h.device_nodes)
    out += fmt::format("{}{}: {}", out.empty() ? "" : "; ", n.path, errno_text(n.open_errno));
  return out;
}

bool has_gpu_node(const HostFacts& h) {
  return std::any_of(h.device_nodes.begin(), h.device_nodes.end(), [](const DeviceNode& n) {
    return is_gpu_node(n.path.substr(n.path.rfind('/') + 1)) && n.open_errno != ENOENT;
  });
}

// Whether a CUDA_VISIBLE_DEVICES entry names one of the driver's GPUs: an index below their
// count, or a prefix of one's UUID.
bool names_a_driver_gpu(const HostFacts& h, const std::string& entry) {
  if (!entry.empty() && std::all_of(entry.begin(), entry.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::stoul(entry) < h.driver_gpus.size();
  return std::any_of(h.driver_gpus.begin(), h.driver_gpus.end(), [&](const DriverGpu& g) {
    return !g.uuid.empty() && g.uuid.rfind(entry.substr(0, entry.find('/')), 0) == 0;
  });
}

std::string driver_gpus_text(const HostFacts& h) {
  std::string out;
  for (std::size_t i = 0; i < h.driver_gpus.size(); ++i)
    out += fmt::format("{}{}: {}{}", i ? "; " : "", i, h.driver_gpus[i].pci,
                       h.driver_gpus[i].uuid.empty() ? "" : " " + h.driver_gpus[i].uuid);
  return out;
}

DiagnosisEntry visible_devices(const HostFacts& h) {
  DiagnosisEntry e{"CUDA_VISIBLE_DEVICES hides every GPU", "CUDA_VISIBLE_DEVICES", "", false};
  if (!h.cuda_visible_devices) {
    e.result = "not set: every GPU is visible";
    return e;
  }
  const std::string& v = *h.cuda_visible_devices;
  if (v.empty()) {
    e.result = "set and empty: no GPU is visible";
    e.likely = true;
    return e;
  }
  // CUDA reads the list up to its first entry that names no device: an index, GPU-<uuid> or
  // MIG-<uuid> (a uuid may be given by a unique prefix).
  static const std::regex valid(R"(\s*([0-9]+|(GPU|MIG)-[0-9a-fA-F-]+(/[0-9]+/[0-9]+)?)\s*)");
  std::string first = v.substr(0, v.find(','));
  if (!std::regex_match(first, valid)) {
    e.result = fmt::format("\"{}\": its first entry \"{}\" names no device, and CUDA stops reading there", v, first);
    e.likely = true;
  } else if (!h.driver_gpus.empty() && !names_a_driver_gpu(h, std::string(resolver::trim(first)))) {
    e.result = fmt::format("\"{}\": its first entry \"{}\" is none of the {} GPU{} the driver has ({})", v,
                           resolver::trim(first), h.driver_gpus.size(), h.driver_gpus.size() == 1 ? "" : "s",
                           driver_gpus_text(h));
    e.likely = true;
  } else {
    e.result =
        fmt::format("\"{}\": names at least one device (an index or uuid the driver does not have also hides it)", v);
  }
  return e;
}

DiagnosisEntry device_nodes_missing(const HostFacts& h) {
  DiagnosisEntry e{
      "the GPU device files were not passed into this container (docker --gpus, the NVIDIA container toolkit)",
      "/dev/nvidiactl and /dev/nvidiaN", nodes_text(h), !has_gpu_node(h)};
  return e;
}

DiagnosisEntry access_denied(const HostFacts& h) {
  DiagnosisEntry e{"access to the GPU device files is denied (a device cgroup, or their permissions)",
                   "open(O_RDWR) of each /dev/nvidia*", nodes_text(h), false};
  e.likely = std::any_of(h.device_nodes.begin(), h.device_nodes.end(),
                         [](const DeviceNode& n) { return denied(n.open_errno); });
  return e;
}

DiagnosisEntry kernel_module(const HostFacts& h) {
  DiagnosisEntry e{"the NVIDIA kernel module is not loaded", "/proc/driver/nvidia/version", "", false};
  if (h.kernel_module_version) {
    e.result = fmt::format("kernel module {} is loaded", *h.kernel_module_version);
  } else {
    e.result = "absent: no NVIDIA kernel module in this kernel (or /proc is not the host's)";
    e.likely = true;
  }
  return e;
}

DiagnosisEntry stub_library(const FailureFacts& f, const HostFacts& h) {
  DiagnosisEntry e{"the CUDA toolkit's stub libcuda (meant for linking only) was loaded instead of the driver's",
                   "the libcuda.so.1 the probe loaded, and stubs/ folders on LD_LIBRARY_PATH", "", false};
  std::vector<std::string> stub_dirs;
  for (const auto& d : h.ld_library_path)
    if (d.find("stubs") != std::string::npos) stub_dirs.push_back(d);
  const bool loaded_stub = f.libcuda_path.find("/stubs/") != std::string::npos;
  e.result = fmt::format("loaded {}{}", f.libcuda_path.empty() ? "nothing" : f.libcuda_path,
                         loaded_stub ? ", in a stubs/ folder" : "");
  if (!stub_dirs.empty()) e.result += fmt::format("; LD_LIBRARY_PATH holds {}", fmt::join(stub_dirs, ", "));
  e.likely = loaded_stub || !stub_dirs.empty() || f.code == 34;
  if (e.likely)
    e.result += "; take the stub (and any link to it) off the library path, so the driver's libcuda.so.1 is found";
  return e;
}

DiagnosisEntry uvm(const HostFacts& h) {
  const auto node = std::find_if(h.device_nodes.begin(), h.device_nodes.end(),
                                 [](const DeviceNode& n) { return n.path == "/dev/nvidia-uvm"; });
  const bool node_ok = node != h.device_nodes.end() && node->open_errno == 0;
  DiagnosisEntry e{"the nvidia_uvm kernel module is not loaded or /dev/nvidia-uvm is missing (CUDA needs it)",
                   "nvidia_uvm in /proc/modules, and /dev/nvidia-uvm",
                   fmt::format("nvidia_uvm {}; /dev/nvidia-uvm: {}", h.uvm_module_loaded ? "loaded" : "not loaded",
                               node == h.device_nodes.end() ? "absent" : errno_text(node->open_errno)),
                   !h.uvm_module_loaded || !node_ok};
  return e;
}

DiagnosisEntry fabric_manager(const HostFacts& h) {
  return {"an NVSwitch system whose fabric manager is not running (the GPUs stay uninitialised)",
          "NVSwitch devices, and an nv-fabricmanager process",
          fmt::format("NVSwitch {}; nv-fabricmanager {}", h.nvswitch_present ? "present" : "absent",
                      h.fabric_manager_running ? "running" : "not running"),
          h.nvswitch_present && !h.fabric_manager_running};
}

DiagnosisEntry driver_mismatch(const FailureFacts& f, const HostFacts& h) {
  const std::string lib = libcuda_file_version(f.libcuda_path);
  DiagnosisEntry e{
      "libcuda.so.1 comes from another driver than the kernel module (a forward-compatibility "
      "compat/ libcuda, or a container's libcuda from another driver release)",
      "libcuda's version (its file name) against /proc/driver/nvidia/version", "", false};
  e.result =
      fmt::format("libcuda {} ({}), kernel module {}", lib.empty() ? "of unknown version" : lib,
                  f.libcuda_path.empty() ? "not loaded" : f.libcuda_path, h.kernel_module_version.value_or("unknown"));
  e.likely = !lib.empty() && h.kernel_module_version && lib != *h.kernel_module_version;
  if (f.libcuda_path.find("/compat/") != std::string::npos) e.result += "; it is a compat/ library";
  return e;
}

DiagnosisEntry libcuda_not_found(const FailureFacts& f, const HostFacts& h) {
  return {
      "no libcuda.so.1 on the loader's path: no NVIDIA driver here, or a container started without the NVIDIA "
      "runtime (which mounts the driver's libraries)",
      "dlopen(\"libcuda.so.1\") with LD_LIBRARY_PATH and the ld.so.cache",
      fmt::format("{}; LD_LIBRARY_PATH {}", f.detail,
                  h.ld_library_path.empty() ? "empty" : fmt::format("{}", fmt::join(h.ld_library_path, ":"))),
      true};
}

DiagnosisEntry stuck(const FailureFacts& f) {
  DiagnosisEntry e{fmt::format("{} did not return: a GPU or driver in a bad state (Xid errors in the kernel log), or "
                               "a call waiting on another process (persistence daemon, MIG reconfiguration)",
                               f.stage),
                   "the stage the deadline hit, and the probe's state when killed", "", true};
  e.result = f.timeout_state.empty()
                 ? fmt::format("timed out in {}; SIGKILL ended it", f.stage)
                 : fmt::format("timed out in {}; unkillable after SIGKILL: state {}, wchan {}", f.stage,
                               f.timeout_state, f.timeout_wchan.empty() ? "?" : f.timeout_wchan);
  return e;
}

}  // namespace

std::string libcuda_file_version(const std::string& path) {
  if (!resolver::base_name(path).starts_with("libcuda.so.")) return "";
  return resolver::version_from_file_name(path).value_or("");
}

DiagnosisEntry driver_age(const FailureFacts& f) {
  DiagnosisEntry e{"the driver is older than the environment's CUDA runtime",
                   "cuDriverGetVersion against the major of the environment's libcudart", "", false};
  if (!f.driver_version || !f.runtime_major) {
    e.result = fmt::format("driver {}, runtime {}", f.driver_version ? cuda_version_text(*f.driver_version) : "unknown",
                           f.runtime_major ? fmt::format("CUDA {}", *f.runtime_major) : "unknown");
    return e;
  }
  e.likely = *f.driver_version / 1000 < *f.runtime_major;
  e.result = fmt::format("the driver supports CUDA {}; the environment's runtime is CUDA {}{}",
                         cuda_version_text(*f.driver_version), *f.runtime_major,
                         e.likely ? ": upgrade the driver, or install the environment for an older CUDA" : "");
  return e;
}

std::vector<DiagnosisEntry> hidden_devices(const HostFacts& h, const std::vector<std::string>& seen) {
  std::vector<DiagnosisEntry> out;
  for (const auto& gpu : h.driver_gpus) {
    if (std::find(seen.begin(), seen.end(), gpu.pci) != seen.end()) continue;
    const std::string node = gpu.minor >= 0 ? fmt::format("/dev/nvidia{}", gpu.minor) : "";
    const auto it =
        std::find_if(h.device_nodes.begin(), h.device_nodes.end(), [&](const DeviceNode& n) { return n.path == node; });
    const int err = it == h.device_nodes.end() ? ENOENT : it->open_errno;
    DiagnosisEntry e;
    e.likely = true;
    e.check = fmt::format("/proc/driver/nvidia/gpus/{}, {} and CUDA_VISIBLE_DEVICES", gpu.pci,
                          node.empty() ? "its device file" : node);
    if (h.cuda_visible_devices) {
      e.cause = fmt::format("GPU {} is left out of CUDA_VISIBLE_DEVICES", gpu.pci);
      e.result = fmt::format("the driver has it; CUDA_VISIBLE_DEVICES={}", *h.cuda_visible_devices);
    } else if (err == ENOENT) {
      e.cause = fmt::format("GPU {} has no device file here (a container given only some GPUs)", gpu.pci);
      e.result = fmt::format("the driver has it; {}: absent", node.empty() ? "its minor is unknown" : node);
    } else if (err == EPERM || err == EACCES) {
      e.cause = fmt::format("GPU {} is hidden by a cgroup's device rule", gpu.pci);
      e.result = fmt::format("the driver has it; open({}) failed: {}", node, std::strerror(err));
    } else {
      e.cause = fmt::format("GPU {} was not seen by the probe", gpu.pci);
      e.result =
          fmt::format("the driver has it; {} opens{}", node, err ? fmt::format(" with {}", std::strerror(err)) : "");
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::string cuda_version_text(int version) { return fmt::format("{}.{}", version / 1000, (version % 1000) / 10); }

HostFacts gather_host_facts(const std::vector<std::string>& ld_library_path) {
  HostFacts h;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) h.cuda_visible_devices = v;
  for (const auto& name : dir_names("/dev")) {
    if (name == "nvidiactl" || name == "nvidia-uvm" || is_gpu_node(name)) {
      const std::string path = "/dev/" + name;
      h.device_nodes.push_back({path, open_errno(path)});
    }
    if (name.rfind("nvidia-nvswitch", 0) == 0) h.nvswitch_present = true;
  }
  if (std::none_of(h.device_nodes.begin(), h.device_nodes.end(),
                   [](const DeviceNode& n) { return n.path == "/dev/nvidiactl"; }))
    h.device_nodes.insert(h.device_nodes.begin(), {"/dev/nvidiactl", ENOENT});
  static const std::regex module_re(R"(Kernel Module\s+(?:for\s+\S+\s+)?([0-9]+\.[0-9]+(\.[0-9]+)?))");
  std::smatch m;
  const std::string version = read_text_or_empty("/proc/driver/nvidia/version");
  if (std::regex_search(version, m, module_re)) h.kernel_module_version = m[1].str();
  const std::string modules = read_text_or_empty("/proc/modules");
  h.uvm_module_loaded = modules.find("nvidia_uvm ") != std::string::npos;
  if (!dir_names("/proc/driver/nvidia-nvswitch").empty()) h.nvswitch_present = true;
  h.fabric_manager_running = h.nvswitch_present && process_running("nv-fabricmanager");
  static const std::regex minor_re(R"(Device Minor:\s*([0-9]+))");
  static const std::regex uuid_re(R"(GPU UUID:\s*(GPU-[0-9a-fA-F-]+))");
  for (const auto& pci : dir_names("/proc/driver/nvidia/gpus")) {
    if (pci.starts_with(".")) continue;
    DriverGpu gpu{pci, -1, ""};
    const std::string info = read_text_or_empty("/proc/driver/nvidia/gpus/" + pci + "/information");
    if (std::regex_search(info, m, minor_re)) gpu.minor = std::stoi(m[1].str());
    if (std::regex_search(info, m, uuid_re)) gpu.uuid = m[1].str();
    h.driver_gpus.push_back(std::move(gpu));
  }
  h.ld_library_path = ld_library_path;
  return h;
}

std::vector<DiagnosisEntry> diagnose(const FailureFacts& f, const HostFacts& h) {
  std::vector<DiagnosisEntry> out;
  switch (f.outcome) {
    case Outcome::ok:
      return out;
    case Outcome::no_driver:
      return {libcuda_not_found(f, h), kernel_module(h), device_nodes_missing(h)};
    case Outcome::timeout:
      return {stuck(f), kernel_module(h), driver_mismatch(f, h)};
    case Outcome::crash:
      out.push_back({fmt::format("a library crashed inside {}", f.stage), "how the probe ended",
                     f.signal ? fmt::format("{} during {}", signal_name(*f.signal), f.stage) : "exited during the call",
                     true});
      out.push_back(driver_mismatch(f, h));
      return out;
    case Outcome::error:
      break;
  }
  const long long code = f.code.value_or(-1);
  const bool cudnn = f.stage.rfind("cudnn", 0) == 0;
  if (cudnn) {
    out.push_back(driver_age(f));
    out.push_back(driver_mismatch(f, h));
    return out;
  }
  switch (code) {
    case 3:  // NOT_INITIALIZED
      return {kernel_module(h), device_nodes_missing(h), access_denied(h)};
    case 34:  // STUB_LIBRARY
      return {stub_library(f, h)};
    case 100:  // NO_DEVICE
      return {visible_devices(h), device_nodes_missing(h), access_denied(h), kernel_module(h)};
    case 999:  // UNKNOWN
      return {uvm(h), access_denied(h), kernel_module(h)};
    case 802:  // SYSTEM_NOT_READY
      return {fabric_manager(h), kernel_module(h)};
    case 803:  // SYSTEM_DRIVER_MISMATCH
    case 804:  // COMPAT_NOT_SUPPORTED_ON_DEVICE
      return {driver_mismatch(f, h)};
    case 35:  // INSUFFICIENT_DRIVER
      return {driver_age(f), driver_mismatch(f, h)};
    default:
      return {kernel_module(h), driver_mismatch(f, h), access_denied(h)};
  }
}

}  // namespace cudafix::installer::probe
