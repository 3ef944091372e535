// The command line's usage errors (cli/usage.hpp): argv read by CLI11, and, when it fails,
// what went wrong said again in plain words, naming the word typed that is wrong.
#include "cli/usage.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <ostream>
#include <ranges>
#include <string_view>

#include "cli/json_output.hpp"
#include "cli/printable.hpp"
#include "resolver/base/closest.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::cli {

namespace {

// --- Where the words of argv lead ------------------------------------------------------------

// The commands `app` has that a user may type (an option group is a nameless subcommand).
std::vector<CLI::App*> commands_of(CLI::App& app) {
  std::vector<CLI::App*> out;
  for (CLI::App* sub : app.get_subcommands({}))
    if (!sub->get_name().empty()) out.push_back(sub);
  return out;
}

// The names of the commands `--help` lists (a developer command is in no group).
std::vector<std::string> listed_commands(CLI::App& app) {
  std::vector<std::string> names;
  for (CLI::App* sub : commands_of(app))
    if (!sub->get_group().empty()) names.push_back(sub->get_name());
  return names;
}

CLI::App* command_named(CLI::App& app, std::string_view name) {
  for (CLI::App* sub : commands_of(app))
    if (sub->get_name() == name) return sub;
  return nullptr;
}

// An option `at` takes: its own, or a command's above it (options fall through to the commands
// they follow: `cudafix doctor --json`).
const CLI::Option* option_at(CLI::App& at, const std::string& name) {
  for (CLI::App* a = &at; a != nullptr; a = a->get_parent())
    if (const CLI::Option* opt = a->get_option_no_throw(name)) return opt;
  return nullptr;
}

// Every command below `app` that takes option `name`, by its path ("plan fix"), in --help's order.
void commands_with_option(CLI::App& app, const std::string& name, const std::string& above,
                          std::vector<std::string>& out) {
  for (CLI::App* sub : commands_of(app)) {
    const std::string path = above.empty() ? sub->get_name() : above + " " + sub->get_name();
    if (sub->get_option_no_throw(name)) out.push_back(path);
    commands_with_option(*sub, name, path, out);
  }
}

// Any option of `app` or of a command below it, by the name CLI11's messages give it.
const CLI::Option* option_anywhere(CLI::App& app, const std::string& name) {
  if (const CLI::Option* opt = app.get_option_no_throw(name)) return opt;
  for (CLI::App* sub : commands_of(app))
    if (const CLI::Option* opt = option_anywhere(*sub, name)) return opt;
  return nullptr;
}

bool takes_value(const CLI::Option& opt) { return opt.get_items_expected_max() > 0; }
bool is_positional(const CLI::Option& opt) { return opt.get_positional() && !opt.nonpositional(); }

// "-1" and "-0.5" are values (of --http-timeout, say), not options, as CLI11 reads them.
bool looks_like_number(std::string_view arg) {
  double v = 0;
  const auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), v);
  return ec == std::errc() && end == arg.data() + arg.size();
}

std::string command_path(const std::vector<CLI::App*>& path) {
  std::string out;
  for (const CLI::App* a : path) out += (out.empty() ? "" : " ") + a->get_name();
  return out;
}

// `name`, which `at` (`path` the commands to it) does not take, said as what it is: an option of
// other commands (`cudafix doctor -y`: "-y is not an option of `cudafix doctor`; it is an option of
// remove, install, ..."), or, typed before a command, one to give after it.
std::string unknown_option_text(CLI::App& root, CLI::App& at, const std::vector<CLI::App*>& path,
                                const std::string& name) {
  std::vector<std::string> owners;
  commands_with_option(root, name, "", owners);
  if (owners.empty()) return fmt::format("unknown option '{}'", name);
  const std::string owner_names =
      owners.size() == 1 ? fmt::format("`cudafix {}`", owners.front()) : fmt::format("{}", fmt::join(owners, ", "));
  if (!listed_commands(at).empty())  // before the command that takes it
    return fmt::format("{} is an option of {}: give it after the command", name, owner_names);
  return fmt::format("{} is not an option of `cudafix {}`; it is an option of {}", name, command_path(path),
                     owner_names);
}

