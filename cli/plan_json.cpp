// The plan documents: `plan remove` and `plan fix` (also the document `plan fix -o` writes and
// `apply` will read). docs/json.md gives their fields.
#include "cli/json_output.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include "cli/json_doc.hpp"
#include "cli/json_writer.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/unresolved.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;

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

void write_plan_remove(JsonWriter& into, const r::Environment& env, const r::Knowledge& knowledge,
                       const r::RemovalPlan& plan) {
  Doc d(env, knowledge, into);
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
  w.key("refused").begin_array();
  for (const auto& rf : plan.cudafix.deletion.refused) {
    w.begin_object().key("dist").value(env.dists[static_cast<std::size_t>(rf.dist)].dir_name).key("file");
    d.path(rf.file);
    w.key("line").value(static_cast<std::uint64_t>(rf.line)).key("entry").value(rf.entry).key("why").value(rf.why);
    w.end_object();
  }
  w.end_array();
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
}

std::string plan_remove_json(const r::Environment& env, const r::Knowledge& knowledge, const r::RemovalPlan& plan) {
  JsonWriter w;
  write_plan_remove(w, env, knowledge, plan);
  return w.take();
}

namespace {

void optional_or_null(JsonWriter& w, const std::string& s) {
  if (s.empty())
    w.null();
  else
    w.value(s);
}

// What the plan was made against: each RECORD's digest and each touched file's stamp.
void fingerprint_json(JsonWriter& w, const r::Fingerprint& fp) {
  w.begin_object().key("digest").value(fp.digest).key("records").begin_array();
  for (const auto& [dist, sha] : fp.records)
    w.begin_object().key("dist").value(dist).key("sha256").value(sha).end_object();
  w.end_array().key("files").begin_array();
  for (const auto& f : fp.files) {
    w.begin_object().key("path").value(f.path).key("exists").value(f.exists);
    w.key("dev").value(f.dev).key("ino").value(f.ino).key("size").value(f.size);
    w.key("mtime_ns").value(static_cast<std::int64_t>(f.mtime_ns)).end_object();
  }
  w.end_array().end_object();
}

// The CUDA major the plan repairs towards, and the consumers' evidence for it.
void target_json(JsonWriter& w, const r::Environment& env, const r::FixPlan& plan) {
  w.begin_object().key("cuda_major");
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
}

// A step's wheel: where it comes from, its objects' dynamic sections, how much of it was read.
void wheel_json(Doc& d, const r::Wheel& wheel) {
  auto& w = d.w;
  w.begin_object().key("file");
  optional_or_null(w, wheel.file);
  w.key("sha256").value(wheel.sha256).key("source").value(wheel.source).key("url");
  optional_or_null(w, wheel.url);
  w.key("objects").begin_array();
  for (const auto& [path, elf] : wheel.elf) {
    w.begin_object().key("path").value(path).key("soname");
    d.optional_string(elf.soname);
    w.key("needed");
    d.strings(elf.needed);
    w.key("rpath");
    d.optional_string(elf.rpath);
    w.key("runpath");
    d.optional_string(elf.runpath);
    w.end_object();
  }
  w.end_array().key("read");
  if (wheel.size)
    w.begin_object().key("bytes").value(wheel.bytes_read).key("of").value(wheel.size).end_object();
  else
    w.null();
  w.end_object();
}

void step_json(Doc& d, const r::Environment& env, const r::Step& st) {
  auto& w = d.w;
  w.begin_object().key("action").value(r::to_string(st.action)).key("dist");
  if (st.dist >= 0)
    w.value(env.dists[static_cast<std::size_t>(st.dist)].dir_name);
  else
    w.null();
  w.key("name").value(st.name).key("version").value(st.version).key("wheel");
  if (st.wheel)
    wheel_json(d, *st.wheel);
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

}  // namespace

void write_plan_fix(JsonWriter& into, const r::Environment& env, const r::Knowledge& knowledge, const r::FixPlan& plan,
                    const r::Fingerprint& fp, const std::vector<std::string>& need_tags,
                    const std::vector<std::string>& source_problems) {
  Doc d(env, knowledge, into);
  auto& w = d.w;
  d.header("plan fix");
  w.key("ok").value(plan.ok()).key("problem");
  if (plan.ok())
    w.null();
  else
    w.value(plan.problem);
  w.key("fingerprint");
  fingerprint_json(w, fp);
  w.key("target");
  target_json(w, env, plan);
  w.key("steps").begin_array();
  for (const auto& st : plan.steps) step_json(d, env, st);
  w.end_array().key("needs").begin_array();
  for (const auto& n : plan.needs) {
    w.begin_object().key("name").value(n.name).key("version").value(n.version).key("tags");
    d.strings(need_tags);
    w.key("why").value(n.why).end_object();
  }
  w.end_array().key("remaining");
  d.strings(plan.remaining);
  w.key("conflict").begin_array();
  for (const auto& st : plan.conflict) {
    w.begin_object().key("action").value(r::to_string(st.action)).key("name").value(st.name);
    w.key("version").value(st.version).key("why").value(st.why).key("worse");
    breaks_json(d, env, st.worse);
    w.end_object();
  }
  w.end_array().key("source_problems");
  d.strings(source_problems);
  w.end_object();
}

std::string plan_fix_json(const r::Environment& env, const r::Knowledge& knowledge, const r::FixPlan& plan,
                          const r::Fingerprint& fp, const std::vector<std::string>& need_tags,
                          const std::vector<std::string>& source_problems) {
  JsonWriter w;
  write_plan_fix(w, env, knowledge, plan, fp, need_tags, source_problems);
  return w.take();
}

}  // namespace cudafix::cli
