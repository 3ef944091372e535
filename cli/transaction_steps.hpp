// What the commands that change an environment share (cli/write_commands.cpp defines it;
// cli/fix_command.cpp uses it too): the confirmation, the retention of backups, the progress bar,
// the commit's report, a plan document's steps staged into a transaction, and the live
// verification after each step.
#pragma once

#include <deque>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/session.hpp"
#include "installer/probe/step_verify.hpp"
#include "installer/probe/verify.hpp"
#include "installer/txn/transaction.hpp"
#include "installer/wheel/install.hpp"
#include "resolver/plan/plan_file.hpp"

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

// The environment's layout, refusing a bare site folder (cudafix changes a venv or a prefix).
const resolver::EnvLayout& writable(const resolver::Environment& env);

// Refuses, before anything changes, an environment whose site folders are on another mount than
// the root's .cudafix: every change is a rename into .cudafix/tx/<id>/, which the kernel refuses
// across file systems and bind mounts (EXDEV).
void check_one_file_system(const resolver::EnvLayout& layout);

// A write command's document as docs/json.md orders every one: {"schema":1,"command":C,
// "venv":ROOT, ...}, the command's own keys after these in the order they are added (an
// ordered_json: nlohmann::json would sort them).
[[nodiscard]] nlohmann::ordered_json document_start(const std::string& command, const std::string& venv);

// What a committed transaction says: `text`, or under --json document_start's keys, the
// transaction's id and ops, `extra`'s keys in their order (its own schema, command and venv
// left out) and what was pruned; then the backups beyond [transactions] keep are removed.
// Returns 0.
int report_done(const GlobalOptions& g, std::ostream& out, const std::string& command, const std::string& venv,
                const installer::txn::Transaction& t, const std::string& text, const Retention& keep,
                const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

// The live verification of a transaction's steps (installer/probe/step_verify.hpp): a baseline
// probe of the environment as it is when the verifier is made, then after each step a probe of
// the environment scanned afresh the way the command scanned it, judged against the baseline by
// the paths the step changed; after the last step also the whole of `cudafix verify`. No driver, or
// a driver stage failing at the baseline before the environment is used: `unverified` (and
// `unverified_why`), and the steps go on. A failed step sets `failed` and throws, naming every check
// that failed with what it expected and found, which undoes the transaction. `last` keeps the
// last step's `verify` report.
struct StepChecks {
  struct Step {
    std::size_t step = 0;  // from 0
    std::string label;
    installer::probe::ProbePoint point;
    installer::probe::StepJudgement judgement;
  };
  bool skip = false;
  bool unverified = false;
  std::string unverified_why;  // "no GPU driver (libcuda.so.1) here", or the driver stage that failed
  bool failed = false;
  std::optional<installer::probe::ProbePoint> baseline;
  std::vector<Step> steps;
  std::optional<installer::probe::VerifyReport> last;
};
[[nodiscard]] std::function<void(std::size_t)> step_verifier(const GlobalOptions& g, const resolver::Environment& env,
                                                             const resolver::Knowledge& knowledge,
                                                             const std::vector<std::string>& steps,
                                                             const installer::txn::Transaction& t, StepChecks& checks);
// The baseline and each step's result, as fix, apply and install report them under "verification".
[[nodiscard]] nlohmann::ordered_json verification_json(const resolver::Environment& env, const StepChecks& checks);

// A transaction carried out with the verification after each step: exit 1 (every change undone,
// and said) when a verification failed; any other failure is thrown on.
[[nodiscard]] std::optional<int> carry_out_verified(const GlobalOptions& g, std::ostream& out,
                                                    const std::string& command, const resolver::Environment& env,
                                                    installer::txn::Transaction& t,
                                                    const std::function<void(std::size_t)>& check,
                                                    const StepChecks& checks);

// A saved plan bound to the environment as it is now (prepare_plan): each step as parsed (its
// label is what the prompt shows), its dist found by its dist-info folder and checked to be the
// one it names, its wheel validated, checked against the plan's SHA-256 and the step's name and
// version, and the step replayed on the model (resolver::replay_steps): the paths it deletes,
// keeps and writes are what the plan lists, and it breaks nothing required. What is staged is
// these steps, and nothing else.
struct PreparedStep {
  std::string label;  // "reinstall nvidia-cudnn-cu13 9.19.0.56"
  resolver::Step step;
  std::optional<installer::ValidatedWheel> wheel;  // install, reinstall
};
struct PreparedPlan {
  std::deque<resolver::Wheel> wheels;  // what the replay simulated from (steps point into it)
  std::vector<PreparedStep> steps;
  [[nodiscard]] std::vector<std::string> labels() const;
};
// Throws Error naming `name` (the plan file) and the step or field: a plan that found no safe
// order, a fingerprint that is not its own digest or leaves out a file a step touches, an
// environment changed since, a step whose dist, wheel or paths are not what it says, or a step
// the replay judges unsafe. A changed environment is said by its first three differences and the
// count of the rest, then `remake`, on its own line: the command that makes a new plan.
[[nodiscard]] PreparedPlan prepare_plan(const GlobalOptions& g, const resolver::Environment& env,
                                        const resolver::Knowledge& knowledge, const resolver::PlanFile& plan,
                                        const std::string& name, const std::string& remake);

// A prepared plan's steps staged into `t`, one journal step each; returns how many files they
// write or delete.
std::size_t stage_plan(const GlobalOptions& g, const resolver::Environment& env, const PreparedPlan& plan,
                       installer::txn::Transaction& t);

}  // namespace cudafix::cli
