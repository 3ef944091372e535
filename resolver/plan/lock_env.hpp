// An environment as a PEP 751 lock (`cudafix lock`), and how an environment differs from a lock
// (`cudafix doctor --lock`'s drift). resolver/pep/pylock.hpp owns the lock's value and format;
// where each dist's wheel came from is found above this room (installer/source/wheel_origin) and
// handed in.
//
// What a lock of an environment holds per dist: its name and version, the wheel it came from
// where one is known (its file name, URL or path, SHA-256), and under [packages.tool.cudafix] the
// shared objects its files provide (path relative to the site folder, SONAME, SHA-256 of the
// bytes on disk now) and how each of their NEEDED entries resolves where the answer lies inside
// the environment or nowhere: a provider outside it (glibc, the driver) is the host's, and a lock
// is carried from host to host.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "resolver/env/environment.hpp"
#include "resolver/pep/pep508.hpp"
#include "resolver/pep/pylock.hpp"

namespace cudafix::resolver::inline plan {

// The wheel a dist was installed from, as found (installer/source/wheel_origin.hpp).
struct WheelOrigin {
  std::string file_name;
  std::optional<std::string> url;    // a URL (an index's, a direct URL)
  std::optional<std::string> path;   // or an absolute path on this host
  std::string sha256;                // hex
  std::optional<std::string> index;  // the index it was found on
  std::string how;                   // "direct_url.json", "--find-links /w", "cudafix cache", "index URL"
};

struct LockRequest {
  std::string created_by;  // "cudafix 1.2.0"
  // One per env.dists (nullopt: none known: the package is written without a source).
  std::vector<std::optional<WheelOrigin>> origins;
  unsigned threads = 0;  // for hashing the libraries
};

// The lock of `env`: every dist-info dist (egg-info dists have no wheel; they are left out, and
// listed in `left_out`). Libraries are hashed in parallel.
struct LockOfEnvironment {
  Lock lock;
  std::vector<std::string> left_out;  // "name version: why", one per dist not locked
};
[[nodiscard]] LockOfEnvironment lock_of(const Environment& env, const LockRequest& request);

// One way the environment differs from the lock.
enum class DriftKind {
  version,        // a locked package's installed version differs
  missing,        // a locked package is not installed
  unlocked,       // an installed package the lock does not hold
  files,          // the installed files differ from the locked wheel's (RECORD against the wheel's)
  library_bytes,  // a locked library's bytes differ from its locked sha256 (or it is gone)
  verdict,        // a recorded verdict no longer holds: the consumer now resolves another cuDNN
};
struct Drift {
  DriftKind kind = DriftKind::version;
  std::string package;             // the PEP 503 name
  std::optional<int> dist;         // the installed dist, when there is one
  std::string locked, found;       // version, sha256 or path: what the lock says and what is there
  std::vector<std::string> files;  // paths (site-relative) the difference is about
  std::optional<std::string> soname;
  std::string message;  // one sentence, naming the package, the files and sonames
};
// How `env` (scanned with its objects and their resolutions) differs from `lock`, in package
// order. The libraries' bytes are hashed in parallel. A lock package whose marker is false for
// `markers` is not expected to be installed.
[[nodiscard]] std::vector<Drift> lock_drift(const Environment& env, const Lock& lock, const MarkerEnvironment& markers,
                                            unsigned threads = 0);

}  // namespace cudafix::resolver::inline plan
