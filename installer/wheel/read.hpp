// A wheel read into the planner's `Wheel` value by the one zip reader
// (installer/wheel/zip_reader.hpp: the archive validated whole first): its name, version, tags,
// METADATA, RECORD and the dynamic section of every ELF object in it. Where the wheel came from
// (a --find-links folder, an index, a cache) is installer/source/'s.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "resolver/base/diagnostic.hpp"
#include "resolver/plan/wheel.hpp"

namespace cudafix::installer {

// What reading wheels cost, for --timings: compressed bytes read of the members, bytes inflated,
// objects whose dynamic section no window placed (placed by a map of the stream, or inflated from
// their start), bytes hashed.
struct WheelReadCost {
  std::uint64_t read = 0, inflated = 0, hashed = 0;
  std::size_t objects_from_start = 0, objects_by_map = 0;
};

// Reads one wheel: its zip structures validated whole, METADATA and RECORD, each shared
// object's dynamic section by ranges (installer/wheel/ranged_read.hpp), its SHA-256. Throws
// resolver::Error naming the file and what is wrong (not a zip, no dist-info, a damaged or
// truncated member read, METADATA or RECORD over zip::k_max_metadata, no RECORD). A member it
// does not read is checked when the wheel is installed. A file read before in this run and
// unchanged since (device, inode, size, mtime and ctime) is not read again: `fix` plans from a
// wheel and then binds its plan to it.
[[nodiscard]] resolver::Wheel read_wheel(const std::string& path, const std::vector<std::string>& supported_tags,
                                         WheelReadCost* cost = nullptr);
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
// The members whose dynamic section the planner reads: shared objects by name.
[[nodiscard]] bool looks_like_elf_member(std::string_view member);

}  // namespace cudafix::installer
