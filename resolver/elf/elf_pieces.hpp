// What a reader of an object in pieces (resolver/elf/elf_reader.hpp, ElfPieces) lacks: the range
// to fetch next, for a reader that inflates a member from its start (installer/wheel/ranged_read)
// and reads the object again with it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "resolver/elf/elf_reader.hpp"

namespace cudafix::resolver::inline elf {

// The first range [offset, offset + n) inside the object that read_elf_pieces needs and no piece
// holds, where that is why it reads as invalid; nullopt where it reads, or is wrong whatever is
// fetched.
[[nodiscard]] std::optional<std::pair<std::uint64_t, std::uint64_t>> missing_piece(const ElfPieces& object,
                                                                                   const std::string& name);

}  // namespace cudafix::resolver::inline elf
