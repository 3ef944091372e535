#include "installer/source/user_caches.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <libdeflate.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "installer/txn/file_ops.hpp"
#include "installer/wheel/install.hpp"
#include "installer/wheel/mapped_file.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/dist_info.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer::source {
namespace r = cudafix::resolver;
namespace fs = std::filesystem;

namespace {

// Just enough msgpack to walk CacheControl's map: each value's kind and where its bytes lie.
struct Msgpack {
  const unsigned char* p;
  std::size_t n, at = 0;

  [[nodiscard]] bool more(std::size_t k) const { return at + k <= n; }
  std::uint64_t be(std::size_t k) {
    if (!more(k)) throw r::Error("truncated");
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < k; ++i) v = (v << 8) | p[at + i];
    at += k;
    return v;
  }
  // A map's size, or nullopt when the next value is no map.
  std::optional<std::uint64_t> map_size() {
    if (!more(1)) return std::nullopt;
    const unsigned char b = p[at];
    if ((b & 0xf0) == 0x80) return ++at, b & 0x0fU;
    if (b == 0xde) return ++at, be(2);
    if (b == 0xdf) return ++at, be(4);
    return std::nullopt;
  }
  // A str or bin: its bytes' offset and length; nullopt for any other kind (left unread).
  std::optional<std::pair<std::size_t, std::size_t>> bytes() {
    if (!more(1)) return std::nullopt;
    const unsigned char b = p[at];
    std::uint64_t len = 0;
    if ((b & 0xe0) == 0xa0) {
      ++at;
      len = b & 0x1fU;
    } else if (b == 0xd9 || b == 0xc4) {
      ++at;
      len = be(1);
    } else if (b == 0xda || b == 0xc5) {
      ++at;
      len = be(2);
    } else if (b == 0xdb || b == 0xc6) {
      ++at;
      len = be(4);
    } else {
      return std::nullopt;
    }
    if (!more(len)) throw r::Error("truncated");
    const std::pair<std::size_t, std::size_t> out{at, static_cast<std::size_t>(len)};
    at += len;
    return out;
  }
  // A non-negative integer (fixint, uint8 to uint64); nullopt (and skipped) for any other kind.
  std::optional<std::int64_t> unsigned_int() {
    if (!more(1)) return std::nullopt;
    const unsigned char b = p[at];
    if (b <= 0x7f) return ++at, static_cast<std::int64_t>(b);
    if (b >= 0xcc && b <= 0xcf) {
      ++at;
      return static_cast<std::int64_t>(be(std::size_t{1} << (b - 0xcc)));
    }
    skip();
    return std::nullopt;
  }
  std::string text() {
    const auto b = bytes();
    if (!b) throw r::Error("a key that is not a string");
    return {reinterpret_cast<const char*>(p + b->first), b->second};
  }
  // Nested arrays and maps are skipped by recursion, so their depth is bounded: CacheControl's
  // entries nest three deep, a hostile one could nest a million (each level one byte).
  void skip(unsigned depth = 0) {
    if (depth > k_max_msgpack_depth)
      throw r::Error(fmt::format("arrays or maps nested deeper than {} (at offset {})", k_max_msgpack_depth, at));
    if (!more(1)) throw r::Error("truncated");
    const unsigned char b = p[at];
    if (bytes()) return;
    if (auto m = map_size()) {
      for (std::uint64_t i = 0; i < 2 * *m; ++i) skip(depth + 1);
      return;
    }
    ++at;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return;
    if ((b & 0xf0) == 0x90 || b == 0xdc || b == 0xdd) {
      const std::uint64_t k = (b & 0xf0) == 0x90 ? (b & 0x0fU) : be(b == 0xdc ? 2 : 4);
      for (std::uint64_t i = 0; i < k; ++i) skip(depth + 1);
      return;
    }
    static const std::map<unsigned char, std::size_t> fixed{{0xcc, 1}, {0xcd, 2}, {0xce, 4}, {0xcf, 8}, {0xd0, 1},
                                                            {0xd1, 2}, {0xd2, 4}, {0xd3, 8}, {0xca, 4}, {0xcb, 8},
                                                            {0xd4, 2}, {0xd5, 3}, {0xd6, 5}, {0xd7, 9}, {0xd8, 17}};
    if (const auto it = fixed.find(b); it != fixed.end()) {
      if (!more(it->second)) throw r::Error("truncated");
      at += it->second;
      return;
    }
    if (b == 0xc7 || b == 0xc8 || b == 0xc9) {
      const std::uint64_t len = be(b == 0xc7 ? 1 : b == 0xc8 ? 2 : 4) + 1;
      if (!more(len)) throw r::Error("truncated");
      at += len;
      return;
    }
    throw r::Error(fmt::format("msgpack byte {:#x} is not one CacheControl writes", b));
  }
};

