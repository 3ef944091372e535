#include "cli/held_command.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "resolver/base/diagnostic.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;

HeldCommand::HeldCommand(const std::vector<std::string>& argv) {
  int go[2], failed[2];
  if (::pipe2(go, O_CLOEXEC) != 0 || ::pipe2(failed, O_CLOEXEC) != 0)
    throw r::Error(fmt::format("pipe: {}", std::strerror(errno)));
  std::cout.flush();
  std::cerr.flush();
  // What exec needs, made before the fork: the child only reads, calls async-signal-safe
  // functions and execs.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) throw r::Error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid_ == 0) {
    ::close(go[1]);
    ::close(failed[0]);
    char c = 0;
    ssize_t n;
    while ((n = ::read(go[0], &c, 1)) < 0 && errno == EINTR) {
    }
    if (n != 1 || c != 'g') ::_exit(0);  // guard refused, or died before the snapshot was taken
    ::execvp(args[0], args.data());
    const int e = errno;
    (void)!::write(failed[1], &e, sizeof e);
    ::_exit(e == ENOENT ? 127 : 126);
  }
  ::close(go[0]);
  ::close(failed[1]);
  go_ = go[1];
  failed_ = failed[0];
}

HeldCommand::~HeldCommand() {
  abandon();
  if (failed_ >= 0) ::close(failed_);
}

int HeldCommand::go() {
  const char c = 'g';
  (void)!::write(go_, &c, 1);
  ::close(go_);
  go_ = -1;
  int e = 0;
  ssize_t n;
  while ((n = ::read(failed_, &e, sizeof e)) < 0 && errno == EINTR) {
  }
  return n == sizeof e ? e : 0;
}

void HeldCommand::abandon() {
  if (go_ < 0) return;
  ::close(go_);
  go_ = -1;
  (void)wait();
}

int HeldCommand::wait() {
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

namespace {

volatile sig_atomic_t g_command_pid = 0;

void pass_on(int sig, siginfo_t* info, void*) {
  const bool from_a_process = info == nullptr || info->si_code <= 0;  // SI_USER, SI_QUEUE, SI_TKILL
  if (from_a_process && g_command_pid > 0) ::kill(static_cast<pid_t>(g_command_pid), sig);
}

}  // namespace

PassingSignalsOn::PassingSignalsOn(pid_t child) {
  g_command_pid = child;
  struct sigaction sa {};
  sa.sa_sigaction = pass_on;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (std::size_t i = 0; i < k_signals.size(); ++i) ::sigaction(k_signals[i], &sa, &old_[i]);
}

PassingSignalsOn::~PassingSignalsOn() {
  for (std::size_t i = 0; i < k_signals.size(); ++i) ::sigaction(k_signals[i], &old_[i], nullptr);
  g_command_pid = 0;
}

}  // namespace cudafix::cli
