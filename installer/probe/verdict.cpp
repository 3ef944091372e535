#include "installer/probe/verdict.hpp"

#include <fmt/format.h>

#include <csignal>
#include <cstring>

#include "installer/probe/cuda_errors.hpp"

namespace cudafix::installer::probe {

std::string_view to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::ok:
      return "ok";
    case Outcome::error:
      return "error";
    case Outcome::crash:
      return "crash";
    case Outcome::timeout:
      return "timeout";
    case Outcome::no_driver:
      return "no-driver";
  }
  return "error";
}

std::optional<std::string> code_name(const StageRecord& s) {
  if (!s.code) return std::nullopt;
  const int code = static_cast<int>(*s.code);
  const auto name = s.stage.rfind("cudnn", 0) == 0 ? cudnn_status_name(code)
                    : s.stage.rfind("nccl", 0) == 0
                        ? (s.stage == "nccl buffers" ? cu_result_name(code) : nccl_result_name(code))
                        : cu_result_name(code);
  return name ? std::optional<std::string>(*name) : std::nullopt;
}

std::string stage_label(const StageRecord& s) {
  return s.device ? fmt::format("{} on device {}", s.stage, *s.device) : s.stage;
}

const StageRecord* failed_stage_of(const ProbeRecords& records, int ordinal) {
  for (const auto& s : records.stages)
    if (s.device == ordinal && (!s.ended || !s.ok)) return &s;
  return nullptr;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

namespace {

std::string how_it_ended(const ProbeRun& run) {
  if (run.timed_out) return "was killed at the deadline";
  if (run.signal) return fmt::format("died of {}", signal_name(*run.signal));
  if (run.exit_code) return fmt::format("exited with status {}", *run.exit_code);
  return "ended";
}

Verdict failed_call(const ProbeRecords& records, std::size_t i) {
  const StageRecord& s = records.stages[i];
  Verdict v;
  v.stage = i;
  if (s.stage == "dlopen libcuda.so.1") {
    v.outcome = Outcome::no_driver;
    v.message = fmt::format("libcuda.so.1 cannot be loaded: {}", s.detail);
    return v;
  }
  v.outcome = Outcome::error;
  if (s.code) {
    const auto name = code_name(s);
    v.message = fmt::format("{} returned {} ({})", stage_label(s), *s.code, name.value_or("an unknown code"));
  } else {
    v.message = fmt::format("{} failed: {}", stage_label(s), s.detail);
  }
  return v;
}

// A stage that began and never returned: the probe hung or died inside it.
Verdict unfinished_call(const ProbeRun& run, std::size_t i, const StageRecord& s) {
  Verdict v;
  v.stage = i;
  if (run.timed_out) {
    v.outcome = Outcome::timeout;
    v.message = fmt::format("timeout at {}: no answer within the deadline", stage_label(s));
    if (!run.reaped)
      v.message += fmt::format("; unkillable (state {}, wchan {})", run.state, run.wchan.empty() ? "?" : run.wchan);
    return v;
  }
  v.outcome = Outcome::crash;
  v.message = fmt::format("crash at {}: the probe {} inside the call", stage_label(s), how_it_ended(run));
  return v;
}

}  // namespace

Verdict judge(const ProbeRecords& records, const ProbeRun& run) {
  for (std::size_t i = 0; i < records.stages.size(); ++i)
    if (records.stages[i].ended && !records.stages[i].ok) return failed_call(records, i);
  for (std::size_t i = 0; i < records.stages.size(); ++i)
    if (!records.stages[i].ended) return unfinished_call(run, i, records.stages[i]);

  Verdict v;
  const std::string last = records.stages.empty() ? "start-up" : stage_label(records.stages.back());
  if (!records.finished) {
    // Between two stages: after one call returned and before the next began.
    v.outcome = run.timed_out ? Outcome::timeout : Outcome::crash;
    v.message = fmt::format("{} after {}: the probe {} before reporting the next stage",
                            run.timed_out ? "timeout" : "crash", last, how_it_ended(run));
    if (!records.stages.empty()) v.stage = records.stages.size() - 1;
    return v;
  }
  v.outcome = Outcome::ok;
  v.message = "every stage succeeded";
  const bool clean_exit = run.exit_code && *run.exit_code == 0;
  if (!clean_exit)
    v.warnings.push_back(
        fmt::format("every stage succeeded, then the probe {} while exiting: a library's exit handler or its "
                    "own timer, not the calls (a wrapper judging by the exit status would have reported a failure)",
                    how_it_ended(run)));
  return v;
}

}  // namespace cudafix::installer::probe
