// cudafix: keeps Python GPU environments working. The command line; docs/cli.md is its contract.
#include <fmt/format.h>
#include <malloc.h>
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"
#include "cli/json_output.hpp"
#include "cli/lock_command.hpp"
#include "cli/printable.hpp"
#include "cli/usage.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"

namespace {

// A run lasts milliseconds and allocates some 40 MB, much of it in blocks glibc would map and
// unmap one by one (each unmap a TLB shootdown across the scan's threads, each fresh page a
// fault). Kept in the heap instead, freed memory is reused: a scan on the 16-core machine took
// 27.7 ms instead of 29.4 (median of 15, interleaved). Untouched padding costs no memory.
void tune_malloc_for_a_short_run() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

// What `cudafix` alone prints, as uv does: the usage and the commands, on standard error (the
// run exits 2, a usage error).
std::string short_help(const CLI::App& app) {
  std::string out = "Usage: cudafix [OPTIONS] COMMAND [ARGS]...\n\n" + app.get_description() + "\n\nCommands:\n";
  for (const auto* sub : app.get_subcommands([](const CLI::App* a) { return !a->get_group().empty(); }))
    out += fmt::format("  {:<10} {}\n", sub->get_name(), sub->get_description());
  return out + "\n`cudafix --help` lists the options, `cudafix COMMAND --help` a command's own.\n";
}

// The options of `app` (the root) that a command honours, shown under its own in its --help:
// CLI11 shows a subcommand's options only, though the common ones may come before or after it.
void show_common_options(CLI::App& app, CLI::App* command, std::vector<std::string> names) {
  command->footer([&app, names = std::move(names)] {
    std::vector<const CLI::Option*> options;
    for (const auto& n : names)
      if (const CLI::Option* o = app.get_option_no_throw(n)) options.push_back(o);
    std::string group = CLI::Formatter{}.make_group("Common options (before or after the command)", false, options);
    while (!group.empty() && group.front() == '\n') group.erase(0, 1);
    while (!group.empty() && group.back() == '\n') group.pop_back();  // CLI11 ends the footer's line
    return group;
  });
}

// `cudafix --version`, `-V` and `cudafix version`: "cudafix X", or under --json
// {"schema":1,"command":"version","venv":null,"version":X} (docs/json.md).
int print_version(bool json, std::ostream& out) {
  out << (json ? cudafix::cli::version_json(CUDAFIX_VERSION) : std::string("cudafix " CUDAFIX_VERSION)) << '\n';
  return 0;
}

using namespace cudafix::cli;

// The common options each command honours, by what they are for: its --help lists them beside its own.
const std::vector<std::string> k_environment = {"--venv",  "--python",  "--json",  "--color",
                                                "--quiet", "--verbose", "--rules", "--lock-timeout"};
const std::vector<std::string> k_scanning = {"--ld-library-path", "--ld-so-cache", "--threads", "--timings",
                                             "--no-cache"};
const std::vector<std::string> k_sources = {"--find-links", "--no-index",     "--index-url", "--extra-index-url",
                                            "--offline",    "--http-timeout", "--retries"};

std::vector<std::string> joined(std::initializer_list<std::vector<std::string>> lists) {
  std::vector<std::string> all;
  for (const auto& l : lists) all.insert(all.end(), l.begin(), l.end());
  return all;
}

// The common options' values, where CLI11 writes them as it parses; settled into `g` after.
struct CommonOptions {
  GlobalOptions g;
  std::string color = "auto";
  std::string ld_library_path;
  CLI::Option* ld_library_path_given = nullptr;
};

// A command: its subcommand, and what runs it once the command line is parsed (its options held
// by the runner, which CLI11 fills as it parses).
struct Command {
  CLI::App* sub;
  std::function<int()> run;
};

// A value CLI11 writes into and a command's runner reads: owned by the runner.
template <class T>
std::shared_ptr<T> held(T initial = T{}) {
  return std::make_shared<T>(std::move(initial));
}

// Where wheels come from: the folders, the indexes, the network's limits.
void add_source_options(CLI::App& app, GlobalOptions& g) {
  app.add_option("--find-links", g.find_links, "a folder of wheels to plan with (repeatable; default $PIP_FIND_LINKS)")
      ->check(existing_folder());
  app.add_option("--index-url", g.index_url,
                 "the package index (Simple API) to fetch wheels from (default $PIP_INDEX_URL, then $UV_INDEX_URL)");
  app.add_option("--extra-index-url", g.extra_index_urls,
                 "another index, after --index-url (repeatable; default $PIP_EXTRA_INDEX_URL, $UV_EXTRA_INDEX_URL)");
  app.add_option("--python-platform", g.python_platform,
                 "choose and install wheels for this platform, not the interpreter's: ARCH-manylinux_2_N, "
                 "ARCH-musllinux_1_N, ARCH-unknown-linux-gnu or ARCH-unknown-linux-musl (as uv's)");
  app.add_option("--python-version", g.python_version,
                 "choose and install wheels for this Python (3.12, 3.13t), not the interpreter's (as uv's)");
  app.add_flag("--no-index", g.no_index, "fetch nothing from an index (--find-links only)");
  app.add_flag("--offline", g.offline, "no network: wheels from --find-links and the pip, uv and cudafix caches only");
  app.add_option("--http-timeout", g.http_timeout_s, "seconds an index may stall before a retry (default 15)")
      ->check(positive_number());
  app.add_option("--retries", g.retries, "retries of a failed transfer (default 5)")->check(whole_number_in(0, 100));
}

void add_common_options(CLI::App& app, CommonOptions& c) {
  GlobalOptions& g = c.g;
  // A folder that cannot be looked at says why (permission denied, whose it is), as read_layout
  // does for one found by -p or $VIRTUAL_ENV.
  app.add_option("--venv", g.venv, "the environment: a venv root, an interpreter prefix or a site-packages folder")
      ->envname("")
      ->check(existing_folder());
  app.add_option("-p,--python", g.python,
                 "the interpreter whose environment to read: a path (.venv/bin/python, a pyenv shim), a version "
                 "(3.11, found in pyenv's and uv's interpreters, then on PATH) or an environment folder");
  app.add_flag("--json", g.json, "print JSON for machines (schema 1)");
  app.add_option("--lock-timeout", g.lock_timeout_s, "seconds to wait for <venv>/.lock, held by uv or cudafix (30)")
      ->check(number_in(0, 86400));
  app.add_option("--color", c.color, "auto (a terminal and no NO_COLOR), always or never")
      ->check(one_of({"auto", "always", "never"}));
  app.add_flag("-q,--quiet", g.quiet, "print nothing but errors");
  app.add_flag("-v,--verbose", g.verbose, "print every entry of long lists");
  c.ld_library_path_given = app.add_option("--ld-library-path", c.ld_library_path,
                                           "the LD_LIBRARY_PATH the loader model assumes (default: this process's)");
  app.add_option("--ld-so-cache", g.ld_so_cache,
                 "read this ld.so.cache instead of the host's (/dev/null: none, as a host without one)")
      ->check(existing_file());
  app.add_option("--threads", g.threads, "worker threads (default and most: one per core this process may run on)");
  app.add_flag("--timings", g.timings, "print how long each phase of the scan took (stderr)");
  app.add_flag("--no-cache", g.no_cache, "read every folder and library afresh, and keep nothing for the next run");
  add_source_options(app, g);
  app.add_option("--rules", g.rules, "a knowledge/rules TOML file on top of the built-in one (repeatable)")
      ->check(existing_file());
}

// -y, and --break-system-packages, of a command that changes an environment (guard asks nothing:
// `yes` false).
void add_write_flags(CLI::App* sub, GlobalOptions& g, bool yes = true) {
  if (yes) sub->add_flag("-y,--yes", g.yes, "change the environment without asking");
  sub->add_flag("--break-system-packages", g.break_system_packages,
                "change an environment the system's package manager owns (EXTERNALLY-MANAGED, PEP 668) all the same "
                "(default $PIP_BREAK_SYSTEM_PACKAGES)");
}

Command scan_command(CLI::App& app, const GlobalOptions& g) {
  auto* sub = app.add_subcommand("scan", "the model: dists, ownership, ELF objects, resolutions");
  show_common_options(app, sub, joined({k_environment, k_scanning}));
  return {sub, [&g] { return run_scan(g, std::cout); }};
}

Command why_command(CLI::App& app, const GlobalOptions& g) {
  auto* sub = app.add_subcommand("why", "who needs a soname or file, what provides it, how it resolves and why");
  auto query = held<std::string>();
  sub->add_option("SONAME_OR_PATH", *query, "a soname (libcudnn.so.9) or a path (torch/lib/libtorch_cuda.so)")
      ->required();
  show_common_options(app, sub, joined({k_environment, k_scanning}));
  return {sub, [&g, query] { return run_why(g, *query, std::cout); }};
}

Command doctor_command(CLI::App& app, const GlobalOptions& g) {
  auto o = held<DoctorCliOptions>();
  auto* sub = app.add_subcommand("doctor", "run the rules: every way the environment is broken, root causes first");
  sub->add_flag("--verify-hashes", o->verify_hashes, "check every file against its RECORD hash (SHA-256)");
  sub->add_option("--select", o->select, "run only these rules (comma-separated)")->delimiter(',');
  sub->add_option("--ignore", o->ignore, "skip these rules (comma-separated)")->delimiter(',');
  sub->add_option("--lock", o->lock, "a pylock.toml: report how the environment drifted from it")
      ->check(existing_file());
  show_common_options(app, sub, joined({k_environment, k_scanning}));
  return {sub, [&g, o] { return run_doctor(g, *o, std::cout); }};
}

Command verify_command(CLI::App& app, const GlobalOptions& g) {
  auto o = held<VerifyCliOptions>();
  auto* sub = app.add_subcommand("verify", "live probe of every visible GPU: cuInit, a cuDNN handle, and a diagnosis");
  sub->add_option("--timeout", o->timeout_s, "seconds before the probe is killed (default 60)");
  sub->add_option("--consumer", o->consumer,
                  "the library to dlopen for cuDNN (default: the environment's, e.g. torch/lib/libtorch_cuda.so)")
      ->check(existing_file());
  sub->add_flag("--nccl", o->nccl,
                "also run one NCCL all-reduce across every visible GPU with the environment's libnccl.so.2 "
                "(NVLink multicast off)");
  // verify refuses --ld-so-cache: the probe's loader reads the host's.
  show_common_options(app, sub, joined({k_environment, {"--ld-library-path", "--threads", "--timings", "--no-cache"}}));
  return {sub, [&g, o] { return run_verify(g, *o, std::cout); }};
}

// `plan remove` and `plan fix`, under `plan`.
std::vector<Command> plan_commands(CLI::App& app, const GlobalOptions& g) {
  auto* plan = app.add_subcommand("plan", "dry runs and repair plans; changes nothing");
  plan->require_subcommand(1);
  auto dists = held<std::vector<std::string>>();
  auto* remove = plan->add_subcommand(
      "remove", "what pip uninstall would delete, what cudafix would delete, and what either breaks");
  remove->add_option("DIST", *dists, "the dists to remove (names as pip takes them)")->required();
  auto o = held<PlanFixCliOptions>();
  auto* fix = plan->add_subcommand("fix", "the repair plan: ordered steps that keep every required library");
  fix->add_option("--cuda-major", o->cuda_major, "the CUDA major to repair for (default: the consumers')")
      ->check(whole_number_in(9, 99));
  fix->add_option("-o,--output", o->output, "write the plan document (JSON) here, for `cudafix apply`");
  show_common_options(app, remove, joined({k_environment, k_scanning}));
  show_common_options(app, fix, joined({k_environment, k_scanning, k_sources}));
  return {{remove, [&g, dists] { return run_plan_remove(g, *dists, std::cout); }},
          {fix, [&g, o] { return run_plan_fix(g, *o, std::cout); }}};
}

Command rules_command(CLI::App& app, const GlobalOptions& g) {
  auto* sub = app.add_subcommand("rules", "every doctor rule: its severities, what it needs scanned, what it finds");
  show_common_options(app, sub, {"--venv", "--python", "--json", "--color", "--rules"});
  return {sub, [&g] { return run_rules(g, std::cout); }};
}

Command explain_command(CLI::App& app, const GlobalOptions& g) {
  auto id = held<std::string>();
  auto* sub = app.add_subcommand("explain", "a doctor rule's document: what it finds, why, how to fix it");
  sub->add_option("RULE", *id, "a rule id (shared-path, metadata-only, ...; `cudafix rules` lists them)")->required();
  show_common_options(app, sub, {"--json"});
  return {sub, [&g, id] { return run_explain(g, *id, std::cout); }};
}

Command remove_command(CLI::App& app, GlobalOptions& g) {
  auto o = held<RemoveCliOptions>();
  auto* sub = app.add_subcommand("remove", "owner-counted removal that refuses to break a required library");
  sub->add_option("DIST", o->dists, "the dists to remove (names as pip takes them)")->required();
  sub->add_flag("--force", o->force, "remove even what plan remove judges to break a required library");
  sub->add_flag("--dry-run", o->dry_run, "show what would be removed; change nothing");
  add_write_flags(sub, g);
  show_common_options(app, sub, joined({k_environment, k_scanning}));
  return {sub, [&g, o] { return run_remove(g, *o, std::cout); }};
}

Command install_command(CLI::App& app, GlobalOptions& g) {
  auto o = held<InstallCliOptions>();
  auto* sub = app.add_subcommand("install", "install wheel files, validated whole first, as one transaction");
  sub->add_option("WHEEL", o->wheels, "the .whl files")->required()->check(existing_file());
  sub->add_flag("--no-verify", o->no_verify, "skip the live GPU check after each wheel");
  sub->add_flag("--dry-run", o->dry_run, "validate the wheels and show what would be installed; change nothing");
  add_write_flags(sub, g);
  show_common_options(app, sub, joined({k_environment, k_scanning}));
  return {sub, [&g, o] { return run_install(g, *o, std::cout); }};
}

Command apply_command(CLI::App& app, GlobalOptions& g) {
  auto o = held<ApplyCliOptions>();
  auto* sub =
      app.add_subcommand("apply", "carry out a saved plan (plan fix -o) as one transaction, verifying each step");
  sub->add_option("PLAN", o->plan, "the plan document")->required()->check(existing_file());
  sub->add_flag("--no-verify", o->no_verify, "skip the live GPU check after each step");
  add_write_flags(sub, g);
  show_common_options(app, sub, joined({k_environment, k_scanning, k_sources}));
  return {sub, [&g, o] { return run_apply(g, *o, std::cout); }};
}

Command fix_command(CLI::App& app, GlobalOptions& g) {
  auto o = held<FixCliOptions>();
  auto* sub = app.add_subcommand(
      "fix", "plan fix, carried out as one transaction, verified after each step, rolled back if a check fails");
  sub->add_option("--cuda-major", o->cuda_major, "the CUDA major to repair for (default: the consumers')")
      ->check(whole_number_in(9, 99));
  sub->add_flag("--dry-run", o->dry_run, "show the plan and what it would change; change nothing");
  sub->add_flag("--no-verify", o->no_verify, "skip the live GPU check after each step");
  add_write_flags(sub, g);
  show_common_options(app, sub, joined({k_environment, k_scanning, k_sources}));
  return {sub, [&g, o] { return run_fix(g, *o, std::cout); }};
}

Command sync_command(CLI::App& app, GlobalOptions& g) {
  auto o = held<SyncCliOptions>();
  auto* sub = add_sync_command(app, *o);
  add_write_flags(sub, g);
  show_common_options(app, sub, joined({k_environment, k_scanning, k_sources}));
  return {sub, [&g, o] { return run_sync(g, *o, std::cout); }};
}

Command lock_command(CLI::App& app, const GlobalOptions& g) {
  auto o = held<LockCliOptions>();
  auto* sub = add_lock_command(app, *o);
  show_common_options(app, sub, joined({k_environment, k_scanning, k_sources}));
  return {sub, [&g, o] { return run_lock(g, *o, CUDAFIX_VERSION, std::cout); }};
}

Command history_command(CLI::App& app, const GlobalOptions& g) {
  auto* sub = app.add_subcommand("history", "the transactions cudafix carried out, newest first");
  show_common_options(app, sub, k_environment);
  return {sub, [&g] { return run_history(g, std::cout); }};
}

Command rollback_command(CLI::App& app, GlobalOptions& g) {
  auto o = held<RollbackCliOptions>();
  auto* sub = app.add_subcommand("rollback", "undo a transaction (default: the last), or restore a snapshot");
  sub->add_option("ID", o->id, "the transaction to undo (`cudafix history` lists them)");
  sub->add_option("--snapshot", o->snapshot, "restore this snapshot instead");
  sub->add_flag("--force", o->force,
                "take aside files changed since the transaction (as backups of the rollback) rather than refuse");
  sub->add_flag("--dry-run", o->dry_run, "show what would be put back; change nothing");
  add_write_flags(sub, g);
  show_common_options(app, sub, joined({k_environment, k_scanning}));
  return {sub, [&g, o] { return run_rollback(g, *o, std::cout); }};
}

Command snapshot_command(CLI::App& app, GlobalOptions& g) {
  auto o = held<SnapshotCliOptions>();
  auto* sub = app.add_subcommand("snapshot", "keep every listed file (hardlinks) before a cleanup by other tools");
  sub->add_option("NAME", o->name, "its name (default: the UTC time)");
  sub->add_flag("--list", o->list, "list the snapshots");
  sub->add_option("--delete", o->remove, "delete this snapshot");
  add_write_flags(sub, g);
  show_common_options(app, sub, joined({k_environment, k_scanning}));
  return {sub, [&g, o] { return run_snapshot(g, *o, std::cout); }};
}

Command guard_command(CLI::App& app, GlobalOptions& g) {
  auto o = held<GuardCliOptions>();
  auto* sub = app.add_subcommand(
      "guard", "run a cleanup (pip uninstall, a script) under a snapshot; refuse a breaking uninstall, undo a break");
  sub->add_flag("--allow-break", o->allow_break, "run an uninstall that plan remove judges to break something");
  sub->add_flag("--keep", o->keep, "keep the snapshot, and what the command did even where it broke something");
  sub->add_flag("--no-verify", o->no_verify, "no GPU probe before and after the command");
  sub->add_option("COMMAND", o->command, "the command and its arguments, after --")->required();
  add_write_flags(sub, g, false);
  return {sub, [&g, o] { return run_guard(g, *o, std::cout); }};
}

Command demo_command(CLI::App& app, const GlobalOptions& g) {
  auto dir = held<std::optional<std::string>>();
  auto* sub = app.add_subcommand("demo", "build a broken example environment and walk the workflow on it");
  sub->add_option("DIR", *dir, "where to build it (default: a new folder under $TMPDIR)");
  show_common_options(app, sub, {"--json", "--color", "--quiet", "--verbose"});
  return {sub, [&g, dir] { return run_demo(g, *dir, std::cout); }};
}

Command version_command(CLI::App& app, const GlobalOptions& g) {
  auto* sub = app.add_subcommand("version", "print cudafix's version (as --version)");
  show_common_options(app, sub, {"--json"});
  return {sub, [&g] { return print_version(g.json, std::cout); }};
}

Command help_command(CLI::App& app, const GlobalOptions& g) {
  auto words = held<std::vector<std::string>>();
  auto* sub = app.add_subcommand("help", "print the help of cudafix or of a command (as --help)");
  sub->add_option("COMMAND", *words, "the command (`cudafix help plan fix`)");
  return {sub, [&app, &g, words] {
            const HelpPage page = help_page(app, *words);
            if (!page.error.empty())
              return report_failure(
                  ParsedCommandLine{.exit_code = k_exit_usage, .error = page.error, .command = "help", .json = g.json},
                  std::cout, std::cerr);
            std::cout << page.text;
            return 0;
          }};
}

// Every command, in the order `cudafix --help` lists them.
std::vector<Command> add_commands(CLI::App& app, GlobalOptions& g) {
  std::vector<Command> all = {scan_command(app, g), why_command(app, g), doctor_command(app, g),
                              verify_command(app, g)};
  for (auto& c : plan_commands(app, g)) all.push_back(std::move(c));
  for (auto* add : {rules_command, explain_command}) all.push_back(add(app, g));
  for (auto* add : {remove_command, install_command, apply_command, fix_command}) all.push_back(add(app, g));
  all.push_back(sync_command(app, g));
  all.push_back(lock_command(app, g));
  all.push_back(history_command(app, g));
  for (auto* add : {rollback_command, snapshot_command, guard_command}) all.push_back(add(app, g));
  for (auto* add : {demo_command, version_command, help_command}) all.push_back(add(app, g));
  return all;
}

// The commands --help does not list: the shell completions' helper and materialize (for developers).
std::vector<Command> add_hidden_commands(CLI::App& app, const GlobalOptions& g) {
  auto kind = held<std::string>();
  auto* complete = app.add_subcommand("__complete", "");
  complete->group("");
  complete->add_option("KIND", *kind)->required()->check(one_of({"rules", "dists"}));
  struct Materialize {
    std::string in, dir, python = "/usr/bin/python3";
    int copies = 1;
  };
  auto m = held<Materialize>();
  auto* mat = app.add_subcommand("materialize", "");
  mat->group("");
  mat->add_option("DESCRIPTION", m->in, "corpus-format JSON, or - for standard input")->required();
  mat->add_option("DIR", m->dir)->required();
  mat->add_option("--copies", m->copies);
  mat->add_option("--python", m->python);
  return {{complete, [&g, kind] { return run_complete(g, *kind, std::cout); }},
          {mat, [m] { return run_materialize(m->in, m->dir, m->copies, m->python, std::cout); }}};
}

// The common options as the commands take them: the colour mode, the library path where given,
// the threads capped at the cores.
void settle(CommonOptions& c) {
  GlobalOptions& g = c.g;
  g.color = c.color == "always" ? ColorMode::always : c.color == "never" ? ColorMode::never : ColorMode::auto_;
  if (c.ld_library_path_given->count()) g.ld_library_path = c.ld_library_path;
  // More threads than cores buys nothing and costs a heap and a stack each (--threads 100000
  // grew to 22 GB before it was capped).
  if (const unsigned cores = cudafix::resolver::cores_available(); g.threads > cores) {
    if (g.verbose)
      std::cerr << fmt::format("cudafix: --threads {} capped at {}, the cores this process may run on\n", g.threads,
                               cores);
    g.threads = cores;
  }
}

}  // namespace

