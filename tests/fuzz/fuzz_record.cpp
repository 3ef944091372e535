// libFuzzer: RECORD parsing must never crash, and every row it returns points into its input
// (under ASan, the bytes of each field are read).
#include <cstdint>
#include <string>

#include "resolver/env/dist_info.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto parsed = cudafix::resolver::parse_record(std::string(reinterpret_cast<const char*>(data), size), "RECORD");
  for (const auto& row : parsed.rows) {
    if (row.path.empty()) __builtin_trap();
    // The algorithm is read back from before the hash: it must be the text before its '='.
    if (row.hash_algo().find('=') != std::string_view::npos) __builtin_trap();
    if (row.size().has_value() != row.has_size) __builtin_trap();
  }
  return 0;
}
