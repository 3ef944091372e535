// The installed-distribution model: one `*.dist-info` folder, as pip and uv write it.
//
// On-disk formats read here (PEP 376, PEP 566, PEP 610, the wheel spec):
//   METADATA   RFC 822 headers (continuation lines start with whitespace), a blank line, a body.
//   RECORD     CSV (Python's csv module, excel dialect: `"` quotes, `""` escapes, CRLF or LF),
//              one row per installed file: path relative to the folder holding the dist-info,
//              `algo=urlsafe-base64-digest-without-padding` or empty, size in bytes or empty.
//              Paths may climb out of site-packages (`../../../bin/tool`) but never out of the
//              environment; rows that do are reported and ignored. A RECORD that is not UTF-8,
//              holds a NUL byte, or has text but no row that parses cannot be read at all
//              (pip's csv reader fails on it too): its `problem` says why, and the dist's files
//              are unknown (`cudafix remove` refuses it, doctor's unreadable-record reports it).
//   INSTALLER  the installer's name on the first line (pip, uv, conda, ...).
//   REQUESTED  present when the user asked for the dist by name.
//   WHEEL      RFC 822 headers: Wheel-Version, Generator, Root-Is-Purelib, Tag.
//   direct_url.json  PEP 610: where a dist installed from a URL or a local folder came from.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "resolver/base/diagnostic.hpp"

namespace cudafix::resolver::inline env {

// RECORD's text, kept whole so that rows can point into it (68,000 rows, no copies).
struct RecordStorage {
  std::string text;
  std::deque<std::string> unescaped;  // quoted fields that held `""`
};

// 48 bytes, not the 72 of a view per field and an optional size: a venv has 70,000 rows, and
// the memory they take is fresh, each page cleared by the kernel first.
struct RecordRow {
  std::string_view path;  // as written in RECORD (points into RecordStorage)
  std::string_view hash;  // urlsafe base64, padding removed; in RECORD right after "algo="
  std::uint64_t size_value = 0;
  std::uint32_t line = 0;  // 1-based line in RECORD, for diagnostics
  std::uint8_t algo_length = 0;
  bool has_size = false;

  // "sha256", or empty when the row has no hash.
  [[nodiscard]] std::string_view hash_algo() const {
    return algo_length == 0 ? std::string_view() : std::string_view(hash.data() - 1 - algo_length, algo_length);
  }
  [[nodiscard]] std::optional<std::uint64_t> size() const {
    return has_size ? std::optional<std::uint64_t>(size_value) : std::nullopt;
  }
};
static_assert(sizeof(RecordRow) == 48);

struct Metadata {
  std::string name;
  std::string version;
  std::optional<std::string> requires_python;
  std::vector<std::string> requires_dist;
  std::vector<std::string> provides_extra;
};

struct ParsedRecord {
  std::shared_ptr<const RecordStorage> storage;
  std::vector<RecordRow> rows;
  std::vector<Diagnostic> diagnostics;
  std::string problem;  // why the whole file cannot be read; empty when it can
};

struct ParsedMetadata {
  Metadata metadata;
  std::vector<Diagnostic> diagnostics;
};

// The largest dist-info file read (METADATA, RECORD, ...): torch's RECORD is a few MB, and a
// sparse file planted there costs its planter nothing at any size.
inline constexpr std::uint64_t k_max_dist_info_file_bytes = std::uint64_t{256} << 20;

// Parses RECORD text; `file` names the input in diagnostics. Never throws on bad input.
[[nodiscard]] ParsedRecord parse_record(std::string text, const std::string& file);
// Parses METADATA (or any RFC 822 header block); stops at the first blank line.
[[nodiscard]] ParsedMetadata parse_metadata(std::string_view text, const std::string& file);
// The value of one header in an RFC 822 block (first occurrence), e.g. WHEEL's Root-Is-Purelib.
[[nodiscard]] std::optional<std::string> header_value(std::string_view text, std::string_view key);
// The project name a Requires-Dist line is about ("cuda-toolkit[cublas]==13.0.2; ..." ->
// "cuda-toolkit"), normalised; empty when the line names none.
[[nodiscard]] std::string requirement_name(std::string_view requirement);

// Which scheme directory a dist lives in; `system` is a base interpreter's site dir seen through
// include-system-site-packages (read-only: cudafix never changes it).
// What a Requires-Dist line says for import order: the project, the extras it asks of it, and
// the extras of the requiring dist that gate it (from `extra == "..."` in its marker).
// Other marker clauses are not evaluated here.
struct RequirementRef {
  std::string name;                   // normalised
  std::vector<std::string> extras;    // normalised
  std::vector<std::string> gated_by;  // normalised; empty: always applies
};
[[nodiscard]] RequirementRef requirement_ref(std::string_view line);

// Which scheme directory a dist lives in; `system` is a base interpreter's site dir seen through
// include-system-site-packages (read-only: cudafix never changes it).
enum class SiteRoot { purelib, platlib, system };
[[nodiscard]] std::string_view to_string(SiteRoot root);

// What kind of folder or file a dist's metadata is (resolver/env/egg_info.hpp has the egg kinds).
enum class DistFormat { dist_info, egg_info, egg_info_file, egg_link };
[[nodiscard]] std::string_view to_string(DistFormat f);

struct DistInfo {
  std::string dir_name;  // "torch-2.11.0.dist-info": the dist's identity in JSON
  DistFormat format = DistFormat::dist_info;
  std::string site_dir;  // absolute folder holding the dist-info (RECORD paths are relative to it)
  SiteRoot root = SiteRoot::platlib;
  std::string name;        // as METADATA spells it
  std::string normalized;  // PEP 503
  std::string version;
  Metadata metadata;
  std::shared_ptr<const RecordStorage> record_storage;  // what `record` points into
  std::vector<RecordRow> record;
  bool has_record = false;
  std::string record_problem;  // why RECORD cannot be read at all (ParsedRecord::problem); empty when it can
  std::string installer;       // first line of INSTALLER, empty when absent
  bool requested = false;
  std::optional<std::string> wheel_generator;
  std::optional<bool> root_is_purelib;
  std::vector<std::string> wheel_tags;
  std::optional<std::string> direct_url;         // PEP 610 "url"
  std::optional<std::string> direct_url_sha256;  // PEP 610 archive_info's sha256 (hex), when given
  std::vector<RequirementRef> requirements;      // metadata.requires_dist, parsed once
  std::string develop_path;                      // egg_link: the project folder it points at

  // The file its rows come from: RECORD, or an egg-info folder's installed-files.txt.
  [[nodiscard]] std::string record_name() const {
    return format == DistFormat::dist_info ? "RECORD" : "installed-files.txt";
  }
};

// "torch 2.11.0": a dist as messages name it.
[[nodiscard]] std::string dist_label(const DistInfo& d);

struct ReadDistInfo {
  DistInfo dist;
  std::vector<Diagnostic> diagnostics;
};

// Reads one dist-info folder. Missing or broken files become diagnostics; the dist is still
// returned (a dist with no METADATA takes its name and version from the folder name).
// Without `with_record`, RECORD is not read (a requirements-only check needs METADATA alone).
enum class ReadRecord { yes, no };
[[nodiscard]] ReadDistInfo read_dist_info(const std::string& site_dir, const std::string& dir_name, SiteRoot root,
                                          ReadRecord with_record = ReadRecord::yes);

}  // namespace cudafix::resolver::inline env
