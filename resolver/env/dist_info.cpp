#include "resolver/env/dist_info.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstring>
#include <filesystem>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline env {
namespace {

constexpr auto k_urlsafe_b64 = [] {
  std::array<std::uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c)
    t[static_cast<std::size_t>(c)] =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '=';
  return t;
}();

// Without a branch per character: the obvious loop's branches were two thirds of parsing RECORD
// (69,000 hashes of 43 characters in a venv). Sixteen characters at a time where SSE2 is there,
// then one table load per character.
bool is_urlsafe_b64(std::string_view s) {
  std::uint8_t all = 1;
  std::size_t i = 0;
#if defined(__SSE2__)
  auto in = [](__m128i v, char lo, char hi) {
    return _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8(static_cast<char>(lo - 1))),
                         _mm_cmplt_epi8(v, _mm_set1_epi8(static_cast<char>(hi + 1))));
  };
  for (; i + 16 <= s.size(); i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.data() + i));
    const __m128i ok = _mm_or_si128(
        _mm_or_si128(in(v, 'A', 'Z'), in(v, 'a', 'z')),
        _mm_or_si128(_mm_or_si128(in(v, '0', '9'), _mm_cmpeq_epi8(v, _mm_set1_epi8('-'))),
                     _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('_')), _mm_cmpeq_epi8(v, _mm_set1_epi8('=')))));
    if (_mm_movemask_epi8(ok) != 0xFFFF) return false;
  }
#endif
  for (; i < s.size(); ++i) all &= k_urlsafe_b64[static_cast<unsigned char>(s[i])];
  return all != 0 && !s.empty();
}

// Where RECORD's next comma, newline, quote, CR or NUL is, found 64 bytes at a time: one pass of
// compares over the text, then a bit scan per character found. Splitting each row with memchr
// (its newline, then each comma, then checks for quotes, CRs and NULs) took half of reading
// dist-info: nine calls per 90-byte row, each mostly call overhead.
class SpecialChars {
 public:
  explicit SpecialChars(std::string_view text) : text_(text) {}

  // The first special character at or after `pos`, or npos.
  std::size_t next(std::size_t pos) {
    while (pos < text_.size()) {
      const std::size_t block = pos & ~std::size_t{63};
      if (block != block_) {
        block_ = block;
        mask_ = classify(block);
      }
      const std::uint64_t rest = mask_ >> (pos - block);
      if (rest != 0) return pos + static_cast<std::size_t>(__builtin_ctzll(rest));
      pos = block + 64;
    }
    return std::string_view::npos;
  }

 private:
  std::uint64_t classify(std::size_t block) const {
    const std::size_t n = std::min<std::size_t>(64, text_.size() - block);
    if (n < 64) {
      std::uint64_t m = 0;
      for (std::size_t i = 0; i < n; ++i)
        if (special(text_[block + i])) m |= std::uint64_t{1} << i;
      return m;
    }
    const char* p = text_.data() + block;
#if defined(__SSE2__)
    std::uint64_t m = 0;
    for (std::size_t part = 0; part < 4; ++part) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * part));
      const __m128i hit = _mm_or_si128(
          _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(',')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\n'))),
          _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\r'))),
                       _mm_cmpeq_epi8(v, _mm_setzero_si128())));
      m |= static_cast<std::uint64_t>(static_cast<std::uint16_t>(_mm_movemask_epi8(hit))) << (16 * part);
    }
    return m;
#else
    std::uint64_t m = 0;
    for (std::size_t i = 0; i < 64; ++i)
      if (special(p[i])) m |= std::uint64_t{1} << i;
    return m;
#endif
  }
  static bool special(char c) { return c == ',' || c == '\n' || c == '"' || c == '\r' || c == '\0'; }

  std::string_view text_;
  std::size_t block_ = std::string_view::npos;
  std::uint64_t mask_ = 0;
};

// Where the usual row's three fields lie: [begin, first), (first, second) and (second, stop).
struct FieldBounds {
  std::size_t begin, first, second, stop;
};

