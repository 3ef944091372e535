// A lock written back (write_lock) and put in its one order (sort_lock): resolver/pep/pylock.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <tuple>

#include "resolver/pep/pep440.hpp"
#include "resolver/pep/pylock.hpp"
#include "resolver/pep/pylock_text.hpp"

namespace cudafix::resolver::inline pep {

using pylock_text::FileKind;
using pylock_text::key_text;
using pylock_text::toml_string;

// ---- writing ---------------------------------------------------------------------------------

namespace {

bool version_less(const std::optional<std::string>& a, const std::optional<std::string>& b) {
  if (!a || !b) return !a && b;
  const auto va = Version::parse(*a), vb = Version::parse(*b);
  if (va && vb && !(*va == *vb)) return *va < *vb;
  return *a < *b;
}

void sort_extras(LockExtras& e) {
  std::sort(e.begin(), e.end(), [](const LockExtra& a, const LockExtra& b) { return a.key < b.key; });
}

void sort_file(LockFile& f) {
  std::sort(f.hashes.digests.begin(), f.hashes.digests.end());
  sort_extras(f.extras);
}

void sort_package(LockPackage& p) {
  if (p.archive) sort_file(*p.archive);
  if (p.sdist) sort_file(*p.sdist);
  for (auto& w : p.wheels) sort_file(w);
  std::stable_sort(p.wheels.begin(), p.wheels.end(),
                   [](const LockFile& a, const LockFile& b) { return a.file_name() < b.file_name(); });
  for (auto& l : p.cudafix.libraries) sort_extras(l.extras);
  for (auto& r : p.cudafix.resolutions) sort_extras(r.extras);
  std::sort(p.cudafix.libraries.begin(), p.cudafix.libraries.end(),
            [](const LockLibrary& a, const LockLibrary& b) { return a.path < b.path; });
  std::sort(p.cudafix.resolutions.begin(), p.cudafix.resolutions.end(),
            [](const LockResolution& a, const LockResolution& b) {
              return std::tie(a.consumer, a.soname, a.provider) < std::tie(b.consumer, b.soname, b.provider);
            });
  sort_extras(p.cudafix.extras);
  sort_extras(p.tool);
  sort_extras(p.extras);
}

}  // namespace

void sort_lock(Lock& lock) {
  for (auto& p : lock.packages) sort_package(p);
  std::stable_sort(lock.packages.begin(), lock.packages.end(), [](const LockPackage& a, const LockPackage& b) {
    if (a.name != b.name) return a.name < b.name;
    return version_less(a.version, b.version);
  });
  for (auto& v : lock.verified) sort_extras(v.extras);
  std::sort(lock.verified.begin(), lock.verified.end(), [](const LockVerdict& a, const LockVerdict& b) {
    return std::tie(a.device, a.consumer) < std::tie(b.device, b.consumer);
  });
  sort_extras(lock.cudafix_extras);
  sort_extras(lock.tool);
  sort_extras(lock.extras);
}

namespace {

// Builds one inline table, `{ k = v, ... }`, keys in the order added.
class InlineTable {
 public:
  InlineTable& raw(std::string_view key, const std::string& toml) {
    parts_.push_back(fmt::format("{} = {}", key_text(key), toml));
    return *this;
  }
  InlineTable& str(std::string_view key, const std::optional<std::string>& v) {
    if (v) raw(key, toml_string(*v));
    return *this;
  }
  InlineTable& extras(const LockExtras& e) {
    for (const auto& x : e) raw(x.key, x.toml);
    return *this;
  }
  [[nodiscard]] std::string text() const {
    if (parts_.empty()) return "{}";
    std::string out = "{ ";
    for (std::size_t i = 0; i < parts_.size(); ++i) out += (i ? ", " : "") + parts_[i];
    return out + " }";
  }

