#include "cli/json_output.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "cli/json_doc.hpp"
#include "cli/json_writer.hpp"
#include "cli/text_output.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/unresolved.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;
namespace p = cudafix::installer::probe;

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
    w.key("format").value(r::to_string(dist.format));
    w.key("name").value(dist.normalized);
    w.key("version").value(dist.version);
    w.key("root").value(r::to_string(dist.root));
    w.key("installer").value(dist.installer);
    w.key("requested").value(dist.requested);
    w.key("requires_dist");
    d.strings(dist.metadata.requires_dist);
    w.key("files").value(static_cast<std::uint64_t>(dist.record.size()));
    w.key("files_listed").value(dist.format == r::DistFormat::dist_info || dist.has_record);
    w.key("missing");
    d.paths(env.missing[i]);
    if (dist.direct_url) w.key("direct_url").value(*dist.direct_url);
    if (!dist.develop_path.empty()) w.key("develop_path").value(dist.develop_path);
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
  w.key("dlopened_by").begin_array();
  for (const auto& m : rep.dlopened_by) {
    w.begin_object();
    w.key("front");
    d.path(m.front->path);
    w.key("front_dists");
    d.dists(m.front->owners);
    w.key("group").value(m.dlopen.group);
    w.key("same_dist").value(m.dlopen.knowledge->same_dist);
    w.key("place").value(r::to_string(m.place));
    w.key("resolution");
    d.resolution(m.dlopen.resolution, false, m.front);
    w.key("release");
    if (m.release.empty())
      w.null();
    else
      w.value(m.release);
    w.key("package");
    if (m.package.empty())
      w.null();
    else
      w.value(m.package);
    w.end_object();
  }
  w.end_array();
  w.key("required_by").begin_array();
  for (const auto& n : rep.required_by) {
    w.begin_object();
    w.key("dist").value(env.dists[static_cast<std::size_t>(n.dist)].dir_name);
    w.key("requires").value(n.requirement);
    w.key("major").value(n.major);
    w.key("basis").value(r::to_string(n.basis));
    w.key("why").value(n.why);
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

namespace {

// Each stage the probe ran (its device, result, time and code), then those it did not run.
void stages_json(JsonWriter& w, const p::VerifyReport& rep) {
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
}

// Each device the probe saw, and the stage it failed at.
void devices_json(JsonWriter& w, const p::VerifyReport& rep) {
  w.key("devices").begin_array();
  for (const auto& dev : rep.records.devices) {
    const auto* failed = p::failed_stage_of(rep.records, dev.ordinal);
    w.begin_object()
        .key("ordinal")
        .value(dev.ordinal)
        .key("name")
        .value(dev.name)
        .key("compute_capability")
        .value(dev.compute_capability)
        .key("uuid")
        .value(dev.uuid)
        .key("pci_bus_id")
        .value(dev.pci)
        .key("ok")
        .value(failed == nullptr);
    optional_string(w, "failed_stage",
                    failed ? std::optional<std::string>(p::stage_label(*failed)) : std::optional<std::string>());
    w.end_object();
  }
  w.end_array();
}

// Every file the probe's process mapped, beside the model's prediction for its soname.
void loaded_json(Doc& d, const p::VerifyReport& rep) {
  auto& w = d.w;
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
    w.key("family").value(f.family);
    optional_string(w, "dist", f.dist.empty() ? std::nullopt : std::optional<std::string>(f.dist));
    optional_string(w, "version", f.version.empty() ? std::nullopt : std::optional<std::string>(f.version));
    optional_string(w, "model", f.model.empty() ? std::nullopt : std::optional<std::string>(f.model));
    w.end_object();
  }
  w.end_array();
}

// What was compared, and which causes the diagnosis found likely.
void checks_json(JsonWriter& w, const p::VerifyReport& rep) {
  w.key("checks").begin_array();
  for (const auto& c : rep.checks) {
    w.begin_object().key("check").value(c.check).key("ok").value(c.ok).key("detail").value(c.detail);
    optional_string(w, "expected", c.ok || c.expected.empty() ? std::nullopt : std::optional<std::string>(c.expected));
    optional_string(w, "found", c.ok || c.expected.empty() ? std::nullopt : std::optional<std::string>(c.found));
    w.end_object();
  }
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
}

// How the probe's process ran and ended.
void probe_run_json(JsonWriter& w, const p::VerifyReport& rep) {
  w.key("probe").begin_object();
  w.key("ms").raw(fmt::format("{:.1f}", rep.run.ms));
  w.key("timed_out").value(rep.run.timed_out).key("reaped").value(rep.run.reaped);
  optional_number(w, "exit_code", rep.run.exit_code ? std::optional<long long>(*rep.run.exit_code) : std::nullopt);
  optional_string(w, "signal",
                  rep.run.signal ? std::optional<std::string>(p::signal_name(*rep.run.signal)) : std::nullopt);
  w.key("stderr").value(rep.run.errors);
  w.end_object();
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
  w.key("nccl");
  if (rep.nccl)
    d.path(*rep.nccl);
  else
    w.null();
  optional_number(w, "nccl_version", rep.nccl_version);
  optional_string(w, "cuda_visible_devices", rep.visible_devices);
  stages_json(w, rep);
  devices_json(w, rep);
  loaded_json(d, rep);
  checks_json(w, rep);
  probe_run_json(w, rep);
  w.end_object();
  return w.take();
}

namespace {

// A finding's fields as doctor's document has them, in an object the caller ends.
void finding_fields(Doc& d, const rules::Finding& f) {
  auto& w = d.w;
  w.begin_object().key("id").value(f.id).key("rule").value(f.rule).key("severity").value(rules::to_string(f.severity));
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
}

}  // namespace

std::string doctor_json(const r::Environment& env, const r::Knowledge& knowledge, const rules::DoctorReport& rep,
                        const std::vector<std::string>& recovered) {
  Doc d(env, knowledge);
  auto& w = d.w;
  d.header("doctor");
  w.key("recovered").begin_array();
  for (const auto& line : recovered) w.value(line);
  w.end_array();
  w.key("externally_managed");
  if (env.layout.externally_managed)
    w.value(*env.layout.externally_managed);
  else
    w.null();
  w.key("findings").begin_array();
  for (const auto& f : rep.findings) {
    finding_fields(d, f);
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

void write_findings_left(JsonWriter& w, const r::Environment& env, const r::Knowledge& knowledge,
                         const rules::DoctorReport& rep, const NextStep& next) {
  Doc d(env, knowledge, w);
  w.begin_array();
  for (const auto& f : rep.findings) {
    if (f.severity == rules::Severity::info) continue;
    finding_fields(d, f);
    w.key("next_step").value(next(f)).end_object();
  }
  w.end_array();
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

std::string version_json(const std::string& version) {
  JsonWriter w;
  w.begin_object();
  w.key("schema").value(1);
  w.key("command").value("version");
  w.key("venv").null();
  w.key("version").value(version);
  w.end_object();
  return w.take();
}

std::string error_json(const std::string& command, const std::string& message, int exit_code) {
  JsonWriter w;
  w.begin_object();
  w.key("schema").value(1);
  w.key("command");
  if (command.empty())
    w.null();
  else
    w.value(command);
  w.key("venv").null();
  w.key("error").value(message);
  w.key("exit").value(exit_code);
  w.end_object();
  return w.take();
}

}  // namespace cudafix::cli
