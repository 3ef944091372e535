#include "cli/json_output.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "cli/json_writer.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/unresolved.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;
namespace p = cudafix::installer::probe;

namespace {

class Doc {
 public:
  Doc(const r::Environment& env, const r::Knowledge& knowledge) : env_(env), knowledge_(knowledge) {}

  JsonWriter w;

  void header(const char* command) {
    w.begin_object();
    w.key("schema").value(1);
    w.key("command").value(command);
    w.key("venv").value(env_.layout.root);
  }

  void path(const std::string& abs) {
    const r::SiteDir* s = env_.site_of(abs);
    if (!s) {
      w.value(abs);
      return;
    }
    // A view, not r::relative_to's copy: the scan document holds 20,000 paths.
    const auto rel = std::string_view(abs).substr(abs.size() == s->real.size() ? abs.size() : s->real.size() + 1);
    if (env_.layout.sites.size() == 1) {
      w.value(rel.empty() ? std::string_view(".") : rel);
    } else {
      w.begin_object().key("root").value(r::to_string(s->root)).key("path").value(rel).end_object();
    }
  }

  void path_or_null(const std::string& abs) {
    if (abs.empty())
      w.null();
    else
      path(abs);
  }

  void paths(const std::vector<std::string>& list) {
    w.begin_array();
    for (const auto& p : list) path(p);
    w.end_array();
  }

  void strings(const std::vector<std::string>& list) {
    w.begin_array();
    for (const auto& s : list) w.value(s);
    w.end_array();
  }

  void dists(const std::vector<int>& indices) {
    std::vector<std::string_view> names;
    for (int i : indices) names.push_back(env_.dists[static_cast<std::size_t>(i)].dir_name);
    std::sort(names.begin(), names.end());
    w.begin_array();
    for (auto n : names) w.value(n);
    w.end_array();
  }

  void optional_string(const std::optional<std::string>& s) {
    if (s)
      w.value(*s);
    else
      w.null();
  }

  void explanation(const r::SharedObject& consumer, const r::Resolution& res) {
    const auto e = r::explain_unresolved(env_, knowledge_, consumer, res);
    w.begin_object();
    w.key("kind").value(r::to_string(e.kind));
    w.key("text").value(e.text);
    w.key("providers");
    paths(e.providers);
    w.end_object();
  }

  // Leaves the object open when `close` is false, for the caller's own keys.
  void resolution(const r::Resolution& res, bool with_search, const r::SharedObject* consumer = nullptr,
                  bool close = true) {
    w.begin_object();
    w.key("needed").value(res.name);
    w.key("path");
    if (res.path)
      path(*res.path);
    else
      w.null();
    w.key("reason").value(r::to_string(res.kind));
    w.key("via");
    path_or_null(res.via);
    if (with_search || !res.found()) {
      w.key("searched").begin_array();
      for (const auto& s : res.searched) {
        w.begin_object();
        w.key("place");
        path(s.place);
        w.key("step").value(r::to_string(s.source));
        w.key("via");
        path_or_null(s.via);
        w.key("result").value(s.result);
        w.end_object();
      }
      w.end_array();
    }
    if (consumer && !res.found()) {
      w.key("explanation");
      explanation(*consumer, res);
    }
    if (close) w.end_object();
  }

  void object(const r::SharedObject& so) {
    w.begin_object();
    w.key("path");
    path(so.path);
    w.key("owners");
    dists(so.owners);
    if (!so.aliases.empty()) {
      w.key("aliases");
      paths(so.aliases);
    }
    if (so.elf.status != r::ElfReadStatus::ok) {
      w.key("invalid").value(so.elf.diagnostic.to_string());
      w.end_object();
      return;
    }
    const auto& e = so.elf.info;
    w.key("soname");
    optional_string(e.soname);
    w.key("class").value(e.elf_class == 1 ? 32 : 64);
    w.key("machine").value(r::machine_name(e.machine));
    w.key("needed");
    strings(e.needed);
    w.key("rpath");
    optional_string(e.rpath);
    w.key("runpath");
    optional_string(e.runpath);
    w.key("flags_1");
    strings(r::flags_1_names(e.flags_1));
    w.key("entry_point").value(so.entry_point);
    w.key("context").value(so.context);
    w.key("resolutions").begin_array();
    for (const auto& res : so.resolutions) resolution(res, false, &so);
    w.end_array();
    w.end_object();
  }

