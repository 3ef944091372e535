#include "resolver/pep/pylock.hpp"
#include "resolver/pep/pylock_text.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/base/toml_checked.hpp"
#include "resolver/pep/pep440.hpp"
#include "resolver/pep/pep508.hpp"
#include "resolver/pep/wheel_name.hpp"

namespace cudafix::resolver::inline pep {

namespace pylock_text {

std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
          out += fmt::format("\\u{:04X}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  return out + '"';
}

std::string key_text(std::string_view k) {
  const bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
  return bare ? std::string(k) : toml_string(k);
}

}  // namespace pylock_text

namespace {

using pylock_text::FileKind;
using pylock_text::key_text;
using pylock_text::toml_string;

template <typename T>
std::string streamed(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Any TOML value as one inline value: tables as `{ k = v, ... }` in key order (toml++ keeps a
// table's keys sorted), so that a kept value is written back the same way every time.
std::string inline_toml(const toml::node& n) {
  if (const auto* t = n.as_table()) {
    if (t->empty()) return "{}";
    std::string out = "{ ";
    bool first = true;
    for (const auto& [k, v] : *t) {
      out += fmt::format("{}{} = {}", first ? "" : ", ", key_text(k.str()), inline_toml(v));
      first = false;
    }
    return out + " }";
  }
  if (const auto* a = n.as_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < a->size(); ++i) out += (i ? ", " : "") + inline_toml((*a)[i]);
    return out + "]";
  }
  if (const auto* s = n.as_string()) return toml_string(s->get());
  if (const auto* i = n.as_integer()) return std::to_string(i->get());
  if (const auto* b = n.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* f = n.as_floating_point()) return streamed(*f);
  if (const auto* d = n.as_date_time()) return streamed(d->get());
  if (const auto* d = n.as_date()) return streamed(d->get());
  if (const auto* d = n.as_time()) return streamed(d->get());
  return "\"\"";
}

const char* type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    default:
      return "nothing";
  }
}

bool is_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); });
}

// The digest length of the algorithms hashlib guarantees; 0 for others.
std::size_t digest_hex_length(std::string_view algorithm) {
  static constexpr std::pair<std::string_view, std::size_t> k_known[] = {
      {"md5", 32},      {"sha1", 40},    {"sha224", 56},   {"sha256", 64},   {"sha384", 96},   {"sha512", 128},
      {"blake2b", 128}, {"blake2s", 64}, {"sha3_224", 56}, {"sha3_256", 64}, {"sha3_384", 96}, {"sha3_512", 128}};
  for (const auto& [name, len] : k_known)
    if (name == algorithm) return len;
  return 0;
}

// PEP 508's name: letters and digits, with '.', '-' and '_' inside.
bool is_project_name(std::string_view s) {
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  if (s.empty() || !alnum(s.front()) || !alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) { return alnum(c) || c == '.' || c == '-' || c == '_'; });
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A URL's last path part, its query and fragment cut and its %XX escapes decoded.
std::string url_file_name(std::string_view url) {
  url = url.substr(0, url.find_first_of("?#"));
  url = url.substr(url.rfind('/') == std::string_view::npos ? 0 : url.rfind('/') + 1);
  std::string out;
  for (std::size_t i = 0; i < url.size(); ++i) {
    if (url[i] == '%' && i + 2 < url.size() && hex_value(url[i + 1]) >= 0 && hex_value(url[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(url[i + 1]) * 16 + hex_value(url[i + 2]));
      i += 2;
    } else {
      out += url[i];
    }
  }
  return out;
}

// The 1-based line of the first control character TOML allows nowhere raw (all but tab, and LF
// and CR as line ends): a valid lock holds none, and toml++ 3.3 asserts on a NUL in a key
// (parse_key), an abort where assertions are on and undefined behaviour where they are off, so
// such a file is refused before toml++ sees it.
std::optional<std::size_t> raw_control_character(std::string_view t) {
  std::size_t line = 1;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const auto c = static_cast<unsigned char>(t[i]);
    if (c == '\n') ++line;
    const bool line_end = c == '\n' || (c == '\r' && i + 1 < t.size() && t[i + 1] == '\n');
    if ((c < 0x20 && c != '\t' && !line_end) || c == 0x7f) return line;
  }
  return std::nullopt;
}

