// JSON documents (schema 1, ../shared/DESIGN.md): schema, command and venv first; lists sorted;
// paths relative to their site folder when one folder is unambiguous; bytes that are not UTF-8
// replaced, with "lossy": true on the object that carries them.
#pragma once

#include <nlohmann/json.hpp>

#include "resolver/environment.hpp"
#include "resolver/knowledge.hpp"
#include "resolver/why.hpp"

namespace cudafix::cli {

using Json = nlohmann::ordered_json;

[[nodiscard]] Json scan_json(const resolver::Environment& env, const resolver::Knowledge& knowledge);
[[nodiscard]] Json why_json(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                            const resolver::WhyReport& report);
[[nodiscard]] Json error_json(const std::string& command, const std::string& message);
// Serialises without ever throwing on bad bytes.
[[nodiscard]] std::string dump(const Json& doc);

}  // namespace cudafix::cli
