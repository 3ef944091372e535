#include "resolver/plan/order_search.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "resolver/base/diagnostic.hpp"

namespace cudafix::resolver::inline plan {
namespace {

class Search {
 public:
  Search(std::size_t n, const std::function<bool(const std::vector<std::size_t>&)>& safe, std::size_t budget)
      : n_(n), safe_(safe), budget_(budget), full_(n == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n) - 1) {}

  OrderSearch run() {
    found_ = walk(0);
    result_.found = found_;
    if (found_) {
      result_.order = path_;
    } else {
      const auto largest = largest_reached();
      for (auto set : largest) result_.reached.push_back(steps_of(set));
      if (!result_.out_of_budget) result_.conflict = steps_of(smallest_conflict(largest));
    }
    return std::move(result_);
  }

 private:
  bool judged_safe(std::uint64_t set) {
    if (const auto it = safe_of_.find(set); it != safe_of_.end()) return it->second;
    if (result_.judged >= budget_) {
      result_.out_of_budget = true;
      return false;
    }
    ++result_.judged;
    const bool ok = safe_(path_);
    safe_of_.emplace(set, ok);
    return ok;
  }

  bool walk(std::uint64_t set) {
    if (set == full_) return true;
    for (std::size_t i = 0; i < n_; ++i) {
      const std::uint64_t bit = std::uint64_t{1} << i;
      if (set & bit) continue;
      const std::uint64_t next = set | bit;
      if (dead_.count(next)) continue;
      path_.push_back(i);
      if (judged_safe(next)) {
        if (path_.size() > result_.deepest.size()) result_.deepest = path_;
        if (walk(next)) return true;
      }
      path_.pop_back();
      if (result_.out_of_budget) return false;
    }
    dead_.insert(set);
    return false;
  }

  static std::vector<std::size_t> steps_of(std::uint64_t set) {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < 64; ++i)
      if (set & (std::uint64_t{1} << i)) out.push_back(i);
    return out;
  }

  // The safe sets the walk reached that no other reached set contains. The empty set is reached
  // by definition.
  [[nodiscard]] std::vector<std::uint64_t> largest_reached() const {
    std::vector<std::uint64_t> reached{0};
    for (const auto& [set, ok] : safe_of_)
      if (ok) reached.push_back(set);
    std::vector<std::uint64_t> out;
    for (auto a : reached) {
      const bool inside =
          std::any_of(reached.begin(), reached.end(), [&](std::uint64_t b) { return b != a && (a & b) == a; });
      if (!inside) out.push_back(a);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // The first set of fewest steps, in the order of preference, that none of `largest` holds.
  // The whole set is one (no order was found), so the search ends.
  [[nodiscard]] std::uint64_t smallest_conflict(const std::vector<std::uint64_t>& largest) const {
    const auto conflicts = [&](std::uint64_t set) {
      return std::none_of(largest.begin(), largest.end(), [&](std::uint64_t m) { return (set & m) == set; });
    };
    for (std::size_t size = 1; size < n_ && size <= k_widest_conflict_; ++size) {
      std::vector<std::size_t> pick(size);
      std::iota(pick.begin(), pick.end(), std::size_t{0});
      while (true) {
        std::uint64_t set = 0;
        for (auto i : pick) set |= std::uint64_t{1} << i;
        if (conflicts(set)) return set;
        // The next combination in lexicographic order, or the end of this size.
        std::size_t at = size;
        while (at > 0 && pick[at - 1] == n_ - size + at - 1) --at;
        if (at == 0) break;
        ++pick[at - 1];
        for (std::size_t j = at; j < size; ++j) pick[j] = pick[j - 1] + 1;
      }
    }
    return full_;
  }

  // Past this many steps the whole set is named: combinations grow too fast to be worth it.
  static constexpr std::size_t k_widest_conflict_ = 4;

  std::size_t n_;
  const std::function<bool(const std::vector<std::size_t>&)>& safe_;
  std::size_t budget_;
  std::uint64_t full_;
  std::vector<std::size_t> path_;
  std::unordered_map<std::uint64_t, bool> safe_of_;
  std::unordered_set<std::uint64_t> dead_;
  OrderSearch result_;
  bool found_ = false;
};

}  // namespace

OrderSearch search_order(std::size_t n, const std::function<bool(const std::vector<std::size_t>&)>& safe,
                         std::size_t budget) {
  if (n > 64) throw Error("a plan of more than 64 candidate steps cannot be ordered");
  return Search(n, safe, budget).run();
}

}  // namespace cudafix::resolver::inline plan