// The 1-based line of the first byte past ASCII outside a string or a comment, where TOML allows
// none. toml++ 3.3 (Debian 12's) reaches __builtin_unreachable() on U+00A1 to U+0499 there
// (is_non_ascii_horizontal_whitespace), undefined behaviour on a hostile file: such a file is
// refused before toml++ sees it. A string's closing quotes may run to five (`"""x"""""`).
std::optional<std::size_t> non_ascii_outside_strings(std::string_view t) {
  std::size_t line = 1;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '\n') {
      ++line;
    } else if (static_cast<unsigned char>(c) >= 0x80) {
      return line;
    } else if (c == '#') {
      while (i + 1 < t.size() && t[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      const bool multi = t.substr(i, 3) == std::string_view(c == '"' ? "\"\"\"" : "'''");
      const std::string_view close = multi ? t.substr(i, 3) : t.substr(i, 1);
      for (i += close.size(); i < t.size(); ++i) {
        if (t[i] == '\n') {
          ++line;
          if (!multi) break;  // an unterminated string: toml++ refuses it
        }
        if (c == '"' && t[i] == '\\') {
          line += i + 1 < t.size() && t[i + 1] == '\n';
          ++i;
          continue;
        }
        if (t.substr(i, close.size()) != close) continue;
        i += close.size() - 1;
        while (multi && i + 1 < t.size() && t[i + 1] == c && t.substr(i + 1, 3) != close) ++i;
        break;
      }
    }
  }
  return std::nullopt;
}

// ---- reading ---------------------------------------------------------------------------------

// Reads one lock's tables, naming the file and the key path in every refusal.
class Reader {
 public:
  explicit Reader(std::string_view file) : file_(file) {}

  [[noreturn]] void fail(std::string_view path, std::string_view what) const {
    throw Error(fmt::format("{}: {}: {}", file_, path, what));
  }

  const toml::table& table(const toml::node& n, std::string_view path) const {
    if (const auto* t = n.as_table()) return *t;
    fail(path, fmt::format("expected a table, got {}", type_name(n)));
  }

  const toml::array& array(const toml::node& n, std::string_view path) const {
    const auto* a = n.as_array();
    if (!a) fail(path, fmt::format("expected an array, got {}", type_name(n)));
    if (a->size() > k_lock_max_items) fail(path, fmt::format("more than {} entries", k_lock_max_items));
    return *a;
  }

  std::string string(const toml::node& n, std::string_view path) const {
    const auto* s = n.as_string();
    if (!s) fail(path, fmt::format("expected a string, got {}", type_name(n)));
    const std::string& v = s->get();
    if (v.size() > k_lock_max_string) fail(path, fmt::format("longer than {} bytes", k_lock_max_string));
    if (v.find('\0') != std::string::npos) fail(path, "holds a NUL character");
    return v;
  }

  std::optional<std::string> opt_string(const toml::table& t, std::string_view key, std::string_view path) const {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    return string(*n, sub(path, key));
  }

  std::string req_string(const toml::table& t, std::string_view key, std::string_view path) const {
    const toml::node* n = t.get(key);
    if (!n) fail(sub(path, key), "missing");
    return string(*n, sub(path, key));
  }

  std::vector<std::string> strings(const toml::table& t, std::string_view key, std::string_view path) const {
    std::vector<std::string> out;
    const toml::node* n = t.get(key);
    if (!n) return out;
    const toml::array& a = array(*n, sub(path, key));
    for (std::size_t i = 0; i < a.size(); ++i) out.push_back(string(a[i], at(sub(path, key), i)));
    return out;
  }

  // Each entry of an array of tables, kept as its inline TOML text.
  std::vector<std::string> tables_text(const toml::table& t, std::string_view key, std::string_view path) const {
    std::vector<std::string> out;
    const toml::node* n = t.get(key);
    if (!n) return out;
    const toml::array& a = array(*n, sub(path, key));
    for (std::size_t i = 0; i < a.size(); ++i) out.push_back(inline_toml(table(a[i], at(sub(path, key), i))));
    return out;
  }

