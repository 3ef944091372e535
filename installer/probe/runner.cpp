#include "installer/probe/runner.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"

extern char** environ;

namespace cudafix::installer::probe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t k_stderr_keep = 8192;
constexpr std::chrono::milliseconds k_pipe_grace{500};

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  [[nodiscard]] int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

struct Pipe {
  Fd read, write;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw resolver::Error(fmt::format("cannot create a pipe: {}", std::strerror(errno)));
  return {Fd(fds[0]), Fd(fds[1])};
}

// Spawn attributes: its own process group (so the whole group can be killed), every signal at
// its default action and none blocked, whatever this process inherited: an ignored SIGALRM or a
// blocked SIGTERM must not change what the probe measures.
class SpawnAttributes {
 public:
  SpawnAttributes() {
    posix_spawnattr_init(&attr_);
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attr_, &all);
    posix_spawnattr_setsigmask(&attr_, &none);
    posix_spawnattr_setpgroup(&attr_, 0);
    posix_spawnattr_setflags(&attr_, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  }
  ~SpawnAttributes() { posix_spawnattr_destroy(&attr_); }
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;
  posix_spawnattr_t* get() { return &attr_; }

 private:
  posix_spawnattr_t attr_;
};

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

pid_t spawn(const ProbeCommand& c, int out_fd, int err_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  SpawnAttributes attr;
  std::vector<std::string> argv_s{c.program};
  argv_s.insert(argv_s.end(), c.args.begin(), c.args.end());
  auto argv = c_strings(argv_s);
  auto envp = c_strings(c.env);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, c.program.c_str(), &actions, attr.get(), argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw resolver::Error(fmt::format("cannot start {}: {}", c.program, std::strerror(rc)));
  return pid;
}

// Reads what is there; false at end of file.
bool drain(int fd, std::string& into) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      into.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
}

void keep_tail(std::string& s, std::size_t keep) {
  if (s.size() > 2 * keep) s.erase(0, s.size() - keep);
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// The state letter from /proc/PID/stat (after the parenthesised command name).
std::string process_state(pid_t pid) {
  const std::string stat = resolver::try_read_file(fmt::format("/proc/{}/stat", pid)).value_or("");
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return "?";
  return stat.substr(close + 2, 1);
}

void record_status(int status, ProbeRun& run) {
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) run.signal = WTERMSIG(status);
}

// Waits for the child to exit, until `deadline`; true when it was reaped.
bool reap_until(pid_t pid, int pidfd, Clock::time_point deadline, ProbeRun& run) {
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      record_status(status, run);
      return true;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left));
    } else {
      ::poll(nullptr, 0, static_cast<int>(std::min<long long>(left, 10)));
    }
  }
}

}  // namespace

std::vector<std::string> environment_with_library_path(const std::vector<std::string>& ld_library_path) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "LD_LIBRARY_PATH=", 16) != 0) env.emplace_back(*e);
  std::string joined;
  for (const auto& d : ld_library_path) joined += (joined.empty() ? "" : ":") + d;
  if (!joined.empty()) env.push_back("LD_LIBRARY_PATH=" + joined);
  return env;
}

ProbeRun run_probe(const ProbeCommand& c) {
  Pipe out = make_pipe();
  Pipe err = make_pipe();
  const auto start = Clock::now();
  const pid_t pid = spawn(c, out.write.get(), err.write.get());
  out.write.reset();
  err.write.reset();
  Fd pidfd(pidfd_open(pid));
  for (int fd : {out.read.get(), err.read.get()}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);

  ProbeRun run;
  const auto deadline = start + c.timeout;
  bool out_open = true, err_open = true, exited = false;
  Clock::time_point exit_time;
  while (out_open || err_open || !exited) {
    // The probe is gone but something it started still holds the pipes: stop reading soon.
    const auto until = exited ? std::min(deadline, exit_time + k_pipe_grace) : deadline;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) break;
    // Without a pidfd (kernels before 5.3) the exit is noticed by polling every 10 ms.
    pollfd fds[3] = {{out_open ? out.read.get() : -1, POLLIN, 0},
                     {err_open ? err.read.get() : -1, POLLIN, 0},
                     {exited ? -1 : pidfd.get(), POLLIN, 0}};
    const int timeout =
        pidfd.get() < 0 && !exited ? static_cast<int>(std::min<long long>(left, 10)) : static_cast<int>(left);
    if (::poll(fds, 3, timeout) < 0 && errno != EINTR)
      throw resolver::Error(fmt::format("waiting for the probe: {}", std::strerror(errno)));
    if (out_open && fds[0].revents) out_open = drain(out.read.get(), run.output);
    if (err_open && fds[1].revents) {
      err_open = drain(err.read.get(), run.errors);
      keep_tail(run.errors, k_stderr_keep);
    }
    if (!exited && (fds[2].revents || pidfd.get() < 0)) {
      exited = reap_until(pid, -1, Clock::now(), run);
      exit_time = Clock::now();
    }
  }
  if (!exited) {
    run.timed_out = true;
    ::kill(-pid, SIGKILL);
    run.reaped = reap_until(pid, pidfd.get(), Clock::now() + c.reap_bound, run);
    if (!run.reaped) {
      run.state = process_state(pid);
      run.wchan = resolver::try_read_file(fmt::format("/proc/{}/wchan", pid)).value_or("");
    }
    drain(out.read.get(), run.output);
    drain(err.read.get(), run.errors);
  }
  if (run.reaped) ::kill(-pid, SIGKILL);  // whatever the probe left running in its group
  if (run.errors.size() > k_stderr_keep) run.errors.erase(0, run.errors.size() - k_stderr_keep);
  run.ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return run;
}

std::string installed_probe() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw resolver::Error(fmt::format("cannot find cudafix's own path: {}", ec.message()));
  const std::string probe = (self.parent_path() / "cudafix-probe").string();
  if (::access(probe.c_str(), X_OK) != 0)
    throw resolver::Error(
        fmt::format("the probe helper {} is missing or not executable; it is installed beside cudafix", probe));
  return probe;
}

}  // namespace cudafix::installer::probe
