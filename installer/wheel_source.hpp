// Wheel sources for planning: a --find-links folder of .whl files, each read by the one zip
// reader (installer/zip_reader.hpp: the archive validated whole first) for its name, version,
// tags, METADATA, RECORD and the dynamic section of every ELF object in it.
#pragma once

#include <string>
#include <vector>

#include "resolver/base/diagnostic.hpp"
#include "resolver/plan/wheel.hpp"

namespace cudafix::installer {

// Reads one wheel. Throws resolver::Error naming the file and what is wrong (not a zip, no
// dist-info, a damaged or truncated member, METADATA or RECORD over zip::k_max_metadata, no RECORD).
[[nodiscard]] resolver::Wheel read_wheel(const std::string& path, const std::vector<std::string>& supported_tags);
// The same over bytes in memory (fuzzing), named `file_name`; no sha256.
[[nodiscard]] resolver::Wheel read_wheel_memory(const void* data, std::size_t size, const std::string& file_name,
                                                const std::vector<std::string>& supported_tags);

// A wheel read in parts (here from the archive, or by range requests from an index): its
// METADATA and RECORD parsed and checked against its file name; `w` holds the name, the
// dist-info and the ELF facts already. Throws resolver::Error naming `label`.
[[nodiscard]] resolver::Wheel complete_wheel(resolver::Wheel w, std::string metadata_text, std::string record_text,
                                             const std::string& label);
// RECORD's text with a UTF-8 byte order mark before its first row dropped (some tools write one;
// pip and pypa/installer read such a RECORD).
[[nodiscard]] std::string record_text_without_bom(std::string text);
// Whether one of the wheel's tags is supported here.
[[nodiscard]] bool compatible_here(const resolver::WheelName& name, const std::vector<std::string>& supported_tags);
// The members whose dynamic section the planner reads: shared objects by name.
[[nodiscard]] bool looks_like_elf_member(std::string_view member);

struct FoundWheels {
  std::vector<resolver::Wheel> wheels;            // sorted by name, then file
  std::vector<resolver::Diagnostic> diagnostics;  // wheels that could not be read (skipped)
};

// Every *.whl in each folder (not below it). A folder that cannot be listed is an Error; a bad
// wheel is a diagnostic and the others are still read.
[[nodiscard]] FoundWheels find_wheels(const std::vector<std::string>& folders,
                                      const std::vector<std::string>& supported_tags);

}  // namespace cudafix::installer
