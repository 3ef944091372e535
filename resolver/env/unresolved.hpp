// Why a NEEDED that resolves nowhere in the process model may still be fine, or is not.
#pragma once

#include <string>
#include <vector>

#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"

namespace cudafix::resolver::inline env {

enum class UnresolvedKind {
  driver_library,     // the NVIDIA driver provides it on a GPU host
  loaded_by_sibling,  // a plugin: the library beside it, which loads it, provides the soname
  earlier_import,     // another dist's library provides it once that dist is imported first
  optional_library,   // a transport or feature that is loaded only when used
  stale_build_path,   // only a build machine's RPATH/RUNPATH folder could have provided it
  unexplained,
};
[[nodiscard]] std::string_view to_string(UnresolvedKind kind);

struct UnresolvedExplanation {
  UnresolvedKind kind = UnresolvedKind::unexplained;
  std::string text;                     // one sentence for people
  std::vector<std::string> providers;   // in-environment objects with that soname
  std::vector<std::string> stale_dirs;  // RPATH/RUNPATH folders that do not exist here
};

[[nodiscard]] UnresolvedExplanation explain_unresolved(const Environment& env, const Knowledge& knowledge,
                                                       const SharedObject& consumer, const Resolution& resolution);

}  // namespace cudafix::resolver::inline env
