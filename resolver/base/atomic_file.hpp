// Files written whole or not at all: the bytes go to a temporary file beside the target, which
// is flushed (fsync) and renamed over the target only on commit(); without a commit the
// temporary file is removed, so a crash or an error never leaves a half-written file.
//
// Its mode: a cache of cudafix's own stays the user's (0600, what mkstemp gives, as pip's cache
// files are); a file the user asked for (a plan) or one the environment holds (cudafix.toml) is
// made as pip and any shell redirection make files, 0666 less the umask (0644 under the usual
// 022), so that whoever may read the environment may read it.
#pragma once

#include <string>
#include <string_view>

namespace cudafix::resolver::inline base {

enum class FileMode { private_to_user, like_any_file };

class AtomicFile {
 public:
  // Creates the temporary file; throws Error naming the folder when it cannot.
  explicit AtomicFile(std::string path, FileMode mode = FileMode::private_to_user);
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
