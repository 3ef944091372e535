// The ELF types of one class, 32 or 64 bits, for code written once for both: the writer of
// small ELF objects and the reader of their dynamic sections.
#pragma once

#include <elf.h>

namespace cudafix::resolver::inline elf {

struct Elf32Types {
  using Ehdr = Elf32_Ehdr;
  using Phdr = Elf32_Phdr;
  using Shdr = Elf32_Shdr;
  using Dyn = Elf32_Dyn;
  using Sym = Elf32_Sym;
  using Addr = Elf32_Addr;
  static constexpr unsigned char klass = ELFCLASS32;
};

struct Elf64Types {
  using Ehdr = Elf64_Ehdr;
  using Phdr = Elf64_Phdr;
  using Shdr = Elf64_Shdr;
  using Dyn = Elf64_Dyn;
  using Sym = Elf64_Sym;
  using Addr = Elf64_Addr;
  static constexpr unsigned char klass = ELFCLASS64;
};

}  // namespace cudafix::resolver::inline elf
