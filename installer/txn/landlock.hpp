// The kernel's own fence around a command that changes an environment: a Landlock ruleset
// (Linux 5.13+) that lets this process, its threads started after it and every child write,
// make, remove, rename or link only beneath the folders given (the environment's root,
// cudafix's cache) and open devices under /dev (the GPU driver's nodes, /dev/null), so that a
// bug cudafix's own checks miss still cannot change a file outside. Reading is not restricted.
//
// The rights handled are those of the kernel's ABI that the build's <linux/landlock.h> names:
// write, truncate (ABI 3), make (file, folder, symlink, fifo, socket, device), remove (file,
// folder) and refer (ABI 2: renames and links between folders).
#pragma once

#include <string>
#include <vector>

namespace cudafix::installer::txn {

struct Fence {
  bool applied = false;
  int abi = 0;      // the kernel's Landlock ABI version (0: none)
  std::string why;  // what is missing, where not applied
};

// Applies the ruleset to the calling thread and what it starts; call before any other thread
// starts (the thread pool's), since threads already running keep their rights: with pool
// threads running, it is not applied and says why. Idempotent: a second call adds nothing.
// Never throws: a kernel without Landlock gets the userspace checks.
[[nodiscard]] Fence fence_writes_beneath(const std::vector<std::string>& folders);

}  // namespace cudafix::installer::txn
