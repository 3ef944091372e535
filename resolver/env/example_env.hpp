// Materialising an environment described in the corpus format (tests/data/README.md):
// a venv with pyvenv.cfg, dist-info folders (METADATA, RECORD, INSTALLER, WHEEL, ...), a file
// for every RECORD row, and, where the description gives a dynamic section, a real ELF shared
// object carrying it (resolver/elf/elf_writer.hpp). `cudafix demo`, the end-to-end tests and the
// benchmarks build their environments with it.
//
// The format: {"python": "3.12.3", "site_packages": "lib/python3.12/site-packages",
//   "dists": [{"dist_info": "...dist-info", "metadata_headers": ["Name: x", ...],
//              "record": [[path, hash, size], ...], "INSTALLER": "uv", "WHEEL": "...",
//              "REQUESTED": "", "top_level.txt": "...", "direct_url.json": "..."}],
//   "elf": {"path/relative/to/site-packages.so": {"soname": ..., "needed": [...],
//           "rpath": ..., "runpath": ..., "class": 32|64, "flags_1": N}},
//   "absent": ["paths RECORD lists that are not written", ...]}
// Files that are not ELF get `size` bytes of filler (capped), or nothing when size is empty.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace cudafix::resolver::inline env {

struct MaterializeOptions {
  int copies = 1;                           // >1: the dists again under renamed packages (scaling runs)
  std::string python = "/usr/bin/python3";  // what bin/python3 links to
  std::size_t max_filler = 0;               // bytes of filler per non-ELF file at most
  // `dir` is a venv `python -m venv` made (resolver/env/interpreter.hpp's make_venv): its
  // pyvenv.cfg, bin/ and lib64 are kept and the dists added to its site folder, which must hold
  // none of theirs. Otherwise `dir` must be empty or absent and gets a pyvenv.cfg and a
  // bin/python3 linking `python`.
  bool into_venv = false;
};

struct MaterializeStats {
  std::size_t dists = 0;
  std::size_t files = 0;
  std::size_t elf_objects = 0;
};

// Writes the environment into `dir` (see MaterializeOptions::into_venv). Throws Error.
MaterializeStats materialize_environment(const nlohmann::json& description, const std::string& dir,
                                         const MaterializeOptions& options = {});

}  // namespace cudafix::resolver::inline env
