#include "cli/json_output.hpp"

#include <algorithm>

#include "resolver/text.hpp"
#include "resolver/unresolved.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;

namespace {

// Builds one JSON object, remembering whether any string in it had to be repaired.
class Obj {
 public:
  explicit Obj(const r::Environment& env) : env_(env) {}

  std::string text(std::string_view s) { return r::to_valid_utf8(s, &lossy_); }

  Json path(const std::string& abs) {
    const bool one_root = env_.layout.sites.size() == 1;
    for (const auto& s : env_.layout.sites) {
      if (!r::is_within(abs, s.real)) continue;
      const std::string rel = text(r::relative_to(abs, s.real));
      if (one_root) return rel;
      return Json{{"root", r::to_string(s.root)}, {"path", rel}};
    }
    return text(abs);
  }

  Json paths(const std::vector<std::string>& list) {
    Json out = Json::array();
    for (const auto& p : list) out.push_back(path(p));
    return out;
  }

  Json texts(const std::vector<std::string>& list) {
    Json out = Json::array();
    for (const auto& s : list) out.push_back(text(s));
    return out;
  }

  Json dist(int index) { return text(env_.dists[static_cast<std::size_t>(index)].dir_name); }

  Json dists(const std::vector<int>& indices) {
    std::vector<std::string> names;
    for (int i : indices) names.push_back(env_.dists[static_cast<std::size_t>(i)].dir_name);
    std::sort(names.begin(), names.end());
    return texts(names);
  }

  // Finishes `j`, marking it lossy when needed.
  Json done(Json j) {
    if (lossy_) j["lossy"] = true;
    lossy_ = false;
    return j;
  }

 private:
  const r::Environment& env_;
  bool lossy_ = false;
};

Json header(const r::Environment& env, const char* command) {
  return Json{{"schema", 1}, {"command", command}, {"venv", r::to_valid_utf8(env.layout.root)}};
}

Json explanation_json(Obj& o, const r::UnresolvedExplanation& e) {
  return Json{{"kind", std::string(r::to_string(e.kind))}, {"text", o.text(e.text)}, {"providers", o.paths(e.providers)}};
}

Json resolution_json(Obj& o, const r::Resolution& res, bool with_search) {
  Json j{{"needed", o.text(res.name)},
         {"path", res.path ? o.path(*res.path) : Json(nullptr)},
         {"reason", std::string(r::to_string(res.kind))},
         {"via", res.via.empty() ? Json(nullptr) : o.path(res.via)}};
  if (with_search || !res.found()) {
    Json searched = Json::array();
    for (const auto& s : res.searched)
      searched.push_back(Json{{"place", o.path(s.place)}, {"step", std::string(r::to_string(s.source))},
                              {"via", s.via.empty() ? Json(nullptr) : o.path(s.via)}, {"result", s.result}});
    j["searched"] = std::move(searched);
  }
  return j;
}

Json object_json(const r::Environment& env, const r::Knowledge& knowledge, const r::SharedObject& so) {
  Obj o(env);
  Json j{{"path", o.path(so.path)}, {"owners", o.dists(so.owners)}};
  if (!so.aliases.empty()) j["aliases"] = o.paths(so.aliases);
  if (so.elf.status != r::ElfReadStatus::ok) {
    j["invalid"] = o.text(so.elf.diagnostic.to_string());
    return o.done(std::move(j));
  }
  const auto& e = so.elf.info;
  j["soname"] = e.soname ? Json(o.text(*e.soname)) : Json(nullptr);
  j["class"] = e.elf_class == 1 ? 32 : 64;
  j["machine"] = r::machine_name(e.machine);
  j["needed"] = o.texts(e.needed);
  j["rpath"] = e.rpath ? Json(o.text(*e.rpath)) : Json(nullptr);
  j["runpath"] = e.runpath ? Json(o.text(*e.runpath)) : Json(nullptr);
  j["flags_1"] = r::flags_1_names(e.flags_1);
  j["entry_point"] = so.entry_point;
  j["context"] = o.text(so.context);
  Json res = Json::array();
  for (const auto& r : so.resolutions) {
    Json j1 = resolution_json(o, r, false);
    if (!r.found()) j1["explanation"] = explanation_json(o, r::explain_unresolved(env, knowledge, so, r));
    res.push_back(std::move(j1));
  }
  j["resolutions"] = std::move(res);
  return o.done(std::move(j));
}

Json diagnostics_json(const std::vector<r::Diagnostic>& diags) {
  Json out = Json::array();
  for (const auto& d : diags) {
    bool lossy = false;
    Json j{{"file", r::to_valid_utf8(d.file, &lossy)},
           {"line", d.line ? Json(*d.line) : Json(nullptr)},
           {"offset", d.offset ? Json(*d.offset) : Json(nullptr)},
           {"message", r::to_valid_utf8(d.message, &lossy)}};
    if (lossy) j["lossy"] = true;
    out.push_back(std::move(j));
  }
  return out;
}

Json loader_json(const r::Environment& env) {
  const auto& c = env.loader->config();
  return Json{{"ld_so", c.host.ld_so},
              {"glibc", c.host.glibc_version},
              {"platform", c.host.platform},
              {"lib", c.host.lib},
              {"default_dirs", c.host.default_dirs},
              {"glibc_hwcaps", c.host.hwcaps_subdirs},
              {"ld_library_path", c.ld_library_path},
              {"preload", c.preload},
              {"main_executable", env.main_executable ? Json(*env.main_executable) : Json(nullptr)}};
}

}  // namespace

