// The commands. Each returns its exit code (docs/cli.md) and writes to the streams it
// is given; errors escape as resolver::Error for main() to report.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace cudafix::cli {

enum class ColorMode { auto_, always, never };

struct GlobalOptions {
  std::optional<std::string> venv;
  std::optional<std::string> python;  // -p/--python
  bool json = false;
  ColorMode color = ColorMode::auto_;
  bool quiet = false;
  bool verbose = false;
  std::optional<std::string> ld_library_path;  // default: the caller's
  std::optional<std::string> ld_so_cache;      // default: the host's
  unsigned threads = 0;
  std::vector<std::string> rules;       // --rules files, in order
  bool timings = false;                 // --timings: phase durations on stderr
  std::vector<std::string> find_links;  // --find-links folders (then $PIP_FIND_LINKS)
  bool no_cache = false;                // --no-cache: read everything afresh, keep nothing
  bool yes = false;                     // -y: write without asking
  // --break-system-packages (then $PIP_BREAK_SYSTEM_PACKAGES), as pip's: change an externally
  // managed environment (PEP 668) all the same.
  bool break_system_packages = false;
  double lock_timeout_s = 30;  // --lock-timeout: how long to wait for <venv>/.lock
  // Wheel sources beyond --find-links (installer/source/sources.hpp).
  std::optional<std::string> index_url;       // --index-url (then $PIP_INDEX_URL, $UV_INDEX_URL)
  std::vector<std::string> extra_index_urls;  // --extra-index-url (then $PIP_EXTRA_INDEX_URL, ...)
  bool no_index = false;                      // --no-index
  // The target whose wheels are chosen and installed, where it is not the environment's own
  // interpreter (resolver/env/interpreter_tags.hpp): uv's --python-platform and --python-version.
  std::optional<std::string> python_platform;
  std::optional<std::string> python_version;
  bool offline = false;        // --offline: the pip, uv and cudafix caches only
  double http_timeout_s = 15;  // --http-timeout (pip's --timeout)
  int retries = 5;             // --retries, as pip's
  // [sources] of the configuration files (cli/session.hpp): used where neither the command line
  // nor the environment names an index or a wheel folder, as pip ranks its config files.
  std::optional<std::string> config_index_url;
  std::vector<std::string> config_extra_index_urls;
  std::vector<std::string> config_find_links;
};

