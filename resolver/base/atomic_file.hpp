// Files written whole or not at all: the bytes go to a temporary file beside the target, which
// is flushed (fsync) and renamed over the target only on commit(); without a commit the
// temporary file is removed, so a crash or an error never leaves a half-written file.
#pragma once

#include <string>
#include <string_view>

namespace cudafix::resolver::inline base {

class AtomicFile {
 public:
  // Creates the temporary file; throws Error naming the folder when it cannot.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends; throws Error (a full disk says so).
  void write(std::string_view data);
  // fsync, rename over the target, fsync of the folder. Throws Error.
  void commit();
  // Rename over the target without waiting for the disk: for a cache, whose reader checks what
  // it reads (a crash may leave the renamed file empty or torn). Throws Error.
  void commit_unsynced();

 private:
  void rename_into_place();

  std::string path_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace cudafix::resolver::inline base
