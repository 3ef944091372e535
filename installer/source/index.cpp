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

// A name an index gave is joined into cache paths and compared with a wheel's metadata: one
// path component of printable bytes, as a wheel's name always is.
bool valid_file_name(std::string_view name) {
  return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
         std::none_of(name.begin(), name.end(), [](char ch) {
           const auto u = static_cast<unsigned char>(ch);
           return u < 0x20 || u == 0x7f || ch == '/' || ch == '\\';
         });
}

int hex_digit(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

}  // namespace

std::string percent_decoded(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

namespace {

// The file name of an index's entry: its own (PEP 691's "filename"), else its URL's; empty when
// it is not a valid one (the file is then no wheel to anyone).
std::string checked_name(const std::optional<std::string>& given, const std::string& url) {
  if (given) return valid_file_name(*given) ? *given : std::string();
  return file_name_in_url(url).value_or("");
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
    const auto given_name = string_field(f, "filename", page_url, where);
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
    file.filename = checked_name(given_name, file.url);
    page.files.push_back(std::move(file));
  }
  return page;
}

// A code point as UTF-8; NUL, a surrogate or one past U+10FFFF is U+FFFD, as HTML5 reads it.
void append_utf8(std::string& out, unsigned long cp) {
  if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A numeric character reference's digits ("62", "x3E"), or nullopt when they are none.
std::optional<unsigned long> code_point_of(std::string_view ent) {
  const bool hex = ent.starts_with("x") || ent.starts_with("X");
  const std::string_view digits = ent.substr(hex ? 1 : 0);
  if (digits.empty() || digits.size() > 8) return std::nullopt;
  unsigned long cp = 0;
  for (const char ch : digits) {
    const int d = hex ? hex_digit(ch) : (ch >= '0' && ch <= '9' ? ch - '0' : -1);
    if (d < 0) return std::nullopt;
    cp = cp * (hex ? 16 : 10) + static_cast<unsigned long>(d);
  }
  return cp;
}

// HTML character references: the named ones a Simple page uses, and every numeric one, to UTF-8.
std::string unescape_html(std::string_view s) {
  static const std::pair<std::string_view, std::string_view> k_named[] = {
      {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}, {"nbsp", "\xC2\xA0"}};
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto semi = s[i] == '&' ? s.find(';', i) : std::string_view::npos;
    if (semi == std::string_view::npos || semi - i > 12) {
      out += s[i];
      continue;
    }
    const std::string_view ent = s.substr(i + 1, semi - i - 1);
    const auto named =
        std::find_if(std::begin(k_named), std::end(k_named), [&](const auto& n) { return n.first == ent; });
    if (named != std::end(k_named)) {
      out += named->second;
    } else if (const auto cp = ent.starts_with("#") ? code_point_of(ent.substr(1)) : std::nullopt) {
      append_utf8(out, *cp);
    } else {
      out += s[i];
      continue;
    }
    i = semi;
  }
  return out;
}

bool is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f'; }

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// One start tag, as HTML5's tokenizer reads it: its name and attributes (names lower-cased,
// values unescaped, a bare attribute without a value), and where the tag ends. A quoted value
// holds any '>' ("data-requires-python=">=3.13""); an unquoted one ends at white space or '>'.
struct Tag {
  std::string name;
  std::vector<std::pair<std::string, std::optional<std::string>>> attributes;
  std::size_t end = 0;  // just past its '>'
};

Tag read_tag(std::string_view s, std::size_t lt) {
  Tag tag;
  std::size_t i = lt + 1;
  const std::size_t name_start = i;
  while (i < s.size() && !is_space(s[i]) && s[i] != '/' && s[i] != '>') ++i;
  tag.name = lower(s.substr(name_start, i - name_start));
  while (true) {
    while (i < s.size() && (is_space(s[i]) || s[i] == '/')) ++i;
    if (i >= s.size()) {
      tag.end = s.size();
      return tag;
    }
    if (s[i] == '>') {
      tag.end = i + 1;
      return tag;
    }
    const std::size_t start = i++;  // a name's first character may be anything, '=' included
    while (i < s.size() && !is_space(s[i]) && s[i] != '/' && s[i] != '>' && s[i] != '=') ++i;
    std::string name = lower(s.substr(start, i - start));
    std::size_t j = i;
    while (j < s.size() && is_space(s[j])) ++j;
    std::optional<std::string> value;
    if (j < s.size() && s[j] == '=') {
      i = j + 1;
      while (i < s.size() && is_space(s[i])) ++i;
      if (i < s.size() && (s[i] == '"' || s[i] == '\'')) {
        const auto close = s.find(s[i], i + 1);
        const std::size_t vstart = i + 1;
        i = close == std::string_view::npos ? s.size() : close + 1;
        value = unescape_html(s.substr(vstart, (close == std::string_view::npos ? s.size() : close) - vstart));
      } else {
        const std::size_t vstart = i;
        while (i < s.size() && !is_space(s[i]) && s[i] != '>') ++i;
        value = unescape_html(s.substr(vstart, i - vstart));
      }
    }
    tag.attributes.emplace_back(std::move(name), std::move(value));
  }
}

ProjectPage parse_html(std::string_view body, const std::string& page_url) {
  ProjectPage page;
  page.format = "html";
  std::string base = page_url;
  for (std::size_t at = 0; (at = body.find('<', at)) != std::string_view::npos;) {
    if (body.substr(at, 4) == "<!--") {  // a comment ends at -->, whatever it holds
      const auto close = body.find("-->", at + 4);
      at = close == std::string_view::npos ? body.size() : close + 3;
      continue;
    }
    const char next = at + 1 < body.size() ? body[at + 1] : '\0';
    if (next == '/' || next == '!' || next == '?') {  // an end tag, a doctype: nothing to read
      const auto close = body.find('>', at);
      at = close == std::string_view::npos ? body.size() : close + 1;
      continue;
    }
    if (!std::isalpha(static_cast<unsigned char>(next))) {  // a '<' in text
      ++at;
      continue;
    }
    Tag tag = read_tag(body, at);
    at = tag.end;
    if (tag.name == "base") {
      for (const auto& [k, v] : tag.attributes)
        if (k == "href" && v) base = resolve_url(page_url, *v);
    } else if (tag.name == "a") {
      IndexFile file;
      bool has_href = false;
      for (const auto& [k, v] : tag.attributes) {
        if (k == "href" && v && !has_href) {  // the first of a repeated attribute counts, as in HTML5
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
        file.filename = checked_name(std::nullopt, file.url);
        page.files.push_back(std::move(file));
      }
    }
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

std::optional<std::string> file_name_in_url(std::string_view url) {
  const std::string_view path = url.substr(0, url.find_first_of("?#"));
  std::string name = percent_decoded(path.substr(path.rfind('/') + 1));
  if (!valid_file_name(name)) return std::nullopt;
  return name;
}

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
    const auto ranked = r::tag_rank(*wheel, supported_tags);
    if (!ranked) {
      pass(f, "no tag this interpreter supports");
      continue;
    }
    const std::size_t rank = *ranked;
    if (!best || *best_version < *v || (*best_version == *v && rank < best_rank)) {
      best = Picked{f, *wheel};
      best_version = v;
      best_rank = rank;
    }
  }
  return best;
}

}  // namespace cudafix::installer::source
