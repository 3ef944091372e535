#include "resolver/plan/uninstall_command.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <optional>
#include <set>

#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline plan {

namespace {

// pip's options that take a value (pip/_internal/cli/cmdoptions.py: the general ones, then
// uninstall's); the rest are flags. optparse takes a unique prefix of a long option too.
constexpr std::array k_pip_valued = {"--python",         "--log",
                                     "--log-file",       "--proxy",
                                     "--retries",        "--timeout",
                                     "--exists-action",  "--trusted-host",
                                     "--cert",           "--client-cert",
                                     "--cache-dir",      "--use-feature",
                                     "--use-deprecated", "--keyring-provider",
                                     "--resume-retries", "--root-user-action",
                                     "--requirement",    "--local-log"};
constexpr std::array k_pip_flags = {"--help",         "--debug",
                                    "--isolated",     "--require-virtualenv",
                                    "--verbose",      "--version",
                                    "--quiet",        "--no-input",
                                    "--no-cache-dir", "--disable-pip-version-check",
                                    "--no-color",     "--no-python-version-warning",
                                    "--yes",          "--break-system-packages"};
// uv's options that take a value, global (before `pip`) and of `uv pip uninstall`.
constexpr std::array k_uv_valued = {
    "--cache-dir",         "--directory",           "--project",    "--config-file", "--color",
    "--python-preference", "--allow-insecure-host", "--python",     "--target",      "--prefix",
    "--keyring-provider",  "--requirements",        "--requirement"};

template <std::size_t N>
bool names_one_of(std::string_view option, const std::array<const char*, N>& list) {
  return std::find(list.begin(), list.end(), option) != list.end();
}

// The long option `option` (without any `=VALUE`) as pip's optparse reads it: itself, or the one
// known option it is a prefix of; empty when unknown or ambiguous.
std::string pip_long_option(std::string_view option) {
  if (names_one_of(option, k_pip_valued) || names_one_of(option, k_pip_flags)) return std::string(option);
  std::string found;
  const auto consider = [&](const char* o) {
    if (!std::string_view(o).starts_with(option)) return true;
    if (!found.empty()) return false;  // ambiguous
    found = o;
    return true;
  };
  for (const char* o : k_pip_valued)
    if (!consider(o)) return "";
  for (const char* o : k_pip_flags)
    if (!consider(o)) return "";
  return found;
}

bool is_program(std::string_view word, std::string_view stem) {
  const auto slash = word.rfind('/');
  std::string_view base = slash == std::string_view::npos ? word : word.substr(slash + 1);
  if (!base.starts_with(stem)) return false;
  base.remove_prefix(stem.size());
  // python3, python3.12, python3.13t; pip3, pip3.12
  if (!base.empty() && (base.back() == 't' || base.back() == 'd') && stem == "python") base.remove_suffix(1);
  return std::all_of(base.begin(), base.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; });
}

// Reads pip's arguments from `at` (after the program, or after `-m pip`): the general options,
// the subcommand, then its own options and the requirements.
std::optional<UninstallCommand> read_pip(const std::vector<std::string>& argv, std::size_t at) {
  UninstallCommand cmd;
  cmd.tool = "pip";
  bool in_uninstall = false, options_done = false;
  for (std::size_t i = at; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (!options_done && a == "--") {
      options_done = true;
      continue;
    }
    if (!options_done && a.size() > 1 && a[0] == '-') {
      if (a.starts_with("--")) {
        const auto eq = a.find('=');
        const std::string name = pip_long_option(std::string_view(a).substr(0, eq));
        const std::string value = eq == std::string::npos ? "" : a.substr(eq + 1);
        const bool valued = names_one_of(std::string_view(name), k_pip_valued);
        std::string got = value;
        if (valued && eq == std::string::npos && i + 1 < argv.size()) got = argv[++i];
        if (name == "--requirement" && in_uninstall) cmd.requirement_files.push_back(got);
        if (name == "--yes") cmd.yes = true;
        continue;
      }
      // Short flags, bundled (-yq); -r takes the rest of the word or the next one.
      for (std::size_t k = 1; k < a.size(); ++k) {
        if (a[k] == 'y') cmd.yes = true;
        if (a[k] == 'r') {
          const std::string file = k + 1 < a.size() ? a.substr(k + 1) : (i + 1 < argv.size() ? argv[++i] : "");
          if (in_uninstall) cmd.requirement_files.push_back(file);
          break;
        }
      }
      continue;
    }
    if (!in_uninstall) {
      if (a != "uninstall") return std::nullopt;  // another pip command
      in_uninstall = true;
      continue;
    }
    cmd.requirements.push_back(a);
  }
  if (!in_uninstall) return std::nullopt;
  return cmd;
}

