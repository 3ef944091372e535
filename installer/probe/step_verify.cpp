#include "installer/probe/step_verify.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer::probe {
namespace r = cudafix::resolver;

namespace {

constexpr const char* k_open_stage = "dlopen library";

// The consumer's tree as the model maps it, and what its loaders dlopen: the libraries of it
// the environment holds, in load order (the consumer first).
struct Tree {
  std::vector<std::string> libraries;
  std::optional<std::string> missing;           // the first library of the consumer's own tree that resolves nowhere
  std::optional<std::string> cudnn;             // the libcudnn it resolves (inside the environment or not)
  std::set<std::string> cudnn_family;           // libraries reached through cuDNN's dlopens
  std::set<std::string> unresolved;             // what the tree NEEDs or dlopens that resolves nowhere
  std::map<std::string, std::string> resolved;  // soname -> the realpath it resolves to, inside or not
};

bool inside(const r::Environment& env, const std::string& real) { return env.site_of(real) != nullptr; }

std::optional<std::string> first_missing(const r::Environment& env, const r::Process& p, std::size_t from,
                                         std::string* soname = nullptr) {
  for (std::size_t i = from; i < p.objects.size(); ++i)
    for (const auto& res : p.objects[i].needed)
      if (!res.found()) {
        if (soname) *soname = res.name;
        return fmt::format("{}, NEEDed by {},", res.name, env.display(p.objects[i].real));
      }
  return std::nullopt;
}

// The objects mapped from `from` on that the environment holds, added to `tree` once each.
void add_libraries(const r::Environment& env, const r::Process& p, std::size_t from, Tree& tree,
                   std::set<std::string>& seen, bool through_cudnn) {
  for (std::size_t i = from; i < p.objects.size(); ++i) {
    const std::string& real = p.objects[i].real;
    for (const auto& res : p.objects[i].needed)
      if (!res.found()) tree.unresolved.insert(res.name);
    const r::ElfInfo* elf = p.objects[i].elf;
    tree.resolved.emplace(elf && elf->soname ? *elf->soname : std::string(r::base_name(real)), real);
    if (!inside(env, real) || !seen.insert(real).second) continue;
    tree.libraries.push_back(real);
    if (through_cudnn) tree.cudnn_family.insert(real);
  }
}

Tree consumer_tree(const r::Environment& env, const r::Knowledge& knowledge, Prediction& p, const std::string& consumer,
                   const std::string& cudnn_soname) {
  Tree tree;
  std::set<std::string> seen;
  p.process.begin_trial();
  const std::size_t first = p.process.objects.size();
  p.model->load(p.process, consumer);
  tree.missing = first_missing(env, p.process, first);
  if (auto it = p.process.by_name.find(cudnn_soname); it != p.process.by_name.end())
    tree.cudnn = p.process.objects[static_cast<std::size_t>(it->second)].real;
  add_libraries(env, p.process, first, tree, seen, false);
  // What the tree's loaders dlopen, and what those dlopen in turn (graph loads the engines).
  for (std::size_t k = 0; k < tree.libraries.size(); ++k) {
    const std::string loader = tree.libraries[k];
    const auto* object = env.object(loader);
    if (object == nullptr) continue;
    const bool through_cudnn = loader == tree.cudnn || tree.cudnn_family.count(loader) > 0;
    for (const auto& d : r::resolve_dlopens(env, knowledge, *object)) {
      if (!d.resolution.found()) {
        tree.unresolved.insert(d.resolution.name);
        continue;
      }
      const std::string real = r::real_path_of(*d.resolution.path);
      if (seen.count(real) > 0) continue;
      const std::size_t from = p.process.objects.size();
      p.model->load(p.process, real);
      add_libraries(env, p.process, from, tree, seen, through_cudnn);
    }
  }
  p.process.rollback();
  return tree;
}

// At most k_max_opened of the tree's libraries and `extra` (what the transaction writes), in load
// order, `extra` appended: cuDNN, the libraries it dlopens and `extra` kept first where the tree is
// larger. Returns how many were left out.
std::size_t choose_libraries(const r::Environment& env, Tree& tree, const std::vector<std::string>& extra) {
  std::vector<std::string> added;
  for (const auto& e : libraries_among(env, extra))
    if (std::find(tree.libraries.begin(), tree.libraries.end(), e) == tree.libraries.end() &&
        std::find(added.begin(), added.end(), e) == added.end())
      added.push_back(e);
  std::vector<std::string> all = tree.libraries;
  all.insert(all.end(), added.begin(), added.end());
  if (all.size() <= k_max_opened) {
    tree.libraries = std::move(all);
    return 0;
  }
  const std::set<std::string> wanted_extra(extra.begin(), extra.end());
  auto first = [&](const std::string& l) {
    return l == tree.cudnn || tree.cudnn_family.count(l) > 0 || wanted_extra.count(l) > 0;
  };
  std::set<std::string> keep;
  for (const auto& l : all)
    if (first(l) && keep.size() < k_max_opened) keep.insert(l);
  for (const auto& l : all)
    if (keep.size() < k_max_opened) keep.insert(l);
  const std::size_t left_out = all.size() - keep.size();
  std::erase_if(all, [&](const std::string& l) { return keep.count(l) == 0; });
  tree.libraries = std::move(all);
  return left_out;
}

// Whether the model says `path` opens on its own in the process as it is; kept loaded if so.
LibraryOpen predict_open(const r::Environment& env, Prediction& p, const std::string& path) {
  LibraryOpen lib;
  lib.path = path;
  const r::ElfRead& elf = p.model->elf_cache().get(path);
  if (elf.status == r::ElfReadStatus::ok && elf.info.soname) lib.soname = *elf.info.soname;
  p.process.begin_trial();
  const std::size_t first = p.process.objects.size();
  if (p.model->load(p.process, path) < 0)
    lib.missing = "it is no ELF object the loader can map";
  else
    lib.missing = first_missing(env, p.process, first, &lib.missing_soname);
  if (lib.missing) p.process.rollback();
  return lib;
}

// Why cuDNN's stages cannot run yet: cuDNN, or a library it dlopens, cannot open.
std::optional<std::string> cudnn_blocked(const r::Environment& env, const std::vector<LibraryOpen>& libraries,
                                         const Tree& tree) {
  for (const auto& lib : libraries) {
    if (!lib.missing) continue;
    if (lib.path == tree.cudnn)
      return fmt::format("{} cannot open yet: {} resolves nowhere", env.display(lib.path), *lib.missing);
    if (tree.cudnn_family.count(lib.path) > 0)
      return fmt::format("{}, which cuDNN dlopens, cannot open yet: {} resolves nowhere", env.display(lib.path),
                         *lib.missing);
  }
  return std::nullopt;
}

const StageRecord* stage_named(const ProbeRecords& records, std::string_view name) {
  for (const auto& s : records.stages)
    if (s.stage == name) return &s;
  return nullptr;
}

// The probe's records less the library opens that returned: judged on their own.
ProbeRecords without_opens(const ProbeRecords& records) {
  ProbeRecords out = records;
  std::erase_if(out.stages, [](const StageRecord& s) { return s.stage == k_open_stage && s.ended; });
  return out;
}

void read_opens(const ProbeRecords& records, std::vector<LibraryOpen>& libraries) {
  std::size_t k = 0;
  for (const auto& s : records.stages) {
    if (s.stage != k_open_stage || k >= libraries.size()) continue;
    auto& lib = libraries[k++];
    lib.opened = s.ended && s.ok;
    lib.error = !s.ended ? "the probe never returned from it" : s.ok ? "" : s.detail;
  }
  for (; k < libraries.size(); ++k) libraries[k].error = "not tried: the probe had ended";
}

void stage_problems(const ProbePoint& pt, const std::optional<std::string>& libcuda, std::vector<Problem>& out) {
  for (const auto& s : pt.records.stages) {
    if (s.stage == k_open_stage && s.ended) continue;
    if (s.ended && s.ok) continue;
    std::vector<std::string> files;
    if (s.stage.rfind("cudnn", 0) == 0 && pt.cudnn) files.push_back(*pt.cudnn);
    if (s.stage.rfind("cu", 0) == 0 && s.stage.rfind("cudnn", 0) != 0 && libcuda) files.push_back(*libcuda);
    std::string found;
    if (!s.ended)
      found = pt.verdict.message;
    else if (s.code)
      found = fmt::format("returned {} ({})", *s.code, code_name(s).value_or("an unknown code"));
    else
      found = s.detail;
    out.push_back({stage_label(s), s.code ? "returns 0" : "succeeds", found, files});
  }
  if (!pt.records.finished &&
      std::all_of(pt.records.stages.begin(), pt.records.stages.end(), [](const StageRecord& s) { return s.ended; }))
    out.push_back({"the probe", "runs to its end", pt.verdict.message, {}});
}

void open_problems(const r::Environment& env, const std::vector<LibraryOpen>& libraries, std::vector<Problem>& out) {
  for (const auto& lib : libraries) {
    const std::string check = "opens " + env.display(lib.path);
    if (!lib.missing && !lib.opened)
      out.push_back({check, "opens: every library it NEEDs resolves", "dlopen failed: " + lib.error, {lib.path}});
    else if (lib.missing && lib.opened)
      out.push_back({check,
                     fmt::format("fails: {} resolves nowhere", *lib.missing),
                     "it opened: the real loader found it",
                     {lib.path}});
  }
}

void loaded_problems(const r::Environment& env, const std::vector<LoadedFile>& loaded, std::vector<Problem>& out) {
  for (const auto& f : loaded) {
    if (!f.predicted || f.match) continue;
    std::vector<std::string> files{*f.predicted};
    if (f.path) files.push_back(r::real_path_of(*f.path));
    out.push_back({"loads " + f.soname, "from " + describe_file(env, *f.predicted),
                   f.path ? "from " + describe_file(env, *f.path) : std::string("never loaded"), files});
  }
}

bool touches(const Problem& p, const std::set<std::string>& changed) {
  for (const auto& f : p.files) {
    if (changed.count(f) > 0) return true;
    // A folder the step moved or made holds it.
    for (std::string up = r::parent_dir(f); !up.empty() && up != "/"; up = r::parent_dir(up))
      if (changed.count(up) > 0) return true;
  }
  return false;
}

// What the model resolves each soname of the tree to, and the probe loaded, inside the environment.
std::map<std::string, std::string> inside_sonames(const r::Environment& env, const ProbePoint& pt) {
  std::map<std::string, std::string> out = pt.resolved;
  for (const auto& f : pt.loaded)
    if (f.path) out.emplace(f.soname, r::real_path_of(*f.path));
  std::erase_if(out, [&](const auto& kv) { return !inside(env, kv.second); });
  return out;
}

// What opened or loaded from the environment at the baseline and does not now.
void regressions(const r::Environment& env, const ProbePoint& baseline, const ProbePoint& now,
                 const std::set<std::string>& changed, std::vector<Problem>& out) {
  for (const auto& b : baseline.libraries) {
    if (!b.opened) continue;
    const auto n = std::find_if(now.libraries.begin(), now.libraries.end(),
                                [&](const LibraryOpen& l) { return l.path == b.path; });
    if (n != now.libraries.end() && !n->opened && n->missing)
      out.push_back({"opens " + env.display(b.path),
                     "opens, as it did before the step",
                     fmt::format("it cannot: {} resolves nowhere", *n->missing),
                     {b.path}});
  }
  std::map<std::string, std::string> found = now.resolved;
  for (const auto& f : now.loaded)
    if (f.path) found.emplace(f.soname, r::real_path_of(*f.path));
  for (const auto& [soname, before] : inside_sonames(env, baseline)) {
    const auto it = found.find(soname);
    const std::string was = describe_file(env, before);
    if (it == found.end()) {
      // Asked for still (a loader whose bytes changed may ask for another name: cuDNN for CUDA 12
      // dlopens libcublasLt.so.12), and resolving nowhere.
      if (now.unresolved.count(soname) > 0)
        out.push_back({"loads " + soname,
                       fmt::format("from {}, or another file of the environment", was),
                       "it resolves nowhere now",
                       {before}});
      continue;
    }
    if (it->second == before) continue;
    if (!inside(env, it->second))
      out.push_back({"loads " + soname,
                     fmt::format("from the environment ({}, as before the step)", was),
                     "from " + describe_file(env, it->second) + ", outside it",
                     {before, it->second}});
    else if (changed.count(before) == 0 && changed.count(it->second) == 0)
      out.push_back({"loads " + soname,
                     fmt::format("from {}, as before the step", was),
                     "from " + describe_file(env, it->second) + ", which the step did not write",
                     {before, it->second}});
  }
  const bool cudnn_passed = baseline.cudnn && baseline.cudnn_version &&
                            std::none_of(baseline.problems.begin(), baseline.problems.end(),
                                         [](const Problem& p) { return p.check.rfind("cudnn", 0) == 0; });
  if (cudnn_passed && !now.cudnn)
    out.push_back({"cuDNN",
                   "its version and a handle on every device checked, as before the step",
                   "not checked: " + now.cudnn_skipped.value_or("?"),
                   {*baseline.cudnn}});
}

}  // namespace