 private:
  std::vector<std::string> parts_;
};

std::string file_text(const LockFile& f, FileKind kind) {
  InlineTable t;
  if (kind != FileKind::archive) t.str("name", f.name);
  if (kind == FileKind::archive) t.str("url", f.url).str("path", f.path);
  if (f.upload_time && kind != FileKind::archive) t.raw("upload-time", *f.upload_time);
  if (kind != FileKind::archive) t.str("url", f.url).str("path", f.path);
  if (f.size) t.raw("size", std::to_string(*f.size));
  if (f.upload_time && kind == FileKind::archive) t.raw("upload-time", *f.upload_time);
  if (kind == FileKind::archive) t.str("subdirectory", f.subdirectory);
  InlineTable h;
  for (const auto& [algorithm, digest] : f.hashes.digests) h.raw(algorithm, toml_string(digest));
  t.raw("hashes", h.text());
  return t.extras(f.extras).text();
}

void line(std::string& out, std::string_view key, const std::string& toml) {
  out += fmt::format("{} = {}\n", key_text(key), toml);
}

void string_line(std::string& out, std::string_view key, const std::optional<std::string>& v) {
  if (v) line(out, key, toml_string(*v));
}

// An array: `key = ["a", "b"]` for strings, one inline table a line for tables.
void list_line(std::string& out, std::string_view key, const std::vector<std::string>& items, bool tables) {
  if (items.empty()) return;
  if (!tables) {
    std::string a = "[";
    for (std::size_t i = 0; i < items.size(); ++i) a += (i ? ", " : "") + toml_string(items[i]);
    line(out, key, a + "]");
    return;
  }
  std::string a = "[\n";
  for (const auto& item : items) a += fmt::format("    {},\n", item);
  line(out, key, a + "]");
}

void extras_lines(std::string& out, const LockExtras& e) {
  for (const auto& x : e) line(out, x.key, x.toml);
}

void write_package_tool(std::string& out, const LockPackage& p) {
  if (!p.tool.empty()) {
    out += "\n[packages.tool]\n";
    extras_lines(out, p.tool);
  }
  if (p.cudafix.empty()) return;
  out += "\n[packages.tool.cudafix]\n";
  string_line(out, "record", p.cudafix.record);
  std::vector<std::string> libraries, resolutions;
  for (const auto& l : p.cudafix.libraries)
    libraries.push_back(
        InlineTable().str("path", l.path).str("soname", l.soname).str("sha256", l.sha256).extras(l.extras).text());
  for (const auto& r : p.cudafix.resolutions)
    resolutions.push_back(InlineTable()
                              .str("consumer", r.consumer)
                              .str("soname", r.soname)
                              .str("provider", r.provider)
                              .extras(r.extras)
                              .text());
  list_line(out, "libraries", libraries, true);
  list_line(out, "resolutions", resolutions, true);
  extras_lines(out, p.cudafix.extras);
}

void write_package(std::string& out, const LockPackage& p) {
  out += "\n[[packages]]\n";
  string_line(out, "name", p.name);
  string_line(out, "version", p.version);
  string_line(out, "marker", p.marker);
  string_line(out, "requires-python", p.requires_python);
  list_line(out, "dependencies", p.dependencies, true);
  string_line(out, "index", p.index);
  if (p.vcs) line(out, "vcs", *p.vcs);
  if (p.directory) line(out, "directory", *p.directory);
  if (p.archive) line(out, "archive", file_text(*p.archive, FileKind::archive));
  if (p.sdist) line(out, "sdist", file_text(*p.sdist, FileKind::sdist));
  std::vector<std::string> wheels;
  for (const auto& w : p.wheels) wheels.push_back(file_text(w, FileKind::wheel));
  list_line(out, "wheels", wheels, true);
  list_line(out, "attestation-identities", p.attestation_identities, true);
  extras_lines(out, p.extras);
  write_package_tool(out, p);
}

void write_tool(std::string& out, const Lock& lock) {
  if (!lock.tool.empty()) {
    out += "\n[tool]\n";
    extras_lines(out, lock.tool);
  }
  if (lock.verified.empty() && lock.cudafix_extras.empty()) return;
  out += "\n[tool.cudafix]\n";
  std::vector<std::string> verified;
  for (const auto& v : lock.verified) {
    InlineTable t;
    t.str("device", v.device).str("driver", v.driver);
    if (v.cuda) t.raw("cuda", std::to_string(*v.cuda));
    t.str("cudnn", v.cudnn).str("consumer", v.consumer).str("cudnn-path", v.cudnn_path);
    if (v.at) t.raw("at", *v.at);
    verified.push_back(t.extras(v.extras).text());
  }
  list_line(out, "verified", verified, true);
  extras_lines(out, lock.cudafix_extras);
}

}  // namespace

std::string write_lock(const Lock& given) {
  Lock lock = given;
  sort_lock(lock);
  std::string out;
  string_line(out, "lock-version", lock.lock_version);
  list_line(out, "environments", lock.environments, false);
  string_line(out, "requires-python", lock.requires_python);
  list_line(out, "extras", lock.extras_names, false);
  list_line(out, "dependency-groups", lock.dependency_groups, false);
  list_line(out, "default-groups", lock.default_groups, false);
  string_line(out, "created-by", lock.created_by);
  extras_lines(out, lock.extras);
  if (lock.packages.empty()) line(out, "packages", "[]");
  for (const auto& p : lock.packages) write_package(out, p);
  write_tool(out, lock);
  return out;
}

}  // namespace cudafix::resolver::inline pep
