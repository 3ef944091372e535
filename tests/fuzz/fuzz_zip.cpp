// libFuzzer: the one zip reader (installer/wheel/zip_reader.hpp) over any bytes: validating an
// archive, then reading every member whole, streamed and by windows, must never crash, read
// outside the input or produce more than a member declares; bad input is an Error naming the
// archive. The range-request path's parsing (the end structures from a tail of the file, as
// remote_wheel fetches it) runs on the same bytes.
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "installer/wheel/zip_reader.hpp"
#include "resolver/base/diagnostic.hpp"

namespace zip = cudafix::installer::zip;

namespace {

const std::string k_label = "fuzz.whl";

void check_named(const cudafix::resolver::Error& e) {
  if (std::string_view(e.what()).find(k_label) == std::string_view::npos) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // As remote_wheel reads it: the last 64 KiB, then the central directory and local headers.
  try {
    const std::size_t tail = std::min<std::size_t>(size, 64 * 1024);
    const zip::End end = zip::parse_end(data + (size - tail), tail, size - tail, k_label);
    if (end.cd_offset + end.cd_size != end.end_at || end.end_at >= size) __builtin_trap();
    const auto entries = zip::parse_central_directory(data + end.cd_offset, end.cd_size, end, k_label);
    for (const auto& e : entries)
      if (e.local_offset < size)
        (void)zip::parse_local_header(data + e.local_offset, size - e.local_offset, e, k_label);
  } catch (const cudafix::resolver::Error& e) {
    check_named(e);
  }
  try {
    const zip::Archive archive(data, size, k_label);
    std::set<std::string> names;
    for (const auto& e : archive.entries()) {
      if (e.data_offset + e.compressed > size) __builtin_trap();
      if (!zip::bad_name(e.raw_name).empty()) __builtin_trap();
      if (!e.folder && !names.insert(e.name).second) __builtin_trap();
    }
    for (const zip::Entry* e : archive.files()) {
      try {
        if (e->size <= (std::uint64_t{1} << 20)) {
          std::vector<unsigned char> whole(e->size);
          archive.extract(*e, whole.data());
          std::uint64_t streamed = 0;
          archive.stream(*e, [&](const unsigned char*, std::size_t n) { streamed += n; });
          if (streamed != e->size) __builtin_trap();
          (void)archive.read(*e, 4096);
        }
        unsigned char window[256];
        const std::size_t got = archive.window(*e, e->size / 2, window, sizeof window);
        if (got > sizeof window || e->size / 2 + got > e->size) __builtin_trap();
      } catch (const cudafix::resolver::Error& err) {
        check_named(err);
      }
    }
  } catch (const cudafix::resolver::Error& e) {
    check_named(e);
  }
  return 0;
}
