#include "resolver/plan/plan_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline plan {

namespace {

using nlohmann::json;

// A field that is wrong, and where: turned into an Error naming the file at the top.
struct Bad {
  std::string where, what;
};

std::string type_of(const json& v) { return v.type_name(); }

[[noreturn]] void expected(const std::string& where, std::string_view what, const json& v) {
  throw Bad{where, fmt::format("expected {}, got {}", what, type_of(v))};
}

// An object whose fields are read by name: every key it holds must be one `allowed` names.
class Object {
 public:
  Object(const json& v, std::string where, std::initializer_list<std::string_view> allowed)
      : v_(v), where_(std::move(where)) {
    if (!v.is_object()) expected(where_.empty() ? "(the document)" : where_, "an object", v);
    for (const auto& [key, value] : v.items()) {
      if (key == "lossy") {
        if (!value.is_boolean()) expected(at(key), "a boolean", value);
        continue;
      }
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        throw Bad{at(key), fmt::format("unknown field (schema {} has no such field here)", k_plan_schema)};
    }
  }

  [[nodiscard]] std::string at(std::string_view key) const {
    return where_.empty() ? std::string(key) : fmt::format("{}.{}", where_, key);
  }
  [[nodiscard]] const json& operator[](std::string_view key) const {
    const auto it = v_.find(key);
    if (it == v_.end()) throw Bad{at(key), "required field missing"};
    return *it;
  }

 private:
  const json& v_;
  std::string where_;
};

std::string string_of(const json& v, const std::string& where) {
  if (!v.is_string()) expected(where, "a string", v);
  return v.get<std::string>();
}

std::optional<std::string> optional_string(const json& v, const std::string& where) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_string()) expected(where, "a string or null", v);
  return v.get<std::string>();
}

bool boolean_of(const json& v, const std::string& where) {
  if (!v.is_boolean()) expected(where, "a boolean", v);
  return v.get<bool>();
}

std::uint64_t unsigned_of(const json& v, const std::string& where) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && !v.is_number_unsigned())
    throw Bad{where, fmt::format("expected an unsigned integer, got {}", v.get<std::int64_t>())};
  expected(where, "an unsigned integer", v);
}

std::int64_t integer_of(const json& v, const std::string& where) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw Bad{where, fmt::format("{} is out of range", u)};
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  expected(where, "an integer", v);
}

int small_int_of(const json& v, const std::string& where) {
  const std::int64_t i = integer_of(v, where);
  if (i < 0 || i > 1000) throw Bad{where, fmt::format("{} is not a CUDA major", i)};
  return static_cast<int>(i);
}

template <typename T>
std::vector<T> array_of(const json& v, const std::string& where,
                        const std::function<T(const json&, const std::string&)>& element) {
  if (!v.is_array()) expected(where, "an array", v);
  std::vector<T> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out.push_back(element(v[i], fmt::format("{}[{}]", where, i)));
  return out;
}

std::vector<std::string> strings_of(const json& v, const std::string& where) {
  return array_of<std::string>(v, where, string_of);
}

StepAction action_of(const json& v, const std::string& where) {
  const std::string s = string_of(v, where);
  for (StepAction a : {StepAction::remove, StepAction::reinstall, StepAction::install})
    if (s == to_string(a)) return a;
  throw Bad{where, fmt::format("\"{}\" is not an action (remove, reinstall or install)", s)};
}

PlanPath path_of(const json& v, const std::string& where) {
  if (v.is_string()) return {std::nullopt, v.get<std::string>()};
  if (!v.is_object()) expected(where, "a path (a string or {root, path})", v);
  const Object o(v, where, {"root", "path"});
  PlanPath p;
  const std::string root = string_of(o["root"], o.at("root"));
  for (SiteRoot r : {SiteRoot::purelib, SiteRoot::platlib, SiteRoot::system})
    if (root == to_string(r)) p.root = r;
  if (!p.root) throw Bad{o.at("root"), fmt::format("\"{}\" is not a site folder (purelib, platlib or system)", root)};
  p.path = string_of(o["path"], o.at("path"));
  return p;
}

