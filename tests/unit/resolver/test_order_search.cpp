// The order search against exhaustive enumeration: on random small cases, it finds an order
// exactly when some permutation of the steps has every prefix safe, and what it returns is one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "resolver/plan/order_search.hpp"

namespace cudafix::resolver {
namespace {

std::uint64_t set_of(const std::vector<std::size_t>& steps) {
  std::uint64_t s = 0;
  for (auto i : steps) s |= std::uint64_t{1} << i;
  return s;
}

bool every_prefix_safe(const std::vector<std::size_t>& order, const std::vector<bool>& safe_set) {
  std::uint64_t s = 0;
  for (auto i : order) {
    s |= std::uint64_t{1} << i;
    if (!safe_set[s]) return false;
  }
  return true;
}

bool some_permutation_works(std::size_t n, const std::vector<bool>& safe_set) {
  std::vector<std::size_t> p(n);
  std::iota(p.begin(), p.end(), std::size_t{0});
  do {
    if (every_prefix_safe(p, safe_set)) return true;
  } while (std::next_permutation(p.begin(), p.end()));
  return false;
}

TEST(OrderSearch, FindsAnOrderExactlyWhenSomePermutationHasEveryPrefixSafe) {
  std::mt19937 rng(20261201);
  std::size_t found = 0, none = 0;
  for (int round = 0; round < 3000; ++round) {
    const std::size_t n = 1 + rng() % 7;
    const double p = 0.35 + 0.6 * static_cast<double>(rng() % 1000) / 1000.0;
    std::vector<bool> safe_set(std::size_t{1} << n);
    std::bernoulli_distribution coin(p);
    for (std::size_t s = 1; s < safe_set.size(); ++s) safe_set[s] = coin(rng);
    std::size_t calls = 0;
    const auto result = search_order(n, [&](const std::vector<std::size_t>& prefix) {
      ++calls;
      return static_cast<bool>(safe_set[set_of(prefix)]);
    });
    const bool exists = some_permutation_works(n, safe_set);
    ASSERT_EQ(result.found, exists) << "round " << round << ", n " << n;
    EXPECT_FALSE(result.out_of_budget);
    EXPECT_EQ(result.judged, calls);
    EXPECT_LE(calls, safe_set.size() - 1) << "each set judged once";
    if (result.found) {
      ++found;
      ASSERT_EQ(result.order.size(), n);
      std::vector<std::size_t> sorted = result.order;
      std::sort(sorted.begin(), sorted.end());
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "every step once";
      EXPECT_TRUE(every_prefix_safe(result.order, safe_set)) << "round " << round;
    } else {
      ++none;
      EXPECT_TRUE(every_prefix_safe(result.deepest, safe_set)) << "the deepest prefix is safe too";
    }
  }
  // Both answers were exercised many times.
  EXPECT_GT(found, 500u);
  EXPECT_GT(none, 500u);
}

// The sets some order reaches with every prefix safe, by dynamic programming over all sets.
std::vector<bool> reachable_sets(std::size_t n, const std::vector<bool>& safe_set) {
  std::vector<bool> reach(std::size_t{1} << n);
  reach[0] = true;
  for (std::uint64_t s = 1; s < reach.size(); ++s) {
    if (!safe_set[s]) continue;
    for (std::size_t i = 0; i < n && !reach[s]; ++i)
      if (s & (std::uint64_t{1} << i)) reach[s] = reach[s & ~(std::uint64_t{1} << i)];
  }
  return reach;
}

// Whether no reachable set holds every step of `set`.
bool is_conflict(std::uint64_t set, const std::vector<bool>& reach) {
  for (std::uint64_t t = 0; t < reach.size(); ++t)
    if (reach[t] && (t & set) == set) return false;
  return true;
}

TEST(OrderSearch, WhenNoOrderExistsItNamesASmallestSetOfStepsThatNoOrderCarriesOutTogether) {
  std::mt19937 rng(20261202);
  std::size_t pairs = 0, singles = 0, checked = 0;
  for (int round = 0; round < 3000; ++round) {
    const std::size_t n = 2 + rng() % 6;
    const double p = 0.5 + 0.45 * static_cast<double>(rng() % 1000) / 1000.0;
    std::vector<bool> safe_set(std::size_t{1} << n);
    std::bernoulli_distribution coin(p);
    for (std::size_t s = 1; s < safe_set.size(); ++s) safe_set[s] = coin(rng);
    const auto result = search_order(
        n, [&](const std::vector<std::size_t>& prefix) { return static_cast<bool>(safe_set[set_of(prefix)]); });
    if (result.found) continue;
    ++checked;
    const auto reach = reachable_sets(n, safe_set);
    ASSERT_FALSE(result.conflict.empty()) << "round " << round;
    const std::uint64_t named = set_of(result.conflict);
    EXPECT_TRUE(is_conflict(named, reach)) << "round " << round << ": some order carries them all out";
    // No smaller set conflicts (every set is tried, up to the sizes the search tries).
    std::size_t smallest = n;
    for (std::uint64_t s = 1; s < reach.size(); ++s)
      if (is_conflict(s, reach))
        smallest = std::min<std::size_t>(smallest, static_cast<std::size_t>(__builtin_popcountll(s)));
    EXPECT_EQ(result.conflict.size(), smallest <= 4 ? smallest : n) << "round " << round;
    // Every largest set reached is reachable, and none holds the conflict.
    for (const auto& m : result.reached) EXPECT_TRUE(reach[set_of(m)]) << "round " << round;
    singles += result.conflict.size() == 1;
    pairs += result.conflict.size() == 2;
  }
  EXPECT_GT(checked, 300u);
  EXPECT_GT(singles, 50u);
  EXPECT_GT(pairs, 50u);
}

TEST(OrderSearch, ThePreferredOrderIsTriedFirstAndCostsOneJudgementAStep) {
  const auto result = search_order(6, [](const std::vector<std::size_t>&) { return true; });
  ASSERT_TRUE(result.found);
  EXPECT_EQ(result.order, (std::vector<std::size_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(result.judged, 6u);
}

// Where the greedy order fails: step 0 (say a removal) is safe on its own, but nothing can follow
// it; only 1, then 2, then 0 works. Greedy took 0 first and stopped there.
TEST(OrderSearch, BacktracksWhereTheGreedyFirstChoiceLeadsNowhere) {
  // Safe sets: {0}, {1}, {1,2}, {0,1,2}.
  const std::vector<bool> safe_set = {true, true, true, false, false, false, true, true};
  const auto result = search_order(
      3, [&](const std::vector<std::size_t>& prefix) { return static_cast<bool>(safe_set[set_of(prefix)]); });
  ASSERT_TRUE(result.found);
  EXPECT_EQ(result.order, (std::vector<std::size_t>{1, 2, 0}));
}

TEST(OrderSearch, ABudgetStopsTheSearchAndSaysSo) {
  const auto result = search_order(
      12, [](const std::vector<std::size_t>& prefix) { return prefix.size() < 11; }, 100);
  EXPECT_FALSE(result.found);
  EXPECT_TRUE(result.out_of_budget);
  EXPECT_EQ(result.judged, 100u);
}

}  // namespace
}  // namespace cudafix::resolver