  std::optional<std::string> opt_table_text(const toml::table& t, std::string_view key, std::string_view path) const {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    return inline_toml(table(*n, sub(path, key)));
  }

  std::optional<std::string> opt_date_time(const toml::table& t, std::string_view key, std::string_view path) const {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    const auto* d = n->as_date_time();
    if (!d) fail(sub(path, key), fmt::format("expected a date-time, got {}", type_name(*n)));
    return streamed(d->get());
  }

  std::string sha256(const toml::table& t, std::string_view key, std::string_view path) const {
    std::string v = req_string(t, key, path);
    if (v.size() != 64 || !is_hex(v)) fail(sub(path, key), "expected 64 hex digits");
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return v;
  }

  // The keys of `t` not in `known`, kept as TOML text (toml++ iterates a table in key order).
  static LockExtras extras(const toml::table& t, std::initializer_list<std::string_view> known) {
    LockExtras out;
    for (const auto& [k, v] : t)
      if (std::find(known.begin(), known.end(), k.str()) == known.end())
        out.push_back({std::string(k.str()), inline_toml(v)});
    return out;
  }

  static std::string sub(std::string_view path, std::string_view key) {
    return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
  }
  static std::string at(std::string_view path, std::size_t i) { return fmt::format("{}[{}]", path, i); }

 private:
  std::string file_;
};

