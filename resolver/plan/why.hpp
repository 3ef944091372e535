// `cudafix why`: everything the model knows about one soname or one file, as a value.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/plan/consumer_needs.hpp"
#include "resolver/plan/dlopen_family.hpp"

namespace cudafix::resolver::inline plan {

struct NeededNode {
  Resolution resolution;
  std::vector<NeededNode> children;
  bool repeated = false;  // already shown higher up the tree
};

struct WhyConsumer {
  const SharedObject* object = nullptr;
  Resolution resolution;               // in the process model
  std::optional<Resolution> fallback;  // if the file it resolves to disappeared
};

struct WhyReport {
  std::string query;
  bool is_path = false;
  const SharedObject* subject = nullptr;       // PATH mode: the object asked about
  std::vector<const SharedObject*> providers;  // SONAME mode: objects with that soname or name
  std::vector<WhyConsumer> consumers;          // objects that NEED it
  std::vector<FamilyMember> dlopened_by;       // front ends whose dlopen loads it (knowledge), as they resolve it
  std::vector<ConsumerNeed> required_by;       // consumers whose requirements name a dist that provides it
  std::optional<Resolution> standalone;        // nothing NEEDs or dlopens it: how dlopen(soname) from Python resolves
  std::optional<NeededNode> tree;              // the NEEDED tree below what it resolves to
  bool resolves = false;
};

// Throws Error when a PATH names no ELF shared object of the environment.
[[nodiscard]] WhyReport explain(const Environment& env, const Knowledge& k, const std::string& query);

}  // namespace cudafix::resolver::inline plan
