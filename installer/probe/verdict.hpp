// The verdict on one probe run, taken from its stage records and never from its exit status:
// a library's own timer or atexit handler can kill a probe whose every call succeeded, and a
// probe killed mid-call can leave a clean-looking status.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "installer/probe/protocol.hpp"
#include "installer/probe/runner.hpp"

namespace cudafix::installer::probe {

enum class Outcome { ok, error, crash, timeout, no_driver };
[[nodiscard]] std::string_view to_string(Outcome outcome);

struct Verdict {
  Outcome outcome = Outcome::ok;
  std::optional<std::size_t> stage;  // index into ProbeRecords::stages: where it failed
  std::string message;               // one sentence for people
  std::vector<std::string> warnings;
};

// The name of a stage's code: CUresult for driver stages, cudnnStatus_t for cuDNN stages.
[[nodiscard]] std::optional<std::string> code_name(const StageRecord& stage);
// "cuInit", "cudnnCreate on device 1".
[[nodiscard]] std::string stage_label(const StageRecord& stage);
[[nodiscard]] std::string signal_name(int signal);
// The first stage of device `ordinal` that failed or never returned, if one did.
[[nodiscard]] const StageRecord* failed_stage_of(const ProbeRecords& records, int ordinal);

[[nodiscard]] Verdict judge(const ProbeRecords& records, const ProbeRun& run);

}  // namespace cudafix::installer::probe
