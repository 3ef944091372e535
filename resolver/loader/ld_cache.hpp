// Reading /etc/ld.so.cache in glibc's binary format (elf/dl-cache.h), as ld.so does.
//
// Format "glibc-ld.so.cache1.1" (alone, or after an old "ld.so-1.7.0" block):
//   header (48 bytes): magic[17] "glibc-ld.so.cache", version[3] "1.1", u32 nlibs,
//     u32 len_strings, u8 flags (endianness), u8[3], u32 extension_offset, u32[3] unused;
//   nlibs entries (24 bytes): i32 flags, u32 key (soname), u32 value (path), u32 osversion,
//     u64 hwcap; string offsets count from the start of this header;
//   extension (at extension_offset): u32 magic 0xEAA42174, u32 count, then sections
//     {u32 tag, u32 flags, u32 offset, u32 size}; tag 1 lists glibc-hwcaps subfolder names as
//     u32 string offsets. An entry whose hwcap has bit 62 set belongs to the subfolder whose
//     index is its low 32 bits.
//   Entry flags: FLAG_ELF_LIBC6 (3) | per-ABI bits (x86-64: 0x0300, AArch64: 0x0a00).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "resolver/base/diagnostic.hpp"

namespace cudafix::resolver::inline loader {

struct LdCacheEntry {
  std::string soname;
  std::string path;
  std::int32_t flags = 0;
  std::optional<std::string> hwcaps_subdir;  // "x86-64-v3" for glibc-hwcaps entries
};

class LdCache {
 public:
  // Parses cache bytes; `file` names the input in errors. Throws Error on a malformed cache;
  // no bytes at all are an empty cache.
  static LdCache parse(const std::string& bytes, const std::string& file);
  // Reads a cache file; a missing file, and the null device, are an empty cache (ld.so then
  // skips this step).
  static LdCache load(const std::string& file);

  // What ld.so would take for `soname` on this host: entries for the object's ABI, a
  // glibc-hwcaps entry of the highest priority the host supports, else a plain one.
  [[nodiscard]] std::optional<std::string> lookup(const std::string& soname, std::uint16_t machine,
                                                  std::uint8_t elf_class,
                                                  const std::vector<std::string>& hwcaps_priority) const;
  [[nodiscard]] const std::vector<LdCacheEntry>& entries() const { return entries_; }
  [[nodiscard]] const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::vector<LdCacheEntry> entries_;
  std::unordered_multimap<std::string, std::size_t> by_soname_;
};

// The cache flags ld.so accepts for objects of this machine and class.
[[nodiscard]] std::int32_t ld_cache_flags_for(std::uint16_t machine, std::uint8_t elf_class);

}  // namespace cudafix::resolver::inline loader