// What a pip or uv user types that is no cudafix command, and the cudafix command that does it.
struct OtherToolsWord {
  std::string_view word, instead;
};
constexpr OtherToolsWord k_other_tools_words[] = {
    {"uninstall", "`cudafix remove` (owner-counted) or `cudafix plan remove` (a dry run)"},
    {"list", "`cudafix scan` (every dist, the files it owns and the libraries it resolves)"},
    {"freeze", "`cudafix scan` (every dist, the files it owns and the libraries it resolves)"},
    {"show", "`cudafix scan` (every dist and its files) or `cudafix why SONAME` (who needs a library, who has it)"},
    {"inspect", "`cudafix scan --json` (the model: dists, files, libraries, resolutions)"},
    {"check", "`cudafix doctor` (every way the environment is broken, unmet requirements included)"},
};

// `word`, no command of `at` (`path` the commands above it), in plain words with "did you
// mean ...?": the cudafix command for a pip or uv word, else the commands closest to a typo (as
// `explain` answers a rule id typed wrong), else the commands there are.
std::string unknown_command_text(const CLI::App& at, const std::vector<CLI::App*>& path, const std::string& word,
                                 const std::vector<std::string>& names) {
  if (!at.get_parent())
    for (const auto& [other, instead] : k_other_tools_words)
      if (word == other) return fmt::format("cudafix has no '{}'; did you mean {}?", word, instead);
  const std::string where = at.get_parent() ? fmt::format(" of '{}'", at.get_name()) : "";
  std::vector<std::string> closest = cudafix::resolver::closest_names(word, names, 2);
  if (closest.empty())
    return fmt::format("unknown command '{}'{}; the commands are: {}", word, where, fmt::join(names, ", "));
  const std::string above = command_path(path);
  for (auto& c : closest) c = fmt::format("`cudafix {}{}`", above.empty() ? "" : above + " ", c);
  return fmt::format("unknown command '{}'{}; did you mean {}?", word, where, fmt::join(closest, " or "));
}

// What the words of argv name, read as CLI11 reads them: the commands, in order, and the first
// word that names no command or option where it stands. CLI11 says only "A subcommand is
// required" of a mistyped command, and of `--venv /x doctor` with /x missing it is CLI11's
// refusal of /x, not "unknown command '/x'": every option's value is skipped here, of a short
// option (-p 3.11) too, whether or not CLI11 accepted it.
struct Walk {
  std::vector<CLI::App*> commands;  // the commands named, outermost first
  std::string problem;              // empty: none found
};

Walk walk_command_line(CLI::App& root, int argc, const char* const* argv) {
  Walk w;
  CLI::App* at = &root;
  const auto problem = [&](std::string text) {
    w.problem = std::move(text);
    return w;
  };
  // A value given as the next word; an option of many values (--rules A B) takes each word up to
  // the next option or command.
  const auto skip_values = [&](const CLI::Option& opt, int& i) {
    if (i + 1 == argc) return false;
    ++i;
    if (opt.get_items_expected_max() <= 1) return true;
    while (i + 1 < argc) {
      const std::string_view next = argv[i + 1];
      if ((next.starts_with("-") && !looks_like_number(next)) || command_named(*at, next)) break;
      ++i;
    }
    return true;
  };
  const auto needs_value = [&](const std::string& name) { return problem(fmt::format("{} needs a value", name)); };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.starts_with("--") && arg.size() > 2) {
      const std::string name(arg.substr(0, arg.find('=')));
      const CLI::Option* opt = option_at(*at, name);
      if (!opt) return problem(unknown_option_text(root, *at, w.commands, name));
      if (name.size() == arg.size() && takes_value(*opt) && !skip_values(*opt, i)) return needs_value(name);
      continue;
    }
    if (arg.starts_with("-") && arg.size() > 1 && !looks_like_number(arg)) {
      // One or more short flags (-qv), the last of which may take a value: -p3.11, -p 3.11.
      for (std::size_t k = 1; k < arg.size(); ++k) {
        const std::string name = fmt::format("-{}", arg[k]);
        const CLI::Option* opt = option_at(*at, name);
        if (!opt) return problem(unknown_option_text(root, *at, w.commands, name));
        if (!takes_value(*opt)) continue;
        if (k + 1 == arg.size() && !skip_values(*opt, i)) return needs_value(name);
        break;
      }
      continue;
    }
    if (CLI::App* sub = command_named(*at, arg)) {
      at = sub;
      w.commands.push_back(sub);
      continue;
    }
    const auto names = listed_commands(*at);
    if (names.empty()) continue;  // a command's own argument: CLI11 judges those
    return problem(unknown_command_text(*at, w.commands, std::string(arg), names));
  }
  if (at->get_require_subcommand_min() > 0) {
    const auto names = listed_commands(*at);
    return problem(at->get_parent() ? fmt::format("`cudafix {}` needs a command: {}", command_path(w.commands),
                                                  fmt::join(names, ", "))
                                    : fmt::format("no command given; the commands are: {}", fmt::join(names, ", ")));
  }
  return w;
}

