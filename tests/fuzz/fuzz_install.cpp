// libFuzzer: validating a wheel for installing (installer/wheel/install.hpp: the zip read from its
// own central directory and local headers, then the dist-info, WHEEL, entry points and RECORD)
// must never crash or read outside the file; bad input is an Error naming the wheel, and a wheel
// that passes names the dist its file name says, each member's data inside the file.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "installer/wheel/install.hpp"
#include "resolver/base/diagnostic.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // One file per process, rewritten for each input: validate_wheel maps a real file.
  static const std::string path = [] {
    char dir[] = "/tmp/fuzz-install-XXXXXX";
    if (!::mkdtemp(dir)) std::abort();
    return std::string(dir) + "/fuzz-1.0-py3-none-any.whl";
  }();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ::write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  ::close(fd);
  try {
    const auto w = cudafix::installer::validate_wheel(path);
    if (w.dist_info != "fuzz-1.0.dist-info" && w.dist_info.rfind("fuzz-", 0) != 0) __builtin_trap();
    for (const auto& m : w.members)
      if (m.data_offset + m.compressed > size) __builtin_trap();
  } catch (const cudafix::resolver::Error& e) {
    if (std::string_view(e.what()).find("fuzz-1.0-py3-none-any.whl") == std::string_view::npos) __builtin_trap();
  }
  return 0;
}
