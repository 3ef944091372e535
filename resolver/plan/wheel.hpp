// A wheel as the planner sees it: its name, version and tags (from its file name, PEP 427 and
// PEP 425), its METADATA and RECORD, and the dynamic section of every shared object it holds,
// so an install can be simulated from the wheel's real file list. installer/wheel reads it from
// the archive; this header owns the value, `resolver/pep/wheel_name` the rules about names and tags.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "resolver/elf/elf_reader.hpp"
#include "resolver/env/dist_info.hpp"
#include "resolver/pep/wheel_name.hpp"

namespace cudafix::resolver::inline plan {

struct Wheel {
  std::string file;    // absolute path of the .whl; empty when it was read by range from an index
  std::string sha256;  // hex digest of the whole file (the index's, when read by range)
  std::string source;  // where it was found: the --find-links folder, the index, a cache
  std::string url;     // read by range: where `cudafix apply` downloads it from
  // How much of it was read to plan from: the bytes fetched and the wheel's size (by range), or
  // 0 and 0 (the whole file at hand).
  std::uint64_t bytes_read = 0, size = 0;
  WheelName wheel_name;
  Metadata metadata;                   // from {name}-{version}.dist-info/METADATA
  ParsedRecord record;                 // its RECORD
  std::string dist_info;               // "nvidia_cudnn_cu13-9.19.0.56.dist-info"
  std::map<std::string, ElfInfo> elf;  // RECORD path -> dynamic section, for every ELF object
  bool compatible = false;             // one of its tags is supported here
  // Where its best tag stands among those supported here (0: the most specific), as pip
  // prefers one wheel to another of the same version; nullopt when it is not compatible.
  std::optional<std::size_t> tag_rank;
};

}  // namespace cudafix::resolver::inline plan
