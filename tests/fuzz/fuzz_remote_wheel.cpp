// libFuzzer: the remote planner (installer/source/remote_wheel) reads a wheel an index serves,
// by range requests; the wheel and the server are untrusted. Here the server is canned
// (tests/support/canned_http.hpp, no network): the input's first byte picks how it answers
// (honouring Range, or one of the faulty servers), the rest is the wheel. The planner asks for a
// few hundred bytes at a time, so that a wheel of a few kilobytes takes every path a CUDA wheel
// takes: members past the tail, objects read by their headers, windows, inflating from the
// start. Every wheel must be read or refused with an Error, never crash, read outside what was
// fetched, or wrap a sum.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "installer/source/remote_wheel.hpp"
#include "resolver/base/diagnostic.hpp"
#include "tests/support/canned_http.hpp"

namespace {

namespace s = cudafix::installer::source;

const std::string& temporary_file() {
  static const std::string path = [] {
    char name[] = "/tmp/fuzz-remote-wheel-XXXXXX";
    const int fd = ::mkstemp(name);
    if (fd < 0) std::abort();
    ::close(fd);
    return std::string(name);
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto quirk = static_cast<cudafix::test::Quirk>(data[0] % 5);
  std::string wheel(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::uint64_t wheel_size = wheel.size();
  s::HttpClient http(cudafix::test::serve_from_memory(std::move(wheel), quirk));
  s::Picked picked;
  picked.file.filename = "fuzz-1.0-py3-none-linux_x86_64.whl";  // as make_seeds.sh names it
  picked.file.url = "https://idx.example/files/" + picked.file.filename;
  picked.file.sha256 = std::string(64, '0');
  picked.wheel = *cudafix::resolver::parse_wheel_name(picked.file.filename);
  try {
    s::RangeLimits small;
    small.tail = 512;
    small.whole_wheel = 1024;
    small.whole_member = 1024;
    small.head = 512;
    small.window = 4096;
    small.chunk = 2048;
    // Mostly read by range to the end (these wheels are a few KB); one seed in eight stops at
    // half the wheel and downloads it whole.
    small.whole_past_half = data[0] / 5 % 8 == 0;
    const auto read = s::read_remote_wheel(http, picked, {"py3-none-linux_x86_64"}, temporary_file(), small);
    if (read.wheel && read.size != wheel_size && quirk == cudafix::test::Quirk::none) __builtin_trap();
  } catch (const cudafix::resolver::Error&) {
  }
  return 0;
}
