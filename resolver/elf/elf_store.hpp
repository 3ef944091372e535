// The dynamic sections read from each ELF object, kept between runs, so that an object unchanged
// since is not read again: its stamp is read (one statx) instead of opening it and reading its
// headers and dynamic segment.
//
// An object's answer is reused when its stamp (cache_file.hpp: device, inode, size, ctime, mtime)
// is the one it had when it was read, and kept only when the object had been still for settle_time()
// when the scan started. Files that are not ELF (a linker script named libfoo.so) are kept as
// such; files that could not be opened are not kept.
//
// The payload of the cache file (cache_file.hpp; magic "cfxelf01"), one per environment:
//   u32 object count N; u32 0; then N objects, each:
//     the stamp (48 bytes); a string: the path;
//     u8 ElfReadStatus; u8 class; u16 machine; u16 type; u64 DT_FLAGS_1;
//     three optional strings: SONAME, RPATH, RUNPATH (u8 1 and a string, or u8 0);
//     u32 NEEDED count and that many strings;
//     the diagnostic of an invalid object: u8 1 and u64 offset, or u8 0; a string: the message.
//   A string is u32 length and its bytes.
// A file that fails any check (its hash, a length past the end, a status out of range, bytes left
// over) is not used at all.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "resolver/base/cache_file.hpp"
#include "resolver/elf/elf_reader.hpp"

namespace cudafix::resolver::inline elf {

// The store's file for an environment of `roots`, in `cache_dir`.
[[nodiscard]] std::string elf_store_file(std::string_view cache_dir, const std::vector<std::string>& roots);

class ElfStore {
 public:
  // The store in `file`: empty when there is none, or when it fails a check (problem() says which).
  [[nodiscard]] static ElfStore load(const std::string& file);

  // What was read from `path` when its stamp was `stamp`, if that is what is kept.
  [[nodiscard]] std::optional<ElfRead> find(const std::string& path, const Stamp& stamp) const;
  [[nodiscard]] bool knows(const std::string& path) const { return kept_.count(path) > 0; }
  [[nodiscard]] std::size_t size() const { return kept_.size(); }
  [[nodiscard]] const std::string& problem() const { return problem_; }

 private:
  struct Kept {
    Stamp stamp;
    std::string_view answer;  // the record's bytes after the path, in the mapping
  };
  std::shared_ptr<const char> mapping_;
  std::unordered_map<std::string_view, Kept> kept_;
  std::string problem_;
};

// One object's answer, for the next store.
struct ElfAnswer {
  const std::string* path;
  const ElfRead* read;
  Stamp stamp;
};

// Replaces `file` with `answers` (store_cache_file). Returns what went wrong, or "".
[[nodiscard]] std::string store_elf_answers(const std::string& file, const std::vector<ElfAnswer>& answers);

// How reading the ELF objects used the store.
struct ElfStoreReport {
  std::string file;         // empty: no store
  std::size_t objects = 0;  // candidates read
  std::size_t reused = 0;   // of those, answered from the store
  bool written = false;
  std::string problem;
};

// Reads every candidate (read_elf_file) on `threads` threads, taking the answer kept in
// `store_file` for each one unchanged since, and writing the file again when any was read.
// Without a store_file, reads them all.
[[nodiscard]] std::vector<ElfRead> read_elf_files(const std::vector<std::string>& candidates, unsigned threads,
                                                  const std::string& store_file, ElfStoreReport& report);

}  // namespace cudafix::resolver::inline elf
