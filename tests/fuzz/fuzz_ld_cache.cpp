// libFuzzer: ld.so.cache parsing must never crash; bad input is an Error with an offset.
#include <cstdint>
#include <string>
#include <string_view>

#include "resolver/loader/ld_cache.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto cache =
        cudafix::resolver::LdCache::parse(std::string(reinterpret_cast<const char*>(data), size), "cache");
    (void)cache.lookup("libc.so.6", 62, 2, {"x86-64-v3"});
  } catch (const cudafix::resolver::Error& e) {
    // The promise above: every rejection names the file and the offset of what is wrong.
    if (std::string_view(e.what()).rfind("cache (offset 0x", 0) != 0) __builtin_trap();
  }
  return 0;
}