// The usual row: three fields and a newline, a CR LF or the end, with no quote, other CR or NUL
// in it. Sets `bounds` and returns true, or returns false without moving when the CSV parser
// must take it. Offsets rather than views: views written to an array and read back whole stalled
// the store forwarding of every field, a quarter of parsing RECORD.
bool next_plain_row(std::string_view text, SpecialChars& special, std::size_t& pos, FieldBounds& bounds) {
  const std::size_t first = special.next(pos);
  if (first == std::string_view::npos || text[first] != ',') return false;
  const std::size_t second = special.next(first + 1);
  if (second == std::string_view::npos || text[second] != ',') return false;
  const std::size_t end = special.next(second + 1);
  if (end == std::string_view::npos) {
    bounds = {pos, first, second, text.size()};
    pos = text.size();
    return true;
  }
  const bool crlf = text[end] == '\r' && end + 1 < text.size() && text[end + 1] == '\n';
  if (text[end] != '\n' && !crlf) return false;
  bounds = {pos, first, second, end};
  pos = end + (crlf ? 2 : 1);
  return true;
}

// One CSV record of RECORD, as views into `text` (quoted fields with `""` are unescaped into
// `storage`). Returns false at end of input. Sets `error` for an unterminated quote.
bool next_csv_row(std::string_view text, std::size_t& pos, std::size_t& line, std::vector<std::string_view>& fields,
                  std::deque<std::string>& storage, std::string& error) {
  fields.clear();
  error.clear();
  if (pos >= text.size()) return false;
  while (true) {
    std::string_view field;
    if (pos < text.size() && text[pos] == '"') {
      // Quoted: runs to the closing quote; `""` stands for one quote.
      const std::size_t start = ++pos;
      bool escaped = false;
      while (pos < text.size()) {
        if (text[pos] == '"') {
          if (pos + 1 < text.size() && text[pos + 1] == '"') {
            escaped = true;
            pos += 2;
            continue;
          }
          break;
        }
        if (text[pos] == '\n') ++line;
        ++pos;
      }
      if (pos >= text.size()) {
        error = "unterminated quoted field";
        fields.push_back(text.substr(start));
        return true;
      }
      field = text.substr(start, pos - start);
      ++pos;  // the closing quote
      if (escaped) {
        std::string u;
        for (std::size_t i = 0; i < field.size(); ++i) {
          u.push_back(field[i]);
          if (field[i] == '"') ++i;
        }
        storage.push_back(std::move(u));
        field = storage.back();
      }
      // Text after the closing quote belongs to the field too (csv module behaviour).
      const std::size_t tail = pos;
      while (pos < text.size() && text[pos] != ',' && text[pos] != '\n' && text[pos] != '\r') ++pos;
      if (pos > tail) {
        storage.push_back(std::string(field) + std::string(text.substr(tail, pos - tail)));
        field = storage.back();
      }
    } else {
      const std::size_t start = pos;
      while (pos < text.size() && text[pos] != ',' && text[pos] != '\n' && text[pos] != '\r') ++pos;
      field = text.substr(start, pos - start);
    }
    fields.push_back(field);
    if (pos >= text.size()) return true;
    const char c = text[pos];
    if (c == ',') {
      ++pos;
      continue;
    }
    if (c == '\r' && pos + 1 < text.size() && text[pos + 1] == '\n') ++pos;
    ++pos;
    return true;
  }
}

}  // namespace

std::string_view to_string(DistFormat f) {
  switch (f) {
    case DistFormat::dist_info:
      return "dist-info";
    case DistFormat::egg_info:
      return "egg-info";
    case DistFormat::egg_info_file:
      return "egg-info file";
    case DistFormat::egg_link:
      return "egg-link";
  }
  return "dist-info";
}

std::string_view to_string(SiteRoot root) {
  switch (root) {
    case SiteRoot::purelib:
      return "purelib";
    case SiteRoot::platlib:
      return "platlib";
    case SiteRoot::system:
      return "system";
  }
  return "platlib";
}

namespace {

// Why a RECORD's text cannot be read at all, or "" when it can: pip opens it as UTF-8 text and
// its csv reader stops at a NUL, so such a file lists nothing anyone can trust.
std::string unreadable_record(std::string_view text, bool no_rows) {
  if (const auto at = first_invalid_utf8(text); at != std::string_view::npos)
    return fmt::format("cannot be read: it is not UTF-8 (byte {:#04x} at offset {})",
                       static_cast<unsigned char>(text[at]), at);
  if (const auto at = text.find('\0'); at != std::string_view::npos)
    return fmt::format("cannot be read: it holds a NUL byte (at offset {})", at);
  if (no_rows && !trim(text).empty()) return "cannot be read: no row of it parses as path,hash,size";
  return "";
}

}  // namespace

