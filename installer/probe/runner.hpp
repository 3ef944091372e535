// Runs cudafix-probe as a child and waits for it without any signal-based timer: a pipe and a
// pidfd under poll(2), against a deadline. Past the deadline the child's process group is
// SIGKILLed and reaped within a bound; a child stuck in the kernel (a driver call in state D)
// is reported with its state and wchan, and the caller still gets its answer.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace cudafix::installer::probe {

struct ProbeCommand {
  std::string program;            // cudafix-probe's path
  std::vector<std::string> args;  // after argv[0]
  std::vector<std::string> env;   // the child's whole environment, "NAME=value"
  std::chrono::milliseconds timeout{60000};
  std::chrono::milliseconds reap_bound{5000};  // after SIGKILL, how long to wait for the exit
};

struct ProbeRun {
  std::string output;      // the records (standard output)
  std::string errors;      // the last 8 KiB of standard error (what the libraries printed)
  bool timed_out = false;  // the deadline passed and the group was killed
  bool reaped = true;      // false: it did not die within reap_bound after SIGKILL
  std::optional<int> exit_code;
  std::optional<int> signal;  // the signal that ended it (SIGKILL after a timeout)
  std::string state;          // when not reaped: /proc/PID/stat state and wchan
  std::string wchan;
  double ms = 0;  // wall time from spawn to exit (or to giving up)
};

// Throws resolver::Error when the child cannot be started.
[[nodiscard]] ProbeRun run_probe(const ProbeCommand& command);

// cudafix-probe's path: installed beside the running binary (the bundle, the wheel and `make
// install` put it there). Throws resolver::Error when it is missing or not executable.
[[nodiscard]] std::string installed_probe();

// The program's own environment with LD_LIBRARY_PATH replaced by `ld_library_path` (removed when
// empty), so the probe's loader searches what the loader model assumed.
[[nodiscard]] std::vector<std::string> environment_with_library_path(const std::vector<std::string>& ld_library_path);

}  // namespace cudafix::installer::probe
