// Diagnostics: what went wrong with one input, precisely enough to find it (file, line or offset).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace cudafix::resolver::inline base {

// One problem with one input. Readers collect these and go on; the scan reports them all.
struct Diagnostic {
  std::string file;                     // absolute path of the input
  std::optional<std::size_t> line;      // 1-based line, for text formats
  std::optional<std::uint64_t> offset;  // byte offset, for binary formats
  std::string message;

  [[nodiscard]] std::string to_string() const;
};

// The one error type orchestration throws; main() prints it as `cudafix: error: ...` and exits 2.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace cudafix::resolver::inline base
