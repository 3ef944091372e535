// The command line read into its options, and what was wrong with it said in plain words, as
// pip and uv say it ("--threads: 'abc' is not a whole number", "--venv given twice"), never in
// the argument parser's (CLI11's) own. A usage error exits 2, and under --json (wherever it
// stands, even where the rest could not be read) it is a JSON document too (docs/json.md).
#pragma once

#include <CLI/CLI.hpp>

#include <iosfwd>
#include <string>
#include <vector>

namespace cudafix::cli {

// Usage errors exit 2, like every "could not run".
inline constexpr int k_exit_usage = 2;

struct ParsedCommandLine {
  bool run = false;      // read whole: the command runs
  int exit_code = 0;     // otherwise: 0 after --help or --version, k_exit_usage after a usage error
  std::string error;     // the usage error, in plain words
  std::string command;   // the command as far as the words typed name one ("plan fix"); empty: none
  bool json = false;     // --json was given
  bool version = false;  // -V or --version was given: the caller prints it (as JSON under --json)
};

// Reads argv into `app`'s options; --help is printed here.
[[nodiscard]] ParsedCommandLine parse_command_line(CLI::App& app, int argc, const char* const* argv);

// Says why a command line or a command failed: "cudafix: error: MESSAGE" on `err` (with where
// to read more after a usage error), and under --json the error document on `out`. Returns
// `exit_code`.
int report_failure(const ParsedCommandLine& parsed, std::ostream& out, std::ostream& err);
int report_failure(bool json, const std::string& command, const std::string& message, int exit_code, std::ostream& out,
                   std::ostream& err);

// `cudafix help [COMMAND...]`: what `cudafix [COMMAND...] --help` prints, as `pip help COMMAND`
// answers; where a word names no command, `error` says so as of a command typed wrong.
struct HelpPage {
  std::string text, error;
};
[[nodiscard]] HelpPage help_page(CLI::App& root, const std::vector<std::string>& words);

// Checks of an option's value that say what is wrong in plain words: "/x does not exist",
// "'x' is not one of auto, always, never". A number's check also refuses what is no number,
// before CLI11 would try to convert it.
[[nodiscard]] CLI::Validator existing_folder();
[[nodiscard]] CLI::Validator existing_file();
[[nodiscard]] CLI::Validator number_in(double low, double high);
[[nodiscard]] CLI::Validator whole_number_in(long long low, long long high);
[[nodiscard]] CLI::Validator positive_number();
[[nodiscard]] CLI::Validator one_of(std::vector<std::string> values);

}  // namespace cudafix::cli
