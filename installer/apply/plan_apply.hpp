// A typed plan (resolver::PlanFile: `apply PLAN.json`'s document as parsed, or `fix`'s plan as
// made) carried out as one transaction: bound to the environment as it is now, staged as the
// transaction's ops, step by step, and carried out with the live verification after each step
// (installer/probe/step_verify.hpp). The command line asks, renders and prints; nothing here
// prints: progress and notes go through the callbacks the options hold.
//
// What a step writes and deletes is computed once, by the planner's own simulation
// (resolver::replay_steps): prepare_plan replays the steps and refuses a plan whose lists are not
// the replay's; stage_plan stages a removal from the replay's list as it is, and checks what it
// staged for every other step against the replay (check_staged_step) before the next step, so
// that the transaction changes what the replay judged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "installer/probe/step_verify.hpp"
#include "installer/probe/verify.hpp"
#include "installer/source/sources.hpp"
#include "installer/txn/transaction.hpp"
#include "installer/wheel/install.hpp"
#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/plan/fix.hpp"
#include "resolver/plan/plan_file.hpp"
#include "resolver/plan/uninstall.hpp"

namespace cudafix::installer::apply {

using Progress = std::function<void(std::uint64_t, std::uint64_t)>;

// The wheels an environment can use: the tags its interpreter accepts, best first, and the Python
// version a wheel's Requires-Python must accept ("3.11.2").
struct WheelTarget {
  std::vector<std::string> tags;
  std::string python_version;
};

// What the command line decides for carrying a plan out.
struct ApplyOptions {
  unsigned threads = 0;  // 0: one per core
  // This environment's target: every step's wheel is checked against it as `install` checks its
  // wheels (installer::check_usable), so that a plan made for another target (--python-platform)
  // or naming another wheel is refused before anything changes. Asked once, when a step has a
  // wheel; none given: not checked.
  std::function<WheelTarget()> target;
  // The sources a step's wheel read by range from an index is downloaded from (its `offline`
  // forbids the download); asked only when a step needs one, so that a plan of local wheels
  // reads no index settings at all.
  std::function<source::SourceSettings()> source_settings;
  // A progress callback for each wheel staged (none, or one returning none: no progress).
  std::function<Progress()> wheel_progress;
  // A progress callback for the ops carried out, once the steps are staged (carry_out_plan).
  std::function<Progress()> carry_out_progress;
  // `sync`'s plan (resolver/plan/sync.hpp): the replay refuses a step only where it leaves a
  // required library resolving nowhere (resolver::sync_breaks), the lock choosing its versions.
  bool lock_sync = false;
};

// The environment's layout, refusing a bare site folder (cudafix changes a venv or a prefix).
const resolver::EnvLayout& writable(const resolver::Environment& env);

// A saved plan bound to the environment as it is now (prepare_plan): each step as parsed (its
// label is what the prompt shows), its dist found by its dist-info folder and checked to be the
// one it names, its wheel validated, checked against the plan's SHA-256 and the step's name and
// version, and the step replayed on the model (resolver::replay_steps): the paths it deletes,
// keeps and writes are what the plan lists, and it breaks nothing required. What is staged is
// these steps, and nothing else.
struct PreparedStep {
  std::string label;  // "reinstall nvidia-cudnn-cu13 9.19.0.56"
  resolver::Step step;
  std::optional<ValidatedWheel> wheel;  // install, reinstall
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
[[nodiscard]] PreparedPlan prepare_plan(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                        const resolver::PlanFile& plan, const std::string& name,
                                        const std::string& remake, const ApplyOptions& options);

// A prepared plan's steps staged into `t`, one journal step each; returns how many files they
// write or delete. Each step's staged writes and deletions are checked against its replay
// (check_staged_step) before the next step is staged.
std::size_t stage_plan(const resolver::Environment& env, const PreparedPlan& plan, txn::Transaction& t,
                       const ApplyOptions& options);

// What one step staged, beside what its replay computed.
struct StagedStep {
  std::vector<std::string> writes;   // absolute: the files put in place
  std::vector<std::string> deletes;  // absolute: files moved aside, and folders with a trailing '/'
  // What the installer makes that no wheel member is and the planner does not model, none of
  // them a library: console scripts, INSTALLER, REQUESTED (StagedWheel::generated). Set aside
  // on both sides.
  std::vector<std::string> generated;
};
// Throws Error naming the step (`step`, from 0, and its label) and the first path, in sorted
// order, that one side holds and the other lacks. A removal or an install: the staged writes and
// deletions are exactly the replay's. A reinstall: every shared library staged is one the
// replay writes (the replay rewrites the dist's RECORD rows, whatever the wheel holds: the
// wheel's other files, and the leftovers it does not rewrite, are not modelled).
void check_staged_step(std::size_t step, const std::string& label, const resolver::Step& replayed,
                       const StagedStep& staged);

// An installed dist a wheel replaces (an upgrade, a reinstall): what its uninstall deletes the
// cudafix way (owner counting: a path a kept dist lists stays), less every path the transaction
// writes (`earlier.listed`) and what its earlier steps removed, moved aside as pip's upgrade
// uninstalls the old version: its dist-info folder whole (one op, so rollback restores it), the
// folders the leftovers empty with them, but never a folder that holds a path written here or
// one a kept dist lists. Rows a removal refuses (a scheme folder, cudafix's state) stay.
// `earlier` then counts the dist as removed and its files as deleted, for the steps after.
// Returns what was staged.
resolver::Deletion stage_leftovers(const resolver::Environment& env, int dist, resolver::EarlierSteps& earlier,
                                   txn::Transaction& t);

// The live verification of a transaction's steps (installer/probe/step_verify.hpp): a baseline
// probe of the environment as it is when the verifier is made, then after each step a probe of
// the environment scanned afresh with `options.scan`, judged against the baseline by the paths
// the step changed; after the last step also the whole of `cudafix verify`. No driver, or a
// driver stage failing at the baseline before the environment is used: `unverified` (and
// `unverified_why`), and the steps go on. A failed step sets `failed` and throws, naming every
// check that failed with what it expected and found, which undoes the transaction. `last` keeps
// the last step's `verify` report.
struct StepChecks {
  struct Step {
    std::size_t step = 0;  // from 0
    std::string label;
    probe::ProbePoint point;
    probe::StepJudgement judgement;
  };
  bool skip = false;
  bool unverified = false;
  std::string unverified_why;  // "no GPU driver (libcuda.so.1) here", or the driver stage that failed
  bool failed = false;
  std::optional<probe::ProbePoint> baseline;
  std::vector<Step> steps;
  std::optional<probe::VerifyReport> last;
};

struct VerifyStepsOptions {
  // How each point scans the environment (its cache folder and ld.so.cache are dropped: files
  // just renamed into place are read afresh, and the probe's real loader reads the host's cache).
  resolver::ScanOptions scan;
  probe::VerifyOptions probe;  // the probe's path and timeout
  // A line for the user after the baseline and after each step verified ("verified after step 1
  // (...): ..."); none: nothing said.
  std::function<void(const std::string&)> note;

