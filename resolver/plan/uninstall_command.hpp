// A command line read as the uninstall it is, when it is one: `pip uninstall`, `pip3 uninstall`,
// `python -m pip uninstall` (any interpreter, by path or name), `uv pip uninstall`, with the
// options of pip and uv before and after the subcommand skipped as they parse them (an option
// that takes a value takes the next word, or its `=VALUE` or attached `-rFILE`), `-r FILE`
// requirement files followed, and each requirement reduced to its project name as pip's
// install_req_from_line does (`torch==2.1`, `nvidia-cudnn-cu12[extra] >= 9; python_version > '3'`,
// `name @ URL`). Nothing here runs anything; reading the requirement files is bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cudafix::resolver::inline plan {

struct UninstallCommand {
  std::string tool;                            // "pip" or "uv"
  std::vector<std::string> requirements;       // as typed on the command line, in order
  std::vector<std::string> requirement_files;  // -r FILE, as typed (relative to the working folder)
  bool yes = false;                            // -y (uv never asks)
};

// `argv` (argv[0] the program as typed) as an uninstall, or nothing when it is none.
[[nodiscard]] std::optional<UninstallCommand> parse_uninstall_command(const std::vector<std::string>& argv);

// The project name a requirement line names, as pip reads it ("Torch==2.1" -> "Torch"); nothing
// for a line that names none (an option, a path, a URL alone).
[[nodiscard]] std::optional<std::string> requirement_project(std::string_view requirement);

// What reading requirement files may cost. A file may name itself, or name another file twelve
// times that names the next twelve times, so that following every `-r` reads without end; each
// bound below that is met is said in `problems` and reading stops there.
struct RequirementFileLimits {
  // pip follows nested files until Python's recursion limit (1000 frames) stops it: a
  // RecursionError, seen at 976 nested files with pip 23.2 on Python 3.11, and nothing removed.
  std::size_t depth = 1000;
  std::uint64_t file_bytes = std::uint64_t{1} << 20;    // one file
  std::uint64_t total_bytes = std::uint64_t{16} << 20;  // every file read, together
  std::size_t total_lines = 100'000;                    // every file's lines (joined), together
};

// The requirements of requirement files, as pip reads them for uninstall: comments (`#` at the
// start or after white space) and blank lines dropped, backslash continuations joined, options
// skipped but nested `-r`/`--requirement` files followed (relative to the file that names them).
// A file that names one being read (itself, or one that named it) is a cycle, said in `problems`
// and not read again: pip 24.3 and later refuse it ("recursively references itself"), earlier
// pips fail with RecursionError. A file read once is not read again where another names it: its
// requirements are listed already. A file that cannot be read, is no regular file or is over a
// bound is said in `problems` too (pip itself then refuses to run: "Could not open requirements
// file").
struct RequirementFileRead {
  std::vector<std::string> requirements;
  std::vector<std::string> problems;  // each said once
};
[[nodiscard]] RequirementFileRead read_requirement_files(const std::vector<std::string>& files,
                                                         const RequirementFileLimits& limits = {});

}  // namespace cudafix::resolver::inline plan
