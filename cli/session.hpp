// What the commands share (cli/commands.cpp defines it, cli/write_commands.cpp uses it too): the
// environment found and scanned the way every command finds and scans it, with a transaction a
// killed run left recovered first, and the small pieces of the command line's behaviour.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/text_output.hpp"
#include "installer/apply/fix_plan.hpp"
#include "installer/source/sources.hpp"
#include "resolver/env/environment.hpp"
#include "resolver/env/interpreter_tags.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/plan/fix.hpp"
#include "rules/doctor.hpp"

namespace cudafix::cli {

// Built-in knowledge, then $XDG_CONFIG_HOME/cudafix/config.toml, <venv>/cudafix.toml and --rules
// files, each on top of the one before.
struct Configuration {
  resolver::Knowledge knowledge;
  std::map<std::string, rules::RuleSettings> rule_settings;
  // [transactions] keep: how many finished transactions keep their backups (0: all).
  std::size_t keep_transactions = 10;
  // [sources] index_url, extra_index_urls, find_links (folders relative to the file's own).
  std::optional<std::string> index_url{};
  std::vector<std::string> extra_index_urls{};
  std::vector<std::string> find_links{};
};

struct Scanned {
  resolver::Environment env;
  resolver::Knowledge knowledge;
  std::map<std::string, rules::RuleSettings> rule_settings;
};

// The environment found and the configuration read for it: what every scan starts from.
struct Located {
  resolver::EnvLayout layout;
  Configuration config;
  std::vector<std::string> recovered;  // what recovery did, one line each ("recovering: ..."), when it wrote
};

[[nodiscard]] std::optional<std::string> env_var(const char* name);
// The options with the configuration's [sources] below them (GlobalOptions::config_*).
[[nodiscard]] GlobalOptions with_configured_sources(const GlobalOptions& g, const Configuration& config);
[[nodiscard]] Style style_for(const GlobalOptions& g);
// What to locate: --venv, -p, $VIRTUAL_ENV, and python3 on $PATH from the current folder.
[[nodiscard]] resolver::LocateRequest locate_request(const GlobalOptions& g);
// The built-in knowledge with the configuration files over it: the user's, --rules, and the
// cudafix.toml of the environment at `venv_root` (none: no environment's).
[[nodiscard]] Configuration load_configuration(const GlobalOptions& g, const std::optional<std::string>& venv_root);
// Where scans keep what they read: $CUDAFIX_CACHE_DIR, else $XDG_CACHE_HOME/cudafix, else
// ~/.cache/cudafix; empty (no cache) when none of them is set.
[[nodiscard]] std::string cache_dir();
// --timings: each phase of the scan on stderr, and what came from the caches.
void print_timings(const resolver::Environment& env);
// What a command may do to the environment it locates.
enum class Access {
  read,   // reads only; a killed change it finds is recovered in a child process, fenced
  write,  // changes it: this process is fenced (Landlock) and confined (openat2) before it recovers
};
// The environment the options name, recovered from an interrupted transaction, its configuration
// read. With `refused`, a recovery cudafix will not carry out (untrusted state) is said there
// instead of thrown: doctor reports it.
[[nodiscard]] Located locate(const GlobalOptions& g, Access access = Access::read,
                             std::vector<std::string>* refused = nullptr);
// PEP 668: pip and uv refuse to change an environment the system's package manager owns
// (EXTERNALLY-MANAGED), and so does every cudafix command that changes one, unless told as pip
// is told (--break-system-packages, $PIP_BREAK_SYSTEM_PACKAGES). A dry run is no change.
void refuse_externally_managed(const resolver::EnvLayout& layout, const GlobalOptions& g);
// Scanned and kept until exit (freeing a large model costs more than some phases of the scan).
const Scanned& scan_kept(const GlobalOptions& g, Located located, resolver::ScanDepth depth = resolver::ScanDepth::full,
                         bool parse_requirements = false);
const Scanned& scan_kept(const GlobalOptions& g);
// --lock-timeout, and what is said while waiting for <venv>/.lock.
[[nodiscard]] std::chrono::milliseconds lock_wait(const GlobalOptions& g);
void say_waiting(const std::string& what);
// The wheel sources the options and the environment name (installer/source/sources.hpp): the
// command line over PIP_* over UV_*; no index under --no-index; the wheel cache in cache_dir().
[[nodiscard]] installer::source::SourceSettings wheel_source_settings(const GlobalOptions& g,
                                                                      const resolver::Environment& env,
                                                                      const std::vector<std::string>& supported_tags);
// The --find-links folders, else (with `pip_find_links_env`) those of $PIP_FIND_LINKS that are
// folders (one that is not is said on stderr and passed over, as pip does), else the configuration's.
[[nodiscard]] std::vector<std::string> find_links_folders(const GlobalOptions& g, bool pip_find_links_env = true);
// The tags of the wheels the environment's interpreter accepts, best first, or those of the
// target --python-platform and --python-version name (resolver/env/interpreter_tags.hpp).
[[nodiscard]] resolver::InterpreterTags environment_tags(const GlobalOptions& g, const resolver::Environment& env);
// The Python version a wheel's Requires-Python must accept: --python-version's, else the
// interpreter's ("3.11.2" where pyvenv.cfg says it, else "3.11").
[[nodiscard]] std::string requires_python_version(const GlobalOptions& g, const resolver::Environment& env);
// How every scan of a command reads the environment: --ld-library-path (else LD_LIBRARY_PATH),
// LD_PRELOAD, --ld-so-cache, the cache folder unless --no-cache.
[[nodiscard]] resolver::ScanOptions scan_options(const GlobalOptions& g,
                                                 resolver::ScanDepth depth = resolver::ScanDepth::full,
                                                 bool parse_requirements = true);
// None under --json or -q, or when stdout or stderr is not a terminal; `unit` names what is counted
// (nullptr: bytes, shown as MB or GB). A total of 0 shows no bar.
[[nodiscard]] std::function<void(std::uint64_t, std::uint64_t)> progress_bar(const GlobalOptions& g, const char* what,
                                                                             const char* unit = nullptr);
// The repair plan `plan fix` prints and `fix` carries out (installer/apply/fix_plan.hpp), from
// the wheels of --find-links (else $PIP_FIND_LINKS where `pip_find_links_env`) and the sources the
// options name; warnings about unreadable wheels and sources, and --timings, on stderr.
using installer::apply::PlannedFix;
[[nodiscard]] PlannedFix make_fix_plan(const GlobalOptions& g, const resolver::Environment& env,
                                       const resolver::Knowledge& knowledge, std::optional<int> cuda_major,
                                       bool pip_find_links_env = true);
// What guards killed while their command ran left (cli/guard_command.cpp): one line each, naming
// the command, the snapshot and the commands that restore or drop it. Their markers are read as
// untrusted input: bounded, validated, and only those whose snapshot exists are said.
[[nodiscard]] std::vector<std::string> killed_guard_notices(const std::string& root);
// `snapshot --delete NAME`: the marker of a killed guard whose snapshot that was goes too.
void forget_guard(const std::string& root, const std::string& snapshot);
// Dists named as pip takes them or by dist-info folder, as indexes; an Error names the unknown ones.
[[nodiscard]] std::vector<int> dists_named(const resolver::Environment& env, const std::vector<std::string>& names);

}  // namespace cudafix::cli
