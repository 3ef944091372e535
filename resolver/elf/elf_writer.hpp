// Writing small, real, loadable ELF shared objects that carry a chosen SONAME, NEEDED, RPATH,
// RUNPATH and FLAGS_1 and nothing else. glibc's ld.so loads them (so tests can compare the
// loader model with the real loader), and no compiler is needed: `cudafix demo`, the corpus
// materialiser and the benchmarks make hundreds of them in milliseconds.
//
// Layout: ELF header, program headers (one PT_LOAD over the whole file, PT_DYNAMIC,
// PT_GNU_STACK), then .dynstr, a one-entry .dynsym, a DT_HASH table and the dynamic array.
// No section headers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cudafix::resolver::inline elf {

struct ElfSpec {
  std::uint8_t elf_class = 2;  // ELFCLASS64; 1 for ELFCLASS32
  std::uint16_t machine = 62;  // EM_X86_64
  std::optional<std::string> soname;
  std::vector<std::string> needed;
  std::optional<std::string> rpath;
  std::optional<std::string> runpath;
  std::uint64_t flags_1 = 0;
  std::size_t padding = 0;  // extra zero bytes, to give objects distinct sizes
  // Bytes of other names before each string, as in a large library whose string table holds
  // its dynamic symbols' names between SONAME, NEEDED and RPATH.
  std::size_t string_gap = 0;
};

[[nodiscard]] std::string make_shared_object(const ElfSpec& spec);
// Writes the object to `path` (mode 0755); throws Error on failure.
void write_shared_object(const std::string& path, const ElfSpec& spec);

}  // namespace cudafix::resolver::inline elf