// Whether --json is among the words before `--`, read or not.
bool asks_for_json(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") return false;
    if (arg == "--json" || arg.starts_with("--json=")) return true;
  }
  return false;
}

// --- CLI11's errors in plain words -----------------------------------------------------------

// `text` after `prefix`, when it starts so.
std::optional<std::string> after(std::string_view text, std::string_view prefix) {
  if (!text.starts_with(prefix)) return std::nullopt;
  return std::string(text.substr(prefix.size()));
}

// "NAME: REST" split at the first ": " (NAME an option's or an argument's name).
std::optional<std::pair<std::string, std::string>> named(std::string_view text) {
  const auto colon = text.find(": ");
  if (colon == std::string_view::npos) return std::nullopt;
  return std::pair{std::string(text.substr(0, colon)), std::string(text.substr(colon + 2))};
}

std::string times(std::size_t n) { return n == 2 ? "twice" : fmt::format("{} times", n); }

// Why `value` is refused as the value of `opt` (the name CLI11's message gives it: `name`).
std::string conversion_refused(const CLI::Option* opt, const std::string& name, const std::string& value) {
  const std::string type = opt ? opt->get_type_name() : "";
  if (opt && opt->get_expected_max() == 0) return fmt::format("{} is a flag: give it alone ('{}' given)", name, value);
  if (type.starts_with("UINT")) return fmt::format("{}: '{}' is not a whole number (0 or more)", name, value);
  if (type.starts_with("INT")) return fmt::format("{}: '{}' is not a whole number", name, value);
  if (type.starts_with("FLOAT") || type.starts_with("NUMBER"))
    return fmt::format("{}: '{}' is not a number", name, value);
  return fmt::format("{}: '{}' is not a valid value", name, value);
}

// Who an argument (a positional) belongs to: "apply: ...", where an option says "--venv: ...".
std::string owner_of(const CLI::Option* opt, const std::string& name, const std::string& command) {
  if (opt && is_positional(*opt) && !command.empty()) return command;
  return name;
}

std::string conversion_text(CLI::App& root, std::string_view what) {
  if (const auto rest = after(what, "Could not convert: ")) {
    const auto eq = rest->find(" = ");
    if (eq != std::string::npos) {
      const std::string name = rest->substr(0, eq), value = rest->substr(eq + 3);
      return conversion_refused(option_anywhere(root, name), name, value);
    }
  }
  if (const auto rest = after(what, "The value ")) {
    const auto at = rest->find(" is not an allowed value for ");
    if (at != std::string::npos)
      return fmt::format("{}: '{}' is not allowed", rest->substr(at + 29), rest->substr(0, at));
  }
  if (const auto parts = named(what)) return fmt::format("{} is a flag: give it alone", parts->first);
  return std::string(what);
}