  void diagnostics() {
    w.key("diagnostics").begin_array();
    for (const auto& d : env_.diagnostics) {
      w.begin_object();
      w.key("file").value(d.file);
      w.key("line");
      if (d.line)
        w.value(static_cast<std::uint64_t>(*d.line));
      else
        w.null();
      w.key("offset");
      if (d.offset)
        w.value(static_cast<std::uint64_t>(*d.offset));
      else
        w.null();
      w.key("message").value(d.message);
      w.end_object();
    }
    w.end_array();
  }

  void loader() {
    const auto& c = env_.loader->config();
    w.key("loader").begin_object();
    w.key("ld_so").value(c.host.ld_so);
    w.key("glibc").value(c.host.glibc_version);
    w.key("platform").value(c.host.platform);
    w.key("lib").value(c.host.lib);
    w.key("default_dirs");
    strings(c.host.default_dirs);
    w.key("glibc_hwcaps");
    strings(c.host.hwcaps_subdirs);
    w.key("ld_library_path");
    strings(c.ld_library_path);
    w.key("preload");
    strings(c.preload);
    w.key("main_executable");
    optional_string(env_.main_executable);
    w.end_object();
  }

  const r::Environment& env_;
  const r::Knowledge& knowledge_;
};

}  // namespace

std::string scan_json(const r::Environment& env, const r::Knowledge& knowledge, unsigned threads) {
  Doc d(env, knowledge);
  auto& w = d.w;
  // The corpus's model is 1 MB of JSON: 1 KB a dist and 2 KB an object leave room for it.
  w.reserve(4096 + env.dists.size() * 1024 + env.objects.size() * 2048);
  d.header("scan");
  w.key("layout").begin_object();
  w.key("python");
  d.optional_string(env.layout.python_version);
  w.key("found_by").value(env.layout.found_by);
  w.key("include_system_site_packages").value(env.layout.include_system_site_packages);
  w.key("sites").begin_array();
  for (const auto& s : env.layout.sites)
    w.begin_object().key("root").value(r::to_string(s.root)).key("path").value(s.path).end_object();
  w.end_array();
  w.end_object();
  d.loader();

  std::size_t rows = 0;
  w.key("dists").begin_array();
  for (std::size_t i = 0; i < env.dists.size(); ++i) {
    const auto& dist = env.dists[i];
    rows += dist.record.size();
    w.begin_object();
    w.key("dist").value(dist.dir_name);
    w.key("name").value(dist.normalized);
    w.key("version").value(dist.version);
    w.key("root").value(r::to_string(dist.root));
    w.key("installer").value(dist.installer);
    w.key("requested").value(dist.requested);
    w.key("requires_dist");
    d.strings(dist.metadata.requires_dist);
    w.key("files").value(static_cast<std::uint64_t>(dist.record.size()));
    w.key("missing");
    d.paths(env.missing[i]);
    if (dist.direct_url) w.key("direct_url").value(*dist.direct_url);
    w.end_object();
  }
  w.end_array();

  w.key("shared_paths").begin_array();
  for (const auto& [path, owners] : env.shared_paths()) {
    w.begin_object();
    w.key("path");
    d.path(path);
    w.key("owners");
    d.dists(owners);
    w.key("on_disk").value(env.present(path));
    w.end_object();
  }
  w.end_array();

  // Each object's JSON stands alone (a third of the document's time on 16 cores when written one
  // after another): written on every core, then put in order.
  std::vector<std::string> objects(env.objects.size());
  std::atomic<std::size_t> unresolved = 0;
  std::atomic<std::size_t> unexplained = 0;
  r::parallel_for(env.objects.size(), threads, [&](std::size_t i) {
    const auto& so = env.objects[i];
    for (const auto& res : so.resolutions) {
      if (res.found()) continue;
      ++unresolved;
      unexplained += r::explain_unresolved(env, knowledge, so, res).kind == r::UnresolvedKind::unexplained;
    }
    Doc one(env, knowledge);
    one.object(so);
    objects[i] = one.w.take();
  });
  w.key("objects").begin_array();
  for (const auto& o : objects) w.raw(o);
  w.end_array();
  d.diagnostics();
  w.key("summary").begin_object();
  w.key("dists").value(static_cast<std::uint64_t>(env.dists.size()));
  w.key("record_rows").value(static_cast<std::uint64_t>(rows));
  w.key("files_walked").value(static_cast<std::uint64_t>(env.on_disk.size()));
  w.key("objects").value(static_cast<std::uint64_t>(env.objects.size()));
  w.key("unresolved_needed").value(static_cast<std::uint64_t>(unresolved.load()));
  w.key("unexplained_needed").value(static_cast<std::uint64_t>(unexplained.load()));
  w.key("diagnostics").value(static_cast<std::uint64_t>(env.diagnostics.size()));
  w.end_object();
  w.end_object();
  return w.take();
}

