// libFuzzer: ld.so.cache parsing must never crash; bad input is an Error with an offset.
#include <cstdint>
#include <string>

#include "resolver/loader/ld_cache.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto cache =
        cudafix::resolver::LdCache::parse(std::string(reinterpret_cast<const char*>(data), size), "cache");
    (void)cache.lookup("libc.so.6", 62, 2, {"x86-64-v3"});
  } catch (const cudafix::resolver::Error&) {
  }
  return 0;
}
