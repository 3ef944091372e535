// libFuzzer: the ELF reader must never crash or read outside the buffer on hostile objects.
#include <cstdint>
#include <vector>

#include "resolver/elf/elf_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // A copy the size of the input, so ASan sees any read past it.
  std::vector<std::uint8_t> copy(data, data + size);
  (void)cudafix::resolver::read_elf_memory(copy.data(), copy.size(), "fuzz.so");
  return 0;
}
