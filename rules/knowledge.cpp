#include "rules/knowledge.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include "knowledge_toml.hpp"
#include "resolver/diagnostic.hpp"

namespace cudafix::rules {
namespace r = cudafix::resolver;

namespace {

std::string where(const std::string& source, const toml::source_region& region) {
  return fmt::format("{}:{}", source, region.begin.line);
}

void read_groups(const toml::table& doc, const char* key, const std::string& source,
                 std::map<std::string, r::SonameGroup>& into) {
  const auto* node = doc.get(key);
  if (!node) return;
  const auto* table = node->as_table();
  if (!table) throw r::Error(fmt::format("{}: [{}] must be a table of groups", where(source, node->source()), key));
  for (const auto& [name, value] : *table) {
    const auto* group = value.as_table();
    if (!group)
      throw r::Error(fmt::format("{}: [{}.{}] must be a table with why and sonames", where(source, value.source()), key,
                                 name.str()));
    r::SonameGroup g;
    if (auto why = (*group)["why"].value<std::string>()) g.why = *why;
    if (auto by = (*group)["by"].value<std::string>()) g.loaded_by = *by;
    if (std::string_view(key) == "dlopen" && g.loaded_by.empty())
      throw r::Error(fmt::format("{}: [dlopen.{}] needs by = \"SONAME\", the library that dlopens them",
                                 where(source, group->source()), name.str()));
    const auto* list = (*group)["sonames"].as_array();
    if (!list)
      throw r::Error(
          fmt::format("{}: [{}.{}] needs sonames = [\"...\"]", where(source, group->source()), key, name.str()));
    for (const auto& s : *list) {
      const auto v = s.value<std::string>();
      if (!v)
        throw r::Error(fmt::format("{}: [{}.{}] sonames must be strings", where(source, s.source()), key, name.str()));
      g.sonames.push_back(*v);
    }
    into[std::string(name.str())] = std::move(g);
  }
}

}  // namespace

void merge_knowledge(std::string_view text, const std::string& source, r::Knowledge& into) {
  toml::table doc;
  try {
    doc = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw r::Error(
        fmt::format("{}:{}:{}: {}", source, e.source().begin.line, e.source().begin.column, e.description()));
  }
  read_groups(doc, "driver", source, into.driver);
  read_groups(doc, "optional", source, into.optional);
  read_groups(doc, "dlopen", source, into.dlopen);
}

r::Knowledge builtin_knowledge() {
  r::Knowledge k;
  merge_knowledge(k_knowledge, "built-in knowledge.toml", k);
  return k;
}

}  // namespace cudafix::rules
