// guard's command (cli/guard_command.cpp): forked before guard fences itself or starts a thread,
// held on a pipe until the snapshot is taken, then let run or abandoned; and the signals another
// process sends guard while it runs passed on to it.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <array>
#include <string>
#include <vector>

namespace cudafix::cli {

// The command's process, forked and waiting for go() or abandon().
class HeldCommand {
 public:
  explicit HeldCommand(const std::vector<std::string>& argv);
  ~HeldCommand();
  HeldCommand(const HeldCommand&) = delete;
  HeldCommand& operator=(const HeldCommand&) = delete;

  // Lets the command run; the errno of a failed exec, else 0.
  int go();
  // The command never runs: its process ends without exec and is reaped.
  void abandon();
  // Its exit code as a shell gives it: the status, or 128 + the signal that ended it.
  int wait();
  [[nodiscard]] pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int go_ = -1, failed_ = -1;
};

// Signals that reach guard while the command runs. One the terminal sends (SIGINT from Ctrl-C)
// reaches the command itself, which is in guard's process group, as it would without guard;
// guard stays to judge what it left. One another process sends to guard (kill PID) is passed on.
class PassingSignalsOn {
 public:
  explicit PassingSignalsOn(pid_t child);
  ~PassingSignalsOn();
  PassingSignalsOn(const PassingSignalsOn&) = delete;
  PassingSignalsOn& operator=(const PassingSignalsOn&) = delete;

 private:
  static constexpr std::array<int, 4> k_signals{SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  std::array<struct sigaction, 4> old_{};
};

}  // namespace cudafix::cli
