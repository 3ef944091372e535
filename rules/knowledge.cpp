#include "rules/knowledge.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include "knowledge_toml.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"

#include <charconv>

namespace cudafix::rules {
namespace r = cudafix::resolver;

namespace {

std::string where(const std::string& source, const toml::source_region& region) {
  return fmt::format("{}:{}", source, region.begin.line);
}

std::vector<std::string> string_list(const toml::node& node, const std::string& what, const std::string& source) {
  const auto* list = node.as_array();
  if (!list) throw r::Error(fmt::format("{}: {} must be a list of strings", where(source, node.source()), what));
  std::vector<std::string> out;
  for (const auto& item : *list) {
    const auto v = item.value<std::string>();
    if (!v) throw r::Error(fmt::format("{}: {} must be a list of strings", where(source, item.source()), what));
    out.push_back(*v);
  }
  return out;
}

int major_key(std::string_view key, const toml::node& node, const std::string& what, const std::string& source) {
  int major = 0;
  const auto [p, ec] = std::from_chars(key.data(), key.data() + key.size(), major);
  if (ec != std::errc() || p != key.data() + key.size() || major <= 0)
    throw r::Error(
        fmt::format("{}: {}: '{}' is not a CUDA major (12, 13, ...)", where(source, node.source()), what, key));
  return major;
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
    if (auto since = (*group)["since"].value<std::string>()) g.since = *since;
    if (auto same = (*group)["same_dist"].value<bool>()) g.same_dist = *same;
    if (auto names = (*group)["release_names"].value<bool>()) g.release_names = *names;
    if (auto e = (*group)["missing_error"].value<std::string>()) g.missing_error = *e;
    if (auto e = (*group)["mismatch_error"].value<std::string>()) g.mismatch_error = *e;
    if (std::string_view(key) == "dlopen" && g.loaded_by.empty())
      throw r::Error(fmt::format("{}: [dlopen.{}] needs by = \"SONAME\", the library that dlopens them",
                                 where(source, group->source()), name.str()));
    const std::string what = fmt::format("[{}.{}]", key, name.str());
    const auto* list = (*group).get("sonames");
    const auto* by_major = (*group).get("sonames_by_major");
    if (!list && !by_major)
      throw r::Error(fmt::format("{}: {} needs sonames = [\"...\"]", where(source, group->source()), what));
    if (list) g.sonames = string_list(*list, what + " sonames", source);
    if (by_major) {
      if (std::string_view(key) != "dlopen")
        throw r::Error(fmt::format("{}: {} sonames_by_major is for [dlopen.*] groups only",
                                   where(source, by_major->source()), what));
      const auto* majors = by_major->as_table();
      if (!majors)
        throw r::Error(fmt::format("{}: {} sonames_by_major must be a table: {{ 12 = [...], 13 = [...] }}",
                                   where(source, by_major->source()), what));
      for (const auto& [major, names] : *majors)
        g.sonames_by_major[major_key(major.str(), names, what + " sonames_by_major", source)] =
            string_list(names, fmt::format("{} sonames_by_major.{}", what, major.str()), source);
    }
    into[std::string(name.str())] = std::move(g);
  }
}

// [family.NAME.MAJOR] sonames = [...], folders = [...], dists = [...]
void read_families(const toml::table& doc, const std::string& source, std::map<std::string, r::CudaFamily>& into) {
  const auto* node = doc.get("family");
  if (!node) return;
  const auto* table = node->as_table();
  if (!table) throw r::Error(fmt::format("{}: [family] must be a table of families", where(source, node->source())));
  for (const auto& [name, value] : *table) {
    const auto* majors = value.as_table();
    if (!majors)
      throw r::Error(
          fmt::format("{}: [family.{}] must hold one table per CUDA major", where(source, value.source()), name.str()));
    r::CudaFamily& family = into[std::string(name.str())];
    family.name = std::string(name.str());
    for (const auto& [key, mv] : *majors) {
      const std::string what = fmt::format("[family.{}.{}]", name.str(), key.str());
      const int major = major_key(key.str(), mv, what, source);
      const auto* t = mv.as_table();
      if (!t) throw r::Error(fmt::format("{}: {} must be a table", where(source, mv.source()), what));
      r::FamilyMajor m;
      for (auto [field, list] : {std::pair{"sonames", &m.sonames}, {"folders", &m.folders}, {"dists", &m.dists}})
        if (const auto* n = t->get(field)) *list = string_list(*n, what + " " + field, source);
      for (auto& d : m.dists) d = r::normalize_name(d);
      if (m.sonames.empty())
        throw r::Error(fmt::format("{}: {} needs sonames = [...]", where(source, mv.source()), what));
      family.majors[major] = std::move(m);
    }
  }
}

void read_extras(const toml::table& doc, const std::string& source, r::Knowledge& into) {
  if (const auto* node = doc.get("minimum_driver")) {
    const auto* t = node->as_table();
    if (!t)
      throw r::Error(
          fmt::format("{}: [minimum_driver] must map CUDA majors to versions", where(source, node->source())));
    for (const auto& [key, v] : *t) {
      const auto version = v.value<std::string>();
      if (!version)
        throw r::Error(fmt::format("{}: minimum_driver.{} must be a string", where(source, v.source()), key.str()));
      into.minimum_driver[major_key(key.str(), v, "[minimum_driver]", source)] = *version;
    }
  }
  if (const auto* node = doc.at_path("harmless.shared_paths").node())
    for (auto& p : string_list(*node, "harmless.shared_paths", source)) into.harmless_shared_paths.push_back(p);
  if (const auto* node = doc.at_path("meta.packages").node())
    for (auto& p : string_list(*node, "meta.packages", source)) into.meta_packages.push_back(r::normalize_name(p));
}

}  // namespace

void merge_knowledge(const toml::table& doc, const std::string& source, r::Knowledge& into) {
  read_groups(doc, "driver", source, into.driver);
  read_groups(doc, "optional", source, into.optional);
  read_groups(doc, "dlopen", source, into.dlopen);
  read_families(doc, source, into.families);
  read_extras(doc, source, into);
}

r::Knowledge builtin_knowledge() {
  r::Knowledge k;
  merge_knowledge(r::parse_toml(k_knowledge, "built-in knowledge.toml"), "built-in knowledge.toml", k);
  return k;
}

}  // namespace cudafix::rules
