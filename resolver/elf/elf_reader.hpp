// Reading the dynamic section of an ELF shared object as the dynamic loader does, touching only
// the ELF header, the program headers, the PT_DYNAMIC segment and the strings it names (section
// headers are ignored, as ld.so ignores them, but for section 0 when e_phnum is PN_XNUM and the
// count of program headers is there); libelf translates each from the file's class and
// byte order. A 1 GB libtorch_cuda.so costs a read of its first 16 KB and two or three small
// ranges, not a read of the file; an object under 16 KB costs one read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "resolver/base/diagnostic.hpp"

namespace cudafix::resolver::inline base {
struct Stamp;  // resolver/base/cache_file.hpp
}  // namespace cudafix::resolver::inline base

namespace cudafix::resolver::inline elf {

inline constexpr std::uint64_t k_df_1_nodeflib = 0x800;  // DF_1_NODEFLIB

struct ElfInfo {
  std::uint8_t elf_class = 0;  // ELFCLASS32 (1) or ELFCLASS64 (2)
  std::uint16_t machine = 0;   // EM_X86_64 (62), EM_AARCH64 (183), ...
  std::uint16_t type = 0;      // ET_DYN, ET_EXEC
  std::optional<std::string> soname;
  std::vector<std::string> needed;
  std::optional<std::string> rpath;
  std::optional<std::string> runpath;
  std::uint64_t flags_1 = 0;

  [[nodiscard]] bool nodeflib() const { return (flags_1 & k_df_1_nodeflib) != 0; }
  // glibc ignores DT_RPATH when DT_RUNPATH is present.
  [[nodiscard]] const std::optional<std::string>& effective_rpath() const;
};

enum class ElfReadStatus { ok, not_elf, invalid };

struct ElfRead {
  ElfReadStatus status = ElfReadStatus::not_elf;
  ElfInfo info;           // when ok
  Diagnostic diagnostic;  // when invalid: file, offset and what is wrong
};

// Reads a file. A file that does not start with the ELF magic is `not_elf` (a linker script
// named libfoo.so is normal); a file that does but cannot be read safely is `invalid`.
[[nodiscard]] ElfRead read_elf_file(const std::string& path);
// The same, also stamping the file (cache_file.hpp) once it is open, before it is read, when
// `stamp` is not null; it stays empty when the file cannot be opened.
[[nodiscard]] ElfRead read_elf_file(const std::string& path, std::optional<Stamp>* stamp);
// The same over bytes in memory (fuzzing, tests). `name` labels diagnostics.
[[nodiscard]] ElfRead read_elf_memory(const void* data, std::size_t size, const std::string& name);

// An object of `size` bytes known only in pieces, each at its offset in the file: what a reader
// that fetches ranges has of it (installer/source/remote_wheel). The pieces are views; they may
// overlap, and a range is read from one piece that holds all of it.
struct ElfPieces {
  std::uint64_t size = 0;
  std::vector<std::pair<std::uint64_t, std::string_view>> pieces;
  // Bytes [offset, offset + n) from one piece, or nullptr: outside the file or in no one piece
  // (no sum here can wrap).
  [[nodiscard]] const char* bytes(std::uint64_t offset, std::uint64_t n) const;
};

// Where the loader finds what it reads, from the ELF header and program headers alone: the file
// bytes of PT_DYNAMIC, and the PT_LOAD segments that map its addresses to file offsets.
struct ElfLayout {
  struct Load {
    std::uint64_t offset = 0, vaddr = 0, filesz = 0;
  };
  std::uint8_t elf_class = 0;                          // ELFCLASS32 (1) or ELFCLASS64 (2)
  std::uint8_t encoding = 0;                           // ELFDATA2LSB (1) or ELFDATA2MSB (2)
  std::uint64_t dynamic_offset = 0, dynamic_size = 0;  // size 0: no PT_DYNAMIC
  std::vector<Load> loads;
  // The file offset of `vaddr`, or nothing when no PT_LOAD's file bytes hold it.
  [[nodiscard]] std::optional<std::uint64_t> file_offset(std::uint64_t vaddr) const;
};

struct ElfLayoutRead {
  ElfReadStatus status = ElfReadStatus::not_elf;
  ElfLayout layout;       // when ok: PT_DYNAMIC lies wholly inside the file
  Diagnostic diagnostic;  // when invalid
  // Invalid only because bytes the headers need lie inside the file but in no piece: more of
  // the object, not a different one, may read.
  bool incomplete = false;
};

// The layout of an object known in pieces, every offset and size checked against `size`.
[[nodiscard]] ElfLayoutRead read_elf_layout(const ElfPieces& object, const std::string& name);
// read_elf_memory over pieces: what the loader reads must be among them; a range that is not is
// invalid, as one outside the file is.
[[nodiscard]] ElfRead read_elf_pieces(const ElfPieces& object, const std::string& name);

[[nodiscard]] std::string machine_name(std::uint16_t machine);
[[nodiscard]] std::vector<std::string> flags_1_names(std::uint64_t flags_1);

}  // namespace cudafix::resolver::inline elf
