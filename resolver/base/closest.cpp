#include "resolver/base/closest.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

namespace cudafix::resolver::inline base {

namespace {

// Levenshtein's distance with a swap of two neighbours counted as one edit ("fxi" is one from
// "fix"): the optimal string alignment distance.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> before(b.size() + 1), row(b.size() + 1), next(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    next[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      next[j] = std::min({row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        next[j] = std::min(next[j], before[j - 2] + 1);
    }
    std::swap(before, row);
    std::swap(row, next);
  }
  return row[b.size()];
}

// How far a name may be from the word and still be offered: a third of it, at least 3 edits, but
// for a short name (a command: fix, why, scan) half of it, or anything would be "close".
std::size_t offered_within(std::size_t name_size) {
  return name_size >= 6 ? std::max<std::size_t>(3, name_size / 3) : std::max<std::size_t>(1, name_size / 2);
}

}  // namespace

std::vector<std::string> closest_names(std::string_view word, const std::vector<std::string>& candidates,
                                       std::size_t at_most) {
  std::vector<std::pair<std::size_t, const std::string*>> scored;
  for (const auto& name : candidates) {
    std::size_t distance = edit_distance(word, name);
    if (!word.empty() && name.find(word) != std::string::npos) distance = std::min<std::size_t>(distance, 1);
    for (std::size_t start = 0; start < name.size();) {
      const auto dash = std::min(name.find('-', start), name.size());
      distance = std::min(distance, 1 + edit_distance(word, std::string_view(name).substr(start, dash - start)));
      start = dash + 1;
    }
    scored.emplace_back(distance, &name);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (const auto& [distance, name] : scored)
    if (out.size() < at_most && distance <= offered_within(name->size()) &&
        std::find(out.begin(), out.end(), *name) == out.end())
      out.push_back(*name);
  return out;
}

}  // namespace cudafix::resolver::inline base
