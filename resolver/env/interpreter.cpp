#include "resolver/env/interpreter.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <vector>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/base/toml_checked.hpp"
#include "resolver/pep/pep440.hpp"

extern char** environ;

namespace cudafix::resolver::inline env {
namespace {

namespace fs = std::filesystem;

bool present(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

bool is_folder(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

std::string home_of(const InterpreterLookup& l) { return l.getenv("HOME").value_or(""); }

std::string env_or(const InterpreterLookup& l, const char* name, const std::string& fallback) {
  const auto v = l.getenv(name);
  return v && !v->empty() ? *v : fallback;
}

// The prefix of an interpreter's path: the venv its pyvenv.cfg names (bin/..), or bin/..
// when that holds lib/pythonX.Y; else the same asked of the file the path links to.
std::optional<std::string> prefix_of_interpreter(const fs::path& exe, int hops = 0) {
  if (hops > 40) return std::nullopt;  // a loop of links
  const fs::path bin = exe.parent_path();
  const fs::path up = bin.parent_path();
  if (present(up / "pyvenv.cfg")) return up.string();
  std::error_code ec;
  for (fs::directory_iterator it(up / "lib", ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().starts_with("python3")) return up.string();
  // One link at a time: ~/bin/python3 -> /opt/py/bin/python3 -> /usr/bin/python3.11 is /opt/py's.
  const auto target = fs::read_symlink(exe, ec);
  if (ec) return std::nullopt;
  return prefix_of_interpreter(target.is_absolute() ? target : (bin / target).lexically_normal(), hops + 1);
}

// Versions installed in `dir` (one folder each) that `name` names: itself, else the newest it
// prefixes at a dot (3.11 -> 3.11.7, not 3.110).
std::optional<std::string> installed_version(const fs::path& dir, const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (is_folder(dir / name)) return name;
  std::optional<std::string> best;
  std::optional<Version> best_v;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (!n.starts_with(name + ".")) continue;
    const auto v = Version::parse(n);
    if (!v) continue;
    if (!best_v || *best_v < *v) {
      best_v = v;
      best = n;
    }
  }
  return best;
}

// The words of a version file, comment lines skipped.
std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> out;
  for (auto line : split(text, '\n')) {
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    for (auto w : split(line, ' '))
      if (!trim(w).empty()) out.emplace_back(trim(w));
  }
  return out;
}

// The first file of `names` in `cwd` or a folder above it.
std::optional<fs::path> file_upward(const std::string& cwd, const std::vector<std::string>& names) {
  for (fs::path dir = cwd;; dir = dir.parent_path()) {
    for (const auto& n : names)
      if (present(dir / n) && !is_folder(dir / n)) return dir / n;
    if (dir == dir.parent_path() || dir.empty()) return std::nullopt;
  }
}

// The next python3 on PATH after the folder `after`: what a manager's `system` runs.
std::optional<std::string> python_after(const std::string& path_env, const fs::path& after) {
  bool past = false;
  for (const auto& dir : split_search_path(path_env)) {
    if (dir.empty()) continue;
    if (!past) {
      std::error_code ec;
      past = fs::equivalent(dir, after, ec);
      continue;
    }
    if (present(fs::path(dir) / "python3")) return (fs::path(dir) / "python3").string();
  }
  return std::nullopt;
}

// A version manager's choice: the names, and where they came from ("PYENV_VERSION", a file).
struct Choice {
  std::vector<std::string> names;
  std::string source;
};

// Picks the first name that is installed (`system`: the next python3 on PATH) and says why.
std::optional<FoundPython> pick(const Choice& c, const fs::path& installs, const fs::path& shims,
                                const InterpreterLookup& l, const std::string& shim_name) {
  for (const auto& name : c.names) {
    if (name == "system") {
      const auto next = python_after(l.path_env, shims);
      if (!next) continue;
      if (const auto prefix = prefix_of_interpreter(*next))
        return FoundPython{
            *prefix, fmt::format("{}: {} says system, the next python3 on PATH ({})", shim_name, c.source, *next)};
      continue;
    }
    const auto version = installed_version(installs, name);
    if (!version || !present(installs / *version / "bin" / "python3")) continue;
    const fs::path prefix = installs / *version;
    const std::string said = *version == name ? name : fmt::format("{} (the newest installed: {})", name, *version);
    return FoundPython{prefix.string(), fmt::format("{}: {} says {}", shim_name, c.source, said)};
  }
  return std::nullopt;
}

std::optional<Choice> choice_from_file(const std::optional<fs::path>& file, const std::string& tool) {
  if (!file) return std::nullopt;
  const auto text = try_read_file(*file);
  if (!text) return std::nullopt;
  if (tool.empty()) return Choice{words_of(*text), file->string()};
  // .tool-versions: "python 3.11.7 3.10.1"
  for (auto line : split(*text, '\n')) {
    auto words = words_of(std::string(line));
    if (words.size() >= 2 && words.front() == tool)
      return Choice{std::vector<std::string>(words.begin() + 1, words.end()), file->string()};
  }
  return std::nullopt;
}

std::optional<FoundPython> follow_pyenv(const fs::path& shims, const InterpreterLookup& l) {
  const fs::path root = shims.parent_path();
  const std::string shim = fmt::format("the pyenv shim {}", (shims / "python3").string());
  std::vector<Choice> choices;
  if (const auto v = l.getenv("PYENV_VERSION"); v && !v->empty()) {
    Choice c{{}, "PYENV_VERSION"};
    for (const auto& part : split(*v, ':')) c.names.emplace_back(part);
    choices.push_back(c);
  } else if (auto c = choice_from_file(file_upward(l.cwd, {".python-version"}), "")) {
    choices.push_back(*c);
  } else if (auto g = choice_from_file(root / "version", "")) {
    choices.push_back(*g);
  } else {
    choices.push_back({{"system"}, "no version is set, so"});
  }
  for (const auto& c : choices)
    if (auto found = pick(c, root / "versions", shims, l, shim)) return found;
  return std::nullopt;
}

std::optional<FoundPython> follow_asdf(const fs::path& shims, const InterpreterLookup& l) {
  const fs::path data = shims.parent_path();
  const std::string shim = fmt::format("the asdf shim {}", (shims / "python3").string());
  std::optional<Choice> c;
  if (const auto v = l.getenv("ASDF_PYTHON_VERSION"); v && !v->empty()) c = Choice{{*v}, "ASDF_PYTHON_VERSION"};
  if (!c) c = choice_from_file(file_upward(l.cwd, {".tool-versions"}), "python");
  if (!c && !home_of(l).empty()) c = choice_from_file(fs::path(home_of(l)) / ".tool-versions", "python");
  if (!c) return std::nullopt;
  return pick(*c, data / "installs" / "python", shims, l, shim);
}

// `[tools] python = "3.11"`, `["3.11", "3.10"]` or `{ version = "3.11" }`.
std::optional<Choice> mise_toml_choice(const fs::path& file) {
  // A regular file of at most 1 MiB (a FIFO or a device named mise.toml in a folder above the
  // working one must not hang or fill the lookup), read as TOML; else, as mise would, it chooses
  // nothing.
  const auto text = try_read_file(file, std::uint64_t{1} << 20);
  if (!text) return std::nullopt;
  toml::table parsed;
  try {
    parsed = parse_toml(*text, file.string());
  } catch (const Error&) {
    return std::nullopt;
  }
  const toml::node_view python = parsed["tools"]["python"];
  Choice c{{}, file.string()};
  const auto add = [&](const toml::node& n) {
    if (const auto s = n.value<std::string>()) c.names.push_back(*s);
    if (const auto* t = n.as_table())
      if (const auto v = (*t)["version"].value<std::string>()) c.names.push_back(*v);
  };
  if (const auto* arr = python.as_array())
    for (const auto& n : *arr) add(n);
  else if (python.node())
    add(*python.node());
  if (c.names.empty()) return std::nullopt;
  return c;
}

std::optional<FoundPython> follow_mise(const fs::path& shims, const InterpreterLookup& l) {
  const fs::path data = shims.parent_path();
  const std::string shim = fmt::format("the mise shim {}", (shims / "python3").string());
  std::optional<Choice> c;
  if (const auto v = l.getenv("MISE_PYTHON_VERSION"); v && !v->empty()) c = Choice{{*v}, "MISE_PYTHON_VERSION"};
  for (fs::path dir = l.cwd; !c; dir = dir.parent_path()) {
    for (const char* n : {"mise.local.toml", "mise.toml", ".mise.toml", ".config/mise.toml"})
      if (!c && present(dir / n)) c = mise_toml_choice(dir / n);
    if (!c)
      c = choice_from_file(present(dir / ".tool-versions") ? std::optional(dir / ".tool-versions") : std::nullopt,
                           "python");
    if (dir == dir.parent_path() || dir.empty()) break;
  }
  if (!c) {
    const std::string config =
        env_or(l, "MISE_CONFIG_DIR", env_or(l, "XDG_CONFIG_HOME", home_of(l) + "/.config") + "/mise");
    if (present(fs::path(config) / "config.toml")) c = mise_toml_choice(fs::path(config) / "config.toml");
  }
  if (!c) return std::nullopt;
  return pick(*c, data / "installs" / "python", shims, l, shim);
}

// Which manager a python3 on PATH belongs to, from its folder: pyenv's $PYENV_ROOT/shims, asdf's
// $ASDF_DATA_DIR/shims, mise's $MISE_DATA_DIR/shims (or their default places).
enum class Manager { none, pyenv, asdf, mise };

Manager manager_of(const fs::path& shims, const InterpreterLookup& l) {
  const std::string home = home_of(l);
  const auto same = [&](const std::string& dir) {
    std::error_code ec;
    return !dir.empty() && fs::equivalent(shims, fs::path(dir) / "shims", ec);
  };
  if (same(env_or(l, "PYENV_ROOT", home + "/.pyenv"))) return Manager::pyenv;
  if (same(env_or(l, "ASDF_DATA_DIR", home + "/.asdf"))) return Manager::asdf;
  if (same(env_or(l, "MISE_DATA_DIR", env_or(l, "XDG_DATA_HOME", home + "/.local/share") + "/mise")))
    return Manager::mise;
  // Elsewhere, by the layout each keeps beside its shims.
  if (shims.filename() != "shims") return Manager::none;
  if (is_folder(shims.parent_path() / "versions")) return Manager::pyenv;
  if (is_folder(shims.parent_path() / "installs")) {
    std::error_code ec;
    const auto target = fs::read_symlink(shims / "python3", ec);
    return !ec && target.filename() == "mise" ? Manager::mise : Manager::asdf;
  }
  return Manager::none;
}

// A script, not an interpreter: what shims are (mise's are links to the mise binary).
bool looks_like_shim(const fs::path& exe) {
  std::error_code ec;
  const auto target = fs::read_symlink(exe, ec);
  if (!ec && target.filename() == "mise") return true;
  const auto head = try_read_file(exe);
  return head && head->starts_with("#!");
}

// Runs `exe -c 'import sys; print(sys.prefix)'` with a deadline; its first line, or nullopt.
std::optional<std::string> ask_prefix(const std::string& exe, std::chrono::milliseconds deadline) {
  const auto text = ask_python(exe, "import sys; print(sys.prefix)", deadline);
  if (!text) return std::nullopt;
  const std::string line(trim(split(*text, '\n').front()));
  return line.empty() ? std::nullopt : std::optional(line);
}

FoundPython ask_shim(const fs::path& exe, const InterpreterLookup& l, const std::string& why) {
  const auto prefix = ask_prefix(exe.string(), l.ask_deadline);
  if (!prefix)
    throw Error(
        fmt::format("{} is a shim ({}), and running it with -c to ask for sys.prefix failed or took over {} s; "
                    "give --venv DIR or -p PYTHON",
                    exe.string(), why, l.ask_deadline.count() / 1000));
  return FoundPython{*prefix,
                     fmt::format("running the shim {} once ({}): sys.prefix is {}", exe.string(), why, *prefix)};
}

// An interpreter on PATH or given: followed when it is a shim, else its own prefix.
std::optional<FoundPython> interpreter(const fs::path& exe, const InterpreterLookup& l, const std::string& how) {
  const fs::path shims = exe.parent_path();
  std::optional<FoundPython> found;
  switch (manager_of(shims, l)) {
    case Manager::pyenv:
      found = follow_pyenv(shims, l);
      break;
    case Manager::asdf:
      found = follow_asdf(shims, l);
      break;
    case Manager::mise:
      found = follow_mise(shims, l);
      break;
    case Manager::none:
      if (!looks_like_shim(exe)) {
        const auto prefix = prefix_of_interpreter(exe);
        if (!prefix) return std::nullopt;
        return FoundPython{*prefix, how};
      }
      return ask_shim(exe, l, "a script of no version manager cudafix knows");
  }
  if (found) return found;
  return ask_shim(exe, l, "its version manager's files name no installed version");
}

}  // namespace

std::optional<std::string> ask_python(const std::string& exe, const std::string& code,
                                      std::chrono::milliseconds deadline, const std::vector<std::string>& args) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> words = {exe, "-c", code};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (spawned != 0) {
    ::close(out[0]);
    return std::nullopt;
  }
  std::string text;
  const auto end = std::chrono::steady_clock::now() + deadline;
  bool timed_out = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const auto n = ::read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return text;
}

std::string make_venv(const std::string& exe, const std::string& dir, std::chrono::milliseconds deadline) {
  // pip goes in as `python -m venv` puts it, by the venv's ensurepip, but told --no-compile:
  // compiling pip's files to bytecode is half of ensurepip's time (4.2 s of CPU against 2.4 on the
  // 2-core CI machine), and python compiles what pip imports on its first run anyway. That
  // needs ensurepip's _bootstrap and _run_pip (3.8 to 3.13, Debian's too); without them, plain
  // `-m ensurepip`. ensurepip may be there and still fail (Debian's without its wheels): then the
  // venv is made again without pip over what the failed attempt left, in a folder that was empty.
  static const char* const k_make =
      "import os, subprocess, sys, venv\n"
      "try:\n"
      "    import ensurepip\n"
      "    pip = ensurepip.version()\n"
      "except Exception:\n"
      "    pip = ''\n"
      "venv.EnvBuilder(with_pip=False, symlinks=True).create(sys.argv[1])\n"
      "quick = ('import ensurepip\\nrun = ensurepip._run_pip\\n'\n"
      "         'ensurepip._run_pip = lambda a, *r: run(a[:1] + [\"--no-compile\"] + a[1:], *r)\\n'\n"
      "         'ensurepip._bootstrap(upgrade=True, default_pip=True)\\n')\n"
      "python = os.path.join(sys.argv[1], 'bin', 'python')\n"
      "if pip:\n"
      "    try:\n"
      "        if not (hasattr(ensurepip, '_bootstrap') and hasattr(ensurepip, '_run_pip')):\n"
      "            raise AttributeError\n"
      "        subprocess.run([python, '-c', quick], check=True, stdout=subprocess.DEVNULL)\n"
      "    except Exception:\n"
      "        try:\n"
      "            subprocess.run([python, '-m', 'ensurepip', '--upgrade', '--default-pip'], check=True,\n"
      "                           stdout=subprocess.DEVNULL)\n"
      "        except Exception:\n"
      "            pip = ''\n"
      "            venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(sys.argv[1])\n"
      "print(pip)\n";
  const auto said = ask_python(exe, k_make, deadline, {dir});
  if (!said) throw Error(fmt::format("{} -m venv {} failed or took over {} s", exe, dir, deadline.count() / 1000));
  std::string pip(trim(*said));
  // A version as ensurepip gives it, nothing else: it is shown to the user.
  if (pip.size() > 32 || pip.find_first_not_of("0123456789.abcrpostdev") != std::string::npos) pip.clear();
  return pip;
}

std::optional<FoundPython> python_on_path(const InterpreterLookup& l) {
  for (const auto& dir : split_search_path(l.path_env)) {
    if (dir.empty()) continue;
    const fs::path exe = fs::path(dir) / "python3";
    if (!present(exe) || is_folder(exe)) continue;
    if (auto found = interpreter(exe, l, "python3 on PATH")) return found;
    // Not an interpreter with a prefix: the venv is bin/.., as before.
    return FoundPython{fs::path(dir).parent_path().string(), "python3 on PATH"};
  }
  return std::nullopt;
}

FoundPython find_python(const std::string& spec, const InterpreterLookup& l) {
  const fs::path given = spec.starts_with("~/") ? fs::path(home_of(l)) / spec.substr(2) : fs::path(spec);
  if (spec.find('/') != std::string::npos || present(given)) {
    const fs::path abs = given.is_absolute() ? given : fs::path(l.cwd) / given;
    if (is_folder(abs)) return FoundPython{abs.string(), "-p (an environment folder)"};
    if (struct stat st{}; ::lstat(abs.c_str(), &st) != 0)
      throw Error(errno == ENOENT || errno == ENOTDIR ? fmt::format("-p {}: no such file or folder", spec)
                                                      : fmt::format("-p {}: {}", spec, os_error_text(errno, abs)));
    if (auto found = interpreter(abs, l, "-p")) return *found;
    throw Error(
        fmt::format("-p {}: cannot tell its environment (no pyvenv.cfg beside its bin folder, no "
                    "lib/python3.N under its prefix)",
                    spec));
  }
  // A version: "3.11", "python3.11", "cpython-3.11", "3.11.7".
  std::string version = spec;
  for (const char* head : {"cpython-", "cpython@", "python"})
    if (version.starts_with(head)) version = version.substr(std::string_view(head).size());
  if (version.empty() || !std::isdigit(static_cast<unsigned char>(version.front())))
    throw Error(fmt::format("-p {}: not an interpreter's path, an environment folder or a version", spec));
  std::vector<std::string> looked;
  const std::string home = home_of(l);
  const fs::path pyenv = fs::path(env_or(l, "PYENV_ROOT", home + "/.pyenv")) / "versions";
  if (const auto v = installed_version(pyenv, version); v && present(pyenv / *v / "bin" / "python3"))
    return FoundPython{(pyenv / *v).string(), fmt::format("-p {}: pyenv's {}", spec, (pyenv / *v).string())};
  looked.push_back(pyenv.string());
  // uv's managed interpreters: cpython-3.11.7-linux-x86_64-gnu.
  const fs::path uv =
      env_or(l, "UV_PYTHON_INSTALL_DIR", env_or(l, "XDG_DATA_HOME", home + "/.local/share") + "/uv/python");
  std::optional<std::pair<Version, fs::path>> best;
  std::error_code ec;
  for (fs::directory_iterator it(uv, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (!n.starts_with("cpython-")) continue;
    const std::string full = n.substr(8, n.find('-', 8) - 8);
    if (full != version && !full.starts_with(version + ".")) continue;
    const auto v = Version::parse(full);
    if (v && present(it->path() / "bin" / "python3") && (!best || best->first < *v)) best = {{*v, it->path()}};
  }
  if (best) return FoundPython{best->second.string(), fmt::format("-p {}: uv's {}", spec, best->second.string())};
  looked.push_back(uv.string());
  for (const auto& dir : split_search_path(l.path_env)) {
    const fs::path exe = fs::path(dir) / ("python" + version);
    if (dir.empty() || !present(exe)) continue;
    if (auto found = interpreter(exe, l, fmt::format("-p {}: python{} on PATH", spec, version))) return *found;
  }
  looked.push_back("python" + version + " on PATH");
  throw Error(fmt::format("-p {}: no Python {} found (looked in {})", spec, version, fmt::join(looked, ", ")));
}

}  // namespace cudafix::resolver::inline env