namespace {

void tree(Doc& d, const r::NeededNode& n) {
  auto& w = d.w;
  d.resolution(n.resolution, false, nullptr, /*close=*/false);
  w.key("repeated").value(n.repeated);
  w.key("children").begin_array();
  for (const auto& c : n.children) tree(d, c);
  w.end_array();
  w.end_object();
}

}  // namespace

std::string why_json(const r::Environment& env, const r::Knowledge& knowledge, const r::WhyReport& rep) {
  Doc d(env, knowledge);
  auto& w = d.w;
  d.header("why");
  w.key("query").value(rep.query);
  w.key("kind").value(rep.is_path ? "path" : "soname");
  w.key("resolves").value(rep.resolves);
  if (rep.subject) {
    w.key("object");
    d.object(*rep.subject);
  }
  w.key("providers").begin_array();
  for (const auto* p : rep.providers) {
    w.begin_object();
    w.key("path");
    d.path(p->path);
    w.key("owners");
    d.dists(p->owners);
    w.key("soname");
    if (p->elf.status == r::ElfReadStatus::ok)
      d.optional_string(p->elf.info.soname);
    else
      w.null();
    w.end_object();
  }
  w.end_array();
  w.key("consumers").begin_array();
  for (const auto& c : rep.consumers) {
    w.begin_object();
    w.key("consumer");
    d.path(c.object->path);
    w.key("consumer_dists");
    d.dists(c.object->owners);
    w.key("context").value(c.object->context);
    w.key("resolution");
    d.resolution(c.resolution, false, c.object);
    w.key("fallback");
    if (c.fallback)
      d.resolution(*c.fallback, false);
    else
      w.null();
    w.end_object();
  }
  w.end_array();
  w.key("standalone");
  if (rep.standalone)
    d.resolution(*rep.standalone, true);
  else
    w.null();
  w.key("tree");
  if (rep.tree)
    tree(d, *rep.tree);
  else
    w.null();
  w.end_object();
  return w.take();
}

namespace {

void optional_number(JsonWriter& w, const char* key, const std::optional<long long>& v) {
  w.key(key);
  if (v)
    w.value(static_cast<std::int64_t>(*v));
  else
    w.null();
}

void optional_string(JsonWriter& w, const char* key, const std::optional<std::string>& v) {
  w.key(key);
  if (v)
    w.value(*v);
  else
    w.null();
}

}  // namespace

