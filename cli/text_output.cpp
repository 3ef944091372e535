#include "cli/text_output.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "cli/printable.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/unresolved.hpp"
#include "rules/rule.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;

namespace {
std::string paint(bool on, const char* code, std::string_view s) {
  return on ? fmt::format("\033[{}m{}\033[0m", code, s) : std::string(s);
}

std::string dist_list(const r::Environment& env, const std::vector<int>& owners) {
  if (owners.empty()) return "no dist";
  std::vector<std::string> names;
  for (int i : owners) names.push_back(printable(env.dists[static_cast<std::size_t>(i)].dir_name));
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The deepest folder every path lies under, with its trailing '/' ("nvidia/nccl/"), or "".
std::string common_folder(const std::vector<std::string>& paths) {
  std::string prefix = paths.front().substr(0, paths.front().rfind('/') + 1);
  for (const auto& p : paths)
    while (!prefix.empty() && !p.starts_with(prefix)) {
      const auto slash = prefix.size() >= 2 ? prefix.rfind('/', prefix.size() - 2) : std::string::npos;
      prefix = slash == std::string::npos ? "" : prefix.substr(0, slash + 1);
    }
  return prefix;
}

// Evidence lines "PATH: WHAT" that say the same WHAT of several paths, as one line per WHAT and
// the folder those paths share: "44 paths under nvidia/nccl/include/: bytes on disk are no
// owner's". Other lines stay as they are, in their order; -v shows every line.
std::vector<std::string> grouped_evidence(const std::vector<std::string>& lines) {
  std::map<std::string, std::vector<std::string>> paths_by_what;
  for (const auto& l : lines) {
    const auto colon = l.find(": ");
    if (colon != std::string::npos && l.find('/') < colon)
      paths_by_what[l.substr(colon + 2)].push_back(l.substr(0, colon));
  }
  std::vector<std::string> out;
  std::set<std::string> said;
  for (const auto& l : lines) {
    const auto colon = l.find(": ");
    const auto it = colon == std::string::npos ? paths_by_what.end() : paths_by_what.find(l.substr(colon + 2));
    if (it == paths_by_what.end() || it->second.size() < 3) {
      out.push_back(l);
      continue;
    }
    if (!said.insert(it->first).second) continue;
    const std::string prefix = common_folder(it->second);
    out.push_back(fmt::format("{} paths {}: {}", it->second.size(),
                              prefix.empty() ? std::string("in several folders") : "under " + prefix, it->first));
  }
  return out;
}

// The paths several dists list, one line per owner set and the folder its paths share (a pair of
// CUDA 12 and 13 wheels lists dozens of the same headers and libraries): "45 paths under
// nvidia/nccl/ are listed by both ...". -v lists every path.
std::string shared_path_groups(const r::Environment& env,
                               const std::vector<std::pair<std::string, std::vector<int>>>& shared, const Style& st) {
  std::map<std::vector<int>, std::vector<std::string>> by_owners;
  std::map<std::vector<int>, std::size_t> gone_by_owners;
  for (const auto& [path, owners] : shared) {
    auto key = owners;
    std::sort(key.begin(), key.end());
    by_owners[key].push_back(shown(env, path));
    gone_by_owners[key] += env.present(path) ? 0 : 1;
  }
  std::string out;
  for (const auto& [owners, paths] : by_owners) {
    std::vector<std::string> names;
    for (int i : owners) {
      const auto& d = env.dists[static_cast<std::size_t>(i)];
      names.push_back(printable(d.metadata.name + " " + d.metadata.version));
    }
    const std::string who = (owners.size() == 2 ? "both " : "all of ") + and_list(names);
    if (paths.size() == 1) {
      out += fmt::format("  {} is listed by {}\n", paths.front(), who);
      continue;
    }
    const std::string prefix = common_folder(paths);
    const std::size_t gone = gone_by_owners[owners];
    out += fmt::format("  {} paths {} are listed by {}{}\n", paths.size(),
                       prefix.empty() ? std::string("in several folders") : "under " + prefix, who,
                       gone ? st.bad(fmt::format(" ({} gone)", gone)) : "");
  }
  return out + st.dim("  (-v lists every path)\n");
}

bool inside_env(const r::Environment& env, const std::string& path) {
  return r::is_within(path, env.layout.root_real) || env.site_of(path);
}

std::string answer(const r::Environment& env, const r::Resolution& res, const Style& st) {
  if (!res.found()) return fmt::format("{} {}", printable(res.name), st.bad("=> not found"));
  const std::string where = shown(env, *res.path);
  return fmt::format("{} => {} {}", printable(res.name), inside_env(env, *res.path) ? where : st.warn(where),
                     st.dim(reason_label(env, res)));
}

void searched_lines(const r::Environment& env, const r::Resolution& res, const std::string& indent, std::string& out) {
  for (const auto& s : res.searched) {
    std::string step(r::to_string(s.source));
    if (!s.via.empty()) step += " of " + shown(env, s.via);
    out += fmt::format("{}looked in {} [{}]: {}\n", indent, s.place.empty() ? "(system folders)" : shown(env, s.place),
                       step, s.result);
  }
}

// A library in the host's system folders (libc, libstdc++): the distribution's business.
bool in_system_folder(const r::Environment& env, const std::string& path) {
  for (const auto& dir : env.loader->config().host.default_dirs)
    if (r::is_within(r::real_path_of(path), r::real_path_of(dir))) return true;
  return false;
}

void tree_lines(const r::Environment& env, const r::NeededNode& n, const Style& st, int depth, std::string& out) {
  const bool system = n.resolution.found() && in_system_folder(env, *n.resolution.path);
  // As libtree does: system libraries below the first level, and their own trees, only with -v.
  if (system && depth > 1 && !st.verbose) return;
  out += fmt::format("{}{}{}\n", std::string(static_cast<std::size_t>(depth) * 2 + 4, ' '),
                     answer(env, n.resolution, st), n.repeated ? st.dim(" (shown above)") : "");
  if (system && !st.verbose) return;
  for (const auto& c : n.children) tree_lines(env, c, st, depth + 1, out);
}

// One ELF object of the model (-v): its path, SONAME and each NEEDED with how it resolves.
void object_lines(const r::Environment& env, const r::SharedObject& o, const Style& st, std::string& out) {
  std::string soname = "(unreadable)";
  if (o.elf.status == r::ElfReadStatus::ok)
    soname = o.elf.info.soname ? "SONAME " + printable(*o.elf.info.soname) : std::string("no SONAME");
  out += fmt::format("    {} {}\n", shown(env, o.path), st.dim(soname));
  for (const auto& res : o.resolutions) out += fmt::format("      NEEDED {}\n", answer(env, res, st));
}

// The model's dists, by name: version, the files their RECORD lists (and how many are missing),
// their ELF objects; with -v each object, its SONAME and how each of its NEEDED resolves, and
// the objects no dist lists.
std::string dists_section(const r::Environment& env, const Style& st) {
  std::vector<std::vector<const r::SharedObject*>> objects_of(env.dists.size());
  std::vector<const r::SharedObject*> unowned;
  for (const auto& o : env.objects) {
    if (o.owners.empty()) unowned.push_back(&o);
    for (int d : o.owners) objects_of[static_cast<std::size_t>(d)].push_back(&o);
  }
  std::vector<std::size_t> order(env.dists.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(env.dists[a].normalized, env.dists[a].dir_name) <
           std::tie(env.dists[b].normalized, env.dists[b].dir_name);
  });
  std::string out = fmt::format("\n{} ({})\n", st.bold("Dists"), env.dists.size());
  for (const std::size_t i : order) {
    const auto& d = env.dists[i];
    const std::size_t missing = i < env.missing.size() ? env.missing[i].size() : 0;
    out += fmt::format("  {} {}  {}{}, {}\n", printable(d.name), printable(d.version),
                       count_of(d.record.size(), "file", "files"),
                       missing ? st.bad(fmt::format(" ({} missing)", missing)) : "",
                       count_of(objects_of[i].size(), "ELF object", "ELF objects"));
    if (st.verbose)
      for (const auto* o : objects_of[i]) object_lines(env, *o, st, out);
  }
  if (!unowned.empty()) {
    out += fmt::format(
        "  {}\n", st.warn(fmt::format("{} that no dist lists", count_of(unowned.size(), "ELF object", "ELF objects"))));
    if (st.verbose)
      for (const auto* o : unowned) object_lines(env, *o, st, out);
  }
  if (!st.verbose && !env.objects.empty())
    out += st.dim("  (-v lists each dist's ELF objects, their SONAME and how each NEEDED resolves)\n");
  return out;
}

}  // namespace