std::optional<UninstallCommand> read_uv(const std::vector<std::string>& argv) {
  UninstallCommand cmd;
  cmd.tool = "uv";
  cmd.yes = true;
  int words = 0;  // 0: before `pip`, 1: before `uninstall`, 2: its arguments
  bool options_done = false;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (!options_done && a == "--" && words == 2) {
      options_done = true;
      continue;
    }
    if (!options_done && a.size() > 1 && a[0] == '-') {
      if (a.starts_with("--")) {
        const auto eq = a.find('=');
        const std::string name = a.substr(0, eq);
        std::string got = eq == std::string::npos ? "" : a.substr(eq + 1);
        if (names_one_of(std::string_view(name), k_uv_valued) && eq == std::string::npos && i + 1 < argv.size())
          got = argv[++i];
        if ((name == "--requirements" || name == "--requirement") && words == 2) cmd.requirement_files.push_back(got);
        continue;
      }
      // Short: -r FILE and -p PYTHON take a value (attached or next); the others are flags.
      for (std::size_t k = 1; k < a.size(); ++k) {
        if (a[k] == 'r' || a[k] == 'p') {
          const std::string value = k + 1 < a.size() ? a.substr(k + 1) : (i + 1 < argv.size() ? argv[++i] : "");
          if (a[k] == 'r' && words == 2) cmd.requirement_files.push_back(value);
          break;
        }
      }
      continue;
    }
    if (words == 0) {
      if (a != "pip") return std::nullopt;
      words = 1;
    } else if (words == 1) {
      if (a != "uninstall") return std::nullopt;
      words = 2;
    } else {
      cmd.requirements.push_back(a);
    }
  }
  if (words != 2) return std::nullopt;
  return cmd;
}

// After an interpreter: its own options, then `-m pip`; nothing for a script or `-c`.
std::optional<UninstallCommand> read_python(const std::vector<std::string>& argv) {
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() < 2 || a[0] != '-' || a.starts_with("--")) return std::nullopt;  // a script, or --help
    for (std::size_t k = 1; k < a.size(); ++k) {
      const char c = a[k];
      if (c == 'c') return std::nullopt;
      if (c == 'm' || c == 'W' || c == 'X') {
        std::string value = k + 1 < a.size() ? a.substr(k + 1) : (i + 1 < argv.size() ? argv[++i] : "");
        if (c == 'm') return value == "pip" ? read_pip(argv, i + 1) : std::nullopt;
        break;
      }
    }
  }
  return std::nullopt;
}

bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'; }

}  // namespace

std::optional<UninstallCommand> parse_uninstall_command(const std::vector<std::string>& argv) {
  if (argv.empty()) return std::nullopt;
  const std::string& program = argv[0];
  if (is_program(program, "pip")) return read_pip(argv, 1);
  if (is_program(program, "python")) return read_python(argv);
  if (is_program(program, "uv") && !program.ends_with(".")) return read_uv(argv);
  return std::nullopt;
}

std::optional<std::string> requirement_project(std::string_view requirement) {
  std::string_view s = trim(requirement);
  if (s.empty() || !std::isalnum(static_cast<unsigned char>(s[0]))) return std::nullopt;
  std::size_t end = 0;
  while (end < s.size() && name_char(s[end])) ++end;
  std::string_view name = s.substr(0, end);
  while (!name.empty() && !std::isalnum(static_cast<unsigned char>(name.back()))) name.remove_suffix(1);
  if (end < s.size()) {
    const char next = s[end];
    // A path (./x, dir/x.whl) or a URL names no project here.
    if (next == '/' || next == ':' || next == '\\') return std::nullopt;
  }
  if (name.ends_with(".whl") || name.ends_with(".tar.gz") || name.ends_with(".zip")) return std::nullopt;
  return std::string(name);
}

namespace {

// A file as the kernel knows it, whatever path named it (`./r.txt`, `../d/r.txt`, a symlink).
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  auto operator<=>(const FileId&) const = default;
};

class RequirementReader {
 public:
  RequirementReader(const RequirementFileLimits& limits, RequirementFileRead& out) : limits_(limits), out_(out) {}

