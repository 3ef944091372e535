// "Did you mean": the names closest to a word typed wrong (a rule id, a command, a dist name).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cudafix::resolver::inline base {

// Of `candidates`, the ones closest to `word` by edit distance (a swap of two letters one edit),
// best first, at most `at_most`. A word of a dashed name typed alone ("shadowed", or misspelt:
// "shadowd") and a part of a name count as close as one typo; nothing further than a third of
// the name (at least 3 edits; half of a name shorter than 6) is offered.
[[nodiscard]] std::vector<std::string> closest_names(std::string_view word, const std::vector<std::string>& candidates,
                                                     std::size_t at_most = 3);

}  // namespace cudafix::resolver::inline base
