// A command line read as the uninstall it is, when it is one: `pip uninstall`, `pip3 uninstall`,
// `python -m pip uninstall` (any interpreter, by path or name), `uv pip uninstall`, with the
// options of pip and uv before and after the subcommand skipped as they parse them (an option
// that takes a value takes the next word, or its `=VALUE` or attached `-rFILE`), `-r FILE`
// requirement files followed, and each requirement reduced to its project name as pip's
// install_req_from_line does (`torch==2.1`, `nvidia-cudnn-cu12[extra] >= 9; python_version > '3'`,
// `name @ URL`). Nothing here runs anything; reading the requirement files is bounded.
#pragma once

#include <cstddef>
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

// The requirements of a requirements file, as pip reads one for uninstall: comments (`#` at the
// start or after white space) and blank lines dropped, backslash continuations joined, options
// skipped but nested `-r`/`--requirement` files followed (relative to the file that names them),
// at most `max_depth` deep and `max_bytes` per file. A file that cannot be read is said in
// `problems` (pip itself then refuses to run: "Could not open requirements file").
struct RequirementFileRead {
  std::vector<std::string> requirements;
  std::vector<std::string> problems;
};
[[nodiscard]] RequirementFileRead read_requirement_files(const std::vector<std::string>& files,
                                                         std::size_t max_depth = 8,
                                                         std::size_t max_bytes = std::size_t{1} << 20);

}  // namespace cudafix::resolver::inline plan
