#include "resolver/base/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline base {

namespace {

// mkstemp's unique name, with the mode asked for: open(2) applies the umask to it, where mkstemp
// always makes 0600 (and a chmod after it would have to read the umask, which only changing it
// tells).
int create_unique(std::string& tmpl, mode_t mode) {
  static constexpr std::string_view k_letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device random;
  const std::size_t x = tmpl.size() - 6;
  for (int attempt = 0; attempt < 100; ++attempt) {
    for (std::size_t i = x; i < tmpl.size(); ++i) tmpl[i] = k_letters[random() % k_letters.size()];
    const int fd = ::open(tmpl.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

}  // namespace

AtomicFile::AtomicFile(std::string path, FileMode mode) : path_(std::move(path)) {
  const std::string dir = parent_dir(path_).empty() ? "." : parent_dir(path_);
  std::string tmpl = (path_.find('/') == std::string::npos ? std::string(".") : dir) + "/." +
                     std::string(base_name(path_)) + ".tmp-XXXXXX";
  fd_ = mode == FileMode::private_to_user ? ::mkstemp(tmpl.data()) : create_unique(tmpl, 0666);
  if (fd_ < 0) throw Error(fmt::format("cannot create a file in {}: {}", dir, os_error_text(errno, dir)));
  temp_ = tmpl;
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::write(std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd_, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("cannot write {}: {}", path_, std::strerror(errno)));
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) throw Error(fmt::format("cannot write {}: {}", path_, std::strerror(errno)));
  rename_into_place();
  const std::string dir = path_.find('/') == std::string::npos ? "." : parent_dir(path_);
  if (const int d = ::open(dir.empty() ? "/" : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

void AtomicFile::commit_unsynced() { rename_into_place(); }

void AtomicFile::rename_into_place() {
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0)
    throw Error(fmt::format("cannot replace {}: {}", path_, std::strerror(errno)));
  committed_ = true;
}

}  // namespace cudafix::resolver::inline base
