// What reading and writing a lock share (resolver/pep/pylock.cpp reads, pylock_write.cpp writes):
// TOML's string and key text, and the kinds of file entry a package names. Private to the room.
#pragma once

#include <string>
#include <string_view>

namespace cudafix::resolver::inline pep::pylock_text {

// `s` as a TOML basic string, every control character escaped.
std::string toml_string(std::string_view s);
// A bare key where TOML allows one, else quoted.
std::string key_text(std::string_view k);

enum class FileKind { wheel, sdist, archive };

}  // namespace cudafix::resolver::inline pep::pylock_text
