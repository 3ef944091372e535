// What the commands that change an environment share (cli/transaction_steps.cpp defines it;
// cli/fix_command.cpp uses it too): the confirmation, the retention of backups, the progress bar,
// the commit's report, and what the command line decides and says for installer/apply (its
// options from the command line's, the verification's rendering). Plans are bound, staged and
// carried out by installer/apply/plan_apply.hpp.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/json_writer.hpp"
#include "cli/session.hpp"
#include "installer/apply/plan_apply.hpp"
#include "installer/txn/transaction.hpp"

namespace cudafix::cli {

// Writing needs a yes: -y, or one typed at a terminal (false: the user said no). With no terminal
// and no -y, throws Error: there is no one to ask.
[[nodiscard]] bool confirmed(const GlobalOptions& g, const std::string& what);
// What a command says when the user declined its prompt: nothing was changed, on standard error
// (beside the prompt), and under --json a document saying so. Returns the exit code, 1 (refused,
// as apt-get's "Abort." exits 1; nothing was changed).
int declined(const GlobalOptions& g, std::ostream& out, const std::string& command, const std::string& venv);

// Where backups are pruned after a commit, and how many transactions keep theirs.
struct Retention {
  std::string root;
  std::size_t count = 0;
};
[[nodiscard]] Retention retention(const Located& located);

// A bar of ops carried out, on a terminal and without --json.
void show_progress(const GlobalOptions& g, installer::txn::Transaction& t, const char* what);

using installer::apply::PreparedPlan;
using installer::apply::StepChecks;
// The environment's layout, refusing a bare site folder (cudafix changes a venv or a prefix).
using installer::apply::writable;

using installer::txn::check_one_file_system;

// A write command's document as docs/json.md orders every one: {"schema":1,"command":C,
// "venv":ROOT, ...}, the command's own keys after these (`keys`, or what `write_keys` writes into
// the open object), on one line of `out`.
void write_document(std::ostream& out, const std::string& command, const std::string& venv, const JsonFields& keys);
void write_document(std::ostream& out, const std::string& command, const std::string& venv,
                    const std::function<void(JsonWriter&)>& write_keys);

// What a committed transaction says: `text`, or under --json {"schema","command","venv",
// "transaction":ID,"ops":N}, the command's own `keys` in their order, and what was pruned
// ("pruned","pruned_bytes"); then the backups beyond [transactions] keep are removed. Returns 0.
int report_done(const GlobalOptions& g, std::ostream& out, const std::string& command, const std::string& venv,
                const installer::txn::Transaction& t, const std::string& text, const Retention& keep,
                const JsonFields& keys = {});

// What installer/apply takes from the command line: the threads, the wheel sources a step's
// wheel is downloaded from (--offline, the indexes, the cache), the progress bar of each wheel.
[[nodiscard]] installer::apply::ApplyOptions apply_options(const GlobalOptions& g, const resolver::Environment& env);
// Where the step verification's notes go: standard error, unless -q or --json (none).
[[nodiscard]] std::function<void(const std::string&)> notes(const GlobalOptions& g);

// The baseline and each step's result, as fix, apply and install report them under "verification"
// (null where the steps were not verified, --no-verify).
void write_verification(JsonWriter& w, const resolver::Environment& env, const StepChecks& checks);

// What a write command says when a step's verification failed (installer/apply undid every
// change): the failure on standard error, and under --json a document with the transaction, the
// error and the verification. Returns the exit code, 1.
int verification_failed(const GlobalOptions& g, std::ostream& out, const std::string& command,
                        const resolver::Environment& env, const installer::txn::Transaction& t,
                        const std::string& failed, const StepChecks& checks);

}  // namespace cudafix::cli
