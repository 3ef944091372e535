// cudafix's own state inside an environment, as untrusted input: anything that can write the
// environment (pip installing a wheel whose .data/data/ lands in the root, a package's code,
// another user) can plant files there, so the state is checked before any of it is read.
//
//   <root>/.cudafix/            0700, owned by the user running cudafix (or root)
//   <root>/.cudafix/tx/<id>/    one transaction (installer/txn/journal.hpp)
//   <root>/.cudafix/active      the id of the transaction in progress
//   <root>/.cudafix/snapshots/  snapshots (installer/txn/changes.hpp); `.<name>.partial` while
//                               one is taken
//   <root>/.cudafix/guards/     <snapshot>.json while `guard` runs a command (cli/guard_command.cpp)
// An id is YYYYMMDDTHHMMSS.mmm-PID-N (at most 64 bytes), a snapshot name up to 128 letters,
// digits, '-', '_' and '.', not a leading '.'; only such an id or name is joined into a path.
// A dist's folder name read from the state (a snapshot's scope) is up to 255 letters, digits,
// '-', '_', '.', '+' and '!' (a local version, an epoch), beginning with a letter or digit and
// ending in .dist-info, .egg-info or .egg-link.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "resolver/env/venv.hpp"

namespace cudafix::resolver::inline env {

[[nodiscard]] bool is_transaction_id(std::string_view id);
[[nodiscard]] bool is_snapshot_name(std::string_view name);
[[nodiscard]] bool is_dist_folder_name(std::string_view name);

// The files of an environment no wheel may write, no RECORD may list and no journal may name:
// cudafix's state, its settings, the venv's pyvenv.cfg, its lock and its interpreter. `rel` is
// relative to the root, normalised. What the file is ("the venv's pyvenv.cfg"), or "" when it
// is none of them: the one list the installer, the removal and the journal's checks share.
[[nodiscard]] std::string protected_file(std::string_view rel);
[[nodiscard]] inline bool is_protected_path(std::string_view rel) { return !protected_file(rel).empty(); }

// Why <root>/.cudafix cannot be trusted ("" when it can, or is absent): it or tx/ is not a real
// folder, belongs to another user (neither this one nor root), or others may write it.
[[nodiscard]] std::string state_folder_problem(const std::string& root);

// RECORD rows of the environment's dists that name a protected path ("<RECORD file>: <row>"),
// read straight from each site folder's dist-info RECORD files (at most `limit` of them said).
[[nodiscard]] std::vector<std::string> records_listing_protected(const EnvLayout& layout, std::size_t limit = 16);

}  // namespace cudafix::resolver::inline env