std::vector<PlanPath> paths_of(const json& v, const std::string& where) {
  return array_of<PlanPath>(v, where, path_of);
}

PlanBreak break_of(const json& v, const std::string& where) {
  const Object o(v, where, {"consumer", "consumer_dist", "soname", "kind", "before", "after", "after_version", "why"});
  PlanBreak b;
  b.consumer = path_of(o["consumer"], o.at("consumer"));
  b.consumer_dist = optional_string(o["consumer_dist"], o.at("consumer_dist"));
  b.soname = string_of(o["soname"], o.at("soname"));
  const std::string kind = string_of(o["kind"], o.at("kind"));
  if (kind == "needed")
    b.kind = RequiredBy::needed;
  else if (kind == "dlopen")
    b.kind = RequiredBy::dlopen;
  else
    throw Bad{o.at("kind"), fmt::format("\"{}\" is neither \"needed\" nor \"dlopen\"", kind)};
  b.before = path_of(o["before"], o.at("before"));
  if (!o["after"].is_null()) b.after = path_of(o["after"], o.at("after"));
  b.after_version = optional_string(o["after_version"], o.at("after_version"));
  b.why = string_of(o["why"], o.at("why"));
  return b;
}

std::vector<PlanBreak> breaks_of(const json& v, const std::string& where) {
  return array_of<PlanBreak>(v, where, break_of);
}

PlanObject object_of(const json& v, const std::string& where) {
  const Object o(v, where, {"path", "soname", "needed", "rpath", "runpath"});
  PlanObject out;
  out.path = string_of(o["path"], o.at("path"));
  out.soname = optional_string(o["soname"], o.at("soname"));
  out.needed = strings_of(o["needed"], o.at("needed"));
  out.rpath = optional_string(o["rpath"], o.at("rpath"));
  out.runpath = optional_string(o["runpath"], o.at("runpath"));
  return out;
}

PlanWheel wheel_of(const json& v, const std::string& where) {
  const Object o(v, where, {"file", "sha256", "source", "url", "objects", "read"});
  PlanWheel w;
  w.file = optional_string(o["file"], o.at("file"));
  w.sha256 = string_of(o["sha256"], o.at("sha256"));
  // Joined into the wheel cache's paths (<cache>/wheels/<sha256>/...): a hash, nothing else.
  if (w.sha256.size() != 64 || !std::all_of(w.sha256.begin(), w.sha256.end(),
                                            [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }))
    throw Bad{o.at("sha256"), "not a SHA-256 (64 lowercase hex digits)"};
  w.source = string_of(o["source"], o.at("source"));
  w.url = optional_string(o["url"], o.at("url"));
  w.objects = array_of<PlanObject>(o["objects"], o.at("objects"), object_of);
  if (const json& read = o["read"]; !read.is_null()) {
    const Object r(read, o.at("read"), {"bytes", "of"});
    w.read = std::make_pair(unsigned_of(r["bytes"], r.at("bytes")), unsigned_of(r["of"], r.at("of")));
  }
  return w;
}

PlanStep step_of(const json& v, const std::string& where) {
  const Object o(
      v, where,
      {"action", "dist", "name", "version", "wheel", "why", "simulated", "deletes", "keeps", "writes", "after_step"});
  PlanStep s;
  s.action = action_of(o["action"], o.at("action"));
  s.dist = optional_string(o["dist"], o.at("dist"));
  s.name = string_of(o["name"], o.at("name"));
  s.version = string_of(o["version"], o.at("version"));
  if (const json& wheel = o["wheel"]; !wheel.is_null()) s.wheel = wheel_of(wheel, o.at("wheel"));
  s.why = string_of(o["why"], o.at("why"));
  s.simulated = boolean_of(o["simulated"], o.at("simulated"));
  s.deletes = paths_of(o["deletes"], o.at("deletes"));
  s.keeps = paths_of(o["keeps"], o.at("keeps"));
  s.writes = paths_of(o["writes"], o.at("writes"));
  const Object after(o["after_step"], o.at("after_step"), {"ok", "worse"});
  s.ok = boolean_of(after["ok"], after.at("ok"));
  s.worse = breaks_of(after["worse"], after.at("worse"));
  return s;
}

