// The order of a plan's steps: one in which every prefix is safe (nothing required worse than
// before the plan), whenever such an order exists.
//
// Whether a prefix is safe is taken to depend on the set of its steps alone: each step is
// simulated on the model with every step before it, and the steps of a repair commute on disk
// (a reinstall writes its dist's files whatever was removed before it; an owner-counted removal
// keeps what kept dists list whenever it runs). The search is then a walk up the lattice of sets,
// from none to all, through safe sets only: depth first, trying the caller's order of preference
// at each level (so the greedy order, when it works, is the first one tried and costs one judgment
// a step), remembering each set judged and each set from which no order completes. It is
// complete: tests/unit/resolver/test_order_search.cpp checks it against every permutation of
// random small cases. A budget bounds the judgments (each is a simulation of the environment).
//
// When no order exists, the search has visited every safe set reachable from none, and a
// smallest conflict follows from them: a smallest set of steps that no reachable safe set holds
// all of, so that no order carries them all out, whatever else is done first or between. One step
// alone is a conflict when no safe order can ever take it; two steps are when each can be taken
// but never both (two majors' providers, say). Sets of up to four steps are tried; when none of
// them conflicts, every step is named.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace cudafix::resolver::inline plan {

struct OrderSearch {
  bool found = false;
  bool out_of_budget = false;                     // stopped before the search was complete
  std::vector<std::size_t> order;                 // found: every step, each prefix safe
  std::vector<std::size_t> deepest;               // not found: the longest safe prefix reached
  std::vector<std::size_t> conflict;              // not found, search complete: a smallest conflicting set, ascending
  std::vector<std::vector<std::size_t>> reached;  // not found: the largest safe sets reached, ascending each
  std::size_t judged = 0;                         // calls of `safe`
};

// `safe(prefix)`: whether the steps of `prefix` (its last one the step being added) leave a safe
// state. Steps are 0..n-1, preferred in that order. At most 64 steps.
[[nodiscard]] OrderSearch search_order(std::size_t n, const std::function<bool(const std::vector<std::size_t>&)>& safe,
                                       std::size_t budget = 4096);

}  // namespace cudafix::resolver::inline plan
