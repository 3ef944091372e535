// Reading TOML into resolver::Knowledge and rule settings: the built-in file embedded at build
// time, then the user's files on top (later tables extend and replace earlier ones by name). A
// file is parsed once (resolver::parse_toml) and its one table handed to each reader.
#pragma once

#include <string>
#include <string_view>

#include "resolver/base/toml_checked.hpp"
#include "resolver/env/knowledge.hpp"
#include "rules/doctor.hpp"

namespace cudafix::rules {

// The knowledge shipped with cudafix (rules/data/knowledge.toml).
[[nodiscard]] resolver::Knowledge builtin_knowledge();
// Adds the knowledge tables of one parsed TOML document (resolver::parse_toml) to `into`. Throws
// resolver::Error naming `source` and the line for a table of the wrong shape.
void merge_knowledge(const toml::table& doc, const std::string& source, resolver::Knowledge& into);
// Reads the `[rules.*]` tables of one parsed TOML document into `into`. Throws resolver::Error
// naming `source` and the line for an unknown rule, a bad severity or a table of the wrong shape.
void merge_rule_settings(const toml::table& doc, const std::string& source, std::map<std::string, RuleSettings>& into);

}  // namespace cudafix::rules
