#include "installer/source/index.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "installer/source/http.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::installer::source {
namespace r = cudafix::resolver;

namespace {

// The URL without its fragment, and the fragment's sha256 where it names one.
void take_fragment(IndexFile& f) {
  const auto hash = f.url.find('#');
  if (hash == std::string::npos) return;
  const std::string fragment = f.url.substr(hash + 1);
  f.url.resize(hash);
  if (fragment.starts_with("sha256=") && f.sha256.empty()) f.sha256 = fragment.substr(7);
}

std::string file_name_of(const std::string& url) {
  std::string path = url.substr(0, url.find_first_of("?#"));
  return path.substr(path.rfind('/') + 1);
}

// The JSON kind of a value, as an error names it: "a number", "an array".
std::string kind_of(const nlohmann::json& v) {
  const std::string name = v.type_name();
  return (name == "array" || name == "object" ? "an " : "a ") + name;
}

// An optional string field of `obj`: nullopt when absent or null, and a refusal naming the
// field (and where it is) when it holds another kind.
std::optional<std::string> string_field(const nlohmann::json& obj, const char* key, const std::string& page_url,
                                        const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string())
    throw r::Error(fmt::format("{}: {}\"{}\" is {}, not a string", redact(page_url), where, key, kind_of(*it)));
  return it->get<std::string>();
}

ProjectPage parse_json(std::string_view body, const std::string& page_url) {
  const auto doc = nlohmann::json::parse(body, nullptr, false);
  if (!doc.is_object()) throw r::Error(fmt::format("{}: the index's JSON page is not valid JSON", redact(page_url)));
  std::string api;
  if (const auto meta = doc.find("meta"); meta != doc.end() && meta->is_object())
    api = string_field(*meta, "api-version", page_url, "meta's ").value_or("");
  if (!api.empty() && !api.starts_with("1."))
    throw r::Error(fmt::format("{}: the index speaks Simple API {}; cudafix reads 1.x", redact(page_url), api));
  ProjectPage page;
  page.format = "json";
  if (!doc.contains("files") || !doc["files"].is_array())
    throw r::Error(fmt::format("{}: the index's JSON page has no files list", redact(page_url)));
  std::size_t n = 0;
  for (const auto& f : doc["files"]) {
    const std::string where = fmt::format("file {}'s ", ++n);
    if (!f.is_object() || !f.contains("url") || !f["url"].is_string())
      throw r::Error(fmt::format("{}: a file of the index's JSON page has no url", redact(page_url)));
    IndexFile file;
    file.url = resolve_url(page_url, f["url"].get<std::string>());
    file.filename = string_field(f, "filename", page_url, where).value_or("");
    if (const auto hashes = f.find("hashes"); hashes != f.end() && !hashes->is_null()) {
      if (!hashes->is_object())
        throw r::Error(fmt::format("{}: {}\"hashes\" is {}, not an object", redact(page_url), where, kind_of(*hashes)));
      file.sha256 = string_field(*hashes, "sha256", page_url, where + "hashes' ").value_or("");
    }
    file.requires_python = string_field(f, "requires-python", page_url, where).value_or("");
    if (const auto yanked = f.find("yanked"); yanked != f.end() && !yanked->is_null()) {
      if (yanked->is_string()) {
        file.yanked = true;
        file.yanked_reason = yanked->get<std::string>();
      } else if (yanked->is_boolean()) {
        file.yanked = yanked->get<bool>();
      } else {
        throw r::Error(fmt::format("{}: {}\"yanked\" is {}, not a boolean or a string", redact(page_url), where,
                                   kind_of(*yanked)));
      }
    }
    take_fragment(file);
    if (file.filename.empty()) file.filename = file_name_of(file.url);
    page.files.push_back(std::move(file));
  }
  return page;
}

std::string unescape_html(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const auto semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 10) {
      out += s[i];
      continue;
    }
    const std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp")
      out += '&';
    else if (ent == "lt")
      out += '<';
    else if (ent == "gt")
      out += '>';
    else if (ent == "quot")
      out += '"';
    else if (ent == "apos")
      out += '\'';
    else if (ent.starts_with("#x") || ent.starts_with("#X"))
      out += static_cast<char>(std::strtol(std::string(ent.substr(2)).c_str(), nullptr, 16));
    else if (ent.starts_with("#"))
      out += static_cast<char>(std::strtol(std::string(ent.substr(1)).c_str(), nullptr, 10));
    else {
      out += s.substr(i, semi - i + 1);
    }
    i = semi;
  }
  return out;
}

