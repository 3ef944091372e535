// Loading resolver::Knowledge from TOML: the built-in file embedded at build time, then the
// user's files on top (later tables extend and replace earlier ones by name).
#pragma once

#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "resolver/env/knowledge.hpp"

namespace cudafix::rules {

// Parses one TOML document; throws resolver::Error with `source`:line:column on a syntax error.
[[nodiscard]] toml::table parse_toml(std::string_view text, const std::string& source);

// The knowledge shipped with cudafix (rules/data/knowledge.toml).
[[nodiscard]] resolver::Knowledge builtin_knowledge();
// Adds the tables of one TOML document to `into`. Throws resolver::Error naming `source` and
// the line on a syntax error or a table of the wrong shape.
void merge_knowledge(std::string_view toml_text, const std::string& source, resolver::Knowledge& into);

}  // namespace cudafix::rules
