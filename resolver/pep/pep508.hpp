// PEP 508 dependency specifiers (Requires-Dist lines): name, extras, version specifier or URL,
// and environment markers, parsed and evaluated as packaging 23 does. One deliberate
// difference: where packaging raises because a version comparison meets a value that is no
// PEP 440 version (`platform_release >= "6"` on a kernel "6.1.0-18-cloud-amd64"), cudafix
// follows PEP 508's fallback to Python's string comparison.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "resolver/pep/pep440.hpp"

namespace cudafix::resolver::inline pep {

// The values markers are evaluated against (PEP 508's names, `extra` included).
using MarkerEnvironment = std::map<std::string, std::string>;

// The environment of a CPython `python_full_version` on this host (uname for the platform_*
// values), with `extra` empty.
[[nodiscard]] MarkerEnvironment marker_environment(const std::string& python_full_version);

class Marker {
 public:
  // Throws std::invalid_argument with packaging-like wording on a syntax error.
  [[nodiscard]] static Marker parse(std::string_view text);
  // nullopt when the marker cannot be evaluated (an operator with no string fallback, such as
  // ~= between non-versions); `error` then says why.
  [[nodiscard]] std::optional<bool> evaluate(const MarkerEnvironment& env, std::string* error = nullptr) const;
  [[nodiscard]] const std::string& text() const { return text_; }
  // The marker's clauses name `extra` (the dependency belongs to an extra).
  [[nodiscard]] bool mentions_extra() const;

  struct Node;

 private:
  std::string text_;
  std::shared_ptr<const Node> root_;
};

struct Requirement {
  std::string name;        // as written
  std::string normalized;  // PEP 503
  std::vector<std::string> extras;
  SpecifierSet specifier;
  std::string url;
  std::optional<Marker> marker;
  std::string text;  // the whole line

  // Throws std::invalid_argument on a malformed line.
  [[nodiscard]] static Requirement parse(std::string_view line);
};

}  // namespace cudafix::resolver::inline pep
