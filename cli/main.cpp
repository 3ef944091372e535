// cudafix: keeps Python GPU environments working. The command line; docs/cli.md is its contract.
#include <fmt/format.h>
#include <malloc.h>
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdlib>
#include <iostream>
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

}  // namespace

int main(int argc, char** argv) {
  tune_malloc_for_a_short_run();
  using namespace cudafix::cli;
  CLI::App app{"cudafix: finds and repairs broken CUDA libraries in Python environments"};
  app.require_subcommand(1);
  app.fallthrough();  // common options may follow the command: `cudafix scan --json`
  app.set_version_flag("-V,--version", "cudafix " CUDAFIX_VERSION);
  GlobalOptions g;
  std::string color = "auto";
  std::string ld_library_path;
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
  app.add_option("--color", color, "auto (a terminal and no NO_COLOR), always or never")
      ->check(one_of({"auto", "always", "never"}));
  app.add_flag("-q,--quiet", g.quiet, "print nothing but errors");
  app.add_flag("-v,--verbose", g.verbose, "print every entry of long lists");
  auto* llp = app.add_option("--ld-library-path", ld_library_path,
                             "the LD_LIBRARY_PATH the loader model assumes (default: this process's)");
  app.add_option("--ld-so-cache", g.ld_so_cache,
                 "read this ld.so.cache instead of the host's (/dev/null: none, as a host without one)")
      ->check(existing_file());
  app.add_option("--threads", g.threads, "worker threads (default and most: one per core this process may run on)");
  app.add_flag("--timings", g.timings, "print how long each phase of the scan took (stderr)");
  app.add_flag("--no-cache", g.no_cache, "read every folder and library afresh, and keep nothing for the next run");
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
  app.add_option("--rules", g.rules, "a knowledge/rules TOML file on top of the built-in one (repeatable)")
      ->check(existing_file());

  auto* scan = app.add_subcommand("scan", "the model: dists, ownership, ELF objects, resolutions");
  std::string query;
  auto* why = app.add_subcommand("why", "who needs a soname or file, what provides it, how it resolves and why");
  why->add_option("SONAME_OR_PATH", query, "a soname (libcudnn.so.9) or a path (torch/lib/libtorch_cuda.so)")
      ->required();
  DoctorCliOptions doctor_opts;
  auto* doctor = app.add_subcommand("doctor", "run the rules: every way the environment is broken, root causes first");
  doctor->add_flag("--verify-hashes", doctor_opts.verify_hashes, "check every file against its RECORD hash (SHA-256)");
  doctor->add_option("--select", doctor_opts.select, "run only these rules (comma-separated)")->delimiter(',');
  doctor->add_option("--ignore", doctor_opts.ignore, "skip these rules (comma-separated)")->delimiter(',');
  doctor->add_option("--lock", doctor_opts.lock, "a pylock.toml: report how the environment drifted from it")
      ->check(existing_file());
  VerifyCliOptions verify_opts;
  auto* verify =
      app.add_subcommand("verify", "live probe of every visible GPU: cuInit, a cuDNN handle, and a diagnosis");
  verify->add_option("--timeout", verify_opts.timeout_s, "seconds before the probe is killed (default 60)");
  verify
      ->add_option("--consumer", verify_opts.consumer,
                   "the library to dlopen for cuDNN (default: the environment's, e.g. torch/lib/libtorch_cuda.so)")
      ->check(existing_file());
  verify->add_flag("--nccl", verify_opts.nccl,
                   "also run one NCCL all-reduce across every visible GPU with the environment's libnccl.so.2 "
                   "(NVLink multicast off)");
  auto* plan = app.add_subcommand("plan", "dry runs and repair plans; changes nothing");
  plan->require_subcommand(1);
  std::vector<std::string> remove_dists;
  auto* plan_remove = plan->add_subcommand(
      "remove", "what pip uninstall would delete, what cudafix would delete, and what either breaks");
  plan_remove->add_option("DIST", remove_dists, "the dists to remove (names as pip takes them)")->required();
  PlanFixCliOptions fix_opts;
  auto* plan_fix = plan->add_subcommand("fix", "the repair plan: ordered steps that keep every required library");
  plan_fix->add_option("--cuda-major", fix_opts.cuda_major, "the CUDA major to repair for (default: the consumers')")
      ->check(whole_number_in(9, 99));
  plan_fix->add_option("-o,--output", fix_opts.output, "write the plan document (JSON) here, for `cudafix apply`");
  auto* rules_cmd =
      app.add_subcommand("rules", "every doctor rule: its severities, what it needs scanned, what it finds");
  std::string explain_id;
  auto* explain = app.add_subcommand("explain", "a doctor rule's document: what it finds, why, how to fix it");
  explain->add_option("RULE", explain_id, "a rule id (shared-path, metadata-only, ...; `cudafix rules` lists them)")
      ->required();
  RemoveCliOptions remove_opts;
  auto* remove = app.add_subcommand("remove", "owner-counted removal that refuses to break a required library");
  remove->add_option("DIST", remove_opts.dists, "the dists to remove (names as pip takes them)")->required();
  remove->add_flag("--force", remove_opts.force, "remove even what plan remove judges to break a required library");
  remove->add_flag("--dry-run", remove_opts.dry_run, "show what would be removed; change nothing");
  InstallCliOptions install_opts;
  auto* install = app.add_subcommand("install", "install wheel files, validated whole first, as one transaction");
  install->add_option("WHEEL", install_opts.wheels, "the .whl files")->required()->check(existing_file());
  install->add_flag("--no-verify", install_opts.no_verify, "skip the live GPU check after each wheel");
  install->add_flag("--dry-run", install_opts.dry_run,
                    "validate the wheels and show what would be installed; change nothing");
  ApplyCliOptions apply_opts;
  auto* apply =
      app.add_subcommand("apply", "carry out a saved plan (plan fix -o) as one transaction, verifying each step");
  apply->add_option("PLAN", apply_opts.plan, "the plan document")->required()->check(existing_file());
  apply->add_flag("--no-verify", apply_opts.no_verify, "skip the live GPU check after each step");
  FixCliOptions fix_cli;
  auto* fix = app.add_subcommand(
      "fix", "plan fix, carried out as one transaction, verified after each step, rolled back if a check fails");
  fix->add_option("--cuda-major", fix_cli.cuda_major, "the CUDA major to repair for (default: the consumers')")
      ->check(whole_number_in(9, 99));
  fix->add_flag("--dry-run", fix_cli.dry_run, "show the plan and what it would change; change nothing");
  fix->add_flag("--no-verify", fix_cli.no_verify, "skip the live GPU check after each step");
  SyncCliOptions sync_opts;
  auto* sync = add_sync_command(app, g, sync_opts);
  LockCliOptions lock_opts;
  auto* lock = add_lock_command(app, lock_opts);
  auto* history = app.add_subcommand("history", "the transactions cudafix carried out, newest first");
  RollbackCliOptions rollback_opts;
  auto* rollback = app.add_subcommand("rollback", "undo a transaction (default: the last), or restore a snapshot");
  rollback->add_option("ID", rollback_opts.id, "the transaction to undo (`cudafix history` lists them)");
  rollback->add_option("--snapshot", rollback_opts.snapshot, "restore this snapshot instead");
  rollback->add_flag("--force", rollback_opts.force,
                     "take aside files changed since the transaction (as backups of the rollback) rather than refuse");
  rollback->add_flag("--dry-run", rollback_opts.dry_run, "show what would be put back; change nothing");
  SnapshotCliOptions snapshot_opts;
  auto* snapshot = app.add_subcommand("snapshot", "keep every listed file (hardlinks) before a cleanup by other tools");
  snapshot->add_option("NAME", snapshot_opts.name, "its name (default: the UTC time)");
  snapshot->add_flag("--list", snapshot_opts.list, "list the snapshots");
  snapshot->add_option("--delete", snapshot_opts.remove, "delete this snapshot");
  GuardCliOptions guard_opts;
  auto* guard = app.add_subcommand(
      "guard", "run a cleanup (pip uninstall, a script) under a snapshot; refuse a breaking uninstall, undo a break");
  guard->add_flag("--allow-break", guard_opts.allow_break,
                  "run an uninstall that plan remove judges to break something");
  guard->add_flag("--keep", guard_opts.keep,
                  "keep the snapshot, and what the command did even where it broke something");
  guard->add_flag("--no-verify", guard_opts.no_verify, "no GPU probe before and after the command");
  guard->add_option("COMMAND", guard_opts.command, "the command and its arguments, after --")->required();
  for (auto* sub : {remove, rollback, snapshot, apply, install, fix})
    sub->add_flag("-y,--yes", g.yes, "change the environment without asking");
  for (auto* sub : {remove, rollback, snapshot, apply, install, fix, guard})
    sub->add_flag("--break-system-packages", g.break_system_packages,
                  "change an environment the system's package manager owns (EXTERNALLY-MANAGED, PEP 668) all the same "
                  "(default $PIP_BREAK_SYSTEM_PACKAGES)");
  std::optional<std::string> demo_dir;
  auto* demo = app.add_subcommand("demo", "build a broken example environment and walk the workflow on it");
  demo->add_option("DIR", demo_dir, "where to build it (default: a new folder under $TMPDIR)");
  auto* version = app.add_subcommand("version", "print cudafix's version (as --version)");
  std::vector<std::string> help_words;
  auto* help = app.add_subcommand("help", "print the help of cudafix or of a command (as --help)");
  help->add_option("COMMAND", help_words, "the command (`cudafix help plan fix`)");
  {
    // Each command's --help lists the common options it honours beside its own.
    const std::vector<std::string> environment = {"--venv",  "--python",  "--json",  "--color",
                                                  "--quiet", "--verbose", "--rules", "--lock-timeout"};
    const std::vector<std::string> scanning = {"--ld-library-path", "--ld-so-cache", "--threads", "--timings",
                                               "--no-cache"};
    const std::vector<std::string> sources = {"--find-links", "--no-index",     "--index-url", "--extra-index-url",
                                              "--offline",    "--http-timeout", "--retries"};
    const auto joined = [](std::initializer_list<std::vector<std::string>> lists) {
      std::vector<std::string> all;
      for (const auto& l : lists) all.insert(all.end(), l.begin(), l.end());
      return all;
    };
    for (auto* sub : {scan, why, doctor, plan_remove, remove, install, rollback, snapshot})
      show_common_options(app, sub, joined({environment, scanning}));
    for (auto* sub : {plan_fix, fix, apply, sync, lock})
      show_common_options(app, sub, joined({environment, scanning, sources}));
    // verify refuses --ld-so-cache: the probe's loader reads the host's.
    show_common_options(app, verify,
                        joined({environment, {"--ld-library-path", "--threads", "--timings", "--no-cache"}}));
    show_common_options(app, history, environment);
    show_common_options(app, rules_cmd, {"--venv", "--python", "--json", "--color", "--rules"});
    show_common_options(app, explain, {"--json"});
    show_common_options(app, demo, {"--json", "--color", "--quiet", "--verbose"});
    show_common_options(app, version, {"--json"});
  }
  if (argc == 1) {  // `cudafix` alone: what there is to run, as uv says it (a usage error)
    std::cerr << short_help(app);
    return k_exit_usage;
  }
  std::string complete_kind;
  auto* complete = app.add_subcommand("__complete", "");  // the shell completions' helper: hidden
  complete->group("");
  complete->add_option("KIND", complete_kind)->required()->check(one_of({"rules", "dists"}));
  std::string mat_in, mat_dir, mat_python = "/usr/bin/python3";
  int copies = 1;
  auto* mat = app.add_subcommand("materialize", "");  // developer command: hidden from --help
  mat->group("");
  mat->add_option("DESCRIPTION", mat_in, "corpus-format JSON, or - for standard input")->required();
  mat->add_option("DIR", mat_dir)->required();
  mat->add_option("--copies", copies);
  mat->add_option("--python", mat_python);

  const ParsedCommandLine parsed = parse_command_line(app, argc, argv);
  if (parsed.version) return print_version(parsed.json, std::cout);
  if (!parsed.run) return parsed.exit_code == 0 ? 0 : report_failure(parsed, std::cout, std::cerr);
  g.color = color == "always" ? ColorMode::always : color == "never" ? ColorMode::never : ColorMode::auto_;
  if (llp->count()) g.ld_library_path = ld_library_path;
  // More threads than cores buys nothing and costs a heap and a stack each (--threads 100000
  // grew to 22 GB before it was capped).
  if (const unsigned cores = cudafix::resolver::cores_available(); g.threads > cores) {
    if (g.verbose)
      std::cerr << fmt::format("cudafix: --threads {} capped at {}, the cores this process may run on\n", g.threads,
                               cores);
    g.threads = cores;
  }

  std::string command = app.get_subcommands().front()->get_name();
  if (plan->parsed()) command += " " + plan->get_subcommands().front()->get_name();
  try {
    if (scan->parsed()) return run_scan(g, std::cout);
    if (why->parsed()) return run_why(g, query, std::cout);
    if (doctor->parsed()) return run_doctor(g, doctor_opts, std::cout);
    if (verify->parsed()) return run_verify(g, verify_opts, std::cout);
    if (plan_remove->parsed()) return run_plan_remove(g, remove_dists, std::cout);
    if (plan_fix->parsed()) return run_plan_fix(g, fix_opts, std::cout);
    if (rules_cmd->parsed()) return run_rules(g, std::cout);
    if (explain->parsed()) return run_explain(g, explain_id, std::cout);
    if (demo->parsed()) return run_demo(g, demo_dir, std::cout);
    if (version->parsed()) return print_version(g.json, std::cout);
    if (help->parsed()) {
      const HelpPage page = help_page(app, help_words);
      if (!page.error.empty())
        return report_failure(
            ParsedCommandLine{.exit_code = k_exit_usage, .error = page.error, .command = "help", .json = g.json},
            std::cout, std::cerr);
      std::cout << page.text;
      return 0;
    }
    if (remove->parsed()) return run_remove(g, remove_opts, std::cout);
    if (history->parsed()) return run_history(g, std::cout);
    if (lock->parsed()) return run_lock(g, lock_opts, CUDAFIX_VERSION, std::cout);
    if (apply->parsed()) return run_apply(g, apply_opts, std::cout);
    if (fix->parsed()) return run_fix(g, fix_cli, std::cout);
    if (sync->parsed()) return run_sync(g, sync_opts, std::cout);
    if (install->parsed()) return run_install(g, install_opts, std::cout);
    if (rollback->parsed()) return run_rollback(g, rollback_opts, std::cout);
    if (snapshot->parsed()) return run_snapshot(g, snapshot_opts, std::cout);
    if (complete->parsed()) return run_complete(g, complete_kind, std::cout);
    if (guard->parsed()) return run_guard(g, guard_opts, std::cout);
    if (mat->parsed()) return run_materialize(mat_in, mat_dir, copies, mat_python, std::cout);
  } catch (const std::exception& e) {
    return report_failure(g.json, command, e.what(), k_exit_usage, std::cout, std::cerr);
  }
  return k_exit_usage;
}