ParsedRecord parse_record(std::string text_in, const std::string& file) {
  ParsedRecord out;
  auto storage = std::make_shared<RecordStorage>();
  storage->text = std::move(text_in);
  const std::string_view text = storage->text;
  std::size_t pos = 0;
  std::size_t line = 1;
  std::vector<std::string_view> fields;
  std::string error;
  SpecialChars special(text);
  // Rows run 90 bytes or so; short ones past this guess cost one copy as the vector grows.
  out.rows.reserve(text.size() / 80 + 1);
  while (true) {
    const std::size_t row_line = line;
    FieldBounds bounds{};
    const bool plain = pos < text.size() && next_plain_row(text, special, pos, bounds);
    if (!plain && !next_csv_row(text, pos, line, fields, storage->unescaped, error)) break;
    ++line;
    auto diag = [&](std::string msg) { out.diagnostics.push_back({file, row_line, std::nullopt, std::move(msg)}); };
    std::string_view path, hash, size;
    if (plain) {
      const char* p = text.data();
      path = std::string_view(p + bounds.begin, bounds.first - bounds.begin);
      hash = std::string_view(p + bounds.first + 1, bounds.second - bounds.first - 1);
      size = std::string_view(p + bounds.second + 1, bounds.stop - bounds.second - 1);
    } else {
      if (!error.empty()) {
        diag(error);
        break;
      }
      if (fields.size() == 1 && fields[0].empty()) continue;  // blank line
      if (fields.size() != 3) {
        diag(fmt::format("expected 3 fields (path,hash,size), found {}", fields.size()));
        continue;
      }
      path = fields[0];
      hash = fields[1];
      size = fields[2];
    }
    if (path.empty()) {
      diag("empty path");
      continue;
    }
    if (!plain && path.find('\0') != std::string_view::npos) {
      diag("path contains a NUL byte");
      continue;
    }
    RecordRow& row = out.rows.emplace_back();  // in place: copying a whole row stalled on its fields
    row.line = static_cast<std::uint32_t>(std::min<std::size_t>(row_line, UINT32_MAX));
    row.path = path;
    if (!hash.empty()) {
      const auto eq = hash.find('=');
      if (eq == std::string_view::npos || eq == 0 || eq > UINT8_MAX || !is_urlsafe_b64(hash.substr(eq + 1))) {
        diag(fmt::format("malformed hash '{}' (expected algo=urlsafe-base64)", to_valid_utf8(hash)));
      } else {
        row.algo_length = static_cast<std::uint8_t>(eq);
        row.hash = hash.substr(eq + 1);
        while (!row.hash.empty() && row.hash.back() == '=') row.hash.remove_suffix(1);
      }
    }
    if (!size.empty()) {
      std::uint64_t v = 0;
      const auto [p, ec] = std::from_chars(size.data(), size.data() + size.size(), v);
      if (ec != std::errc() || p != size.data() + size.size()) {
        diag(fmt::format("malformed size '{}'", to_valid_utf8(size)));
      } else {
        row.size_value = v;
        row.has_size = true;
      }
    }
  }
  out.problem = unreadable_record(text, out.rows.empty());
  out.storage = std::move(storage);
  return out;
}

namespace {

// Calls `on_header(key, value, line)` for each header of an RFC 822 block, unfolding
// continuation lines; stops at the first blank line.
template <class F>
void for_each_header(std::string_view text, const std::string& file, std::vector<Diagnostic>* diags, F&& on_header) {
  std::string key;
  std::string value;
  std::size_t key_line = 0;
  bool have = false;
  auto flush = [&] {
    if (have) on_header(key, std::string(trim(value)), key_line);
    have = false;
  };
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      if (pos > text.size() && !have) break;
      break;  // end of headers; the body follows
    }
    if (line.front() == ' ' || line.front() == '\t') {
      if (have) {
        value.push_back('\n');
        value.append(trim(line));
      } else if (diags) {
        diags->push_back({file, line_no, std::nullopt, "continuation line before any header"});
      }
      continue;
    }
    const auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      if (diags)
        diags->push_back(
            {file, line_no, std::nullopt, fmt::format("not a header line: '{}'", to_valid_utf8(line.substr(0, 80)))});
      continue;
    }
    flush();
    key.assign(line.substr(0, colon));
    value.assign(line.substr(colon + 1));
    key_line = line_no;
    have = true;
  }
  flush();
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

}  // namespace

