// TOML read by toml++ (its compiled part is toml_checked.cpp, where its assertions are checks:
// that file says why). Every TOML file cudafix reads is parsed here.
#pragma once

#include <toml++/toml.h>
#include <string>
#include <string_view>

namespace cudafix::resolver {

// `text` parsed; what is wrong with it a resolver::Error "SOURCE:LINE:COLUMN: what" (the line
// and column left out where toml++ knows none).
[[nodiscard]] toml::table parse_toml(std::string_view text, const std::string& source);

}  // namespace cudafix::resolver