int main(int argc, char** argv) {
  tune_malloc_for_a_short_run();
  CLI::App app{"cudafix: finds and repairs broken CUDA libraries in Python environments"};
  app.require_subcommand(1);
  app.fallthrough();  // common options may follow the command: `cudafix scan --json`
  app.set_version_flag("-V,--version", "cudafix " CUDAFIX_VERSION);
  CommonOptions common;
  add_common_options(app, common);
  std::vector<Command> commands = add_commands(app, common.g);
  if (argc == 1) {  // `cudafix` alone: what there is to run, as uv says it (a usage error)
    std::cerr << short_help(app);
    return k_exit_usage;
  }
  for (auto& c : add_hidden_commands(app, common.g)) commands.push_back(std::move(c));

  const ParsedCommandLine parsed = parse_command_line(app, argc, argv);
  if (parsed.version) return print_version(parsed.json, std::cout);
  if (!parsed.run) return parsed.exit_code == 0 ? 0 : report_failure(parsed, std::cout, std::cerr);
  settle(common);
  const GlobalOptions& g = common.g;
  std::string command = app.get_subcommands().front()->get_name();
  if (const auto* plan = app.get_subcommand("plan"); plan->parsed())
    command += " " + plan->get_subcommands().front()->get_name();
  try {
    for (const auto& c : commands)
      if (c.sub->parsed()) return c.run();
  } catch (const std::exception& e) {
    return report_failure(g.json, command, e.what(), k_exit_usage, std::cout, std::cerr);
  }
  return k_exit_usage;
}