ParsedMetadata parse_metadata(std::string_view text, const std::string& file) {
  ParsedMetadata out;
  auto& md = out.metadata;
  for_each_header(text, file, &out.diagnostics, [&](const std::string& key, std::string value, std::size_t) {
    if (iequals(key, "Name"))
      md.name = std::move(value);
    else if (iequals(key, "Version"))
      md.version = std::move(value);
    else if (iequals(key, "Requires-Python"))
      md.requires_python = std::move(value);
    else if (iequals(key, "Requires-Dist"))
      md.requires_dist.push_back(std::move(value));
    else if (iequals(key, "Provides-Extra"))
      md.provides_extra.push_back(std::move(value));
  });
  if (md.name.empty()) out.diagnostics.push_back({file, std::nullopt, std::nullopt, "no Name header"});
  if (md.version.empty()) out.diagnostics.push_back({file, std::nullopt, std::nullopt, "no Version header"});
  return out;
}

std::optional<std::string> header_value(std::string_view text, std::string_view key) {
  std::optional<std::string> out;
  for_each_header(text, "", nullptr, [&](const std::string& k, std::string value, std::size_t) {
    if (!out && iequals(k, key)) out = std::move(value);
  });
  return out;
}

std::string requirement_name(std::string_view req) {
  req = trim(req);
  std::size_t end = 0;
  while (end < req.size()) {
    const char c = req[end];
    const bool name_char =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    if (!name_char) break;
    ++end;
  }
  return normalize_name(req.substr(0, end));
}

namespace {

// "nvidia_cudnn_cu13-9.19.0.56.dist-info" -> {"nvidia_cudnn_cu13", "9.19.0.56"}
std::pair<std::string, std::string> split_dist_info_name(std::string_view dir_name) {
  auto stem = dir_name.substr(0, dir_name.size() - std::string_view(".dist-info").size());
  const auto dash = stem.find('-');
  if (dash == std::string_view::npos) return {std::string(stem), ""};
  return {std::string(stem.substr(0, dash)), std::string(stem.substr(dash + 1))};
}

}  // namespace

// PEP 610's archive_info: its "hashes" {"sha256": HEX}, else its older "hash" "sha256=HEX"; a
// value that is no 64 hex digits is none (the file is hostile input, and the digest may end up
// in a lock).
static std::optional<std::string> archive_sha256(const nlohmann::json& j) {
  const auto hex64 = [](const std::string& s) {
    return s.size() == 64 &&
           std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  };
  if (!j.contains("archive_info") || !j["archive_info"].is_object()) return std::nullopt;
  const auto& a = j["archive_info"];
  if (a.contains("hashes") && a["hashes"].is_object() && a["hashes"].contains("sha256") &&
      a["hashes"]["sha256"].is_string() && hex64(a["hashes"]["sha256"].get<std::string>()))
    return a["hashes"]["sha256"].get<std::string>();
  if (a.contains("hash") && a["hash"].is_string()) {
    const std::string h = a["hash"].get<std::string>();
    if (h.starts_with("sha256=") && hex64(h.substr(7))) return h.substr(7);
  }
  return std::nullopt;
}

