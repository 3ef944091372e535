// A file mapped read-only, for the readers that walk a wheel's or a cache entry's bytes in place
// (installer/wheel/install, installer/source/user_caches). Throws resolver::Error naming the
// file when it cannot be opened or mapped, or is no regular file; an empty file maps to no bytes.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "resolver/base/diagnostic.hpp"

namespace cudafix::installer {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    // O_NONBLOCK and a regular file only: a FIFO named like a wheel in a --find-links folder
    // must not hang the open, nor a device be mapped.
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) throw resolver::Error(fmt::format("{}: {}", path, std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw resolver::Error(fmt::format("{}: not a regular file (a FIFO, a device or a folder); not read", path));
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
      if (p == MAP_FAILED) throw resolver::Error(fmt::format("{}: mmap: {}", path, std::strerror(errno)));
      data_ = static_cast<const unsigned char*>(p);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
    if (fd_ >= 0) ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  [[nodiscard]] const unsigned char* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }

 private:
  int fd_ = -1;
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace cudafix::installer