std::string mismatch_text(std::string_view what) {
  const auto parts = named(what);
  if (!parts) {
    // "Expected exactly N arguments to NAME, got M" / "NAME was given a disallowed flag override"
    if (const auto rest = after(what, "Expected ")) return fmt::format("expected {}", *rest);
    const auto at = what.find(" was given a disallowed flag override");
    if (at != std::string_view::npos) return fmt::format("{} is a flag: give it alone", what.substr(0, at));
    return std::string(what);
  }
  const auto& [name, rest] = *parts;
  std::size_t received = 0;
  if (std::sscanf(rest.c_str(), "At Most %*d required but received %zu", &received) == 1)
    return fmt::format("{} given {}; give it once", name, times(received));
  int least = 0;
  if (std::sscanf(rest.c_str(), "At least %d required but received %zu", &least, &received) == 2)
    return fmt::format("{} needs at least {} {}", name, least, least == 1 ? "value" : "values");
  if (rest.find(" required ") != std::string::npos && rest.ends_with(" missing"))
    return fmt::format("{} needs a value", name);
  return fmt::format("{}: {}", name, rest);
}

std::string required_text(CLI::App& root, std::string_view what, const std::string& command) {
  const auto at = what.rfind(" is required");
  if (at == std::string_view::npos || at + 12 != what.size()) return std::string(what);
  const std::string missing(what.substr(0, at));
  const CLI::Option* opt = option_anywhere(root, missing);
  if (opt && is_positional(*opt) && !command.empty())
    return fmt::format("`cudafix {}` needs {}: {}", command, missing, opt->get_description());
  return fmt::format("{} is required", missing);
}

// ExtrasError lists the words it did not expect last first (CLI11 joins them in reverse).
std::string extras_text(std::string_view what, const std::string& command) {
  const auto colon = what.find(": ");
  if (colon == std::string_view::npos) return std::string(what);
  std::vector<std::string> words;
  for (const auto word : std::views::split(what.substr(colon + 2), ' '))
    words.emplace(words.begin(), word.begin(), word.end());
  const std::string first = words.empty() ? "" : words.front();
  if (first.starts_with("-")) return fmt::format("unknown option '{}'", first);
  const std::string where = command.empty() ? "" : fmt::format(" for `cudafix {}`", command);
  if (words.size() == 1) return fmt::format("unexpected argument '{}'{}", first, where);
  return fmt::format("unexpected arguments{}: {}", where, fmt::join(words, " "));
}

// One of CLI11's errors, said in plain words.
std::string plain_words(CLI::App& root, const CLI::ParseError& e, const std::string& command) {
  const std::string_view what = e.what();
  if (dynamic_cast<const CLI::ConversionError*>(&e)) return conversion_text(root, what);
  if (dynamic_cast<const CLI::ValidationError*>(&e)) {
    // "NAME: MESSAGE", MESSAGE the checks' own (existing_folder, ...).
    if (const auto parts = named(what))
      return fmt::format("{}: {}", owner_of(option_anywhere(root, parts->first), parts->first, command), parts->second);
    return std::string(what);
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e)) return mismatch_text(what);
  if (dynamic_cast<const CLI::RequiredError*>(&e)) return required_text(root, what, command);
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) return extras_text(what, command);
  if (dynamic_cast<const CLI::RequiresError*>(&e)) {
    const auto at = what.find(" requires ");
    if (at != std::string_view::npos) return fmt::format("{} needs {}", what.substr(0, at), what.substr(at + 10));
  }
  if (dynamic_cast<const CLI::ExcludesError*>(&e)) {
    const auto at = what.find(" excludes ");
    if (at != std::string_view::npos)
      return fmt::format("{} and {} cannot be given together", what.substr(0, at), what.substr(at + 10));
  }
  return std::string(what);
}

// --- Checks of values ------------------------------------------------------------------------

std::optional<long long> whole_number(std::string_view s) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> finite_number(std::string_view s) {
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// What is wrong with `path` as a folder (`folder`) or a file; empty: nothing.
std::string path_problem(const std::string& path, bool folder) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return fmt::format("{} does not exist", path);
    // "permission denied (/p belongs to root, mode 0700: ...)", never "does not exist".
    return fmt::format("{}: {}", path, cudafix::resolver::os_error_text(err, path));
  }
  const bool is_folder = S_ISDIR(st.st_mode);
  if (folder && !is_folder) return fmt::format("{} is not a folder", path);
  if (!folder && is_folder) return fmt::format("{} is a folder, not a file", path);
  return "";
}

}  // namespace

