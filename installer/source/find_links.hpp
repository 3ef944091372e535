// The --find-links folders: the wheels in them read for planning (installer/wheel/read.hpp).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "installer/wheel/read.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/plan/wheel.hpp"

namespace cudafix::installer::source {

struct FoundWheels {
  std::vector<resolver::Wheel> wheels;            // sorted by name, then file
  std::vector<resolver::Diagnostic> diagnostics;  // wheels that could not be read (skipped)
};

// Every *.whl in each folder (not below it), or with `names`, those whose file name gives one of
// those dists (normalised) or no dist at all; read in parallel, what it cost added to `cost`. A
// folder that cannot be listed is an Error; a bad wheel is a diagnostic and the others are
// still read.
[[nodiscard]] FoundWheels find_wheels(const std::vector<std::string>& folders,
                                      const std::vector<std::string>& supported_tags,
                                      const std::set<std::string>* names = nullptr, WheelReadCost* cost = nullptr);

}  // namespace cudafix::installer::source