struct CachedResponse {
  std::optional<std::pair<std::size_t, std::size_t>> body;  // within the entry
  std::string content_encoding;
  std::int64_t status = 0;
};

// "cc=4," then {"response": {"body": BIN, "headers": {...}, "status": N, ...}, "vary": {...}}.
CachedResponse read_cachecontrol(const unsigned char* p, std::size_t n, const std::string& entry) {
  if (n < 5 || std::memcmp(p, "cc=", 3) != 0) throw r::Error(fmt::format("{}: not a CacheControl entry", entry));
  const auto comma = std::find(p, p + std::min<std::size_t>(n, 8), ',') - p;
  const std::string version(reinterpret_cast<const char*>(p) + 3, static_cast<std::size_t>(comma) - 3);
  if (version != "4")
    throw r::Error(
        fmt::format("{}: CacheControl serialization cc={}; cudafix reads cc=4 (pip 20.3 on)", entry, version));
  Msgpack m{p, n, static_cast<std::size_t>(comma) + 1};
  CachedResponse out;
  try {
    const auto top = m.map_size();
    if (!top) throw r::Error("not a map");
    for (std::uint64_t i = 0; i < *top; ++i) {
      if (m.text() != "response") {
        m.skip();
        continue;
      }
      const auto fields = m.map_size();
      if (!fields) throw r::Error("response is not a map");
      for (std::uint64_t f = 0; f < *fields; ++f) {
        const std::string key = m.text();
        if (key == "body") {
          out.body = m.bytes();
          if (!out.body) m.skip();
        } else if (key == "status") {
          out.status = m.unsigned_int().value_or(0);
        } else if (key == "headers") {
          const auto h = m.map_size();
          if (!h) {
            m.skip();
            continue;
          }
          for (std::uint64_t k = 0; k < *h; ++k) {
            std::string name = m.text();
            std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
            if (name == "content-encoding")
              out.content_encoding = m.text();
            else
              m.skip();
          }
        } else {
          m.skip();
        }
      }
    }
  } catch (const r::Error& e) {
    throw r::Error(fmt::format("{}: a damaged pip cache entry ({})", entry, e.what()));
  }
  return out;
}

bool looks_like_zip(const unsigned char* p, std::size_t n) { return n >= 4 && std::memcmp(p, "PK\x03\x04", 4) == 0; }

// The wheel a body holds, or nullopt when it holds none (an index page, an sdist): only a body
// that is a zip and not a wheel is a problem worth a line.
std::optional<CachedWheel> wheel_in(const unsigned char* p, std::size_t n, const std::string& label, CacheScan& scan) {
  if (!looks_like_zip(p, n)) return std::nullopt;
  try {
    const auto w = validate_wheel_bytes(p, n, label);
    CachedWheel c;
    c.filename = wheel_file_name(w);
    c.size = n;
    return c;
  } catch (const r::Error& e) {
    if (std::string_view(e.what()).find(".dist-info") != std::string_view::npos &&
        std::string_view(e.what()).find("no .dist-info folder") != std::string_view::npos)
      return std::nullopt;  // a zip that is no wheel (an sdist as .zip)
    scan.problems.push_back(e.what());
    return std::nullopt;
  }
}

void scan_pip_layout(const std::string& dir, bool separate_bodies, const std::string& origin, CacheScan& scan) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const std::string entry = it->path().string();
    if (entry.ends_with(".body")) continue;
    try {
      const MappedFile meta(entry);
      const auto response = read_cachecontrol(meta.data(), meta.size(), entry);
      if (response.status != 200 || !response.content_encoding.empty()) continue;  // not a whole file as served
      if (separate_bodies) {
        const std::string body_path = entry + ".body";
        if (::access(body_path.c_str(), R_OK) != 0) continue;
        const MappedFile body(body_path);
        if (auto w = wheel_in(body.data(), body.size(), body_path, scan)) {
          w->kind = CachedWheel::Kind::pip_body;
          w->path = body_path;
          w->origin = origin;
          scan.wheels.push_back(std::move(*w));
        }
      } else if (response.body) {
        const auto [off, len] = *response.body;
        if (auto w = wheel_in(meta.data() + off, len, entry, scan)) {
          w->kind = CachedWheel::Kind::pip_embedded;
          w->path = entry;
          w->offset = off;
          w->origin = origin;
          scan.wheels.push_back(std::move(*w));
        }
      }
    } catch (const r::Error& e) {
      scan.problems.push_back(e.what());
    }
  }
}

