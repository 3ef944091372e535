// A wheel as the planner sees it: its name, version and tags (from its file name, PEP 427 and
// PEP 425), its METADATA and RECORD, and the dynamic section of every shared object it holds,
// so an install can be simulated from the wheel's real file list. installer/wheel reads it from
// the archive; this header owns the value and the rules about names and tags.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "resolver/dist_info.hpp"
#include "resolver/elf_reader.hpp"

namespace cudafix::resolver {

// {distribution}-{version}(-{build tag})?-{python tag}-{abi tag}-{platform tag}.whl
struct WheelName {
  std::string name;        // as in the file name (underscores)
  std::string normalized;  // PEP 503
  std::string version;
  std::string build;
  std::vector<std::string> tags;  // every python-abi-platform triple the compressed tag set expands to
};
// nullopt when the file name is no wheel name.
[[nodiscard]] std::optional<WheelName> parse_wheel_name(std::string_view file_name);

// The tags an interpreter of `python_version` ("3.12") on this host accepts, most specific
// first: cp312-cp312-manylinux_2_X_<arch> down to py3-none-any (as packaging.tags does for
// CPython on glibc Linux).
[[nodiscard]] std::vector<std::string> supported_tags(const std::string& python_version,
                                                      const std::string& glibc_version, const std::string& arch);

struct Wheel {
  std::string file;    // absolute path of the .whl
  std::string sha256;  // hex digest of the whole file
  std::string source;  // the --find-links folder it was found in
  WheelName wheel_name;
  Metadata metadata;                   // from {name}-{version}.dist-info/METADATA
  ParsedRecord record;                 // its RECORD
  std::string dist_info;               // "nvidia_cudnn_cu13-9.19.0.56.dist-info"
  std::map<std::string, ElfInfo> elf;  // RECORD path -> dynamic section, for every ELF object
  bool compatible = false;             // one of its tags is supported here
};

}  // namespace cudafix::resolver
