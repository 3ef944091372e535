#include "resolver/base/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline base {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const std::string dir = parent_dir(path_).empty() ? "." : parent_dir(path_);
  std::string tmpl = (path_.find('/') == std::string::npos ? std::string(".") : dir) + "/." +
                     std::string(base_name(path_)) + ".tmp-XXXXXX";
  fd_ = ::mkstemp(tmpl.data());
  if (fd_ < 0) throw Error(fmt::format("cannot create a file in {}: {}", dir, std::strerror(errno)));
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
