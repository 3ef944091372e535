// The records cudafix-probe writes to its standard output (a pipe), and their parser.
//
// One record per line, fields separated by tabs; inside a field, tab, newline and backslash are
// written as \t, \n and \\. The probe writes each record with one write(2) before and after each
// call, so whatever it managed to write survives a hang, a crash or a SIGKILL.
//
//   B  STAGE DEVICE                       a stage begins (DEVICE: ordinal, or - for none)
//   E  STAGE DEVICE OK NS CODE DETAIL     it ended: OK 1/0, NS its duration in nanoseconds,
//                                         CODE the CUresult / cudnnStatus_t or -, DETAIL text
//                                         (the path dlopen loaded, the version, dlerror())
//   D  ORDINAL NAME CC UUID PCI           a visible device (CC "9.0", UUID "GPU-..." or, for a MIG instance, "MIG-...";
//                                         PCI "0000:1b:00.0"; probes before it wrote no PCI field)
//   M  DEV INO PATH                       a file mapped into the probe (dl_iterate_phdr)
//   X  done|stopped                       the last record: every stage ran, or one failed
//
// Stages, in order: "dlopen libcuda.so.1", one "dlopen library" per --open (its DETAIL the path
// given, or dlerror(); a failed one does not stop the probe), cuDriverGetVersion, cuInit, cuDeviceGetCount, per
// device cuDeviceGet and cuDevicePrimaryCtxRetain, then "dlopen consumer" (or "dlopen cuDNN"),
// cudnnGetVersion, and per device cudnnCreate, cudnnConvolutionForward (where cuDNN and the
// driver have the calls for it) and cudnnDestroy; with --nccl and two or more
// devices up, "dlopen libnccl.so.2", ncclGetVersion, per device "nccl buffers", then
// ncclCommInitAll, ncclAllReduce and "nccl sum". A device whose stage failed has no later
// stages; the others go on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cudafix::installer::probe {

struct StageRecord {
  std::string stage;
  std::optional<int> device;
  bool ended = false;  // false: it began and never returned
  bool ok = false;
  double ms = 0;
  std::optional<long long> code;
  std::string detail;
};

struct DeviceRecord {
  int ordinal = 0;
  std::string name;
  std::string compute_capability;
  std::string uuid;
  std::string pci;  // "0000:1b:00.0"; empty from an older probe
};

struct MappedRecord {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  std::string path;
};

struct ProbeRecords {
  std::vector<StageRecord> stages;  // in the order they began
  std::vector<DeviceRecord> devices;
  std::vector<MappedRecord> mapped;
  bool finished = false;               // the X record arrived
  std::vector<std::string> malformed;  // lines that are no record (a torn last line, noise)
};

[[nodiscard]] ProbeRecords parse_probe_records(std::string_view text);

}  // namespace cudafix::installer::probe