Json scan_json(const r::Environment& env, const r::Knowledge& knowledge) {
  Json doc = header(env, "scan");
  Json sites = Json::array();
  for (const auto& s : env.layout.sites) sites.push_back(Json{{"root", r::to_string(s.root)}, {"path", r::to_valid_utf8(s.path)}});
  doc["layout"] = Json{{"python", env.layout.python_version ? Json(*env.layout.python_version) : Json(nullptr)},
                       {"found_by", env.layout.found_by},
                       {"include_system_site_packages", env.layout.include_system_site_packages},
                       {"sites", std::move(sites)}};
  doc["loader"] = loader_json(env);

  Json dists = Json::array();
  std::size_t files = 0;
  for (std::size_t i = 0; i < env.dists.size(); ++i) {
    const auto& d = env.dists[i];
    Obj o(env);
    files += d.record.size();
    Json j{{"dist", o.text(d.dir_name)},
           {"name", o.text(d.normalized)},
           {"version", o.text(d.version)},
           {"root", std::string(r::to_string(d.root))},
           {"installer", o.text(d.installer)},
           {"requested", d.requested},
           {"requires_dist", o.texts(d.metadata.requires_dist)},
           {"files", d.record.size()},
           {"missing", o.paths(env.missing[i])}};
    if (d.direct_url) j["direct_url"] = o.text(*d.direct_url);
    dists.push_back(o.done(std::move(j)));
  }
  doc["dists"] = std::move(dists);

  Json shared_json = Json::array();
  for (const auto& [path, owners] : env.shared_paths()) {
    Obj o(env);
    shared_json.push_back(o.done(Json{{"path", o.path(path)}, {"owners", o.dists(owners)}, {"on_disk", env.present(path)}}));
  }
  doc["shared_paths"] = std::move(shared_json);

  Json objects = Json::array();
  std::size_t unresolved = 0;
  std::size_t unexplained = 0;
  for (const auto& so : env.objects) {
    for (const auto& res : so.resolutions) {
      if (res.found()) continue;
      ++unresolved;
      unexplained += r::explain_unresolved(env, knowledge, so, res).kind == r::UnresolvedKind::unexplained;
    }
    objects.push_back(object_json(env, knowledge, so));
  }
  doc["objects"] = std::move(objects);
  doc["diagnostics"] = diagnostics_json(env.diagnostics);
  doc["summary"] = Json{{"dists", env.dists.size()},
                        {"record_rows", files},
                        {"files_on_disk", env.on_disk.size()},
                        {"objects", env.objects.size()},
                        {"unresolved_needed", unresolved},
                        {"unexplained_needed", unexplained},
                        {"diagnostics", env.diagnostics.size()}};
  return doc;
}

namespace {

Json tree_json(Obj& o, const r::NeededNode& n) {
  Json j = resolution_json(o, n.resolution, false);
  if (n.repeated) j["repeated"] = true;
  Json children = Json::array();
  for (const auto& c : n.children) children.push_back(tree_json(o, c));
  j["children"] = std::move(children);
  return j;
}

}  // namespace

Json why_json(const r::Environment& env, const r::Knowledge& knowledge, const r::WhyReport& rep) {
  Json doc = header(env, "why");
  Obj o(env);
  doc["query"] = o.text(rep.query);
  doc["kind"] = rep.is_path ? "path" : "soname";
  doc["resolves"] = rep.resolves;
  if (rep.subject) doc["object"] = object_json(env, knowledge, *rep.subject);
  Json providers = Json::array();
  for (const auto* p : rep.providers) {
    Obj po(env);
    providers.push_back(po.done(Json{{"path", po.path(p->path)},
                                     {"owners", po.dists(p->owners)},
                                     {"soname", p->elf.status == r::ElfReadStatus::ok && p->elf.info.soname
                                                    ? Json(po.text(*p->elf.info.soname))
                                                    : Json(nullptr)}}));
  }
  doc["providers"] = std::move(providers);
  Json consumers = Json::array();
  for (const auto& c : rep.consumers) {
    Obj co(env);
    Json j{{"consumer", co.path(c.object->path)},
           {"consumer_dists", co.dists(c.object->owners)},
           {"context", co.text(c.object->context)},
           {"resolution", resolution_json(co, c.resolution, false)},
           {"explanation", c.resolution.found() ? Json(nullptr)
                                                 : explanation_json(co, r::explain_unresolved(env, knowledge, *c.object, c.resolution))},
           {"fallback", c.fallback ? resolution_json(co, *c.fallback, false) : Json(nullptr)}};
    consumers.push_back(co.done(std::move(j)));
  }
  doc["consumers"] = std::move(consumers);
  doc["standalone"] = rep.standalone ? resolution_json(o, *rep.standalone, true) : Json(nullptr);
  doc["tree"] = rep.tree ? tree_json(o, *rep.tree) : Json(nullptr);
  return o.done(std::move(doc));
}

Json error_json(const std::string& command, const std::string& message) {
  return Json{{"schema", 1}, {"command", command}, {"venv", nullptr}, {"error", r::to_valid_utf8(message)}};
}

std::string dump(const Json& doc) { return doc.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace cudafix::cli