PlanFingerprint fingerprint_of_json(const json& v, const std::string& where) {
  const Object o(v, where, {"digest", "records", "files"});
  PlanFingerprint fp;
  fp.digest = string_of(o["digest"], o.at("digest"));
  fp.records = array_of<std::pair<std::string, std::string>>(
      o["records"], o.at("records"), [](const json& r, const std::string& at) {
        const Object rec(r, at, {"dist", "sha256"});
        return std::make_pair(string_of(rec["dist"], rec.at("dist")), string_of(rec["sha256"], rec.at("sha256")));
      });
  fp.files = array_of<PlanFileStamp>(o["files"], o.at("files"), [](const json& f, const std::string& at) {
    const Object file(f, at, {"path", "exists", "dev", "ino", "size", "mtime_ns"});
    PlanFileStamp s;
    s.path = path_of(file["path"], file.at("path"));
    s.exists = boolean_of(file["exists"], file.at("exists"));
    s.dev = unsigned_of(file["dev"], file.at("dev"));
    s.ino = unsigned_of(file["ino"], file.at("ino"));
    s.size = unsigned_of(file["size"], file.at("size"));
    s.mtime_ns = integer_of(file["mtime_ns"], file.at("mtime_ns"));
    return s;
  });
  return fp;
}

PlanFile plan_of(const json& doc) {
  // The schema first: a document of another schema is named as such, not by its first field
  // this version does not know.
  if (!doc.is_object()) expected("(the document)", "an object", doc);
  const auto schema = doc.find("schema");
  if (schema == doc.end()) throw Bad{"schema", "required field missing"};
  if (!schema->is_number_integer()) expected("schema", "the number 1", *schema);
  if (const auto n = schema->get<std::int64_t>(); n != k_plan_schema)
    throw Bad{"schema", fmt::format("schema {} is not one this version of cudafix reads (it reads schema {} only)",
                                    schema->is_number_unsigned() ? fmt::format("{}", schema->get<std::uint64_t>())
                                                                 : fmt::format("{}", n),
                                    k_plan_schema)};
  const Object o(doc, "",
                 {"schema", "command", "venv", "ok", "problem", "fingerprint", "target", "steps", "needs", "remaining",
                  "conflict", "source_problems"});
  if (const std::string command = string_of(o["command"], "command"); command != "plan fix")
    throw Bad{"command", fmt::format("\"{}\" is not a plan (write one with `cudafix plan fix -o PLAN.json`)", command)};
  PlanFile p;
  p.venv = optional_string(o["venv"], "venv");
  p.ok = boolean_of(o["ok"], "ok");
  p.problem = optional_string(o["problem"], "problem");
  p.fingerprint = fingerprint_of_json(o["fingerprint"], "fingerprint");
  const Object target(o["target"], "target", {"cuda_major", "given", "evidence"});
  if (const json& m = target["cuda_major"]; !m.is_null()) p.cuda_major = small_int_of(m, target.at("cuda_major"));
  p.target_given = boolean_of(target["given"], target.at("given"));
  p.evidence =
      array_of<PlanEvidence>(target["evidence"], target.at("evidence"), [](const json& e, const std::string& at) {
        const Object ev(e, at, {"dist", "cuda_major", "why"});
        return PlanEvidence{optional_string(ev["dist"], ev.at("dist")),
                            small_int_of(ev["cuda_major"], ev.at("cuda_major")), string_of(ev["why"], ev.at("why"))};
      });
  p.steps = array_of<PlanStep>(o["steps"], "steps", step_of);
  p.needs = array_of<PlanNeed>(o["needs"], "needs", [](const json& n, const std::string& at) {
    const Object need(n, at, {"name", "version", "tags", "why"});
    return PlanNeed{string_of(need["name"], need.at("name")), string_of(need["version"], need.at("version")),
                    strings_of(need["tags"], need.at("tags")), string_of(need["why"], need.at("why"))};
  });
  p.remaining = strings_of(o["remaining"], "remaining");
  p.conflict = array_of<PlanConflict>(o["conflict"], "conflict", [](const json& c, const std::string& at) {
    const Object con(c, at, {"action", "name", "version", "why", "worse"});
    return PlanConflict{action_of(con["action"], con.at("action")), string_of(con["name"], con.at("name")),
                        string_of(con["version"], con.at("version")), string_of(con["why"], con.at("why")),
                        breaks_of(con["worse"], con.at("worse"))};
  });
  p.source_problems = strings_of(o["source_problems"], "source_problems");
  return p;
}

