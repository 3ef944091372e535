// The repair plan (`cudafix plan fix`): from a broken environment to one where every consumer's
// CUDA libraries resolve inside the environment to providers of one CUDA major, in steps ordered
// so that no required resolution is ever worse than before the plan.
//
// 1. The target major: given, or the one the consumers (dists that ship no CUDA libraries but
//    NEED them: torch, jax, cupy) need, from the sonames they NEED that only one major ships
//    (libcudart.so.13), their pinned Requires-Dist on provider dists (nvidia-cudnn-cu13==...),
//    and torch/version.py. Consumers that disagree stop the plan: no guess.
// 2. The steps: reinstall each provider of the target major whose files are gone or hold another
//    dist's bytes; install each provider a requirement or an extras chain asks for and the
//    environment lacks; remove (owner-counted) each provider of another major.
// 3. The order: one in which each step, simulated on the model with everything before it, leaves
//    no required resolution worse than before the plan, found whenever one exists
//    (resolver/plan/order_search.hpp: that order of preference first, backtracking where it
//    fails). When none exists, the plan stops after the longest safe prefix and names the
//    smallest set of steps that no order carries out together, with what each of them breaks
//    when it comes after the most steps that can go before it.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/plan/consumer_needs.hpp"
#include "resolver/plan/plan.hpp"
#include "resolver/plan/wheel.hpp"

namespace cudafix::resolver::inline plan {

struct FixOptions {
  std::optional<int> cuda_major;
  std::vector<Wheel> wheels;                // from --find-links
  std::vector<std::string> supported_tags;  // what this interpreter accepts, best first
  // The interpreter's version ("3.11.2"; "3.11" where only that is known) that a wheel's
  // Requires-Python must accept, as pip checks it; empty: not checked.
  std::string python_version;
  unsigned threads = 0;
};

// What the consumers need, as consumer_needs judges it: the plan's target comes from it.
using Evidence = ConsumerNeed;

enum class StepAction { remove, reinstall, install };
[[nodiscard]] std::string_view to_string(StepAction a);

struct Step {
  StepAction action = StepAction::remove;
  int dist = -1;  // the installed dist it removes, restores or replaces; -1 for a new install
  std::string name;
  std::string version;
  // install, reinstall: the PEP 440 specifiers a wheel for it must meet ("==9.19.0.56"), so a
  // wheel source can fetch one when none is at hand.
  std::string accepts;
  const Wheel* wheel = nullptr;  // its source, when one is at hand (install, reinstall)
  std::string why;
  std::vector<std::string> deletes;  // absolute paths
  std::vector<std::string> keeps;    // remove: listed paths kept because another dist lists them
  std::vector<std::string> writes;   // install, reinstall: the files written
  bool simulated = true;             // false: an install without a wheel, so no file list
  bool ok = true;                    // after this step, nothing required is worse than before
  std::vector<Break> worse;
};

struct Need {
  std::string name;
  std::string version;  // an exact version, or the specifier when none is pinned
  std::string why;
};

struct FixPlan {
  std::optional<int> target;
  bool target_given = false;
  std::vector<Evidence> evidence;
  std::vector<Step> steps;  // in order
  std::vector<Need> needs;
  std::vector<std::string> remaining;  // what still differs from the desired state after the plan
  std::vector<Step> conflict;          // no safe order: the smallest set of steps no order carries out together
  std::string problem;                 // non-empty: no plan (consumers disagree, no safe order)
  [[nodiscard]] bool ok() const { return problem.empty(); }
};

[[nodiscard]] FixPlan plan_fix(const Environment& env, const Knowledge& k, const FixOptions& options);

// The dists plan_fix would install or reinstall, whatever wheels are at hand (normalised names):
// the only wheels worth reading for it.
[[nodiscard]] std::set<std::string> wheels_wanted(const Environment& env, const Knowledge& k,
                                                  const FixOptions& options);

// Steps carried out again on the model of `env` as it is now, in their order, exactly as
// plan_fix judges them: each step's deletes, keeps and writes computed afresh, and its `ok` and
// `worse` from the simulation of it after every step before it. `apply` replays a saved plan
// this way before it writes anything: each step names its dist by index, and an install or
// reinstall its wheel by the Wheel read from the very file it will install.
[[nodiscard]] std::vector<Step> replay_steps(const Environment& env, const Knowledge& k, std::vector<Step> steps,
                                             std::optional<int> target, unsigned threads = 0);

// Steps carried out on the model of `env` in their order, as replay_steps carries them out (each
// one's deletes, keeps and writes filled in), and the environment they leave together, simulated
// once: how `sync` (resolver/plan/sync.hpp) judges a prefix of its steps.
[[nodiscard]] Environment simulate_steps(const Environment& env, const Knowledge& k, std::vector<Step>& steps,
                                         unsigned threads = 0);

// What a step's breaks are, one clause each: "torch/lib/libtorch_cuda.so libcudnn.so.9: ...".
[[nodiscard]] std::string describe_breaks(const Environment& env, const std::vector<Break>& worse);

// What `apply` checks before it changes anything: the dist-info set, each RECORD's bytes, and
// the identity of every file the plan touches.
struct FileStamp {
  std::string path;
  bool exists = false;
  std::uint64_t dev = 0, ino = 0, size = 0;
  std::int64_t mtime_ns = 0;
};
struct Fingerprint {
  std::vector<std::pair<std::string, std::string>> records;  // (dist-info folder, RECORD's SHA-256)
  std::vector<FileStamp> files;                              // sorted by path
  std::string digest;                                        // SHA-256 over all of the above
};
[[nodiscard]] Fingerprint fingerprint_of(const Environment& env, const FixPlan& plan);
// The digest of `fp`'s records and files (SHA-256 over each field, each ended by a NUL).
[[nodiscard]] std::string digest_of(const Fingerprint& fp);

}  // namespace cudafix::resolver::inline plan
