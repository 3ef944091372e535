// Finding the environment and its scheme directories without running its interpreter: a copied
// or broken venv may have a dangling bin/python3, so everything comes from pyvenv.cfg and the
// lib/pythonX.Y/site-packages layout.
//
// pyvenv.cfg (written by `python -m venv`, virtualenv and uv): `key = value` lines; cudafix reads
//   home (the base interpreter's bin folder), include-system-site-packages (true/false), and
//   version / version_info (the Python version).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "resolver/env/dist_info.hpp"
#include "resolver/env/interpreter.hpp"

namespace cudafix::resolver::inline env {

enum class EnvKind {
  venv,      // a folder with pyvenv.cfg
  prefix,    // an interpreter prefix without pyvenv.cfg (conda env, /usr/local)
  site_dir,  // a bare site-packages folder given with --venv
};

struct SiteDir {
  std::string path;  // absolute, as found (may go through a symlink such as lib64)
  std::string real;  // realpath: two SiteDirs with one real folder are one
  SiteRoot root;
  std::string bound;  // realpath of the prefix its RECORD paths must stay within
};

struct EnvLayout {
  EnvKind kind = EnvKind::venv;
  std::string root;                           // absolute: venv or prefix root; the site dir itself for a bare site dir
  std::string root_real;                      // its realpath
  std::optional<std::string> python_version;  // "3.12" when known
  std::optional<std::string> python_full_version;  // "3.12.3" when pyvenv.cfg says
  bool include_system_site_packages = false;
  std::optional<std::string> home;  // pyvenv.cfg's home
  std::vector<SiteDir> sites;       // purelib first; system sites last
  std::string found_by;             // "--venv", "$VIRTUAL_ENV", "python3 on PATH"
  // PEP 668: the EXTERNALLY-MANAGED file in an interpreter prefix's lib/pythonX.Y (Debian's
  // /usr, for one), when there is one. pip and uv refuse to change such an environment: its
  // packages belong to the system's package manager. A venv never is.
  std::optional<std::string> externally_managed;

  [[nodiscard]] const SiteDir* purelib() const;
  // Where pip installs a wheel's files: platlib, else purelib (one folder in a venv).
  [[nodiscard]] const SiteDir* platlib() const;
};

struct LocateRequest {
  std::optional<std::string> venv_option;    // --venv
  std::optional<std::string> python_option;  // -p/--python
  std::optional<std::string> virtual_env;    // $VIRTUAL_ENV
  InterpreterLookup lookup;                  // $PATH, the current folder, the version managers' variables
};

// Finds the environment: --venv, else -p, else $VIRTUAL_ENV, else the python3 on PATH (a
// version manager's shim followed to the interpreter it would run: resolver/env/interpreter.hpp).
// Throws Error saying what was looked at when none is found.
[[nodiscard]] EnvLayout locate_environment(const LocateRequest& request);
// Reads the layout of one folder (a venv root, an interpreter prefix or a site-packages dir).
[[nodiscard]] EnvLayout read_layout(const std::string& dir, const std::string& found_by);

}  // namespace cudafix::resolver::inline env