std::string shown(const r::Environment& env, const std::string& path) { return printable(env.display(path)); }

std::string count_of(std::size_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string and_list(const std::vector<std::string>& names) {
  if (names.size() < 2) return names.empty() ? "" : names.front();
  return fmt::format("{} and {}", fmt::join(names.begin(), names.end() - 1, ", "), names.back());
}

std::string scope_text(const std::optional<std::vector<std::string>>& scope) {
  if (!scope) return "";
  if (scope->empty()) return ", scoped to no dist";
  std::vector<std::string> dists;
  for (std::string_view f : *scope) {
    if (f.ends_with(".dist-info")) f.remove_suffix(std::string_view(".dist-info").size());
    dists.emplace_back(f);
  }
  return fmt::format(", scoped to {}", and_list(dists));
}

std::string Style::bold(std::string_view s) const { return paint(color, "1", s); }
std::string Style::bad(std::string_view s) const { return paint(color, "1;31", s); }
std::string Style::warn(std::string_view s) const { return paint(color, "33", s); }
std::string Style::good(std::string_view s) const { return paint(color, "32", s); }
std::string Style::dim(std::string_view s) const { return paint(color, "2", s); }

std::string reason_label(const r::Environment& env, const r::Resolution& res) {
  switch (res.kind) {
    case r::ReasonKind::rpath:
      return fmt::format("[rpath of {}]", shown(env, res.via));
    case r::ReasonKind::runpath:
      return fmt::format("[runpath of {}]", shown(env, res.via));
    case r::ReasonKind::already_loaded:
      return fmt::format("[already loaded: {}]", shown(env, res.via));
    default:
      return fmt::format("[{}]", r::to_string(res.kind));
  }
}

std::string scan_text(const r::Environment& env, const r::Knowledge& knowledge, const Style& st) {
  std::string out;
  std::size_t rows = 0;
  for (const auto& d : env.dists) rows += d.record.size();
  out += fmt::format("{} {}\n", st.bold("Environment"), printable(env.layout.root));
  out += fmt::format("  Python {}, found by {}\n", env.layout.python_version.value_or("?"), env.layout.found_by);
  for (const auto& s : env.layout.sites) out += fmt::format("  {}: {}\n", r::to_string(s.root), printable(s.path));
  out += fmt::format("  {} dists, {} RECORD rows, {} files walked (__pycache__ not entered), {} ELF shared objects\n",
                     env.dists.size(), rows, env.on_disk.size(), env.objects.size());
  const auto& c = env.loader->config();
  out += fmt::format("  loader model: glibc {}, main executable {}, LD_LIBRARY_PATH {}\n", c.host.glibc_version,
                     env.main_executable.value_or("(none)"),
                     c.ld_library_path.empty() ? "(empty)" : fmt::format("{}", fmt::join(c.ld_library_path, ":")));

  out += dists_section(env, st);

  const auto shared = env.shared_paths();
  if (!shared.empty()) {
    out += fmt::format("\n{} ({})\n", st.bold("Paths listed by more than one dist"), shared.size());
    if (st.verbose) {
      for (const auto& [path, owners] : shared)
        out += fmt::format("  {}{}\n    owners: {}\n", shown(env, path), env.present(path) ? "" : st.bad(" (gone)"),
                           dist_list(env, owners));
    } else {
      out += shared_path_groups(env, shared, st);
    }
  }

  std::size_t with_missing = 0;
  for (const auto& m : env.missing) with_missing += m.empty() ? 0 : 1;
  if (with_missing) {
    out += fmt::format("\n{} ({})\n", st.bold("Dists with files missing"), with_missing);
    for (std::size_t i = 0; i < env.dists.size(); ++i) {
      const auto& m = env.missing[i];
      if (m.empty()) continue;
      out += fmt::format("  {}: {} of {} files missing, e.g. {}\n", printable(env.dists[i].dir_name), m.size(),
                         env.dists[i].record.size(), shown(env, m.front()));
    }
  }

  // Unresolved NEEDED, the unexplained first: those are what breaks at import.
  struct Miss {
    const r::SharedObject* object;
    r::UnresolvedExplanation why;
  };
  std::map<std::string, std::vector<Miss>> unexplained;
  std::map<std::string, std::map<std::string, std::vector<Miss>>> explained;  // kind -> soname
  for (const auto& o : env.objects)
    for (const auto& res : o.resolutions) {
      if (res.found()) continue;
      auto why = r::explain_unresolved(env, knowledge, o, res);
      auto& list = why.kind == r::UnresolvedKind::unexplained
                       ? unexplained[res.name]
                       : explained[std::string(r::to_string(why.kind))][res.name];
      list.push_back({&o, std::move(why)});
    }
  auto list_objects = [&](const std::vector<Miss>& objs, const char* indent) {
    const std::size_t shown_max = st.verbose ? objs.size() : std::min<std::size_t>(objs.size(), 3);
    for (std::size_t k = 0; k < shown_max; ++k)
      out +=
          fmt::format("{}{} ({})\n", indent, shown(env, objs[k].object->path), dist_list(env, objs[k].object->owners));
    if (shown_max < objs.size())
      out += fmt::format("{}... and {} more (-v lists them)\n", indent, objs.size() - shown_max);
  };
  if (!unexplained.empty()) {
    out += fmt::format("\n{} ({} sonames)\n", st.bad("NEEDED that resolve nowhere"), unexplained.size());
    for (const auto& [name, objs] : unexplained) {
      out +=
          fmt::format("  {} {}\n", st.bad(printable(name)), st.dim(fmt::format("needed by {} object(s)", objs.size())));
      list_objects(objs, "    ");
    }
    out += "  `cudafix why SONAME` shows every place the loader looked.\n";
  }
  if (!explained.empty()) {
    std::size_t n = 0;
    for (const auto& [kind, by_name] : explained) n += by_name.size();
    out += fmt::format("\n{} ({} sonames)\n", st.bold("NEEDED unresolved here, and why that is expected"), n);
    for (const auto& [kind, by_name] : explained) {
      out += fmt::format("  [{}]\n", kind);
      for (const auto& [name, objs] : by_name) {
        out += fmt::format("    {}: {}\n", printable(name), printable(objs.front().why.text, k_line_limit));
        if (st.verbose) list_objects(objs, "      ");
      }
    }
  }

  if (!env.diagnostics.empty()) {
    out += fmt::format("\n{} ({})\n", st.bold("Unreadable input"), env.diagnostics.size());
    for (const auto& d : env.diagnostics) out += fmt::format("  {}\n", printable(d.to_string(), k_line_limit));
  }
  return out;
}

namespace {

// "  dlopened by:" lines: each front end, how its dlopen resolves the soname, and whether that is
// its own dist's build.
void dlopened_by_lines(const r::Environment& env, const r::WhyReport& rep, const Style& st, std::string& out) {
  if (rep.dlopened_by.empty()) return;
  out += "  dlopened by (knowledge):\n";
  for (const auto& m : rep.dlopened_by) {
    out += fmt::format("    {} [{}]\n", r::describe_front(env, m), m.dlopen.group);
    const std::string place = r::describe_place(env, m);
    if (!m.dlopen.knowledge->same_dist || !m.split())
      out += fmt::format("      {}\n", m.dlopen.resolution.found() ? answer(env, m.dlopen.resolution, st)
                                                                   : st.bad("resolves nowhere"));
    else
      out += fmt::format(
          "      {}\n",
          st.bad(fmt::format("resolves to {}, not to its own dist's build{}", place,
                             r::runtime_error_of(m).empty() ? std::string() : ": " + r::runtime_error_of(m))));
    if (!m.dlopen.resolution.found()) searched_lines(env, m.dlopen.resolution, "        ", out);
  }
}

std::string needed_by_header(const r::WhyReport& rep) {
  if (!rep.consumers.empty()) return "  needed by:\n";
  return rep.dlopened_by.empty() ? "  needed by: nothing in the environment\n"
                                 : "  needed by: no DT_NEEDED names it; it is dlopened\n";
}

void required_by_lines(const r::Environment& env, const r::WhyReport& rep, std::string& out) {
  if (rep.required_by.empty()) return;
  out += "  required by:\n";
  for (const auto& n : rep.required_by) out += fmt::format("    {}\n", printable(n.why, k_line_limit));
  (void)env;
}

}  // namespace

std::string why_text(const r::Environment& env, const r::Knowledge& knowledge, const r::WhyReport& rep,
                     const Style& st) {
  std::string out;
  if (rep.subject) {
    const auto& so = *rep.subject;
    out += fmt::format("{} {}\n", st.bold(shown(env, so.path)), st.dim(fmt::format("({})", dist_list(env, so.owners))));
    if (so.elf.status == r::ElfReadStatus::ok) {
      const auto& e = so.elf.info;
      out += fmt::format("  SONAME {}, ELF{} {}\n", e.soname.value_or("(none)"), e.elf_class == 1 ? 32 : 64,
                         r::machine_name(e.machine));
      if (e.rpath) out += fmt::format("  RPATH {}{}\n", *e.rpath, e.runpath ? " (ignored: RUNPATH is set)" : "");
      if (e.runpath) out += fmt::format("  RUNPATH {}\n", *e.runpath);
      if (!so.context.empty()) out += fmt::format("  loaded by the model in: {}\n", so.context);
    }
    out += needed_by_header(rep);
    for (const auto& c : rep.consumers)
      out +=
          fmt::format("    {} ({}) {}\n", shown(env, c.object->path), dist_list(env, c.object->owners),
                      c.resolution.found() ? reason_label(env, c.resolution) : st.bad("resolves elsewhere or nowhere"));
    dlopened_by_lines(env, rep, st, out);
    required_by_lines(env, rep, out);
    if (rep.tree) {
      out += "  NEEDED tree:\n";
      // The object asked about is the tree's top (depth 0); its NEEDED are depth 1.
      for (const auto& child : rep.tree->children) tree_lines(env, child, st, 1, out);
    }
    return out;
  }

  out += fmt::format("{}\n", st.bold(printable(rep.query)));
  out += fmt::format("  provided in the environment by:{}\n", rep.providers.empty() ? " " + st.warn("nothing") : "");
  for (const auto* p : rep.providers)
    out += fmt::format("    {} ({})\n", shown(env, p->path), dist_list(env, p->owners));
  out += needed_by_header(rep);
  for (const auto& c : rep.consumers) {
    out += fmt::format("    {} ({})\n", shown(env, c.object->path), dist_list(env, c.object->owners));
    out += fmt::format("      {}\n", answer(env, c.resolution, st));
    if (!c.resolution.found()) {
      out += fmt::format("      {}\n",
                         printable(r::explain_unresolved(env, knowledge, *c.object, c.resolution).text, k_line_limit));
      searched_lines(env, c.resolution, "        ", out);
    }
    if (c.fallback)
      out += fmt::format("      if that file disappeared: {}\n",
                         c.fallback->found() ? answer(env, *c.fallback, st) : st.bad("nothing would provide it"));
  }
  dlopened_by_lines(env, rep, st, out);
  required_by_lines(env, rep, out);
  if (rep.standalone) {
    out += fmt::format("  dlopen(\"{}\") from Python: {}\n", printable(rep.query), answer(env, *rep.standalone, st));
    if (!rep.standalone->found() || st.verbose) searched_lines(env, *rep.standalone, "    ", out);
  }
  if (rep.tree) {
    out += "  NEEDED tree:\n";
    tree_lines(env, *rep.tree, st, 0, out);
  }
  std::vector<std::string> outside;
  for (const auto& c : rep.consumers)
    if (c.resolution.found() && !inside_env(env, *c.resolution.path)) outside.push_back(shown(env, *c.resolution.path));
  if (rep.standalone && rep.standalone->found() && !inside_env(env, *rep.standalone->path))
    outside.push_back(shown(env, *rep.standalone->path));
  bool split = false;
  for (const auto& m : rep.dlopened_by) {
    if (m.dlopen.resolution.found() && !inside_env(env, *m.dlopen.resolution.path))
      outside.push_back(shown(env, *m.dlopen.resolution.path));
    split |= m.dlopen.knowledge->same_dist && m.split() && m.dlopen.resolution.found();
  }
  std::sort(outside.begin(), outside.end());
  outside.erase(std::unique(outside.begin(), outside.end()), outside.end());
  if (!rep.resolves)
    out += st.bad("  does not resolve\n");
  else if (split)
    out += st.bad("  resolves, but not to its front end's own build (cudafix doctor --select foreign-sublibrary)\n");
  else if (!rep.resolves)
    out += st.bad("  does not resolve\n");
  else if (!outside.empty())
    out += st.warn(fmt::format("  resolves, but outside the environment: {}\n", fmt::join(outside, ", ")));
  else
    out += st.good("  resolves\n");
  return out;
}

namespace {

std::string outcome_headline(const installer::probe::VerifyReport& rep, const Style& st) {
  namespace p = installer::probe;
  switch (rep.verdict.outcome) {
    case p::Outcome::ok:
      return st.good("ok");
    case p::Outcome::no_driver:
      return st.bad("no driver");
    default:
      return st.bad(fmt::format("failed ({})", p::to_string(rep.verdict.outcome)));
  }
}

std::string stage_line(const installer::probe::StageRecord& s, bool timed_out, const Style& st) {
  namespace p = installer::probe;
  const std::string status = !s.ended ? st.bad(timed_out ? "hung " : "died ")
                             : s.ok   ? st.good("ok   ")
                                      : st.bad("FAIL ");
  std::string line =
      fmt::format("  {} {:>9}  {}", status, s.ended ? fmt::format("{:.1f} ms", s.ms) : "-", p::stage_label(s));
  if (s.code && *s.code != 0) line += fmt::format(": {} {}", *s.code, p::code_name(s).value_or("(unknown code)"));
  if (!s.ended) line += ": began and never returned";
  if (!s.detail.empty() && s.stage != "cuInit") line += st.dim(fmt::format("  {}", printable(s.detail, k_line_limit)));
  return line + "\n";
}

}  // namespace

namespace {

// verify under -q: the verdict, then only what failed (the stages, the checks, the likely causes).
std::string verify_errors_text(const installer::probe::VerifyReport& rep, const Style& st) {
  namespace p = installer::probe;
  if (rep.verdict.outcome == p::Outcome::ok) return "";
  std::string out = fmt::format("{} {}: {}\n", st.bold("cudafix verify"), outcome_headline(rep, st),
                                printable(rep.verdict.message, k_line_limit));
  for (const auto& s : rep.records.stages)
    if (!s.ended || !s.ok) out += stage_line(s, rep.run.timed_out, st);
  for (const auto& c : rep.checks)
    if (!c.ok) out += fmt::format("  {} {}: {}\n", st.bad("FAIL"), c.check, printable(c.detail, k_line_limit));
  for (const auto& e : rep.diagnosis)
    if (e.likely) out += fmt::format("  {} {}\n", st.bad("likely:"), e.cause);
  return out;
}

}  // namespace

std::string verify_text(const r::Environment& env, const installer::probe::VerifyReport& rep, const Style& st) {
  namespace p = installer::probe;
  if (st.quiet) return verify_errors_text(rep, st);
  std::string out = fmt::format("{} {}: {}\n", st.bold("cudafix verify"), outcome_headline(rep, st),
                                printable(rep.verdict.message, k_line_limit));
  if (rep.libcuda)
    out +=
        fmt::format("  driver    {}{}{}\n", printable(*rep.libcuda),
                    rep.libcuda_real && *rep.libcuda_real != *rep.libcuda ? " -> " + printable(*rep.libcuda_real) : "",
                    rep.driver_version ? fmt::format(", CUDA {}", p::cuda_version_text(*rep.driver_version)) : "");
  if (rep.visible_devices) out += fmt::format("  visible   CUDA_VISIBLE_DEVICES={}\n", printable(*rep.visible_devices));
  for (const auto& d : rep.records.devices) {
    const auto failed = p::failed_stage_of(rep.records, d.ordinal);
    out += fmt::format("  device {}  {}, compute capability {}{}{}  {}\n", d.ordinal, printable(d.name),
                       d.compute_capability, d.uuid.empty() ? "" : ", " + d.uuid, d.pci.empty() ? "" : ", PCI " + d.pci,
                       failed ? st.bad("FAILED at " + p::stage_label(*failed)) : st.good("ok"));
  }
  if (rep.consumer) out += fmt::format("  consumer  {}\n", shown(env, *rep.consumer));
  if (rep.cudnn_version) out += fmt::format("  cuDNN     {}\n", *rep.cudnn_version);
  if (rep.nccl)
    out += fmt::format("  NCCL      {}{}\n", shown(env, *rep.nccl),
                       rep.nccl_version ? fmt::format(", version {}", *rep.nccl_version) : "");
  out += st.bold("stages") + "\n";
  for (const auto& s : rep.records.stages) out += stage_line(s, rep.run.timed_out, st);
  for (const auto& s : rep.skipped) out += fmt::format("  {} {:>9}  {}: {}\n", st.dim("skip "), "-", s.stage, s.why);
  if (!rep.checks.empty()) {
    out += st.bold("checks") + "\n";
    for (const auto& c : rep.checks) {
      out += fmt::format("  {} {}: {}\n", c.ok ? st.good("ok  ") : st.bad("FAIL"), c.check,
                         printable(c.detail, k_line_limit));
      if (!c.ok && !c.expected.empty())
        out += fmt::format("       expected {}\n       found    {}\n", printable(c.expected, k_line_limit),
                           printable(c.found, k_line_limit));
    }
  }
  std::string family;
  for (const auto& f : rep.loaded)
    if (f.family && !f.path && !f.model.empty())
      family += fmt::format(
          "  {:<40} {}\n", f.soname,
          st.bad("not in the process; the model resolves it to " + f.model + ", not its front end's own build"));
    else if (f.family && f.path)
      family += fmt::format("  {:<40} {} ({})\n", f.soname, shown(env, r::real_path_of(*f.path)),
                            f.dist.empty() ? (f.version.empty() ? "no dist, release unknown"
                                                                : "outside the environment, release " + f.version)
                                           : f.dist + " " + f.version);
  if (!family.empty()) out += st.bold("loaded from the cuDNN family (what the loader really mapped)") + "\n" + family;
  std::string files;
  for (const auto& f : rep.loaded) {
    if (!st.verbose && (!f.predicted || f.match)) continue;
    files += fmt::format("  {} {} {}{}\n",
                         !f.predicted ? st.dim("    ")
                         : f.match    ? st.good("same")
                                      : st.bad("DIFF"),
                         f.soname, f.path ? shown(env, r::real_path_of(*f.path)) : "(not loaded)",
                         f.predicted && !f.match ? fmt::format(", predicted {}", shown(env, *f.predicted)) : "");
  }
  if (!files.empty()) out += st.bold("loaded files") + "\n" + files;
  if (!rep.diagnosis.empty()) {
    out += st.bold("diagnosis") + "\n";
    for (const auto& e : rep.diagnosis)
      out += fmt::format("  {} {}\n      {}: {}\n", e.likely ? st.bad("likely:  ") : st.dim("unlikely:"), e.cause,
                         e.check, printable(e.result, k_line_limit));
  }
  for (const auto& w : rep.verdict.warnings) out += fmt::format("{} {}\n", st.warn("warning:"), w);
  if (!rep.run.errors.empty() && (st.verbose || rep.verdict.outcome != p::Outcome::ok))
    out += st.bold("probe stderr (last lines)") + "\n" + printable_lines(rep.run.errors) + "\n";
  return out;
}

namespace {

std::string severity_label(rules::Severity s, const Style& st) {
  switch (s) {
    case rules::Severity::error:
      return st.bad("error");
    case rules::Severity::warning:
      return st.warn("warning");
    case rules::Severity::info:
      return st.dim("info");
  }
  return "";
}

// The next command doctor's text shows under a root finding: its remedy's.
std::string remedy_command(const rules::Finding& f) { return f.remedy ? f.remedy->command : ""; }

// `explained`: the rules whose pointer to `cudafix explain` was printed already (once a rule);
// `next`: the command shown under a root finding ("" shows none).
void finding_lines(const rules::DoctorReport& rep, const rules::Finding& f,
                   const std::map<int, std::vector<const rules::Finding*>>& effects, const Style& st, int depth,
                   const std::function<std::string(const rules::Finding&)>& next, std::set<std::string>& explained,
                   std::string& out) {
  const std::string indent(static_cast<std::size_t>(depth) * 4, ' ');
  out += fmt::format("{}{}{}[{}] #{} {}\n", indent, depth ? "└ " : "", severity_label(f.severity, st), f.rule, f.id,
                     printable(f.message, k_line_limit));
  const bool details = f.severity != rules::Severity::info || st.verbose;
  if (details) {
    const auto evidence = st.verbose ? f.evidence : grouped_evidence(f.evidence);
    const std::size_t limit = st.verbose ? evidence.size() : std::min<std::size_t>(evidence.size(), 6);
    for (std::size_t i = 0; i < limit; ++i)
      out += fmt::format("{}      {}\n", indent, printable(evidence[i], k_line_limit));
    if (limit < evidence.size())
      out += st.dim(fmt::format("{}      ... {} more (-v)\n", indent, evidence.size() - limit));
  }
  if (auto it = effects.find(f.id); it != effects.end())
    for (const auto* e : it->second) finding_lines(rep, *e, effects, st, depth + 1, next, explained, out);
  if (const std::string command = details && depth == 0 ? next(f) : ""; !command.empty())
    out += fmt::format("{}    {} {}\n", indent, st.bold("next:"), printable(command, k_line_limit));
  if (!st.quiet && explained.insert(f.rule).second)
    out += st.dim(fmt::format("{}    see: cudafix explain {}\n", indent, f.rule));
}

// Root causes first (most severe first), each with the findings it causes nested under it; how
// many findings (info) were not shown.
std::size_t findings_lines(const rules::DoctorReport& rep, const Style& st,
                           const std::function<std::string(const rules::Finding&)>& next, std::string& out) {
  std::map<int, std::vector<const rules::Finding*>> effects;
  for (const auto& f : rep.findings)
    for (int cause : f.caused_by) effects[cause].push_back(&f);
  std::size_t infos_hidden = 0;
  std::set<std::string> explained;
  for (const auto& f : rep.findings) {
    if (!f.caused_by.empty()) continue;
    if (f.severity == rules::Severity::info && !st.verbose) {
      ++infos_hidden;
      continue;
    }
    out += "\n";
    finding_lines(rep, f, effects, st, 0, next, explained, out);
  }
  return infos_hidden;
}

}  // namespace

namespace {

// The error findings alone, each a root where what caused it is not an error (-q).
rules::DoctorReport errors_only(const rules::DoctorReport& rep) {
  rules::DoctorReport out = rep;
  std::erase_if(out.findings, [](const rules::Finding& f) { return f.severity != rules::Severity::error; });
  std::set<int> kept;
  for (const auto& f : out.findings) kept.insert(f.id);
  for (auto& f : out.findings) std::erase_if(f.caused_by, [&](int cause) { return !kept.count(cause); });
  return out;
}

}  // namespace

std::string doctor_text(const r::Environment& env, const rules::DoctorReport& rep, const Style& st) {
  if (st.quiet) {  // the errors, with their evidence and next step; no header, warning or footer
    std::string out;
    findings_lines(errors_only(rep), st, remedy_command, out);
    return out.empty() ? out : out.substr(1);  // no blank line before the first
  }
  std::string out = fmt::format("{} {}: {} error{}, {} warning{}, {} explained (info)\n", st.bold("cudafix doctor"),
                                shown(env, env.layout.root), rep.errors, rep.errors == 1 ? "" : "s", rep.warnings,
                                rep.warnings == 1 ? "" : "s", rep.infos);
  if (env.layout.externally_managed && (rep.errors || rep.warnings))
    out += st.dim(
        fmt::format("{} is externally managed ({}, PEP 668): the system's own packages are repaired by its package "
                    "manager, the rest in a venv that sees them; pip changes it only with --break-system-packages\n",
                    shown(env, env.layout.root), shown(env, *env.layout.externally_managed)));
  if (rep.hashed_files)
    out += fmt::format("hashed {} files ({:.2f} GB) against their RECORD\n", rep.hashed_files,
                       static_cast<double>(rep.hashed_bytes) / 1e9);
  const std::size_t infos_hidden = findings_lines(rep, st, remedy_command, out);
  if (infos_hidden)
    out += st.dim(fmt::format("\n{} explained findings (info) not shown; -v shows them\n", infos_hidden));
  if (rep.errors == 0 && rep.warnings == 0) out += st.good("\nno problems found\n");
  return out;
}

std::string findings_left_text(const rules::DoctorReport& report, const NextStep& next, const Style& st) {
  // Errors and warnings only, as write_findings_left writes them, -v or not.
  rules::DoctorReport left = report;
  std::erase_if(left.findings, [](const rules::Finding& f) { return f.severity == rules::Severity::info; });
  std::string out;
  findings_lines(left, st, next, out);
  return out;
}

std::string rules_text(const std::map<std::string, rules::RuleSettings>& settings, const Style& st) {
  std::string out = fmt::format("{:<24} {:<8} {:<12} {:<6} {}\n", "rule", "default", "configured", "scans", "finds");
  for (const auto* rule : rules::registry()) {
    std::string configured = "-";
    if (auto it = settings.find(std::string(rule->id)); it != settings.end()) {
      if (!it->second.enabled)
        configured = "off";
      else if (it->second.severity)
        configured = std::string(rules::to_string(*it->second.severity));
    }
    out += fmt::format("{:<24} {:<8} {:<12} {:<6} {}\n", st.bold(rule->id), rules::to_string(rule->severity),
                       configured, rules::to_string(rule->depth), rule->summary);
  }
  out += st.dim("\ncudafix explain RULE prints a rule's document; [rules.RULE] in cudafix.toml configures it\n");
  return out;
}

}  // namespace cudafix::cli
