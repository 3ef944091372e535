// Where the wheels a plan needs come from, in pip's order: the --find-links folders
// (installer/source/find_links), then the package indexes (installer/source/index over
// installer/source/http), or, offline, the user's own pip and uv caches
// (installer/source/user_caches) and cudafix's own. Every wheel ends up a file in cudafix's
// content-addressed cache, its SHA-256 checked first:
//
//   <cache>/wheels/<sha256 hex>/<wheel file name>   the wheel, by its hash
//   <cache>/wheels/.tmp/                            downloads in progress (a temporary name,
//                                                   synced, renamed into place: never a partial
//                                                   file under a final name)
//
// The cache is kept under its size limit by removing the wheels used longest ago; a partial
// download untouched for an hour (its run was killed) is removed, the others count toward it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "installer/source/http.hpp"
#include "installer/source/index.hpp"
#include "installer/source/user_caches.hpp"
#include "resolver/plan/wheel.hpp"

namespace cudafix::installer::source {

struct SourceSettings {
  // The index first, then the extra ones; empty: no index (--no-index).
  std::vector<std::string> index_urls;
  bool offline = false;  // no network: the caches and --find-links only
  // Plan from an index's wheel by range requests (installer/source/remote_wheel.hpp) instead
  // of downloading it, where the index gives its sha256 (so a later download is pinned).
  bool by_range = false;
  std::string cache_dir;                    // cudafix's cache folder (wheels/ below it)
  std::uint64_t cache_limit = 20ULL << 30;  // bytes of wheels kept
  std::vector<std::string> pip_caches;      // the user's pip cache folders
  std::vector<std::string> uv_caches;       // the user's uv cache folders
  HttpOptions http;
  std::string python_version;  // "3.12"
  std::vector<std::string> supported_tags;
  // (bytes, of bytes) for all the downloads together, on a terminal.
  std::function<void(std::uint64_t, std::uint64_t)> progress;
};

struct Wanted {
  std::string name;     // PEP 503 normalized
  std::string accepts;  // PEP 440 specifiers ("==9.19.0.56"; empty: any version)
};

struct Obtained {
  std::string file;                       // the wheel in cudafix's cache; empty when none was found (or read by range)
  std::optional<resolver::Wheel> remote;  // read by range: the planner's facts, and no file
  std::string origin;   // "https://host/simple/x/ (JSON)", "pip cache /root/.cache/pip (http-v2)", ...
  std::string problem;  // why none was found: every place looked at and what it had
  bool downloaded = false;
};

struct SourceStats {
  std::uint64_t bytes_received = 0;  // over the network, every attempt counted
  std::size_t downloads = 0;
  std::size_t cache_hits = 0;
};

class WheelSources {
 public:
  explicit WheelSources(SourceSettings settings);
  // One answer per wanted wheel, in order; the downloads run at once.
  [[nodiscard]] std::vector<Obtained> obtain(const std::vector<Wanted>& wanted);
  // The wheel at `url` (a plan's, read by range when planned) in cudafix's cache, downloaded
  // unless it is there already; its SHA-256 must be `sha256` (empty: none is known, as for a
  // lock's unpinned wheel: downloaded, and kept under the SHA-256 it has). Offline, only a
  // file:// URL is read.
  [[nodiscard]] Obtained download(const std::string& url, const std::string& sha256, const std::string& filename);
  // The wheel of this SHA-256 and file name in cudafix's cache (marked used), or empty.
  [[nodiscard]] std::string cached(const std::string& sha256, const std::string& filename);
  // The wheel open at `fd` (a lock's `path`, opened confined beneath the lock's folder) copied
  // into cudafix's cache under the SHA-256 it has, as `filename`; `origin` names it in messages.
  [[nodiscard]] Obtained keep_copy(int fd, const std::string& filename, const std::string& origin);
  [[nodiscard]] const SourceStats& stats() const { return stats_; }
  // What could not be read in the user's caches (entries, unknown layouts), one line each.
  [[nodiscard]] const std::vector<std::string>& cache_problems() const { return cache_problems_; }

 private:
  SourceSettings settings_;
  HttpClient http_;
  SourceStats stats_;
  std::vector<std::string> cache_problems_;
  // A finished download checked against the index's hash and renamed into the cache; empty
  // (and `problem` set) when it does not match.
  std::string keep_download(const std::string& tmp, const IndexFile& file, std::string& problem);

  // obtain()'s steps. A wheel file a source offers (sources.cpp), each wanted one's in turn, and
  // what was looked in for it (said when none fits).
  struct Candidate;
  using Candidates = std::vector<std::vector<Candidate>>;
  using Looked = std::vector<std::vector<std::string>>;
  // Offline or without an index: every wheel in the user's caches and cudafix's, kept in `user`.
  void candidates_from_caches(CacheScan& user, Candidates& candidates, Looked& looked);
  // Every file of each wanted dist's page on each index, the pages fetched at once.
  void candidates_from_indexes(const std::vector<Wanted>& wanted, Candidates& candidates, Looked& looked);
  // The picked wheel from the user's cache (copied into cudafix's) or cudafix's own: true where
  // it was one of those.
  bool from_cache(const Candidate& c, Obtained& o);
  // The picked wheel read by range from its index (or fetched whole, small or where the server
  // ignores Range): false where it is to be downloaded instead.
  bool by_range(const Candidate& c, Obtained& o);
  // The downloads, at once, with one progress total; each kept against its index's hash.
  void download_all(std::vector<HttpRequest>& downloads, const std::vector<std::size_t>& download_of,
                    const std::vector<const Candidate*>& picked, std::vector<Obtained>& out);
};

// The index URL and the extra ones, as one place (the command line, the environment, the
// configuration files) sets them: two settings of their own, as pip's --index-url and
// --extra-index-url are; nullopt where that place does not set one.
struct IndexChoice {
  std::optional<std::string> index_url;
  std::optional<std::vector<std::string>> extra_index_urls;
};

// What pip and uv read from the environment: PIP_INDEX_URL, else UV_INDEX_URL, else
// UV_DEFAULT_INDEX; the extra ones of PIP_EXTRA_INDEX_URL, UV_EXTRA_INDEX_URL and UV_INDEX
// together (spaces between URLs).
[[nodiscard]] IndexChoice indexes_from_environment();

// The indexes asked, in order, by pip's rule: the index URL of the command line, else of the
// environment, else of the configuration files; then the extra ones of the environment, else of
// the files, with the command line's after them (pip's --extra-index-url appends to the list
// PIP_EXTRA_INDEX_URL gives, which replaces its config files'). Unlike pip, no index is assumed:
// a repair on a provisioning node reaches the network only where it is told to.
[[nodiscard]] std::vector<std::string> index_urls(const IndexChoice& command_line, const IndexChoice& environment,
                                                  const IndexChoice& config_files);

// The pip and uv cache folders the environment names (PIP_CACHE_DIR, UV_CACHE_DIR, else
// $XDG_CACHE_HOME/{pip,uv}, else ~/.cache/{pip,uv}).
void read_environment(SourceSettings& settings);

}  // namespace cudafix::installer::source
