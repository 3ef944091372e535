// What every JSON document of the command line is built with: the header (schema, command,
// venv), paths relative to their site folder, dists by their dist-info folder, the loader facts.
// Internal to cli/'s JSON files (json_output.cpp, plan_json.cpp).
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>

#include "cli/json_writer.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/env/unresolved.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;

class Doc {
 public:
  // A document of its own (take it from `w`), or one written into `into`, the writer of the
  // document that holds it.
  Doc(const r::Environment& env, const r::Knowledge& knowledge) : w(own_), env_(env), knowledge_(knowledge) {}
  Doc(const r::Environment& env, const r::Knowledge& knowledge, JsonWriter& into)
      : w(into), env_(env), knowledge_(knowledge) {}
  Doc(const Doc&) = delete;
  Doc& operator=(const Doc&) = delete;

 private:
  JsonWriter own_;

 public:
  JsonWriter& w;

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

}  // namespace cudafix::cli