std::string Problem::text() const { return fmt::format("{}: expected {}, found {}", check, expected, found); }

std::vector<std::string> libraries_among(const r::Environment& env, const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    const auto* o = env.object(p);
    if (o != nullptr && !o->entry_point && o->elf.status == r::ElfReadStatus::ok) out.push_back(p);
  }
  return out;
}

std::size_t ProbePoint::opened() const {
  return static_cast<std::size_t>(
      std::count_if(libraries.begin(), libraries.end(), [](const LibraryOpen& l) { return l.opened; }));
}

ProbePoint probe_point(const r::Environment& env, const r::Knowledge& knowledge, const VerifyOptions& o,
                       const std::vector<std::string>& extra) {
  const auto t0 = std::chrono::steady_clock::now();
  ProbePoint pt;
  pt.consumer =
      o.consumer ? std::optional<std::string>(r::real_path_of(*o.consumer)) : cudnn_consumer(env, o.cudnn_soname);
  Prediction p = probe_process(env, o.probe);
  Tree tree;
  if (pt.consumer && env.object(*pt.consumer) != nullptr)
    tree = consumer_tree(env, knowledge, p, *pt.consumer, o.cudnn_soname);
  pt.consumer_missing = tree.missing;
  pt.unresolved = tree.unresolved;
  pt.resolved = tree.resolved;
  pt.left_out = choose_libraries(env, tree, extra);
  for (const auto& path : tree.libraries) {
    pt.libraries.push_back(predict_open(env, p, path));
    const std::string& lacks = pt.libraries.back().missing_soname;
    pt.libraries.back().optional = !lacks.empty() && (knowledge.optional_group(lacks) || knowledge.driver_group(lacks));
  }

  ProbeCommand cmd;
  cmd.program = o.probe;
  cmd.timeout = o.timeout;
  cmd.env = environment_with_library_path(env.loader->config().ld_library_path);
  for (const auto& lib : pt.libraries) cmd.args.insert(cmd.args.end(), {"--open", lib.path});
  if (!tree.cudnn) {
    pt.cudnn_skipped = pt.consumer
                           ? fmt::format("{} resolves nowhere for {}", o.cudnn_soname, env.display(*pt.consumer))
                           : fmt::format("no library of the environment NEEDs {}", o.cudnn_soname);
  } else if (auto why = cudnn_blocked(env, pt.libraries, tree)) {
    pt.cudnn_skipped = why;
  } else {
    const LibraryOpen self = predict_open(env, p, *tree.cudnn);
    if (self.missing) {
      pt.cudnn_skipped = fmt::format("{} cannot open: {} resolves nowhere", *tree.cudnn, *self.missing);
    } else {
      pt.cudnn = tree.cudnn;
      cmd.args.insert(cmd.args.end(), {"--cudnn", *tree.cudnn, "--cudnn-soname", o.cudnn_soname});
    }
  }

  pt.run = run_probe(cmd);
  pt.records = parse_probe_records(pt.run.output);
  const ProbeRecords judged = without_opens(pt.records);
  pt.verdict = judge(judged, pt.run);
  if (pt.verdict.stage && *pt.verdict.stage < judged.stages.size())
    pt.failed_stage = judged.stages[*pt.verdict.stage].stage;
  read_opens(pt.records, pt.libraries);
  if (const auto* s = stage_named(pt.records, "cudnnGetVersion"); s && s->ok)
    pt.cudnn_version = r::to_number<long long>(s->detail);
  pt.loaded = compare_loaded(pt.records, p, knowledge, false);

  std::optional<std::string> libcuda;
  if (const auto* s = stage_named(pt.records, "dlopen libcuda.so.1"); s && s->ok) libcuda = r::real_path_of(s->detail);
  stage_problems(pt, libcuda, pt.problems);
  open_problems(env, pt.libraries, pt.problems);
  loaded_problems(env, pt.loaded, pt.problems);
  if (pt.cudnn && pt.cudnn_version) {
    const Check c = cudnn_version_check(env, *pt.cudnn_version, *pt.cudnn, o.cudnn_soname, pt.consumer);
    if (!c.ok) pt.problems.push_back({c.check, c.expected, c.found, {*pt.cudnn}});
  }
  pt.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return pt;
}

StepJudgement judge_step(const r::Environment& env, const ProbePoint& baseline, const ProbePoint& now,
                         const std::set<std::string>& changed, bool last) {
  StepJudgement j;
  // Once no step is left to bring what they lack, the libraries the transaction wrote must open.
  if (last)
    for (const auto& lib : now.libraries)
      if (lib.missing && !lib.optional && touches({"", "", "", {lib.path}}, changed))
        j.failures.push_back({"opens " + env.display(lib.path),
                              "opens: the transaction wrote it, and no step is left",
                              fmt::format("it cannot: {} resolves nowhere", *lib.missing),
                              {lib.path}});
  for (const auto& p : now.problems) {
    const bool before = std::find(baseline.problems.begin(), baseline.problems.end(), p) != baseline.problems.end();
    (before && !touches(p, changed) ? j.excused : j.failures).push_back(p);
  }
  std::vector<Problem> worse;
  regressions(env, baseline, now, changed, worse);
  // One failure per check: a library that cannot open is said once, however many rules see it.
  for (auto& p : worse)
    if (std::none_of(j.failures.begin(), j.failures.end(), [&](const Problem& f) { return f.check == p.check; }))
      j.failures.push_back(std::move(p));
  return j;
}

}  // namespace cudafix::installer::probe