std::string verify_json(const r::Environment& env, const r::Knowledge& knowledge, const p::VerifyReport& rep) {
  Doc d(env, knowledge);
  auto& w = d.w;
  d.header("verify");
  w.key("outcome").value(p::to_string(rep.verdict.outcome));
  w.key("message").value(rep.verdict.message);
  optional_string(w, "failed_stage",
                  rep.verdict.stage && rep.verdict.outcome != p::Outcome::ok
                      ? std::optional<std::string>(p::stage_label(rep.records.stages[*rep.verdict.stage]))
                      : std::nullopt);
  optional_string(w, "failed_check", rep.failed_check);
  w.key("warnings").begin_array();
  for (const auto& s : rep.verdict.warnings) w.value(s);
  w.end_array();
  optional_string(w, "libcuda", rep.libcuda);
  optional_string(w, "libcuda_real", rep.libcuda_real);
  optional_number(w, "driver_version", rep.driver_version);
  optional_number(w, "runtime_major", rep.runtime_major);
  optional_number(w, "cudnn_version", rep.cudnn_version);
  w.key("consumer");
  if (rep.consumer)
    d.path(*rep.consumer);
  else
    w.null();
  w.key("stages").begin_array();
  for (const auto& s : rep.records.stages) {
    w.begin_object().key("stage").value(s.stage).key("device");
    if (s.device)
      w.value(*s.device);
    else
      w.null();
    w.key("ok").value(s.ended && s.ok).key("returned").value(s.ended);
    w.key("ms").raw(fmt::format("{:.3f}", s.ms));
    optional_number(w, "code", s.code);
    optional_string(w, "name", p::code_name(s));
    w.key("detail").value(s.detail).end_object();
  }
  for (const auto& s : rep.skipped)
    w.begin_object().key("stage").value(s.stage).key("skipped").value(true).key("detail").value(s.why).end_object();
  w.end_array();
  w.key("devices").begin_array();
  for (const auto& dev : rep.records.devices)
    w.begin_object()
        .key("ordinal")
        .value(dev.ordinal)
        .key("name")
        .value(dev.name)
        .key("compute_capability")
        .value(dev.compute_capability)
        .key("uuid")
        .value(dev.uuid)
        .end_object();
  w.end_array();
  w.key("loaded").begin_array();
  for (const auto& f : rep.loaded) {
    w.begin_object().key("soname").value(f.soname).key("path");
    if (f.path)
      d.path(r::real_path_of(*f.path));
    else
      w.null();
    w.key("predicted");
    if (f.predicted)
      d.path(*f.predicted);
    else
      w.null();
    w.key("basis").value(f.basis).key("match");
    if (f.predicted)
      w.value(f.match);
    else
      w.null();
    w.end_object();
  }
  w.end_array();
  w.key("checks").begin_array();
  for (const auto& c : rep.checks)
    w.begin_object().key("check").value(c.check).key("ok").value(c.ok).key("detail").value(c.detail).end_object();
  w.end_array();
  w.key("diagnosis").begin_array();
  for (const auto& e : rep.diagnosis)
    w.begin_object()
        .key("cause")
        .value(e.cause)
        .key("check")
        .value(e.check)
        .key("result")
        .value(e.result)
        .key("likely")
        .value(e.likely)
        .end_object();
  w.end_array();
  w.key("probe").begin_object();
  w.key("ms").raw(fmt::format("{:.1f}", rep.run.ms));
  w.key("timed_out").value(rep.run.timed_out).key("reaped").value(rep.run.reaped);
  optional_number(w, "exit_code", rep.run.exit_code ? std::optional<long long>(*rep.run.exit_code) : std::nullopt);
  optional_string(w, "signal",
                  rep.run.signal ? std::optional<std::string>(p::signal_name(*rep.run.signal)) : std::nullopt);
  w.key("stderr").value(rep.run.errors);
  w.end_object();
  w.end_object();
  return w.take();
}

std::string doctor_json(const r::Environment& env, const r::Knowledge& knowledge, const rules::DoctorReport& rep) {
  Doc d(env, knowledge);
  auto& w = d.w;
  d.header("doctor");
  w.key("findings").begin_array();
  for (const auto& f : rep.findings) {
    w.begin_object()
        .key("id")
        .value(f.id)
        .key("rule")
        .value(f.rule)
        .key("severity")
        .value(rules::to_string(f.severity));
    w.key("message").value(f.message);
    w.key("evidence").begin_array();
    for (const auto& e : f.evidence) w.value(e);
    w.end_array().key("dists").begin_array();
    for (const auto& x : f.dists) w.value(x);
    w.end_array().key("paths").begin_array();
    for (const auto& x : f.paths) d.path(x);
    w.end_array().key("sonames").begin_array();
    for (const auto& x : f.sonames) w.value(x);
    w.end_array().key("caused_by").begin_array();
    for (int x : f.caused_by) w.value(x);
    w.end_array().key("remedy");
    if (f.remedy) {
      w.begin_object().key("action").value(f.remedy->action).key("dists").begin_array();
      for (const auto& x : f.remedy->dists) w.value(x);
      w.end_array().key("command").value(f.remedy->command).end_object();
    } else {
      w.null();
    }
    w.end_object();
  }
  w.end_array();
  w.key("summary").begin_object().key("errors").value(rep.errors).key("warnings").value(rep.warnings);
  w.key("info").value(rep.infos).end_object();
  if (rep.hashed_files)
    w.key("hashed")
        .begin_object()
        .key("files")
        .value(rep.hashed_files)
        .key("bytes")
        .value(rep.hashed_bytes)
        .end_object();
  w.end_object();
  return w.take();
}

