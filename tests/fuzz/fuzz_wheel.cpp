// libFuzzer: reading a wheel (its archive through the one zip reader, then METADATA, RECORD and
// the ELF members) must never crash; bad input is an Error naming the wheel, and a wheel that is
// read names the dist its file name says.
#include <cstdint>
#include <string>
#include <string_view>

#include "installer/wheel/read.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto tags = cudafix::resolver::supported_tags({3, 12, "", "x86_64", false, 2, 36});
  try {
    const auto w = cudafix::installer::read_wheel_memory(data, size, "fuzz-1.0-py3-none-any.whl", tags);
    if (w.dist_info.empty() || cudafix::resolver::normalize_name(w.metadata.name) != "fuzz") __builtin_trap();
  } catch (const cudafix::resolver::Error& e) {
    // Every rejection names the wheel it could not read.
    if (std::string_view(e.what()).find("fuzz-1.0-py3-none-any.whl") == std::string_view::npos) __builtin_trap();
  }
  return 0;
}