// pip's own wheels/ folder: wheels it built from sdists, whole files under their names.
void scan_pip_built(const std::string& dir, const std::string& origin, CacheScan& scan) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file() || it->path().extension() != ".whl") continue;
    CachedWheel c;
    c.kind = CachedWheel::Kind::pip_body;
    c.filename = it->path().filename().string();
    c.path = it->path().string();
    c.size = static_cast<std::uint64_t>(it->file_size(ec));
    c.origin = origin;
    scan.wheels.push_back(std::move(c));
  }
}

std::optional<int> version_suffix(const std::string& name, const std::string& stem) {
  if (!name.starts_with(stem)) return std::nullopt;
  const std::string rest = name.substr(stem.size());
  if (rest.empty() || !std::all_of(rest.begin(), rest.end(), ::isdigit)) return std::nullopt;
  return std::stoi(rest);
}

// An unpacked wheel's identity from its dist-info: NAME-VERSION-TAGS.whl.
std::optional<std::string> unpacked_file_name(const std::string& root) {
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.ends_with(".dist-info")) continue;
    const auto wheel = r::try_read_file(it->path().string() + "/WHEEL");
    if (!wheel) return std::nullopt;
    ValidatedWheel w;
    w.path = root;
    w.dist_info = name;
    const std::string stem = name.substr(0, name.size() - 10);
    const auto dash = stem.find('-');
    if (dash == std::string::npos) return std::nullopt;
    w.name = stem.substr(0, dash);
    w.version = stem.substr(dash + 1);
    for (auto line : r::split(*wheel, '\n'))
      if (line.starts_with("Tag:")) w.tags.emplace_back(r::trim(line.substr(4)));
    return wheel_file_name(w);
  }
  return std::nullopt;
}

