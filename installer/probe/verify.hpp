// `cudafix verify`: runs cudafix-probe against the environment and checks what the real loader
// and driver did against what the loader model predicted.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "installer/probe/diagnosis.hpp"
#include "installer/probe/protocol.hpp"
#include "installer/probe/runner.hpp"
#include "installer/probe/verdict.hpp"
#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"

namespace cudafix::installer::probe {

struct VerifyOptions {
  std::string probe;  // cudafix-probe's path
  std::chrono::milliseconds timeout{60000};
  std::optional<std::string> consumer;  // default: chosen from the objects that NEED cuDNN
  std::string cudnn_soname = "libcudnn.so.9";
  // --nccl: one all-reduce across every visible GPU with the libnccl.so.2 the model predicts.
  bool nccl = false;
  std::string nccl_soname = "libnccl.so.2";
};

// One file the probe had mapped, beside the model's prediction for its soname.
struct LoadedFile {
  std::string soname;
  std::optional<std::string> path;       // as the real loader named it; none: predicted, never loaded
  std::optional<std::string> predicted;  // none: the model has no prediction for it
  std::string basis;                     // "needed", "dlopen" (knowledge), or empty
  bool match = false;                    // same (dev, ino) as the prediction
  // A front end or member of a family that ships as one (cuDNN's dispatcher, graph library,
  // sub-libraries and engines: the knowledge's `same_dist` dlopen groups): what was loaded.
  bool family = false;
  std::string dist;     // loaded: the dist whose bytes the file holds ("nvidia-cudnn-cu13"); empty outside
  std::string version;  // that dist's version, or outside the release its real file name carries
  // Not in the process at the end, though its front end was: where the model resolves it, when
  // that is not its front end's own build ("/lib/.../libcudnn_engines_precompiled.so.9 (release
  // 9.14.0), outside the environment, by ld.so.cache"); the real loader may have mapped it and
  // let it go (a build that does not link against this front end).
  std::string model;
};

struct Check {
  std::string check;  // "loaded files", "cuDNN version", "driver version"
  bool ok = true;
  std::string detail;
  std::string expected, found;  // what was expected and what was found, for a failed check
};

struct SkippedStage {
  std::string stage;
  std::string why;
};

struct VerifyReport {
  Verdict verdict;  // the probe's; a failed check turns ok into error
  std::optional<std::string> failed_check;
  ProbeRecords records;
  ProbeRun run;
  std::vector<SkippedStage> skipped;
  std::optional<std::string> consumer;      // the cuDNN consumer dlopened
  std::optional<std::string> cudnn;         // no consumer: the libcudnn dlopened
  std::optional<std::string> libcuda;       // the libcuda.so.1 loaded, as the loader named it
  std::optional<std::string> libcuda_real;  // that file with every symlink resolved
  std::optional<int> driver_version;
  std::optional<long long> cudnn_version;
  std::optional<int> runtime_major;
  std::optional<std::string> nccl;             // --nccl: the libnccl.so.2 given to the probe
  std::optional<long long> nccl_version;       // ncclGetVersion()
  std::optional<std::string> visible_devices;  // CUDA_VISIBLE_DEVICES as the probe saw it
  std::vector<LoadedFile> loaded;
  std::vector<Check> checks;
  std::vector<DiagnosisEntry> diagnosis;

  // 0 ok, 1 failed, 3 no driver (docs/cli.md).
  [[nodiscard]] int exit_code() const;
};

[[nodiscard]] VerifyReport verify_environment(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                              const VerifyOptions& options);

// The driver check: cuDriverGetVersion against the runtime's major, and the kernel module's
// release against the knowledge's minimum driver for that major. Needs driver_version and
// runtime_major.
[[nodiscard]] Check driver_check(const VerifyReport& report, const resolver::Knowledge& knowledge,
                                 const HostFacts& host);

// The probe's process as the loader model sees it: the probe, libcuda.so.1 dlopened by it; the
// callers then load what the probe dlopens, in the same order.
struct Prediction {
  std::unique_ptr<resolver::LoaderModel> model;
  resolver::Process process;
};
[[nodiscard]] Prediction probe_process(const resolver::Environment& env, const std::string& probe);

// Each file the probe had mapped beside the model's prediction for its soname (dlopen groups'
// members resolved from their loader as they are met, and loaded into `p`). `everything`: the
// objects the model put in the process must all have been mapped (the consumer was loaded).
[[nodiscard]] std::vector<LoadedFile> compare_loaded(const ProbeRecords& records, Prediction& p,
                                                     const resolver::Knowledge& knowledge, bool everything);

// The object whose dlopen makes the real loader resolve `soname` (cuDNN) as the environment's
// code does: a library (not an extension module, which would need the interpreter's symbols),
// not one beside a provider of it, preferring libraries without "python" in their name.
[[nodiscard]] std::optional<std::string> cudnn_consumer(const resolver::Environment& env, const std::string& soname);

// Fills `family`, `dist` and `version` of each loaded file, and adds the members of a mapped
// front end's family that are not in the process and that the model resolves to another build.
void describe_family(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                     std::vector<LoadedFile>& loaded);

// "torch/lib/libx.so (torch 2.11.0)" inside the environment; outside, the path and the version
// its real file name carries ("/usr/lib/x86_64-linux-gnu/libcudnn.so.9 (libcudnn.so.9.14.0)").
[[nodiscard]] std::string describe_file(const resolver::Environment& env, const std::string& path);

// The cuDNN check: cudnnGetVersion() of the libcudnn at `loaded` against the version the dist
// that installed it means (or, for one outside the environment, the consumer's pin).
[[nodiscard]] Check cudnn_version_check(const resolver::Environment& env, long long version, const std::string& loaded,
                                        const std::string& soname, const std::optional<std::string>& consumer);

// cuDNN's version number for a dist version: "9.19.0.56" -> 91900 (cuDNN 9 and later:
// major*10000 + minor*100 + patch; cuDNN 8: major*1000 + minor*100 + patch).
[[nodiscard]] std::optional<long long> cudnn_version_number(std::string_view dist_version);

}  // namespace cudafix::installer::probe