// How deeply arrays and objects nest, outside strings; stops counting once past `limit`.
std::size_t nesting_depth(std::string_view text, std::size_t limit) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

PlanFile parse_plan_file(std::string_view text, std::string_view name) {
  if (text.size() > k_plan_file_max)
    throw Error(
        fmt::format("{}: {} bytes, more than a plan document may hold ({} bytes)", name, text.size(), k_plan_file_max));
  if (nesting_depth(text, k_plan_max_depth) > k_plan_max_depth)
    throw Error(fmt::format("{}: nested deeper than {} levels (a plan document nests 6)", name, k_plan_max_depth));
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    // A syntax error, or a number past a double's range (out_of_range, not a parse_error):
    // nlohmann's message after its "[json.exception.parse_error.N] " tag, cut, since it quotes
    // the token it stopped at.
    std::string_view why = e.what();
    if (const auto tag = why.find("] "); tag != std::string_view::npos) why.remove_prefix(tag + 2);
    constexpr std::size_t shown = 240;
    throw Error(fmt::format("{}: not JSON: {}{}", name, why.substr(0, shown), why.size() > shown ? "..." : ""));
  }
  try {
    return plan_of(doc);
  } catch (const Bad& bad) {
    throw Error(fmt::format("{}: {}: {}", name, bad.where, bad.what));
  }
}

std::string read_plan_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw Error(fmt::format("{}: cannot read the plan: {}", path, std::strerror(errno)));
  std::string text;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!ok) {
    ::close(fd);
    throw Error(fmt::format("{}: not a regular file", path));
  }
  // Read to one byte past the cap, whatever fstat said: the file may grow while it is read.
  const std::size_t cap = k_plan_file_max + 1;
  text.resize(std::min<std::size_t>(static_cast<std::size_t>(std::max<off_t>(st.st_size, 0)), k_plan_file_max) + 1);
  std::size_t got = 0;
  while (got < cap) {
    if (got == text.size()) text.resize(std::min(cap, text.size() * 2));
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = n == 0;
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  const int err = errno;
  ::close(fd);
  if (!ok) throw Error(fmt::format("{}: cannot read the plan: {}", path, std::strerror(err)));
  if (got > k_plan_file_max)
    throw Error(fmt::format("{}: larger than a plan document may be ({} bytes)", path, k_plan_file_max));
  text.resize(got);
  return text;
}

PlanPath plan_path_of(const Environment& env, const std::string& abs) {
  const SiteDir* s = env.site_of(abs);
  if (!s) return {std::nullopt, abs};
  std::string rel = abs.size() == s->real.size() ? "." : abs.substr(s->real.size() + 1);
  if (env.layout.sites.size() == 1) return {std::nullopt, std::move(rel)};
  return {s->root, std::move(rel)};
}