namespace {

// Files, then folders with a trailing '/', in one sorted list as the user sees them.
void deletion_json(Doc& d, const r::Environment& env, const r::Deletion& del) {
  std::vector<std::pair<std::string, std::string>> shown;  // (display, absolute)
  for (const auto& f : del.files) shown.emplace_back(env.display(f), f);
  for (const auto& dir : del.dirs) shown.emplace_back(env.display(dir) + "/", dir + "/");
  std::sort(shown.begin(), shown.end());
  d.w.begin_array();
  for (const auto& [display, abs] : shown) d.path(abs);
  d.w.end_array();
}

void breaks_json(Doc& d, const r::Environment& env, const std::vector<r::Break>& breaks) {
  auto& w = d.w;
  w.begin_array();
  for (const auto& b : breaks) {
    w.begin_object().key("consumer");
    d.path(b.consumer);
    w.key("consumer_dist");
    if (b.consumer_dist >= 0)
      w.value(env.dists[static_cast<std::size_t>(b.consumer_dist)].dir_name);
    else
      w.null();
    w.key("soname").value(b.soname);
    w.key("kind").value(b.kind == r::RequiredBy::needed ? "needed" : "dlopen");
    w.key("before");
    d.path(b.before);
    w.key("after");
    if (b.after)
      d.path(*b.after);
    else
      w.null();
    w.key("after_version");
    d.optional_string(b.after_version);
    w.key("why").value(b.why).end_object();
  }
  w.end_array();
}

void left_json(Doc& d, const r::Environment& env, const std::vector<r::LeftBehind>& left, bool metadata_only) {
  std::vector<int> dists;
  for (const auto& l : left)
    if (l.metadata_only == metadata_only) dists.push_back(l.dist);
  if (metadata_only) {
    d.dists(dists);
    return;
  }
  d.w.begin_array();
  for (const auto& l : left) {
    if (l.metadata_only) continue;
    d.w.begin_object().key("dist").value(env.dists[static_cast<std::size_t>(l.dist)].dir_name).key("paths");
    d.paths(l.paths);
    d.w.end_object();
  }
  d.w.end_array();
}

}  // namespace

std::string plan_remove_json(const r::Environment& env, const r::Knowledge& knowledge, const r::RemovalPlan& plan) {
  Doc d(env, knowledge);
  auto& w = d.w;
  d.header("plan remove");
  w.key("removing");
  d.dists(plan.removing);
  w.key("safe").value(plan.safe()).key("safe_with_cudafix").value(plan.safe_with_cudafix());
  w.key("pip_would_delete");
  deletion_json(d, env, plan.pip.deletion);
  w.key("cudafix_would_delete");
  deletion_json(d, env, plan.cudafix.deletion);
  w.key("cudafix_keeps");
  d.paths(plan.cudafix.deletion.kept);
  w.key("breaks");
  breaks_json(d, env, plan.pip.breaks);
  w.key("breaks_with_cudafix");
  breaks_json(d, env, plan.cudafix.breaks);
  w.key("requirement_breaks").begin_array();
  for (const auto& rb : plan.requirement_breaks) {
    w.begin_object()
        .key("dist")
        .value(env.dists[static_cast<std::size_t>(rb.dist)].dir_name)
        .key("requirement")
        .value(rb.requirement)
        .key("removed")
        .value(env.dists[static_cast<std::size_t>(rb.removed)].dir_name)
        .end_object();
  }
  w.end_array();
  w.key("left_metadata_only");
  left_json(d, env, plan.pip.left, true);
  w.key("left_metadata_only_with_cudafix");
  left_json(d, env, plan.cudafix.left, true);
  w.key("left_with_missing_files");
  left_json(d, env, plan.pip.left, false);
  w.end_object();
  return w.take();
}