LockHashes read_hashes(const Reader& r, const toml::table& file, std::string_view path) {
  const std::string hp = Reader::sub(path, "hashes");
  const toml::node* n = file.get("hashes");
  if (!n) r.fail(hp, "missing");
  LockHashes h;
  for (const auto& [k, v] : r.table(*n, hp)) {
    const std::string algorithm(k.str());
    const std::string kp = Reader::sub(hp, algorithm);
    std::string digest = r.string(v, kp);
    const std::size_t want = digest_hex_length(algorithm);
    if (!is_hex(digest) || (want && digest.size() != want) || (!want && (digest.size() < 32 || digest.size() % 2)))
      r.fail(kp, want ? fmt::format("expected {} hex digits", want) : std::string("expected hex digits"));
    std::transform(digest.begin(), digest.end(), digest.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    h.digests.emplace_back(algorithm, std::move(digest));
  }
  return h;
}

std::optional<std::uint64_t> read_size(const Reader& r, const toml::table& t, std::string_view path) {
  const toml::node* n = t.get("size");
  if (!n) return std::nullopt;
  const auto* i = n->as_integer();
  if (!i) r.fail(Reader::sub(path, "size"), fmt::format("expected an integer, got {}", type_name(*n)));
  if (i->get() < 0) r.fail(Reader::sub(path, "size"), "negative");
  return static_cast<std::uint64_t>(i->get());
}

bool is_url(std::string_view s) {
  const std::size_t colon = s.find(':');
  if (colon == 0 || colon == std::string_view::npos) return false;
  for (std::size_t i = 0; i < colon; ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (i && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'));
    if (!ok) return false;
  }
  return std::none_of(s.begin(), s.end(), [](unsigned char c) { return c <= 0x20 || c == 0x7f; });
}

// A wheel, the sdist or the archive: `kind` says which keys it may hold.
LockFile read_file_entry(const Reader& r, const toml::node& node, std::string_view path, FileKind kind) {
  const toml::table& t = r.table(node, path);
  LockFile f;
  if (kind != FileKind::archive) f.name = r.opt_string(t, "name", path);
  f.upload_time = r.opt_date_time(t, "upload-time", path);
  f.url = r.opt_string(t, "url", path);
  f.path = r.opt_string(t, "path", path);
  f.size = read_size(r, t, path);
  if (kind == FileKind::archive) f.subdirectory = r.opt_string(t, "subdirectory", path);
  f.hashes = read_hashes(r, t, path);
  if (!f.url && !f.path) r.fail(path, "has neither url nor path");
  if (f.url && !is_url(*f.url)) r.fail(Reader::sub(path, "url"), fmt::format("not a URL: {}", toml_string(*f.url)));
  if (f.path && f.path->empty()) r.fail(Reader::sub(path, "path"), "empty");
  f.extras = kind == FileKind::archive
                 ? Reader::extras(t, {"upload-time", "url", "path", "size", "subdirectory", "hashes"})
                 : Reader::extras(t, {"name", "upload-time", "url", "path", "size", "hashes"});
  return f;
}

// A wheel's file name must be a wheel's, of the package's project and version.
void check_wheel_name(const Reader& r, const LockPackage& p, const LockFile& w, std::string_view path) {
  const std::string file = w.file_name();
  const auto parsed = parse_wheel_name(file);
  const std::string where = w.name ? Reader::sub(path, "name") : Reader::sub(path, w.url ? "url" : "path");
  if (!parsed || file.find('/') != std::string::npos)
    r.fail(where, fmt::format("{} is no wheel file name", toml_string(file)));
  if (parsed->normalized != p.name)
    r.fail(where, fmt::format("{} is a wheel of {}, not of {}", file, parsed->normalized, p.name));
  if (!p.version) return;
  const auto wv = Version::parse(parsed->version);
  const auto pv = Version::parse(*p.version);
  if (!wv || !pv || !(*wv == *pv))
    r.fail(where, fmt::format("{} is version {}, not the package's {}", file, parsed->version, *p.version));
}

LockPackageTool read_package_tool(const Reader& r, const toml::table& t, std::string_view path) {
  LockPackageTool tool;
  if (t.get("record")) tool.record = r.sha256(t, "record", path);
  if (const toml::node* n = t.get("libraries")) {
    const std::string lp = Reader::sub(path, "libraries");
    const toml::array& a = r.array(*n, lp);
    for (std::size_t i = 0; i < a.size(); ++i) {
      const std::string ip = Reader::at(lp, i);
      const toml::table& e = r.table(a[i], ip);
      tool.libraries.push_back({r.req_string(e, "path", ip), r.opt_string(e, "soname", ip), r.sha256(e, "sha256", ip),
                                Reader::extras(e, {"path", "soname", "sha256"})});
    }
  }
  if (const toml::node* n = t.get("resolutions")) {
    const std::string rp = Reader::sub(path, "resolutions");
    const toml::array& a = r.array(*n, rp);
    for (std::size_t i = 0; i < a.size(); ++i) {
      const std::string ip = Reader::at(rp, i);
      const toml::table& e = r.table(a[i], ip);
      tool.resolutions.push_back({r.req_string(e, "consumer", ip), r.req_string(e, "soname", ip),
                                  r.opt_string(e, "provider", ip),
                                  Reader::extras(e, {"consumer", "soname", "provider"})});
    }
  }
  tool.extras = Reader::extras(t, {"record", "libraries", "resolutions"});
  return tool;
}

void read_package_tools(const Reader& r, const toml::table& pt, std::string_view path, LockPackage& p) {
  const toml::node* n = pt.get("tool");
  if (!n) return;
  const std::string tp = Reader::sub(path, "tool");
  const toml::table& tool = r.table(*n, tp);
  if (const toml::node* c = tool.get("cudafix"))
    p.cudafix = read_package_tool(r, r.table(*c, Reader::sub(tp, "cudafix")), Reader::sub(tp, "cudafix"));
  p.tool = Reader::extras(tool, {"cudafix"});
}

void read_package_text(const Reader& r, const toml::table& t, std::string_view path, LockPackage& p) {
  const std::string name = r.req_string(t, "name", path);
  if (!is_project_name(name))
    r.fail(Reader::sub(path, "name"), fmt::format("{} is no project name", toml_string(name)));
  p.name = normalize_name(name);
  p.version = r.opt_string(t, "version", path);
  if (p.version && !Version::parse(*p.version))
    r.fail(Reader::sub(path, "version"), fmt::format("{} is no PEP 440 version", toml_string(*p.version)));
  p.marker = r.opt_string(t, "marker", path);
  if (p.marker) try {
      (void)Marker::parse(*p.marker);
    } catch (const std::invalid_argument& e) {
      r.fail(Reader::sub(path, "marker"), e.what());
    }
  p.requires_python = r.opt_string(t, "requires-python", path);
  if (p.requires_python && !SpecifierSet::parse(*p.requires_python))
    r.fail(Reader::sub(path, "requires-python"),
           fmt::format("{} is no version specifier", toml_string(*p.requires_python)));
  p.dependencies = r.tables_text(t, "dependencies", path);
  p.index = r.opt_string(t, "index", path);
  if (p.index && !is_url(*p.index))
    r.fail(Reader::sub(path, "index"), fmt::format("not a URL: {}", toml_string(*p.index)));
  p.attestation_identities = r.tables_text(t, "attestation-identities", path);
}

LockPackage read_package(const Reader& r, const toml::node& node, std::string_view path) {
  const toml::table& t = r.table(node, path);
  LockPackage p;
  read_package_text(r, t, path, p);
  p.vcs = r.opt_table_text(t, "vcs", path);
  p.directory = r.opt_table_text(t, "directory", path);
  if (const toml::node* n = t.get("archive"))
    p.archive = read_file_entry(r, *n, Reader::sub(path, "archive"), FileKind::archive);
  if (const toml::node* n = t.get("sdist"))
    p.sdist = read_file_entry(r, *n, Reader::sub(path, "sdist"), FileKind::sdist);
  if (const toml::node* n = t.get("wheels")) {
    const std::string wp = Reader::sub(path, "wheels");
    const toml::array& a = r.array(*n, wp);
    for (std::size_t i = 0; i < a.size(); ++i) {
      p.wheels.push_back(read_file_entry(r, a[i], Reader::at(wp, i), FileKind::wheel));
      check_wheel_name(r, p, p.wheels.back(), Reader::at(wp, i));
    }
  }
  const int sources = int(p.vcs.has_value()) + int(p.directory.has_value()) + int(p.archive.has_value()) +
                      int(p.sdist.has_value() || !p.wheels.empty());
  if (sources > 1) r.fail(path, "more than one of vcs, directory, archive and sdist or wheels");
  read_package_tools(r, t, path, p);
  p.extras = Reader::extras(t, {"name", "version", "marker", "requires-python", "dependencies", "index", "vcs",
                                "directory", "archive", "sdist", "wheels", "attestation-identities", "tool"});
  return p;
}

void read_lock_version(const Reader& r, const toml::table& t, Lock& lock, std::vector<std::string>* warnings) {
  lock.lock_version = r.req_string(t, "lock-version", "");
  const auto parts = split(lock.lock_version, '.');
  const auto major = parts.size() == 2 ? to_number<int>(parts[0]) : std::nullopt;
  const auto minor = parts.size() == 2 ? to_number<int>(parts[1]) : std::nullopt;
  if (!major || !minor)
    r.fail("lock-version", fmt::format("{} is no MAJOR.MINOR version", toml_string(lock.lock_version)));
  if (*major != k_lock_major)
    r.fail("lock-version",
           fmt::format("version {} is not one cudafix reads (it reads {}.x)", lock.lock_version, k_lock_major));
  if (*minor > k_lock_minor && warnings)
    warnings->push_back(fmt::format("lock-version {} is newer than {}.{}: keys it adds are kept, not understood",
                                    lock.lock_version, k_lock_major, k_lock_minor));
}

LockVerdict read_verdict(const Reader& r, const toml::node& node, std::string_view path) {
  const toml::table& t = r.table(node, path);
  LockVerdict v;
  v.device = r.req_string(t, "device", path);
  v.driver = r.req_string(t, "driver", path);
  if (const toml::node* n = t.get("cuda")) {
    const auto* i = n->as_integer();
    if (!i || i->get() < 0 || i->get() > 1000000)
      r.fail(Reader::sub(path, "cuda"), "expected a CUDA version as an integer (12040)");
    v.cuda = static_cast<int>(i->get());
  }
  v.cudnn = r.opt_string(t, "cudnn", path);
  v.consumer = r.req_string(t, "consumer", path);
  v.cudnn_path = r.opt_string(t, "cudnn-path", path);
  v.at = r.opt_date_time(t, "at", path);
  v.extras = Reader::extras(t, {"device", "driver", "cuda", "cudnn", "consumer", "cudnn-path", "at"});
  return v;
}

void read_tool(const Reader& r, const toml::table& top, Lock& lock) {
  const toml::node* n = top.get("tool");
  if (!n) return;
  const toml::table& tool = r.table(*n, "tool");
  if (const toml::node* c = tool.get("cudafix")) {
    const toml::table& ct = r.table(*c, "tool.cudafix");
    if (const toml::node* v = ct.get("verified")) {
      const toml::array& a = r.array(*v, "tool.cudafix.verified");
      for (std::size_t i = 0; i < a.size(); ++i)
        lock.verified.push_back(read_verdict(r, a[i], Reader::at("tool.cudafix.verified", i)));
    }
    lock.cudafix_extras = Reader::extras(ct, {"verified"});
  }
  lock.tool = Reader::extras(tool, {"cudafix"});
}

}  // namespace

std::optional<std::string> LockHashes::sha256() const {
  for (const auto& [algorithm, digest] : digests)
    if (algorithm == "sha256") return digest;
  return std::nullopt;
}

std::string LockFile::file_name() const {
  if (name) return *name;
  if (url) return url_file_name(*url);
  if (path) return std::string(base_name(*path));
  return {};
}

Lock parse_lock(std::string_view text, std::string_view file, std::vector<std::string>* warnings) {
  const Reader r(file);
  if (text.size() > k_lock_file_max) r.fail("(file)", fmt::format("larger than {} bytes", k_lock_file_max));
  if (const auto line = raw_control_character(text))
    throw Error(fmt::format("{}:{}: a control character TOML allows only escaped in a string", file, *line));
  if (const auto line = non_ascii_outside_strings(text))
    throw Error(fmt::format("{}:{}: a character past ASCII outside a string or a comment", file, *line));
  const toml::table top = parse_toml(text, std::string(file));
  Lock lock;
  read_lock_version(r, top, lock, warnings);
  lock.environments = r.strings(top, "environments", "");
  for (std::size_t i = 0; i < lock.environments.size(); ++i) try {
      (void)Marker::parse(lock.environments[i]);
    } catch (const std::invalid_argument& e) {
      r.fail(Reader::at("environments", i), e.what());
    }
  lock.requires_python = r.opt_string(top, "requires-python", "");
  if (lock.requires_python && !SpecifierSet::parse(*lock.requires_python))
    r.fail("requires-python", fmt::format("{} is no version specifier", toml_string(*lock.requires_python)));
  lock.extras_names = r.strings(top, "extras", "");
  lock.dependency_groups = r.strings(top, "dependency-groups", "");
  lock.default_groups = r.strings(top, "default-groups", "");
  lock.created_by = r.req_string(top, "created-by", "");
  const toml::node* packages = top.get("packages");
  if (!packages) r.fail("packages", "missing");
  const toml::array& a = r.array(*packages, "packages");
  if (a.size() > k_lock_max_packages) r.fail("packages", fmt::format("more than {} packages", k_lock_max_packages));
  for (std::size_t i = 0; i < a.size(); ++i) lock.packages.push_back(read_package(r, a[i], Reader::at("packages", i)));
  read_tool(r, top, lock);
  lock.extras = Reader::extras(top, {"lock-version", "environments", "requires-python", "extras", "dependency-groups",
                                     "default-groups", "created-by", "packages", "tool"});
  return lock;
}

Lock read_lock(const std::string& path, std::vector<std::string>* warnings) {
  int err = 0;
  const auto text = try_read_file_at(AT_FDCWD, path.c_str(), k_lock_file_max, &err);
  if (!text) {
    if (err == EFBIG) throw Error(fmt::format("{}: larger than {} bytes", path, k_lock_file_max));
    throw Error(fmt::format("cannot read {}: {}", path, why_unread(err, path)));
  }
  return parse_lock(*text, path, warnings);
}

}  // namespace cudafix::resolver::inline pep