namespace {

std::optional<std::string> dir_name_of(const Environment& env, int dist) {
  if (dist < 0) return std::nullopt;
  return env.dists[static_cast<std::size_t>(dist)].dir_name;
}

std::optional<std::string> unless_empty(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}

std::vector<PlanPath> plan_paths_of(const Environment& env, const std::vector<std::string>& paths) {
  std::vector<PlanPath> out;
  out.reserve(paths.size());
  for (const auto& p : paths) out.push_back(plan_path_of(env, p));
  return out;
}

std::vector<PlanBreak> plan_breaks_of(const Environment& env, const std::vector<Break>& breaks) {
  std::vector<PlanBreak> out;
  for (const auto& b : breaks) {
    PlanBreak pb;
    pb.consumer = plan_path_of(env, b.consumer);
    pb.consumer_dist = dir_name_of(env, b.consumer_dist);
    pb.soname = b.soname;
    pb.kind = b.kind;
    pb.before = plan_path_of(env, b.before);
    if (b.after) pb.after = plan_path_of(env, *b.after);
    pb.after_version = b.after_version;
    pb.why = b.why;
    out.push_back(std::move(pb));
  }
  return out;
}

PlanWheel plan_wheel_of(const Wheel& w) {
  PlanWheel pw;
  pw.file = unless_empty(w.file);
  pw.sha256 = w.sha256;
  pw.source = w.source;
  pw.url = unless_empty(w.url);
  for (const auto& [path, elf] : w.elf) pw.objects.push_back({path, elf.soname, elf.needed, elf.rpath, elf.runpath});
  if (w.size) pw.read = std::pair{w.bytes_read, w.size};
  return pw;
}

PlanStep plan_step_of(const Environment& env, const Step& st) {
  PlanStep ps;
  ps.action = st.action;
  ps.dist = dir_name_of(env, st.dist);
  ps.name = st.name;
  ps.version = st.version;
  if (st.wheel) ps.wheel = plan_wheel_of(*st.wheel);
  ps.why = st.why;
  ps.simulated = st.simulated;
  ps.deletes = plan_paths_of(env, st.deletes);
  ps.keeps = plan_paths_of(env, st.keeps);
  ps.writes = plan_paths_of(env, st.writes);
  ps.ok = st.ok;
  ps.worse = plan_breaks_of(env, st.worse);
  return ps;
}

}  // namespace

PlanFile plan_file_of(const Environment& env, const FixPlan& plan, const Fingerprint& fingerprint,
                      const std::vector<std::string>& need_tags, const std::vector<std::string>& source_problems) {
  PlanFile out;
  out.venv = env.layout.root;
  out.ok = plan.ok();
  if (!plan.ok()) out.problem = plan.problem;
  out.fingerprint.digest = fingerprint.digest;
  out.fingerprint.records = fingerprint.records;
  // The document writes the stamps' paths as they are, absolute.
  for (const auto& f : fingerprint.files)
    out.fingerprint.files.push_back({{std::nullopt, f.path}, f.exists, f.dev, f.ino, f.size, f.mtime_ns});
  out.cuda_major = plan.target;
  out.target_given = plan.target_given;
  for (const auto& e : plan.evidence) out.evidence.push_back({dir_name_of(env, e.dist), e.major, e.why});
  for (const auto& st : plan.steps) out.steps.push_back(plan_step_of(env, st));
  for (const auto& n : plan.needs) out.needs.push_back({n.name, n.version, need_tags, n.why});
  out.remaining = plan.remaining;
  for (const auto& st : plan.conflict)
    out.conflict.push_back({st.action, st.name, st.version, st.why, plan_breaks_of(env, st.worse)});
  out.source_problems = source_problems;
  return out;
}

std::string absolute_path(const Environment& env, const PlanPath& p) {
  if (p.root) {
    for (const auto& site : env.layout.sites)
      if (site.root == *p.root) return join_normal(site.real, p.path) + (p.path.ends_with("/") ? "/" : "");
    throw Error(fmt::format("the plan names a site folder this environment lacks: {}", to_string(*p.root)));
  }
  if (p.path.starts_with("/") || env.layout.sites.empty()) return p.path;
  return join_normal(env.layout.sites.front().real, p.path) + (p.path.ends_with("/") ? "/" : "");
}

std::string step_label(const PlanStep& step) {
  return fmt::format("{} {} {}", to_string(step.action), step.name, step.version);
}

}  // namespace cudafix::resolver::inline plan
