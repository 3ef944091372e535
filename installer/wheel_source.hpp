// Wheel sources for planning: a --find-links folder of .whl files, each read with libarchive for
// its name, version, tags, METADATA, RECORD and the dynamic section of every ELF object in it.
#pragma once

#include <string>
#include <vector>

#include "resolver/base/diagnostic.hpp"
#include "resolver/plan/wheel.hpp"

namespace cudafix::installer {

// Reads one wheel. Throws resolver::Error naming the file and what is wrong (not a zip, no
// dist-info, a truncated member, no RECORD).
[[nodiscard]] resolver::Wheel read_wheel(const std::string& path, const std::vector<std::string>& supported_tags);
// The same over bytes in memory (fuzzing), named `file_name`; no sha256.
[[nodiscard]] resolver::Wheel read_wheel_memory(const void* data, std::size_t size, const std::string& file_name,
                                                const std::vector<std::string>& supported_tags);

struct FoundWheels {
  std::vector<resolver::Wheel> wheels;            // sorted by name, then file
  std::vector<resolver::Diagnostic> diagnostics;  // wheels that could not be read (skipped)
};

// Every *.whl in each folder (not below it). A folder that cannot be listed is an Error; a bad
// wheel is a diagnostic and the others are still read.
[[nodiscard]] FoundWheels find_wheels(const std::vector<std::string>& folders,
                                      const std::vector<std::string>& supported_tags);

}  // namespace cudafix::installer
