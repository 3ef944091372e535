#include "resolver/env/unresolved.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline env {

std::string_view to_string(UnresolvedKind kind) {
  switch (kind) {
    case UnresolvedKind::driver_library:
      return "driver-library";
    case UnresolvedKind::loaded_by_sibling:
      return "loaded-by-sibling";
    case UnresolvedKind::earlier_import:
      return "earlier-import";
    case UnresolvedKind::optional_library:
      return "optional-library";
    case UnresolvedKind::stale_build_path:
      return "stale-build-path";
    case UnresolvedKind::unexplained:
      return "unexplained";
  }
  return "unexplained";
}

namespace {

// Absolute RPATH/RUNPATH folders of `o` that do not exist: left over from the build machine.
std::vector<std::string> stale_dirs_of(const SharedObject& o) {
  std::vector<std::string> out;
  if (o.elf.status != ElfReadStatus::ok) return out;
  for (const auto* list : {&o.elf.info.rpath, &o.elf.info.runpath}) {
    if (!*list) continue;
    for (const auto& dir : split_search_path(**list)) {
      std::error_code ec;
      if (!dir.empty() && dir.front() == '/' && !std::filesystem::exists(dir, ec)) out.push_back(dir);
    }
  }
  return out;
}

std::string owner_names(const Environment& env, const SharedObject& o) {
  if (o.owners.empty()) return "no dist";
  std::string out;
  for (int i : o.owners) out += (out.empty() ? "" : ", ") + env.dists[static_cast<std::size_t>(i)].name;
  return out;
}

}  // namespace

UnresolvedExplanation explain_unresolved(const Environment& env, const Knowledge& knowledge,
                                         const SharedObject& consumer, const Resolution& r) {
  UnresolvedExplanation e;
  e.stale_dirs = stale_dirs_of(consumer);
  const std::string stale_note =
      e.stale_dirs.empty()
          ? ""
          : fmt::format("; its search path names {}, a build machine's folder that does not exist here",
                        e.stale_dirs.front());
  if (const auto* g = knowledge.driver_group(r.name)) {
    e.kind = UnresolvedKind::driver_library;
    e.text = fmt::format(
        "{} comes with the {}, not from a wheel; on a GPU host it resolves through ld.so.cache or LD_LIBRARY_PATH",
        r.name, g->why);
    return e;
  }
  const auto providers = env.providers(r.name);
  for (const auto* p : providers) e.providers.push_back(p->path);
  const std::string folder = parent_dir(consumer.path);
  for (const auto* p : providers) {
    if (parent_dir(p->path) != folder) continue;
    e.kind = UnresolvedKind::loaded_by_sibling;
    e.text = fmt::format("a plugin: {} beside it provides {}, and is loaded before it by the library that dlopens it{}",
                         env.display(p->path), r.name, stale_note);
    return e;
  }
  if (!providers.empty()) {
    const SharedObject& p = *providers.front();
    e.kind = UnresolvedKind::earlier_import;
    e.text =
        fmt::format("satisfied only once {} ({}) is loaded by an earlier import; {} does not declare that dependency{}",
                    env.display(p.path), owner_names(env, p), owner_names(env, consumer), stale_note);
    return e;
  }
  if (const auto* g = knowledge.optional_group(r.name)) {
    e.kind = UnresolvedKind::optional_library;
    e.text =
        fmt::format("{} belongs to {}: a system library this optional plugin needs only when that feature is used{}",
                    r.name, g->why, stale_note);
    return e;
  }
  if (!e.stale_dirs.empty()) {
    e.kind = UnresolvedKind::stale_build_path;
    e.text = fmt::format("only the build machine's {} could have provided it", e.stale_dirs.front());
    return e;
  }
  e.text = fmt::format("nothing in the environment or on this host provides {}", r.name);
  return e;
}

}  // namespace cudafix::resolver::inline env