ReadDistInfo read_dist_info(const std::string& site_dir, const std::string& dir_name, SiteRoot root,
                            ReadRecord with_record) {
  ReadDistInfo out;
  DistInfo& d = out.dist;
  d.dir_name = dir_name;
  d.site_dir = site_dir;
  d.root = root;
  const std::filesystem::path dir = std::filesystem::path(site_dir) / dir_name;
  // Its files are opened relative to the folder, looked up once (a venv's dist-info folders
  // are six or more parts deep, and each has five files to read).
  const int dir_fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  const struct CloseFolder {
    int fd;
    ~CloseFolder() {
      if (fd >= 0) ::close(fd);
    }
  } close_folder{dir_fd};
  // A folder that cannot be opened has no readable files: each read below then fails, and says
  // why as the folder's open did (permission denied, missing).
  const int dir_error = dir_fd < 0 ? errno : 0;
  int read_error = 0;
  auto read = [&](const char* name) {
    auto text = try_read_file_at(dir_fd, name, k_max_dist_info_file_bytes, &read_error);
    if (dir_fd < 0) read_error = dir_error;
    return text;
  };
  auto unread = [&](const char* name) {
    return why_unread(read_error, dir_fd < 0 ? dir.string() : (dir / name).string());
  };

  if (auto text = read("METADATA")) {
    auto parsed = parse_metadata(*text, (dir / "METADATA").string());
    d.metadata = std::move(parsed.metadata);
    for (auto& diag : parsed.diagnostics) out.diagnostics.push_back(std::move(diag));
  } else {
    out.diagnostics.push_back({(dir / "METADATA").string(), std::nullopt, std::nullopt,
                               unread("METADATA") + "; name and version taken from the folder name"});
  }
  auto [folder_name, folder_version] = split_dist_info_name(dir_name);
  d.name = d.metadata.name.empty() ? folder_name : d.metadata.name;
  d.version = d.metadata.version.empty() ? folder_version : d.metadata.version;
  d.normalized = normalize_name(d.name);
  for (const auto& line : d.metadata.requires_dist) d.requirements.push_back(requirement_ref(line));

  if (with_record == ReadRecord::no) {
    // Not asked for: neither read nor reported missing.
  } else if (auto text = read("RECORD")) {
    auto parsed = parse_record(std::move(*text), (dir / "RECORD").string());
    d.record = std::move(parsed.rows);
    d.record_storage = std::move(parsed.storage);
    d.has_record = true;
    d.record_problem = std::move(parsed.problem);
    for (auto& diag : parsed.diagnostics) out.diagnostics.push_back(std::move(diag));
  } else {
    out.diagnostics.push_back(
        {(dir / "RECORD").string(), std::nullopt, std::nullopt, unread("RECORD") + "; the dist's files are unknown"});
    // There but unreadable (a folder, a FIFO, an I/O error): a listing nobody can read. A RECORD
    // that is simply missing is pip's "no RECORD file" and stays a warning.
    struct stat there {};
    if (::fstatat(dir_fd, "RECORD", &there, AT_SYMLINK_NOFOLLOW) == 0)
      d.record_problem = "cannot be read: " + unread("RECORD");
  }
  if (auto text = read("INSTALLER")) d.installer = std::string(trim(split(*text, '\n').front()));
  struct stat st {};
  d.requested = ::fstatat(dir_fd, "REQUESTED", &st, 0) == 0;
  if (auto text = read("WHEEL")) {
    d.wheel_generator = header_value(*text, "Generator");
    if (auto v = header_value(*text, "Root-Is-Purelib")) d.root_is_purelib = (*v == "true");
    for_each_header(*text, "", nullptr, [&](const std::string& k, std::string v, std::size_t) {
      if (iequals(k, "Tag")) d.wheel_tags.push_back(std::move(v));
    });
  }
  if (auto text = read("direct_url.json")) {
    auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("url") && j["url"].is_string()) {
      d.direct_url = j["url"].get<std::string>();
      d.direct_url_sha256 = archive_sha256(j);
    } else {
      out.diagnostics.push_back({(dir / "direct_url.json").string(), std::nullopt, std::nullopt,
                                 "not a JSON object with a \"url\" (PEP 610)"});
    }
  }
  return out;
}

}  // namespace cudafix::resolver::inline env

namespace cudafix::resolver::inline env {

std::string dist_label(const DistInfo& d) { return d.name + " " + d.version; }

RequirementRef requirement_ref(std::string_view line) {
  RequirementRef out;
  out.name = requirement_name(line);
  const auto semi = line.find(';');
  const auto head = line.substr(0, semi);
  if (const auto lb = head.find('['); lb != std::string_view::npos) {
    const auto rb = head.find(']', lb);
    if (rb != std::string_view::npos)
      for (auto e : split(head.substr(lb + 1, rb - lb - 1), ','))
        if (!trim(e).empty()) out.extras.push_back(normalize_name(trim(e)));
  }
  if (semi == std::string_view::npos) return out;
  const auto marker = line.substr(semi + 1);
  for (auto pos = marker.find("extra"); pos != std::string_view::npos; pos = marker.find("extra", pos + 5)) {
    if (pos > 0 && (std::isalnum(static_cast<unsigned char>(marker[pos - 1])) || marker[pos - 1] == '_')) continue;
    auto rest = trim(marker.substr(pos + 5));
    if (!rest.starts_with("==")) continue;
    rest = trim(rest.substr(2));
    if (rest.empty() || (rest.front() != '"' && rest.front() != '\'')) continue;
    const char q = rest.front();
    const auto close = rest.find(q, 1);
    if (close == std::string_view::npos) continue;
    out.gated_by.push_back(normalize_name(rest.substr(1, close - 1)));
  }
  return out;
}

}  // namespace cudafix::resolver::inline env