  // A write command's: its scan, and the probe installed beside cudafix (probe::installed_probe,
  // its absence an error) where `verify`; none where not, so that a cudafix copied without its
  // helper still installs with --no-verify.
  [[nodiscard]] static VerifyStepsOptions for_command(resolver::ScanOptions scan, bool verify,
                                                      std::function<void(const std::string&)> note);
};

// The baseline probe, started before the transaction is staged so that the driver's
// initialisation (most of a second on a GPU) runs beside the staging: the environment scanned as
// step_verifier scans it, probed with `paths` (what the plan's replay says its steps write and
// delete) as the libraries opened beyond the consumer's tree. step_verifier takes it where those
// libraries are the ones of what the staged transaction changes, and probes again where not.
struct EarlyBaseline {
  resolver::Environment env;       // as the probe's loader saw it
  std::vector<std::string> extra;  // the libraries among `paths` it opened
  probe::ProbePoint point;
};
[[nodiscard]] std::future<EarlyBaseline> start_baseline(const resolver::EnvLayout& layout,
                                                        const resolver::Knowledge& knowledge, const PreparedPlan& plan,
                                                        const VerifyStepsOptions& options);

// `early`: the baseline start_baseline began, valid or not (none: probed here).
[[nodiscard]] std::function<void(std::size_t)> step_verifier(const resolver::Environment& env,
                                                             const resolver::Knowledge& knowledge,
                                                             const std::vector<std::string>& labels,
                                                             const txn::Transaction& t,
                                                             const VerifyStepsOptions& options, StepChecks& checks,
                                                             std::future<EarlyBaseline>* early = nullptr);

// `t` carried out with `check` after each step. A failed verification undoes every change and
// is returned as its message (the checks that failed); nullopt: carried out. Any other failure
// is thrown on.
[[nodiscard]] std::optional<std::string> carry_out_verified(txn::Transaction& t,
                                                            const std::function<void(std::size_t)>& check,
                                                            const StepChecks& checks);

// What carry_out_plan did: how many files its steps wrote or deleted, and the verification's
// failure where one failed (every change undone; nullopt: carried out).
struct CarriedOut {
  std::size_t files = 0;
  std::optional<std::string> failed;
};

// A prepared plan carried out as `t`, as `apply` and `fix` carry one out: the baseline probe
// started first, beside the staging (the driver's initialisation costs as much), the steps staged
// (stage_plan), then each carried out and verified after it (step_verifier). Without
// `verify_steps` (--no-verify) no probe runs and `checks.skip` is set. `phase` is told as each part
// ends ("stage", "baseline probe", "steps and their checks"), for a command's timings. Any failure
// but a verification's is thrown on.
[[nodiscard]] CarriedOut carry_out_plan(const resolver::Environment& env, const resolver::Knowledge& knowledge,
                                        const PreparedPlan& plan, txn::Transaction& t, const ApplyOptions& apply,
                                        const VerifyStepsOptions& verify, bool verify_steps, StepChecks& checks,
                                        const std::function<void(const char*)>& phase = {});

}  // namespace cudafix::installer::apply
