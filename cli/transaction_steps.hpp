// What the commands that change an environment share (cli/transaction_steps.cpp defines it;
// cli/fix_command.cpp uses it too): the confirmation, the retention of backups, the progress bar,
// the commit's report, and what the command line decides and says for installer/apply (its
// options from the command line's, the verification's rendering). Plans are bound, staged and
// carried out by installer/apply/plan_apply.hpp.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
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

// Refuses, before anything changes, an environment whose site folders are on another mount than
// the root's .cudafix: every change is a rename into .cudafix/tx/<id>/, which the kernel refuses
// across file systems and bind mounts (EXDEV).
void check_one_file_system(const resolver::EnvLayout& layout);

// A write command's document as docs/json.md orders every one: {"schema":1,"command":C,
// "venv":ROOT, ...}, the command's own keys after these in the order they are added (an
// ordered_json: nlohmann::json would sort them). For the documents of a few plain values; those
// that hold a rendered document (a plan, the verification) are written by one JsonWriter.
[[nodiscard]] nlohmann::ordered_json document_start(const std::string& command, const std::string& venv);

// What a committed transaction says: `text`, or under --json {"schema","command","venv",
// "transaction":ID,"ops":N}, the command's own `keys` in their order, and what was pruned
// ("pruned","pruned_bytes"); then the backups beyond [transactions] keep are removed. Returns 0.
int report_done(const GlobalOptions& g, std::ostream& out, const std::string& command, const std::string& venv,
                const installer::txn::Transaction& t, const std::string& text, const Retention& keep,
                const JsonFields& keys = {});

// What installer/apply takes from the command line: the threads, the wheel sources a step's
// wheel is downloaded from (--offline, the indexes, the cache), the progress bar of each wheel.
[[nodiscard]] installer::apply::ApplyOptions apply_options(const GlobalOptions& g, const resolver::Environment& env);
// The step verification's options: the scan as the command scans, the probe beside the binary
// (found, or its absence an error, only where `verify`: --no-verify needs none), and its notes on
// standard error unless -q or --json.
[[nodiscard]] installer::apply::VerifyStepsOptions verify_steps_options(const GlobalOptions& g, bool verify);

// The baseline and each step's result, as fix, apply and install report them under "verification"
// (null where the steps were not verified, --no-verify).
void write_verification(JsonWriter& w, const resolver::Environment& env, const StepChecks& checks);

// A transaction carried out with the verification after each step (installer/apply): exit 1
// (every change undone, and said) when a verification failed; any other failure is thrown on.
[[nodiscard]] std::optional<int> carry_out_verified(const GlobalOptions& g, std::ostream& out,
                                                    const std::string& command, const resolver::Environment& env,
                                                    installer::txn::Transaction& t,
                                                    const std::function<void(std::size_t)>& check,
                                                    const StepChecks& checks);

}  // namespace cudafix::cli
