// The --find-links folders: every wheel in them read for planning (installer/wheel/read.hpp).
#pragma once

#include <string>
#include <vector>

#include "resolver/base/diagnostic.hpp"
#include "resolver/plan/wheel.hpp"

namespace cudafix::installer::source {

struct FoundWheels {
  std::vector<resolver::Wheel> wheels;            // sorted by name, then file
  std::vector<resolver::Diagnostic> diagnostics;  // wheels that could not be read (skipped)
};

// Every *.whl in each folder (not below it). A folder that cannot be listed is an Error; a bad
// wheel is a diagnostic and the others are still read.
[[nodiscard]] FoundWheels find_wheels(const std::vector<std::string>& folders,
                                      const std::vector<std::string>& supported_tags);

}  // namespace cudafix::installer::source