// The attributes of one tag's text (`a href="..." data-yanked`): lower-cased names, values
// unescaped; a bare attribute has an empty value.
std::vector<std::pair<std::string, std::optional<std::string>>> attributes(std::string_view tag) {
  std::vector<std::pair<std::string, std::optional<std::string>>> out;
  std::size_t i = 0;
  while (i < tag.size() && !std::isspace(static_cast<unsigned char>(tag[i]))) ++i;  // the tag's name
  while (i < tag.size()) {
    while (i < tag.size() && (std::isspace(static_cast<unsigned char>(tag[i])) || tag[i] == '/')) ++i;
    std::size_t start = i;
    while (i < tag.size() && tag[i] != '=' && !std::isspace(static_cast<unsigned char>(tag[i]))) ++i;
    std::string name(tag.substr(start, i - start));
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    while (i < tag.size() && std::isspace(static_cast<unsigned char>(tag[i]))) ++i;
    std::optional<std::string> value;
    if (i < tag.size() && tag[i] == '=') {
      ++i;
      while (i < tag.size() && std::isspace(static_cast<unsigned char>(tag[i]))) ++i;
      if (i < tag.size() && (tag[i] == '"' || tag[i] == '\'')) {
        const char q = tag[i++];
        start = i;
        while (i < tag.size() && tag[i] != q) ++i;
        value = unescape_html(tag.substr(start, i - start));
        ++i;
      } else {
        start = i;
        while (i < tag.size() && !std::isspace(static_cast<unsigned char>(tag[i]))) ++i;
        value = unescape_html(tag.substr(start, i - start));
      }
    }
    if (!name.empty()) out.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

ProjectPage parse_html(std::string_view body, const std::string& page_url) {
  ProjectPage page;
  page.format = "html";
  std::string base = page_url;
  for (std::size_t at = 0; (at = body.find('<', at)) != std::string_view::npos;) {
    const auto end = body.find('>', at);
    if (end == std::string_view::npos) break;
    const std::string_view tag = body.substr(at + 1, end - at - 1);
    const auto name_end = tag.find_first_of(" \t\r\n/");
    std::string name(tag.substr(0, name_end));
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (name == "base") {
      for (const auto& [k, v] : attributes(tag))
        if (k == "href" && v) base = resolve_url(page_url, *v);
    } else if (name == "a") {
      IndexFile file;
      bool has_href = false;
      for (const auto& [k, v] : attributes(tag)) {
        if (k == "href" && v) {
          file.url = resolve_url(base, *v);
          has_href = true;
        } else if (k == "data-requires-python" && v) {
          file.requires_python = *v;
        } else if (k == "data-yanked") {
          file.yanked = true;
          file.yanked_reason = v.value_or("");
        }
      }
      if (has_href) {
        take_fragment(file);
        file.filename = file_name_of(file.url);
        page.files.push_back(std::move(file));
      }
    }
    at = end + 1;
  }
  return page;
}

bool pins_exactly(const r::SpecifierSet& s, const std::string& version) {
  const auto v = r::Version::parse(version);
  for (const auto& c : s.clauses()) {
    if (c.op() == "===" && c.version_text() == version) return true;
    if (c.op() != "==" || c.version_text().ends_with(".*")) continue;
    const auto pinned = r::Version::parse(c.version_text());
    if (pinned && v && *pinned == *v) return true;
  }
  return false;
}

}  // namespace

std::string project_url(const std::string& index_url, const std::string& normalized_name) {
  std::string base = index_url;
  while (base.ends_with("/")) base.pop_back();
  return base + "/" + normalized_name + "/";
}

ProjectPage parse_project_page(std::string_view body, const std::string& content_type, const std::string& page_url) {
  std::string type = content_type.substr(0, content_type.find(';'));
  type = std::string(r::trim(type));
  std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return std::tolower(c); });
  if (type == "application/vnd.pypi.simple.v1+json" || type == "application/json") {
    // Every field is read by kind above; a JSON error that still escapes is the page's fault,
    // not a reason to stop planning from the other indexes.
    try {
      return parse_json(body, page_url);
    } catch (const nlohmann::json::exception& e) {
      throw r::Error(fmt::format("{}: the index's JSON page is malformed ({})", redact(page_url), e.what()));
    }
  }
  if (type.empty() || type == "text/html" || type == "application/vnd.pypi.simple.v1+html")
    return parse_html(body, page_url);
  throw r::Error(fmt::format("{}: the index answered with {}, not a Simple API page", redact(page_url), type));
}

std::optional<Picked> pick_wheel(const std::vector<IndexFile>& files, const std::string& normalized_name,
                                 const r::SpecifierSet& accepts, const std::string& python_version,
                                 const std::vector<std::string>& supported_tags,
                                 std::vector<std::string>* passed_over) {
  const auto python = r::Version::parse(python_version);
  std::optional<Picked> best;
  std::optional<r::Version> best_version;
  std::size_t best_rank = 0;
  const auto pass = [&](const IndexFile& f, const std::string& why) {
    if (passed_over) passed_over->push_back(fmt::format("{} ({})", f.filename, why));
  };
  for (const auto& f : files) {
    const auto wheel = r::parse_wheel_name(f.filename);
    if (!wheel || wheel->normalized != normalized_name) continue;  // an sdist, or another project's file
    const auto v = r::Version::parse(wheel->version);
    if (!v || !accepts.contains(*v)) continue;
    if (f.yanked && !pins_exactly(accepts, wheel->version)) {
      pass(f, f.yanked_reason.empty() ? "yanked" : "yanked: " + f.yanked_reason);
      continue;
    }
    if (!f.requires_python.empty() && python) {
      const auto rp = r::SpecifierSet::parse(f.requires_python);
      if (rp && !rp->contains(*python, true)) {
        pass(f, fmt::format("requires Python {}; this is {}", f.requires_python, python_version));
        continue;
      }
    }
    std::size_t rank = supported_tags.size();
    for (const auto& t : wheel->tags) {
      const auto it = std::find(supported_tags.begin(), supported_tags.end(), t);
      if (it != supported_tags.end()) rank = std::min(rank, static_cast<std::size_t>(it - supported_tags.begin()));
    }
    if (rank == supported_tags.size()) {
      pass(f, "no tag this interpreter supports");
      continue;
    }
    if (!best || *best_version < *v || (*best_version == *v && rank < best_rank)) {
      best = Picked{f, *wheel};
      best_version = v;
      best_rank = rank;
    }
  }
  return best;
}

}  // namespace cudafix::installer::source
