// PEP 751 lock files (`pylock.toml`, packaging.python.org/specifications/pylock-toml), as one
// typed value: read strictly from what uv 0.11 (`uv pip compile -o pylock.toml`, `uv export`) and
// cudafix (`cudafix lock`) write, and written back deterministically.
//
// A lock file is hostile input like anything else an environment holds: it is read with bounds
// (k_lock_file_max bytes, k_lock_max_packages packages, k_lock_max_items entries in any one list,
// k_lock_max_string bytes in any one string), every key's type is checked, and a problem throws
// Error naming the file and the key as a path: "pylock.toml: packages[3].wheels[0].hashes.sha256:
// expected 64 hex digits". Before toml++ reads it, a byte past ASCII outside a string or a comment
// (TOML allows none there) is refused with its line: toml++ 3.3 mistakes some for its own
// invariants (resolver/base/toml_checked.cpp makes those checks). What is
// checked beyond types:
//   - lock-version: "1.N"; another major is refused (the spec's MUST), a newer minor is read with
//     a warning (its SHOULD);
//   - a package's name is kept PEP 503 normalised; its version is PEP 440, its marker PEP 508,
//     its requires-python a specifier set;
//   - vcs, directory and archive exclude each other and sdist and wheels (the spec's one source);
//   - a wheel's file name (its `name`, else the last part of its url or path) parses as a wheel
//     file name whose project and version are the package's; a file has a url or a path;
//   - a hash is hex of its algorithm's length (sha256: 64); an algorithm cudafix does not know is
//     kept when it is hex;
//   - a `path` is kept as the text the lock gives (relative to the lock file's folder, or
//     absolute): resolving it, and refusing one that escapes where it must stay, is the caller's.
// Keys this model does not know are kept, each as its value's TOML text, and written back.
//
// The writer orders top-level and package keys as the specification lists them, packages by
// name then version, hash algorithms and unknown keys by name; it writes no timestamp of its own
// (a recorded verification's time is the caller's to give): the same value gives the same bytes.
//
// cudafix's own tables (typed here; unknown keys in them are kept too):
//   [packages.tool.cudafix]  record      = SHA-256 of its installed RECORD's rows in the site folder
//                            libraries   = [{ path, soname, sha256 }]  the shared objects the
//                                            package's files provide, path relative to the site
//                                            folder
//                            resolutions = [{ consumer, soname, provider }]  each of its objects'
//                                            NEEDED and the path that provides it (none: unresolved)
//   [tool.cudafix]           verified    = [{ device, driver, cuda, cudnn, consumer, cudnn-path,
//                                            at }]  a passing probe's verdict per device
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cudafix::resolver::inline pep {

inline constexpr std::size_t k_lock_file_max = 64u << 20;  // a lock of a torch stack is ~0.5 MiB
inline constexpr std::size_t k_lock_max_packages = 20000;
inline constexpr std::size_t k_lock_max_items = 100000;  // wheels, hashes, libraries, ... in one list
inline constexpr std::size_t k_lock_max_string = 64u << 10;
inline constexpr int k_lock_major = 1;
inline constexpr int k_lock_minor = 0;

// A key this model does not know, kept to be written back: `key = toml`, `toml` an inline value.
struct LockExtra {
  std::string key;
  std::string toml;
  bool operator==(const LockExtra&) const = default;
};
using LockExtras = std::vector<LockExtra>;  // sorted by key

// Hash algorithm -> lower-case hex digest, sorted by algorithm.
struct LockHashes {
  std::vector<std::pair<std::string, std::string>> digests;
  [[nodiscard]] std::optional<std::string> sha256() const;
  bool operator==(const LockHashes&) const = default;
};

// A file a package installs from: one of `wheels`, its `sdist`, or its `archive`.
struct LockFile {
  std::optional<std::string> name;         // the file name, when the url's or path's last part is not it
  std::optional<std::string> upload_time;  // a TOML date-time, as its text (RFC 3339)
  std::optional<std::string> url;
  std::optional<std::string> path;  // as the lock writes it: relative to the lock's folder or absolute
  std::optional<std::uint64_t> size;
  std::optional<std::string> subdirectory;  // archive only
  LockHashes hashes;
  LockExtras extras;
  // `name`, else the last part of the url (its query and fragment cut) or of the path.
  [[nodiscard]] std::string file_name() const;
  bool operator==(const LockFile&) const = default;
};
using LockWheel = LockFile;

// [packages.tool.cudafix]
struct LockLibrary {
  std::string path;  // relative to the site folder
  std::optional<std::string> soname;
  std::string sha256;
  LockExtras extras;
  bool operator==(const LockLibrary&) const = default;
};
struct LockResolution {
  std::string consumer;                 // relative to the site folder, or absolute outside it
  std::string soname;                   // the NEEDED entry
  std::optional<std::string> provider;  // where it resolves; none: unresolved
  LockExtras extras;
  bool operator==(const LockResolution&) const = default;
};
struct LockPackageTool {
  // SHA-256 (hex) of the installed RECORD's rows inside the site folder, outside the dist-info,
  // as "path,hash" lines sorted: the same wheel installed by pip, uv or cudafix gives the same.
  std::optional<std::string> record;
  std::vector<LockLibrary> libraries;       // sorted by path
  std::vector<LockResolution> resolutions;  // sorted by consumer, then soname
  LockExtras extras;
  [[nodiscard]] bool empty() const { return !record && libraries.empty() && resolutions.empty() && extras.empty(); }
  bool operator==(const LockPackageTool&) const = default;
};

// [tool.cudafix] verified: what a passing probe found on one device.
struct LockVerdict {
  std::string device;                     // the device's UUID ("GPU-..."), else its index as text
  std::string driver;                     // the driver's version
  std::optional<int> cuda;                // the driver's CUDA version, as cuDriverGetVersion gives it (12040)
  std::optional<std::string> cudnn;       // cuDNN's version, "9.1.0"
  std::string consumer;                   // the library verified (its path, as resolutions give consumers)
  std::optional<std::string> cudnn_path;  // the libcudnn.so.9 the probe mapped
  std::optional<std::string> at;          // when (a TOML date-time's text); given by the caller
  LockExtras extras;
  bool operator==(const LockVerdict&) const = default;
};

struct LockPackage {
  std::string name;  // PEP 503 normalised
  std::optional<std::string> version;
  std::optional<std::string> marker;
  std::optional<std::string> requires_python;
  std::vector<std::string> dependencies;  // each an inline table's TOML text
  std::optional<std::string> index;
  std::optional<std::string> vcs;        // inline table TOML text: cudafix installs no VCS source
  std::optional<std::string> directory;  // the same: nor a source tree
  std::optional<LockFile> archive;
  std::optional<LockFile> sdist;
  std::vector<LockWheel> wheels;
  std::vector<std::string> attestation_identities;  // each an inline table's TOML text
  LockPackageTool cudafix;                          // [packages.tool.cudafix]
  LockExtras tool;                                  // [packages.tool]'s other tools
  LockExtras extras;
  bool operator==(const LockPackage&) const = default;
};

struct Lock {
  std::string lock_version = "1.0";
  std::vector<std::string> environments;
  std::optional<std::string> requires_python;
  std::vector<std::string> extras_names;  // `extras`
  std::vector<std::string> dependency_groups;
  std::vector<std::string> default_groups;
  std::string created_by;
  std::vector<LockPackage> packages;  // sorted by name, then version, by the writer
  std::vector<LockVerdict> verified;  // [tool.cudafix] verified
  LockExtras cudafix_extras;          // [tool.cudafix]'s other keys
  LockExtras tool;                    // [tool]'s other tools
  LockExtras extras;
  bool operator==(const Lock&) const = default;
};

// Parses `text` (the contents of `file`, named in messages). Throws Error on anything malformed;
// `warnings` gets what is read but said (a newer minor lock-version).
[[nodiscard]] Lock parse_lock(std::string_view text, std::string_view file,
                              std::vector<std::string>* warnings = nullptr);
// Reads and parses `path`, refusing more than k_lock_file_max bytes before reading.
[[nodiscard]] Lock read_lock(const std::string& path, std::vector<std::string>* warnings = nullptr);
// The lock as TOML, deterministic (see above); packages and lists are sorted in the copy written.
[[nodiscard]] std::string write_lock(const Lock& lock);
// Sorts what the writer sorts, so that a parsed lock and the value it was written from compare equal.
void sort_lock(Lock& lock);

}  // namespace cudafix::resolver::inline pep
