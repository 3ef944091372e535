// Verification across the steps of one transaction (`fix`, `apply`, `install`): a baseline probe
// of the environment as it is, then after each step a probe of what is there, judged against the
// baseline by what the step changed.
//
// A step of a multi-step repair leaves the consumer's tree (torch's libtorch_cuda.so) incomplete
// until the last step, so loading the whole tree after step 1 fails for libraries steps 2 to 4
// bring. Instead every library of the consumer's tree that the environment holds, and what its
// loaders dlopen (cuDNN's sub-libraries), is dlopened on its own at the path the model resolves
// for the consumer (cudafix-probe --open). The model says beforehand which of them can open now
// (every library it NEEDs resolves) and which cannot yet (the first that resolves nowhere).
// Where the model says cuDNN opens, cudnnGetVersion is checked against its dist and cudnnCreate
// runs on every device.
//
// A step fails when it makes anything worse than the baseline (a stage that passed fails, a
// library that opened no longer opens or loads another file, a version that matched no longer
// does) or when what it wrote does not work (a library the model says opens does not, a file
// loaded is not the one predicted, a cuDNN it installed is the wrong release). A problem the
// baseline already had is excused while the step touched none of its files.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "installer/probe/verify.hpp"

namespace cudafix::installer::probe {

// The most libraries one probe opens: a torch environment's tree is about a hundred.
inline constexpr std::size_t k_max_opened = 1024;

// One library opened on its own.
struct LibraryOpen {
  std::string path;    // its realpath, as the model resolves it for the consumer
  std::string soname;  // empty: it has none
  // The model's verdict: none, it opens; else the first library of its tree that resolves
  // nowhere, "libnccl.so.2, NEEDed by torch/lib/libtorch_cuda.so,".
  std::optional<std::string> missing;
  std::string missing_soname;
  // What it lacks is a library an optional feature or transport needs only when used (MPI,
  // InfiniBand verbs: nvshmem's bootstrap plugins), or the driver's: not the library's fault.
  bool optional = false;
  bool opened = false;  // the probe's
  std::string error;    // dlerror(), where it did not open
};

// Something found wrong at one probe, as expected against found, with the files it is about.
struct Problem {
  std::string check;  // "opens nvidia/cudnn/lib/libcudnn.so.9", "cuDNN version", "cudnnCreate on device 0"
  std::string expected, found;
  std::vector<std::string> files;  // realpaths

  [[nodiscard]] std::string text() const;  // "CHECK: expected E, found F"
  [[nodiscard]] bool operator==(const Problem& o) const {
    return check == o.check && expected == o.expected && found == o.found;
  }
};

// One probe of the environment at one point of the transaction.
struct ProbePoint {
  ProbeRun run;
  ProbeRecords records;
  Verdict verdict;  // of the probe's driver and cuDNN stages (the library opens are judged apart)
  std::optional<std::string> failed_stage;  // the stage the verdict names (its index is into other records)
  std::optional<std::string> consumer;
  std::optional<std::string> consumer_missing;  // the model: the first library of its tree that resolves nowhere
  std::vector<LibraryOpen> libraries;           // in the order opened
  std::set<std::string> unresolved;             // sonames the tree NEEDs or dlopens that resolve nowhere
  std::map<std::string, std::string> resolved;  // soname -> the realpath the model resolves it to (inside or not)
  std::size_t left_out = 0;                     // libraries past k_max_opened, not opened
  std::optional<std::string> cudnn;             // the libcudnn the consumer resolves, whose stages ran
  std::optional<std::string> cudnn_skipped;     // why its stages did not run
  std::optional<long long> cudnn_version;
  std::vector<LoadedFile> loaded;  // every file mapped, beside the model's prediction
  std::vector<Problem> problems;   // everything found wrong, expected against found
  double seconds = 0;

  [[nodiscard]] bool no_driver() const { return verdict.outcome == Outcome::no_driver; }
  [[nodiscard]] std::size_t opened() const;
};

// Those of `paths` that a probe point opens as `extra`: the environment's shared libraries that
// resolver/elf read whole, in the order given.
[[nodiscard]] std::vector<std::string> libraries_among(const resolver::Environment& env,
                                                       const std::vector<std::string>& paths);

// Probes `env` as it is now. `options.consumer`: the consumer the baseline chose, so that every
// point of one transaction is measured from the same library; none: chosen as verify chooses.
// `extra`: what the transaction writes; those of them that are shared libraries of the
// environment are opened too, reached by the consumer's tree or not.
[[nodiscard]] ProbePoint probe_point(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                     const VerifyOptions& options, const std::vector<std::string>& extra = {});

struct StepJudgement {
  std::vector<Problem> failures;  // what makes the step fail
  std::vector<Problem> excused;   // what the baseline had already, in files the step did not touch
  [[nodiscard]] bool ok() const { return failures.empty(); }
};

// `now` against `baseline`; `changed`: the realpaths the step (for the last step, the whole
// transaction) wrote, moved aside or made. `last`: no step is left, so a library the transaction
// wrote that cannot open fails it too.
[[nodiscard]] StepJudgement judge_step(const resolver::Environment& env, const ProbePoint& baseline,
                                       const ProbePoint& now, const std::set<std::string>& changed, bool last);

}  // namespace cudafix::installer::probe
