// The plan that brings an environment to exactly a lock (`cudafix sync LOCK`): a `FixPlan`, so
// that `fix`'s whole way of carrying a plan out (installer/apply: bound, replayed, staged,
// verified after each step, undone on failure) serves it unchanged.
//
// 1. What differs (sync_needs): each locked dist the environment lacks, or holds at another
//    version, is installed from the lock's wheel; one it holds at the locked version is
//    reinstalled when a file its RECORD lists is gone or holds other bytes (its size, then its
//    SHA-256, against the RECORD row: pip writes the wheel's own hashes there, so a library
//    another dist wrote over, or one edited, is found). Only those dists' wheels are needed.
// 2. The steps: those installs and reinstalls, then a removal (owner-counted) of every dist of
//    the environment's own site folders that the lock does not hold.
// 3. Refused before any write, with the plan's `problem`:
//    - two of the lock's dists writing one path with other bytes (each wheel's RECORD, or the
//      installed RECORD of a dist left as it is): both named, and the path; the cu12 and cu13
//      NVIDIA wheels that ship the same libraries are the case. The same bytes twice (the
//      `nvidia/__init__.py` every cu12 wheel ships) are no conflict;
//    - a library some object NEEDs that resolves nowhere once the plan is carried out and did
//      resolve (or did not exist) before, and that doctor cannot explain (a driver library, an
//      earlier import): the consumer and the soname named;
//    - no order of the steps (resolver/plan/order_search.hpp) in which every required library
//      that resolves before the plan still resolves somewhere after each step.
//    The lock chooses versions and CUDA majors, so a move to another provider is no break here,
//    unlike `plan fix` (sync_breaks): only a library left resolving nowhere is.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/plan/fix.hpp"
#include "resolver/plan/plan.hpp"
#include "resolver/plan/wheel.hpp"

namespace cudafix::resolver::inline plan {

struct LockedDist {
  std::string name;     // PEP 503 normalised
  std::string version;  // as the lock gives it
  // Filled by sync_needs: install or reinstall, with why; none: installed at this version, whole.
  std::optional<StepAction> action;
  std::string why;
  const Wheel* wheel = nullptr;  // the lock's wheel, read, its SHA-256 checked (for an action)
};

// Fills each locked dist's `action` and `why` from the environment as it is (file sizes and
// SHA-256 read in parallel).
void sync_needs(const Environment& env, std::vector<LockedDist>& locked, unsigned threads = 0);

// The plan; `problem` set where it is refused (above). Every dist with an action needs its wheel.
[[nodiscard]] FixPlan plan_sync(const Environment& env, const Knowledge& k, const std::vector<LockedDist>& locked,
                                unsigned threads = 0);

// Of a step's breaks (worse_resolutions), those sync refuses: a required library that resolves
// nowhere after it.
[[nodiscard]] std::vector<Break> sync_breaks(std::vector<Break> worse);

}  // namespace cudafix::resolver::inline plan