// A stored (uncompressed) zip of `files` (archive name, path on disk, mode), written to `fd`.
void write_stored_zip(int fd, const std::vector<std::tuple<std::string, std::string, unsigned>>& files,
                      const std::string& into) {
  std::string central;
  std::uint64_t offset = 0;
  const auto put16 = [](std::string& s, std::uint16_t v) {
    s += static_cast<char>(v & 0xff);
    s += static_cast<char>(v >> 8);
  };
  const auto put32 = [](std::string& s, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  for (const auto& [name, path, mode] : files) {
    const MappedFile f(path);
    const std::uint32_t crc = static_cast<std::uint32_t>(libdeflate_crc32(0, f.data(), f.size()));
    const auto size = static_cast<std::uint32_t>(f.size());
    if (f.size() > 0xfffffffeULL || offset > 0xfffffffeULL)
      throw r::Error(fmt::format("{}: over 4 GiB, which needs ZIP64 (not written yet)", path));
    std::string local;
    put32(local, 0x04034b50);
    put16(local, 20);
    put16(local, 0x0800);  // UTF-8 names
    put16(local, 0);
    put32(local, 0);  // time, date
    put32(local, crc);
    put32(local, size);
    put32(local, size);
    put16(local, static_cast<std::uint16_t>(name.size()));
    put16(local, 0);
    local += name;
    txn::write_all(fd, local.data(), local.size(), into);
    if (f.size()) txn::write_all(fd, f.data(), f.size(), into);
    put32(central, 0x02014b50);
    put16(central, 0x0314);  // made by: UNIX
    put16(central, 20);
    put16(central, 0x0800);
    put16(central, 0);
    put32(central, 0);
    put32(central, crc);
    put32(central, size);
    put32(central, size);
    put16(central, static_cast<std::uint16_t>(name.size()));
    put32(central, 0);  // extra, comment lengths
    put32(central, 0);  // disk, internal attributes
    put32(central, (S_IFREG | (mode & 0777)) << 16);
    put32(central, static_cast<std::uint32_t>(offset));
    central += name;
    offset += local.size() + f.size();
  }
  std::string end;
  put32(end, 0x06054b50);
  put32(end, 0);
  put16(end, static_cast<std::uint16_t>(files.size()));
  put16(end, static_cast<std::uint16_t>(files.size()));
  put32(end, static_cast<std::uint32_t>(central.size()));
  put32(end, static_cast<std::uint32_t>(offset));
  put16(end, 0);
  txn::write_all(fd, central.data(), central.size(), into);
  txn::write_all(fd, end.data(), end.size(), into);
}

void zip_unpacked(const CachedWheel& w, int fd, const std::string& into) {
  std::string record_path;
  std::error_code ec;
  for (fs::directory_iterator it(w.path, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().ends_with(".dist-info")) record_path = it->path().string() + "/RECORD";
  const auto text = r::try_read_file(record_path);
  if (!text) throw r::Error(fmt::format("{}: the unpacked wheel has no RECORD", w.path));
  const auto record = r::parse_record(*text, record_path);
  std::vector<std::tuple<std::string, std::string, unsigned>> files;
  const std::string record_rel = r::relative_to(record_path, w.path);
  for (const auto& row : record.rows) {
    const std::string rel(row.path);
    if (rel.empty() || rel.front() == '/' || rel.find("..") != std::string::npos)
      throw r::Error(fmt::format("{}: RECORD row '{}' leaves the wheel", record_path, rel));
    const std::string abs = w.path + "/" + rel;
    struct stat st {};
    if (::lstat(abs.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      throw r::Error(fmt::format("{}: {} is listed in its RECORD but not there", w.path, rel));
    if (rel != record_rel) {
      if (row.hash_algo() != "sha256") throw r::Error(fmt::format("{}: RECORD gives {} no sha256 hash", w.path, rel));
      if (r::sha256_of_file(abs) != row.hash)
        throw r::Error(fmt::format("{}: {} does not match its RECORD hash (the cache entry is damaged)", w.path, rel));
    }
    files.emplace_back(rel, abs, st.st_mode);
  }
  write_stored_zip(fd, files, into);
}

}  // namespace

CacheScan scan_pip_cache(const std::string& dir) {
  CacheScan scan;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return scan;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string path = it->path().string();
    if (name == "http") {
      scan_pip_layout(path, false, fmt::format("pip cache {} (http, pip before 23.3)", dir), scan);
    } else if (name == "http-v2") {
      scan_pip_layout(path, true, fmt::format("pip cache {} (http-v2, pip 23.3 on)", dir), scan);
    } else if (name == "wheels") {
      scan_pip_built(path, fmt::format("pip cache {} (wheels pip built)", dir), scan);
    } else if (const auto v = version_suffix(name, "http-v"); v && *v > 2) {
      scan.problems.push_back(
          fmt::format("{}: a pip cache layout newer than cudafix reads (http, http-v2); not guessed at", path));
    }
  }
  return scan;
}

CacheScan scan_uv_cache(const std::string& dir) {
  CacheScan scan;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return scan;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto v = version_suffix(name, "wheels-v");
    if (!v) continue;
    if (*v > 6) {
      scan.problems.push_back(
          fmt::format("{}: a uv cache layout newer than cudafix reads (wheels-v5, wheels-v6); not guessed at",
                      it->path().string()));
      continue;
    }
    if (*v < 5) continue;
    const std::string origin = fmt::format("uv cache {} ({})", dir, name);
    // wheels-vN/<index|path|url>/<hash>/<name>/<version>-<tags>: symlinks to archive-v0/<id>/.
    std::error_code walk;
    for (fs::recursive_directory_iterator e(it->path(), fs::directory_options::skip_permission_denied, walk), eend;
         !walk && e != eend; e.increment(walk)) {
      if (!e->is_symlink() && !(e->is_directory() && e.depth() == 3)) continue;
      std::error_code target_ec;
      const fs::path target = fs::canonical(e->path(), target_ec);
      if (target_ec || !fs::is_directory(target, target_ec)) continue;
      if (e->is_directory()) e.disable_recursion_pending();
      const auto file_name = unpacked_file_name(target.string());
      if (!file_name) {
        scan.problems.push_back(fmt::format("{}: no readable dist-info in {}", e->path().string(), target.string()));
        continue;
      }
      CachedWheel c;
      c.kind = CachedWheel::Kind::uv_unpacked;
      c.filename = *file_name;
      c.path = target.string();
      c.origin = origin;
      scan.wheels.push_back(std::move(c));
    }
  }
  return scan;
}

void write_wheel_file(const CachedWheel& w, const std::string& into) {
  const int fd = ::open(into.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw r::Error(fmt::format("{}: {}", into, std::strerror(errno)));
  try {
    if (w.kind == CachedWheel::Kind::uv_unpacked) {
      zip_unpacked(w, fd, into);
    } else {
      const MappedFile f(w.path);
      if (w.offset + w.size > f.size())
        throw r::Error(fmt::format("{}: the cache entry is shorter than it says", w.path));
      txn::write_all(fd, f.data() + w.offset, static_cast<std::size_t>(w.size), into);
    }
  } catch (...) {
    ::close(fd);
    ::unlink(into.c_str());
    throw;
  }
  ::close(fd);
}

}  // namespace cudafix::installer::source
