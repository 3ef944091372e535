// Which interpreter the user means, and so which environment: the `python3` on PATH when it is a
// version manager's shim (pyenv, asdf, mise) followed by the manager's own rule without running
// it, and `-p/--python` (an interpreter, a version, or an environment folder), as uv takes it.
//
// The rules followed (each manager's documented lookup order):
//   pyenv  $PYENV_VERSION, else `.python-version` from the current folder up, else
//          $PYENV_ROOT/version, else `system`. Each is a list of names (words; `#` starts a
//          comment line); the first whose $PYENV_ROOT/versions/NAME/bin/python3 exists wins.
//          A name that is not installed as written matches the newest installed version it
//          prefixes (`3.11` -> `3.11.7`), as pyenv 2.3+ does. pyenv-virtualenv environments are
//          versions/NAME too. `system` is the next python3 on PATH after the shims folder.
//   asdf   $ASDF_PYTHON_VERSION, else `python V...` in `.tool-versions` from the current folder
//          up, else in $HOME/.tool-versions; installs in $ASDF_DATA_DIR/installs/python/V
//          (default ~/.asdf).
//   mise   $MISE_PYTHON_VERSION, else `[tools] python` in mise.local.toml, mise.toml,
//          .mise.toml, .config/mise.toml, or `python V` in .tool-versions, from the current
//          folder up, else ~/.config/mise/config.toml; installs in
//          $MISE_DATA_DIR/installs/python/V (default $XDG_DATA_HOME/mise, ~/.local/share/mise),
//          a prefix matching the newest installed.
// A shim whose rule leads nowhere (an unknown shim, a version file naming nothing installed) is
// asked once, `SHIM -c 'import sys; print(sys.prefix)'` with a deadline, and the answer says so.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace cudafix::resolver::inline env {

struct InterpreterLookup {
  std::string path_env;  // $PATH
  std::string cwd;       // where .python-version and friends are looked for, upward
  std::function<std::optional<std::string>(const char*)> getenv;  // PYENV_ROOT, HOME, ...
  std::chrono::milliseconds ask_deadline{10000};                  // for running a shim
};

struct FoundPython {
  std::string prefix;    // the environment's folder: a venv root or an interpreter prefix
  std::string found_by;  // how, in words: "the pyenv shim ...: /p/.python-version says 3.11.7"
};

// The python3 on PATH, a shim followed; nullopt when PATH has none.
[[nodiscard]] std::optional<FoundPython> python_on_path(const InterpreterLookup& lookup);

// Runs `exe -c CODE ARGS...` (stdin and stderr /dev/null; ARGS reach the code as sys.argv[1:],
// never joined into it), killed at `deadline`: what it printed, or nullopt when it could not
// start, failed or ran out of time.
[[nodiscard]] std::optional<std::string> ask_python(const std::string& exe, const std::string& code,
                                                    std::chrono::milliseconds deadline,
                                                    const std::vector<std::string>& args = {});

// Makes `dir` (absent or empty) a venv of the interpreter `exe` with its own venv module, as
// `exe -m venv DIR` does: with pip where the interpreter has ensurepip (its version returned),
// else as `--without-pip` does (an empty string returned; Debian's python3 without python3-venv
// has none). Throws Error when the interpreter could not make it.
[[nodiscard]] std::string make_venv(const std::string& exe, const std::string& dir, std::chrono::milliseconds deadline);

// `-p/--python SPEC`: an interpreter's path (.venv/bin/python, a shim), an environment folder,
// or a version (`3.11`, `3.11.7`, `python3.11`, `cpython-3.11`) found as pyenv, uv and PATH
// hold it. Throws Error saying what was looked at when it finds none.
[[nodiscard]] FoundPython find_python(const std::string& spec, const InterpreterLookup& lookup);

}  // namespace cudafix::resolver::inline env