int run_scan(const GlobalOptions& g, std::ostream& out);
int run_why(const GlobalOptions& g, const std::string& query, std::ostream& out);
struct VerifyCliOptions {
  double timeout_s = 60;
  std::optional<std::string> consumer;
  bool nccl = false;  // --nccl: an all-reduce across the visible GPUs with the environment's NCCL
};
int run_verify(const GlobalOptions& g, const VerifyCliOptions& v, std::ostream& out);
struct DoctorCliOptions {
  bool verify_hashes = false;
  std::vector<std::string> select, ignore;
  std::optional<std::string> lock;  // --lock: a PEP 751 lock the lock-*-drift rules compare with
};
int run_doctor(const GlobalOptions& g, const DoctorCliOptions& d, std::ostream& out);
// `plan remove DIST...`: exit 0 safe, 1 unsafe, 2 when a DIST is not installed.
int run_plan_remove(const GlobalOptions& g, const std::vector<std::string>& dists, std::ostream& out);
struct PlanFixCliOptions {
  std::optional<int> cuda_major;
  std::optional<std::string> output;  // -o: the plan document
  bool pip_find_links_env = true;     // without --find-links, read $PIP_FIND_LINKS
};
// `plan fix`: exit 0 plan found or nothing to do, 1 no safe plan (or the consumers disagree).
int run_plan_fix(const GlobalOptions& g, const PlanFixCliOptions& p, std::ostream& out);
// `rules`: every rule, its severities and what it needs scanned; the configuration is the
// environment's where one is found, else the user's and the --rules files.
int run_rules(const GlobalOptions& g, std::ostream& out);
// `explain RULE`: the rule's document; exit 2 for an unknown id, naming the closest ones.
int run_explain(const GlobalOptions& g, const std::string& rule, std::ostream& out);
int run_demo(const GlobalOptions& g, const std::optional<std::string>& dir, std::ostream& out);
// The write commands (installer/txn/): exit 0 done, 1 refused, 2 could not run.
struct RemoveCliOptions {
  std::vector<std::string> dists;
  bool force = false;
  bool dry_run = false;  // what would be removed; nothing changed, the exit code the removal would give
};
int run_remove(const GlobalOptions& g, const RemoveCliOptions& o, std::ostream& out);
int run_history(const GlobalOptions& g, std::ostream& out);
// `install WHEEL...`: each wheel validated whole, then installed (replacing an installed dist
// of its name) as one transaction, verified after each wheel as apply's steps are; the same
// exit codes.
struct InstallCliOptions {
  std::vector<std::string> wheels;
  bool no_verify = false;
  bool dry_run = false;  // the wheels validated and what they would replace shown; nothing changed
};
int run_install(const GlobalOptions& g, const InstallCliOptions& o, std::ostream& out);
// `apply PLAN.json`: 0 done and verified (or --no-verify), 4 done but no GPU driver to verify
// with, 1 a verification failed and everything was undone, 2 could not run.
struct ApplyCliOptions {
  std::string plan;
  bool no_verify = false;
};
int run_apply(const GlobalOptions& g, const ApplyCliOptions& o, std::ostream& out);
// `fix`: plan fix, then the plan carried out as one transaction verified after each step, with
// doctor's findings before and after: 0 done and verified (or nothing to do), 4 done but no GPU
// driver to verify with, 1 no safe plan (nothing changed) or a verification failed (everything
// undone), 2 could not run (a step's wheel found nowhere, not confirmed).
struct FixCliOptions {
  std::optional<int> cuda_major;
  bool dry_run = false;
  bool no_verify = false;
};
int run_fix(const GlobalOptions& g, const FixCliOptions& o, std::ostream& out);
// `sync LOCK` (cli/sync_command.cpp): the environment brought to exactly a PEP 751 lock; exit
// codes as fix's.
struct SyncCliOptions {
  std::string lock;
  bool dry_run = false;
  bool no_verify = false;
  bool require_hashes = false;  // refuse a wheel the lock gives no SHA-256 for
};
int run_sync(const GlobalOptions& g, const SyncCliOptions& o, std::ostream& out);
// Its subcommand and options, added to `app` (main.cpp stays a list of commands).
CLI::App* add_sync_command(CLI::App& app, SyncCliOptions& o);
struct RollbackCliOptions {
  std::optional<std::string> id;
  std::optional<std::string> snapshot;
  bool force = false;    // take aside what was changed since, rather than refuse
  bool dry_run = false;  // what would be put back (or refused); nothing changed
};
int run_rollback(const GlobalOptions& g, const RollbackCliOptions& o, std::ostream& out);
struct SnapshotCliOptions {
  std::optional<std::string> name;
  bool list = false;
  std::optional<std::string> remove;  // --delete NAME
};
int run_snapshot(const GlobalOptions& g, const SnapshotCliOptions& o, std::ostream& out);
// The words the shell completions offer (contrib/completions/), one a line: "rules", the rule
// ids; "dists", the environment's dist names as pip takes them (PEP 503), read from the dist-info
// folders alone so that a TAB stays quick. Names that are no PEP 508 name are left out.
int run_complete(const GlobalOptions& g, const std::string& kind, std::ostream& out);
// `guard -- COMMAND...`: COMMAND run under a snapshot, checked before where it is an uninstall by
// pip or uv, and undone when it leaves the environment worse: 1 refused before it ran or undone
// (or left, with --keep) because something got worse, 2 could not run (no snapshot possible),
// else COMMAND's own exit code.
struct GuardCliOptions {
  std::vector<std::string> command;
  bool allow_break = false;  // run an uninstall plan remove judges to break something
  bool keep = false;         // keep the snapshot, and what the command did even when it broke something
  bool no_verify = false;    // no probe before and after
};
int run_guard(const GlobalOptions& g, const GuardCliOptions& o, std::ostream& out);
// Developer command: writes an environment from a corpus-format description (file or "-").
int run_materialize(const std::string& description, const std::string& dir, int copies, const std::string& python,
                    std::ostream& out);

}  // namespace cudafix::cli
