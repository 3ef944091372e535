// Running real programs from tests (glibc's ld.so, libtree, pip, the cudafix binary).
#pragma once

#include <string>
#include <vector>

namespace cudafix::test {

struct RunResult {
  int exit_code = -1;
  std::string out;  // standard output and standard error, interleaved
};

// Runs `command` with /bin/sh; standard error is merged into the output.
RunResult run_shell(const std::string& command);
// Quotes one word for /bin/sh.
std::string shell_quote(const std::string& word);
// Writes `text` to `path`, creating its parent folders (test set-up, never product code).
void write_file(const std::string& path, const std::string& text);
// A fresh folder under $TMPDIR, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace cudafix::test
