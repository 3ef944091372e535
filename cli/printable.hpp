// Text from the environment made fit to print: every name, path, RECORD line, METADATA field,
// error and probe line that `cudafix` prints as text goes through `printable` (JSON output is
// escaped by its writer and kept whole).
//
// What it does:
//   - cuts the text after a limit of its bytes, at a UTF-8 boundary, and says how much it left
//     out: "... (199.0 MB more)". A field (a name, a path, a value) is cut at 512 bytes, a
//     message line built from fields (an error, a finding's evidence, a diagnostic) at 2048;
//   - escapes what a terminal would act on or hide: control bytes (C0 and DEL) as \xNN, with
//     \n, \r and \t by name; the C1 controls (U+0080..U+009F: U+009B is a CSI to many
//     terminals) and the bidirectional overrides and isolates (U+202A..U+202E,
//     U+2066..U+2069) as \uNNNN; bytes that are not UTF-8 as \xNN.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cudafix::cli {

inline constexpr std::size_t k_field_limit = 512;
inline constexpr std::size_t k_line_limit = 2048;

// `text`, cut after `limit` bytes and escaped.
[[nodiscard]] std::string printable(std::string_view text, std::size_t limit = k_field_limit);
// Text of several lines (a probe's standard error, an error message): each line as
// printable(line, k_line_limit), the newlines kept.
[[nodiscard]] std::string printable_lines(std::string_view text);

}  // namespace cudafix::cli
