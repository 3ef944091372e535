// A package index's Simple API: a project's page as PEP 691 JSON
// (application/vnd.pypi.simple.v1+json) or, where the index serves only that, PEP 503 HTML;
// each file's URL (resolved against the page), its hashes (PEP 691's `hashes`, or the URL's
// `#sha256=` fragment), `requires-python` (PEP 503's `data-requires-python`) and yanked state
// (PEP 592); and the wheel pip would pick from them for this interpreter.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "resolver/pep/pep440.hpp"
#include "resolver/pep/wheel_name.hpp"

namespace cudafix::installer::source {

// What the Accept header asks for: JSON first, HTML where the index has no JSON.
inline constexpr const char* k_simple_accept =
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1";

struct IndexFile {
  std::string filename;
  std::string url;     // absolute, its fragment dropped
  std::string sha256;  // hex; empty when the index gives none
  std::string requires_python;
  bool yanked = false;
  std::string yanked_reason;
};

struct ProjectPage {
  std::string format;  // "json" or "html"
  std::vector<IndexFile> files;
};

// The file name a URL's path ends with, percent-decoded as pip's Link.filename is
// (".../torch-2.7.0%2Bcu128-cp312-....whl" names torch-2.7.0+cu128-cp312-....whl); nullopt when
// the decoded name is no single file name (empty, "." or "..", a '/', a '\\', a control byte:
// an index is hostile input, and the name is joined into cache paths). The URL stays as served.
[[nodiscard]] std::optional<std::string> file_name_in_url(std::string_view url);

// %XX decoded, as Python's urllib.parse.unquote does (a % not followed by two hex digits is kept).
[[nodiscard]] std::string percent_decoded(std::string_view s);

// `<index>/<normalized name>/`.
[[nodiscard]] std::string project_url(const std::string& index_url, const std::string& normalized_name);

// Reads a project page by its Content-Type; throws resolver::Error naming `page_url` (redacted)
// and what is wrong: malformed JSON, an api-version of major other than 1, a file with no URL, a
// field of the wrong kind (named, with the file's place in the list: `file 3's "yanked" is a
// number, not a boolean or a string`).
[[nodiscard]] ProjectPage parse_project_page(std::string_view body, const std::string& content_type,
                                             const std::string& page_url);

struct Picked {
  IndexFile file;
  resolver::WheelName wheel;
};

// The wheel pip would pick among `files`: a wheel whose version `accepts` admits (pre-releases
// only when it names one), whose requires-python `python_version` meets, with a tag this
// interpreter supports; the highest version, then the most specific tag. A yanked file is taken
// only when `accepts` pins exactly its version (PEP 592). Why each near miss was passed over goes
// to `passed_over` (for the message when nothing is picked).
[[nodiscard]] std::optional<Picked> pick_wheel(const std::vector<IndexFile>& files, const std::string& normalized_name,
                                               const resolver::SpecifierSet& accepts, const std::string& python_version,
                                               const std::vector<std::string>& supported_tags,
                                               std::vector<std::string>* passed_over = nullptr);

}  // namespace cudafix::installer::source
