// libFuzzer: what an index or a cache hands cudafix is untrusted. A Simple API page (its first
// byte picks PEP 691 JSON or PEP 503 HTML) must parse or be an Error, every file's URL absolute
// and without its fragment, every file name (percent-decoded) one path component or none, and
// the pick must be one of the page's files; a pip cache entry (CacheControl's "cc=4," and
// msgpack, the body a wheel) must be read or named as a problem, never crash or read past the
// entry.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "installer/source/index.hpp"
#include "installer/source/user_caches.hpp"
#include "resolver/base/diagnostic.hpp"

namespace {

void page(std::string_view body, bool json) {
  using namespace cudafix::installer::source;
  try {
    const auto p = parse_project_page(body, json ? "application/vnd.pypi.simple.v1+json" : "text/html",
                                      "https://idx.example/simple/fuzz/");
    for (const auto& f : p.files) {
      if (f.url.find("://") == std::string::npos || f.url.find('#') != std::string::npos) __builtin_trap();
      // A file's name (percent-decoded) is joined into cache paths: one component or none.
      if (f.filename == "." || f.filename == ".." ||
          f.filename.find_first_of(std::string_view("/\\\0", 3)) != std::string::npos)
        __builtin_trap();
    }
    const auto any = cudafix::resolver::SpecifierSet::parse("");
    const auto pick = pick_wheel(p.files, "fuzz", *any, "3.12", {"py3-none-any"});
    if (pick && pick->wheel.normalized != "fuzz") __builtin_trap();
  } catch (const cudafix::resolver::Error&) {
  }
}

void pip_entry(const std::uint8_t* data, std::size_t size) {
  static const std::string root = [] {
    char dir[] = "/tmp/fuzz-index-XXXXXX";
    if (!::mkdtemp(dir)) std::abort();
    std::filesystem::create_directories(std::string(dir) + "/http/a/b/c/d/e");
    return std::string(dir);
  }();
  const std::string entry = root + "/http/a/b/c/d/e/abcde0";
  const int fd = ::open(entry.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ::write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  ::close(fd);
  const auto scan = cudafix::installer::source::scan_pip_cache(root);
  for (const auto& w : scan.wheels)
    if (w.offset + w.size > size) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0:
      page(rest, true);
      break;
    case 1:
      page(rest, false);
      break;
    default:
      pip_entry(data + 1, size - 1);
  }
  return 0;
}
