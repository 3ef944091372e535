// An installed dist packed back into a wheel (the file pip would install it from): every file
// its RECORD lists, the dist-info's METADATA and WHEEL, and a RECORD written afresh from the bytes
// on disk. `cudafix demo` builds its local wheel folder this way; the wheel format is PEP 427's,
// a zip (deflate) written with libarchive.
#pragma once

#include <string>

#include "resolver/env/environment.hpp"

namespace cudafix::installer {

// Writes `<out_dir>/<name>-<version>-<tag>.whl` for env.dists[dist] and returns its path. The tag
// is the first `Tag:` of the dist-info's WHEEL file, else py3-none-any. Installer-written files
// (INSTALLER, REQUESTED, direct_url.json) and byte code are left out, as pip leaves them out of
// what it builds. Throws resolver::Error naming the file when a listed file is missing or
// unreadable (a metadata-only dist cannot be packed), or when a row lies outside the site folder
// (scripts and data files are not carried).
[[nodiscard]] std::string pack_installed_dist(const resolver::Environment& env, int dist, const std::string& out_dir);

}  // namespace cudafix::installer