  // `file`, and the files it names; `by` is the file whose -r line named it (empty for the
  // command line's).
  void read(const std::string& file, const std::string& by) {
    if (stopped_) return;
    if (reading_.size() >= limits_.depth) {
      problem(fmt::format("{}: requirement files nested deeper than {}; not read", file, limits_.depth));
      return;
    }
    std::optional<FileId> id;
    if (struct stat st{}; ::stat(file.c_str(), &st) == 0) id = FileId{st.st_dev, st.st_ino};
    if (id && std::find(reading_.begin(), reading_.end(), *id) != reading_.end()) {
      problem(fmt::format("{}: recursively includes itself (named again by -r in {}); not read again", file, by));
      return;
    }
    if (id && read_.contains(*id)) return;
    // The identity is taken before the read: a file swapped in between is read under the old
    // one's name once at most, which the totals bound like any other.
    const std::uint64_t left = limits_.total_bytes - bytes_;
    const std::uint64_t bound = std::min(limits_.file_bytes, left);
    int err = 0;
    const auto text = try_read_file_at(AT_FDCWD, file.c_str(), bound, &err);
    if (!text) {
      if (err == EFBIG && bound < limits_.file_bytes)
        return stop(
            fmt::format("{}: requirement files over {} bytes together; the rest not read", file, limits_.total_bytes));
      problem(err == EFBIG ? fmt::format("{}: cannot be read: larger than {} bytes", file, bound)
                           : fmt::format("{}: cannot be read: {}", file, why_unread(err, file)));
      return;
    }
    bytes_ += text->size();
    if (id) {
      read_.insert(*id);
      reading_.push_back(*id);
    }
    lines(file, *text);
    if (id) reading_.pop_back();
  }

 private:
  const RequirementFileLimits& limits_;
  RequirementFileRead& out_;
  std::vector<FileId> reading_;  // the chain being read, outermost first
  std::set<FileId> read_;
  std::set<std::string> said_;
  std::uint64_t bytes_ = 0;
  std::size_t lines_ = 0;
  bool stopped_ = false;

  void problem(std::string text) {
    if (said_.insert(text).second) out_.problems.push_back(std::move(text));
  }
  void stop(std::string text) {
    stopped_ = true;
    problem(std::move(text));
  }

  void lines(const std::string& file, const std::string& text) {
    const std::string folder = std::filesystem::path(file).parent_path().string();
    std::string joined;
    const auto take = [&](std::string line) {
      if (++lines_ > limits_.total_lines)
        return stop(fmt::format("{}: requirement files of over {} lines together; the rest not read", file,
                                limits_.total_lines));
      // A comment starts at '#' at the line's start or after white space.
      for (std::size_t k = 0; k < line.size(); ++k)
        if (line[k] == '#' && (k == 0 || std::isspace(static_cast<unsigned char>(line[k - 1])))) {
          line.resize(k);
          break;
        }
      const std::string_view t = trim(line);
      if (t.empty()) return;
      if (t.starts_with("-r") || t.starts_with("--requirement")) {
        std::string_view rest = t.starts_with("--requirement") ? t.substr(13) : t.substr(2);
        if (rest.starts_with("=")) rest.remove_prefix(1);
        rest = trim(rest);
        if (rest.empty()) return;
        const std::string nested(rest);
        read(nested.front() == '/' || folder.empty() ? nested : folder + "/" + nested, file);
        return;
      }
      if (t.starts_with("-")) return;  // -c, -e, --index-url, ...: no project to uninstall
      out_.requirements.emplace_back(t);
    };
    for (const auto raw : split(text, '\n')) {
      if (stopped_) return;
      std::string_view line = raw;
      if (line.ends_with("\r")) line.remove_suffix(1);
      if (line.ends_with("\\")) {
        joined += std::string(line.substr(0, line.size() - 1));
        continue;
      }
      joined += std::string(line);
      take(std::move(joined));
      joined.clear();
    }
    if (!joined.empty() && !stopped_) take(std::move(joined));
  }
};

}  // namespace

RequirementFileRead read_requirement_files(const std::vector<std::string>& files, const RequirementFileLimits& limits) {
  RequirementFileRead out;
  RequirementReader reader(limits, out);
  for (const auto& f : files) reader.read(f, "");
  return out;
}

}  // namespace cudafix::resolver::inline plan
