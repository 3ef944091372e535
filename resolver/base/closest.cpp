#include "resolver/base/closest.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

namespace cudafix::resolver::inline base {

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
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
    if (out.size() < at_most && distance <= std::max<std::size_t>(3, name->size() / 3) &&
        std::find(out.begin(), out.end(), *name) == out.end())
      out.push_back(*name);
  return out;
}

}  // namespace cudafix::resolver::inline base
