// libFuzzer: cudafix's cache files (the walk cache, the ELF store) must never crash their reader,
// whatever their payload. The first byte picks the kind; the rest is the payload, written to a
// file with the header and hash trailer of resolver/base/cache_file.hpp, so that the fuzzer explores
// what lies behind the checksum.
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

#include "resolver/base/path_index.hpp"
#include "resolver/elf/elf_store.hpp"
#include "resolver/env/walk_cache.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cudafix::resolver;
  if (size == 0) return 0;
  const bool walk = (data[0] & 1) == 0;
  const std::string_view payload(reinterpret_cast<const char*>(data + 1), size - 1);
  static const std::string file = "/tmp/fuzz_cache_" + std::to_string(::getpid()) + ".bin";
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    const std::uint32_t order = 0x01020304, zero = 0;
    const std::uint64_t hash = PathHash().add(payload).value();
    out << (walk ? "cfxwalk4" : "cfxelf01");
    out.write(reinterpret_cast<const char*>(&order), 4).write(reinterpret_cast<const char*>(&zero), 4);
    out << payload;
    out.write(reinterpret_cast<const char*>(&hash), 8);
  }
  if (walk) {
    const auto cache = WalkCache::load(file, 1);
    if (const auto* f = cache.find("/s", "/", PathHash().add("/s/").value()))
      for (std::uint32_t i = f->first_entry; i < f->first_entry + f->entry_count; ++i) (void)cache.entry(i);
  } else {
    const auto store = ElfStore::load(file);
    (void)store.find("/s/libx.so", Stamp{});
  }
  return 0;
}
