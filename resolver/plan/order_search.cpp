#include "resolver/plan/order_search.hpp"

#include <cstdint>
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
    if (found_) result_.order = path_;
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