std::string plan_fix_json(const r::Environment& env, const r::Knowledge& knowledge, const r::FixPlan& plan,
                          const r::Fingerprint& fp, const std::vector<std::string>& need_tags) {
  Doc d(env, knowledge);
  auto& w = d.w;
  d.header("plan fix");
  w.key("ok").value(plan.ok()).key("problem");
  if (plan.ok())
    w.null();
  else
    w.value(plan.problem);
  w.key("fingerprint").begin_object().key("digest").value(fp.digest).key("records").begin_array();
  for (const auto& [dist, sha] : fp.records)
    w.begin_object().key("dist").value(dist).key("sha256").value(sha).end_object();
  w.end_array().key("files").begin_array();
  for (const auto& f : fp.files) {
    w.begin_object().key("path").value(f.path).key("exists").value(f.exists);
    w.key("dev").value(f.dev).key("ino").value(f.ino).key("size").value(f.size);
    w.key("mtime_ns").value(static_cast<std::int64_t>(f.mtime_ns)).end_object();
  }
  w.end_array().end_object();
  w.key("target").begin_object().key("cuda_major");
  if (plan.target)
    w.value(*plan.target);
  else
    w.null();
  w.key("given").value(plan.target_given).key("evidence").begin_array();
  for (const auto& e : plan.evidence) {
    w.begin_object().key("dist");
    if (e.dist >= 0)
      w.value(env.dists[static_cast<std::size_t>(e.dist)].dir_name);
    else
      w.null();
    w.key("cuda_major").value(e.major).key("why").value(e.why).end_object();
  }
  w.end_array().end_object();
  w.key("steps").begin_array();
  for (const auto& st : plan.steps) {
    w.begin_object().key("action").value(r::to_string(st.action)).key("dist");
    if (st.dist >= 0)
      w.value(env.dists[static_cast<std::size_t>(st.dist)].dir_name);
    else
      w.null();
    w.key("name").value(st.name).key("version").value(st.version).key("wheel");
    if (st.wheel)
      w.begin_object()
          .key("file")
          .value(st.wheel->file)
          .key("sha256")
          .value(st.wheel->sha256)
          .key("source")
          .value(st.wheel->source)
          .end_object();
    else
      w.null();
    w.key("why").value(st.why).key("simulated").value(st.simulated);
    w.key("deletes");
    d.paths(st.deletes);
    w.key("keeps");
    d.paths(st.keeps);
    w.key("writes");
    d.paths(st.writes);
    w.key("after_step").begin_object().key("ok").value(st.ok).key("worse");
    breaks_json(d, env, st.worse);
    w.end_object().end_object();
  }
  w.end_array().key("needs").begin_array();
  for (const auto& n : plan.needs) {
    w.begin_object().key("name").value(n.name).key("version").value(n.version).key("tags");
    d.strings(need_tags);
    w.key("why").value(n.why).end_object();
  }
  w.end_array().key("remaining");
  d.strings(plan.remaining);
  w.end_object();
  return w.take();
}

std::string rules_json(const std::optional<std::string>& venv,
                       const std::map<std::string, rules::RuleSettings>& settings) {
  JsonWriter w;
  w.begin_object();
  w.key("schema").value(1);
  w.key("command").value("rules");
  w.key("venv");
  if (venv)
    w.value(*venv);
  else
    w.null();
  w.key("rules").begin_array();
  for (const auto* rule : rules::registry()) {
    const auto it = settings.find(std::string(rule->id));
    w.begin_object();
    w.key("id").value(rule->id);
    w.key("severity").value(rules::to_string(rule->severity));
    w.key("configured_severity");
    if (it != settings.end() && it->second.severity)
      w.value(rules::to_string(*it->second.severity));
    else
      w.null();
    w.key("enabled").value(it == settings.end() || it->second.enabled);
    w.key("depth").value(rules::to_string(rule->depth));
    w.key("summary").value(rule->summary);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return w.take();
}

std::string explain_json(const rules::Rule& rule) {
  JsonWriter w;
  w.begin_object();
  w.key("schema").value(1);
  w.key("command").value("explain");
  w.key("venv").null();
  w.key("rule").value(rule.id);
  w.key("severity").value(rules::to_string(rule.severity));
  w.key("depth").value(rules::to_string(rule.depth));
  w.key("summary").value(rule.summary);
  w.key("document").value(rule.doc);
  w.end_object();
  return w.take();
}

std::string error_json(const std::string& command, const std::string& message) {
  JsonWriter w;
  w.begin_object();
  w.key("schema").value(1);
  w.key("command").value(command);
  w.key("venv").null();
  w.key("error").value(message);
  w.end_object();
  return w.take();
}

}  // namespace cudafix::cli