CLI::Validator existing_folder() {
  return CLI::Validator([](std::string& s) { return path_problem(s, true); }, "DIR");
}

CLI::Validator existing_file() {
  return CLI::Validator([](std::string& s) { return path_problem(s, false); }, "FILE");
}

CLI::Validator number_in(double low, double high) {
  return CLI::Validator(
      [low, high](std::string& s) -> std::string {
        const auto v = finite_number(s);
        if (!v) return fmt::format("'{}' is not a number", s);
        if (*v < low || *v > high) return fmt::format("{} is not between {} and {}", s, low, high);
        return "";
      },
      fmt::format("{} to {}", low, high));
}

CLI::Validator whole_number_in(long long low, long long high) {
  return CLI::Validator(
      [low, high](std::string& s) -> std::string {
        const auto v = whole_number(s);
        if (!v) return fmt::format("'{}' is not a whole number", s);
        if (*v < low || *v > high) return fmt::format("{} is not between {} and {}", s, low, high);
        return "";
      },
      fmt::format("{} to {}", low, high));
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const auto v = finite_number(s);
        if (!v) return fmt::format("'{}' is not a number", s);
        if (*v <= 0) return fmt::format("{} is not more than 0", s);
        return "";
      },
      "POSITIVE");
}

CLI::Validator one_of(std::vector<std::string> values) {
  const std::string listed = fmt::format("{}", fmt::join(values, ", "));
  return CLI::Validator(
      [values = std::move(values), listed](std::string& s) -> std::string {
        for (const auto& v : values)
          if (s == v) return "";
        return fmt::format("'{}' is not one of {}", s, listed);
      },
      fmt::format("{{{}}}", fmt::join(values, ",")));
}

ParsedCommandLine parse_command_line(CLI::App& app, int argc, const char* const* argv) {
  ParsedCommandLine p;
  p.json = asks_for_json(argc, argv);
  try {
    app.parse(argc, argv);
    p.run = true;
    return p;
  } catch (const CLI::CallForVersion&) {
    p.version = true;
    return p;
  } catch (const CLI::Success& e) {  // --help
    p.exit_code = app.exit(e);
    return p;
  } catch (const CLI::ParseError& e) {
    // The words' own problem first: a mistyped command makes CLI11 refuse what follows it.
    const Walk w = walk_command_line(app, argc, argv);
    p.command = command_path(w.commands);
    p.error = w.problem.empty() ? plain_words(app, e, p.command) : w.problem;
    p.exit_code = k_exit_usage;
    return p;
  }
}

HelpPage help_page(CLI::App& root, const std::vector<std::string>& words) {
  CLI::App* at = &root;
  std::vector<CLI::App*> path;
  std::string usage_name = root.get_name();  // as --help's usage line names it: argv[0], then the commands
  for (const std::string& word : words) {
    const auto names = listed_commands(*at);
    CLI::App* sub = std::ranges::find(names, word) != names.end() ? command_named(*at, word) : nullptr;
    if (!sub && names.empty())
      return {"", fmt::format("`cudafix {}` has no commands ('{}' given)", command_path(path), word)};
    if (!sub) return {"", unknown_command_text(*at, path, word, names)};
    path.push_back(sub);
    at = sub;
    usage_name += " " + word;
  }
  // The formatter itself: App::help would show the help of the command parsed, `help` itself.
  return {at->get_formatter()->make_help(at, usage_name, CLI::AppFormatMode::Normal), ""};
}

int report_failure(bool as_json, const std::string& command, const std::string& message, int exit_code,
                   std::ostream& out, std::ostream& err) {
  if (as_json) out << error_json(command, message, exit_code) << '\n';
  err << fmt::format("cudafix: error: {}\n", printable_lines(message));
  return exit_code;
}

int report_failure(const ParsedCommandLine& parsed, std::ostream& out, std::ostream& err) {
  report_failure(parsed.json, parsed.command, parsed.error, parsed.exit_code, out, err);
  err << fmt::format("For more information, try 'cudafix {}--help'.\n",
                     parsed.command.empty() ? "" : printable(parsed.command) + " ");
  return parsed.exit_code;
}

}  // namespace cudafix::cli
