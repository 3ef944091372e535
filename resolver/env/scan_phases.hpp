// The phases of a scan that scan_environment and simulate both run, each in its own file:
// ownership (RECORD rows against the walk) and the process model (the simulated imports).
// Internal to resolver/env/.
#pragma once

#include <string>
#include <unordered_set>

#include "resolver/env/environment.hpp"

namespace cudafix::resolver::inline env {

// RECORD rows matched against the walk: present, missing, escaping, through a symlinked
// folder; the owners of every path. `symlinks`: the walk's symlinked folders.
void index_ownership(Environment& env, const std::unordered_set<std::string>& symlinks, unsigned threads);
// Each dist's extension modules imported in a simulated process that already imported its
// requirements, as soon as those imports ran; objects nothing imports dlopened alone.
void resolve_objects(Environment& env, unsigned threads);
// The name indexes of the objects (providers and consumers by soname), after they changed.
void index_objects(Environment& env);

}  // namespace cudafix::resolver::inline env
