// Wheels the user's pip and uv have already downloaded, found by name, version and tags with no
// network: the layouts of the versions tested (README names them), an unknown one refused.
//
// pip (CacheControl's FileCache; the key is the file's URL, the path sha224(URL) in hex, its
// first five characters as five folders):
//   <pip cache>/http/a/b/c/d/e/<sha224>         pip before 23.3 (Debian 12's 23.0): "cc=4,"
//                                               then a msgpack map whose response.body holds the
//                                               whole file
//   <pip cache>/http-v2/a/b/c/d/e/<sha224>      pip 23.3 on: the same header and map, the body
//   <pip cache>/http-v2/a/b/c/d/e/<sha224>.body   beside it in its own file
// The URL is not kept, so a body is known for a wheel by its own dist-info (METADATA's Name and
// Version, WHEEL's Tag lines). The msgpack is walked for response.body, .status and .headers
// alone; arrays and maps nested deeper than k_max_msgpack_depth make the entry a damaged one,
// reported with its path (CacheControl writes three levels).
//
// uv (0.11):
//   <uv cache>/wheels-v6/<index|path|url>/<16 hex>/<name>/<version>-<tags>[.http|.msgpack]
//     a symlink (absolute) to the unpacked wheel,
//   <uv cache>/archive-v0/<id>/                 the wheel unpacked, its RECORD inside
// (wheels-v5 for uv before 0.8, read the same way). A cache whose version folder is newer than
// these is refused by name rather than guessed at.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cudafix::installer::source {

inline constexpr unsigned k_max_msgpack_depth = 32;

struct CachedWheel {
  // kept: a wheel in cudafix's own cache, used where it lies.
  enum class Kind { pip_body, pip_embedded, uv_unpacked, kept };
  Kind kind = Kind::pip_body;
  std::string filename;      // the wheel's file name, rebuilt from its dist-info
  std::string path;          // the .body file, the serialized response, or the unpacked folder
  std::uint64_t offset = 0;  // pip_embedded: where the body starts in `path`
  std::uint64_t size = 0;    // pip: the body's size
  std::string origin;        // "pip cache /root/.cache/pip (http-v2)"
};

struct CacheScan {
  std::vector<CachedWheel> wheels;
  std::vector<std::string> problems;  // entries or layouts that could not be read, one line each
};

[[nodiscard]] CacheScan scan_pip_cache(const std::string& dir);
[[nodiscard]] CacheScan scan_uv_cache(const std::string& dir);

// The cached wheel as a .whl file at `into` (a new file): a pip body copied out of its entry,
// an unpacked uv wheel zipped (stored) after each file is checked against its RECORD's hash.
// Throws resolver::Error naming the entry and what is wrong.
void write_wheel_file(const CachedWheel& wheel, const std::string& into);

}  // namespace cudafix::installer::source
