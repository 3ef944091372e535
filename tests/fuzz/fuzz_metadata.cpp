// libFuzzer: METADATA and Requires-Dist parsing must never crash.
#include <cstdint>
#include <string>

#include "resolver/env/dist_info.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto parsed = cudafix::resolver::parse_metadata(text, "METADATA");
  for (const auto& r : parsed.metadata.requires_dist) (void)cudafix::resolver::requirement_ref(r);
  (void)cudafix::resolver::header_value(text, "Root-Is-Purelib");
  return 0;
}
