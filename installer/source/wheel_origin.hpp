// Where each installed dist's wheel came from, for `cudafix lock` (resolver/plan/lock_env.hpp):
//   1. its direct_url.json (PEP 610), where it names a .whl and archive_info gives its sha256;
//   2. a wheel of its name, version and tags (WHEEL's Tag lines) in cudafix's content-addressed
//      cache, then in the --find-links folders, confirmed by its RECORD: every row of the wheel
//      inside the site folder and outside its dist-info is a row of the installed RECORD, hash
//      for hash (an installer rewrites only its dist-info and the scripts of .data);
//   3. the index (--index-url and the extra ones, not --offline): a file of its name, version
//      and tags whose sha256 the index gives (the wheel is not downloaded: its RECORD is not
//      compared, and the lock says which index).
// A dist none of these knows gets none: its package is written without a source.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "installer/source/http.hpp"
#include "resolver/env/environment.hpp"
#include "resolver/plan/lock_env.hpp"

namespace cudafix::installer::source {

struct OriginSettings {
  std::vector<std::string> find_links;
  std::vector<std::string> index_urls;  // empty: no index
  bool offline = false;
  std::string cache_dir;  // cudafix's cache folder (wheels/ below it); empty: none
  std::vector<std::string> supported_tags;
  HttpOptions http;
};

struct Origins {
  std::vector<std::optional<resolver::WheelOrigin>> by_dist;  // one per env.dists
  std::vector<std::string> problems;                          // wheels or pages that could not be read, one line each
};

[[nodiscard]] Origins find_origins(const resolver::Environment& env, const OriginSettings& settings);

}  // namespace cudafix::installer::source
