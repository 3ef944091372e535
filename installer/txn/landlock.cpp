#include "installer/txn/landlock.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "resolver/base/parallel.hpp"

namespace cudafix::installer::txn {
namespace {

int landlock_abi() {
  const long v = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return v < 0 ? 0 : static_cast<int>(v);
}

constexpr std::uint64_t truncate_right() {
#ifdef LANDLOCK_ACCESS_FS_TRUNCATE
  return LANDLOCK_ACCESS_FS_TRUNCATE;
#else
  return 0;
#endif
}

std::uint64_t write_rights(int abi) {
  std::uint64_t rights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                         LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
                         LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                         LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
#ifdef LANDLOCK_ACCESS_FS_REFER
  if (abi >= 2) rights |= LANDLOCK_ACCESS_FS_REFER;
#endif
#ifdef LANDLOCK_ACCESS_FS_TRUNCATE
  if (abi >= 3) rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
#endif
  return rights;
}

// Allows `rights` beneath `folder`; false when it cannot be opened (it is skipped).
bool allow(int ruleset, const std::string& folder, std::uint64_t rights) {
  const int fd = ::open(folder.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return false;
  landlock_path_beneath_attr rule{};
  rule.allowed_access = rights;
  rule.parent_fd = fd;
  const long rc = ::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
  ::close(fd);
  return rc == 0;
}

}  // namespace

Fence fence_writes_beneath(const std::vector<std::string>& folders) {
  static Fence done;
  if (done.applied) return done;
  Fence f;
  f.abi = landlock_abi();
  if (const unsigned running = resolver::pool_threads_started(); running > 0 && f.abi > 0) {
    // The ruleset would fence this thread and not those, which write too (the staging's
    // inflation): a fence with a hole is not applied. Only a command run inside another (the
    // demo's walk) gets here.
    f.why = fmt::format("{} worker {} running before it, which Landlock would not fence", running,
                        running == 1 ? "thread was" : "threads were");
    return f;
  }
  if (f.abi <= 0) {
    f.why = errno == EOPNOTSUPP ? "Landlock is built into this kernel but switched off (lsm= on its command line)"
                                : "this kernel has no Landlock (Linux 5.13 or later has it)";
    return f;
  }
  const std::uint64_t rights = write_rights(f.abi);
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = rights;
  const int ruleset = static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0));
  if (ruleset < 0) {
    f.why = fmt::format("landlock_create_ruleset: {}", std::strerror(errno));
    return f;
  }
  for (const auto& folder : folders) (void)allow(ruleset, folder, rights);
  // The devices that are opened for writing: the GPU driver's nodes (cuInit opens /dev/nvidiactl,
  // /dev/nvidia0... read-write) and /dev/null for spawned children; each by name, so that a
  // file under /dev/shm (a tmpfs anyone can write) stays outside the fence.
  for (const char* device :
       {"/dev/null", "/dev/tty", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"})
    (void)allow(ruleset, device, LANDLOCK_ACCESS_FS_WRITE_FILE);
  for (int i = 0; i < 64; ++i) (void)allow(ruleset, fmt::format("/dev/nvidia{}", i), LANDLOCK_ACCESS_FS_WRITE_FILE);
  (void)allow(ruleset, "/dev/nvidia-caps", LANDLOCK_ACCESS_FS_WRITE_FILE);
  // cuInit writes (fopen "w": write and truncate) a file of its own process under /proc/<pid>,
  // the probe's, which does not exist yet: without this it fails with 304
  // (CUDA_ERROR_OPERATING_SYSTEM), as the GPU machine showed. /proc holds no file of an environment.
  (void)allow(ruleset, "/proc", rights & (LANDLOCK_ACCESS_FS_WRITE_FILE | truncate_right()));
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) {
    f.why = fmt::format("landlock_restrict_self: {}", std::strerror(errno));
    ::close(ruleset);
    return f;
  }
  ::close(ruleset);
  f.applied = true;
  done = f;
  return f;
}

}  // namespace cudafix::installer::txn
