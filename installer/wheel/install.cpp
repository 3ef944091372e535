// Validating a wheel whole before anything is written (installer/wheel/install.hpp): its zip, its
// dist-info, RECORD against every member, each target; and the file name pip would give it.
#include "installer/wheel/install.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "installer/txn/file_ops.hpp"
#include "installer/wheel/install_parts.hpp"
#include "installer/wheel/mapped_file.hpp"
#include "installer/wheel/read.hpp"
#include "installer/wheel/zip_reader.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/dist_info.hpp"
#include "resolver/env/state_folder.hpp"
#include "resolver/pep/pep440.hpp"
#include "resolver/pep/wheel_name.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer {
namespace {

namespace fs = std::filesystem;
namespace r = cudafix::resolver;

struct RecordEntry {
  std::string algorithm, hash;
  std::optional<std::uint64_t> size;
  bool operator==(const RecordEntry&) const = default;
};

// RECORD's rows by their normal name (`./a/x` is `a/x`, as pypa/installer's and pip's paths
// compare after normalisation), a UTF-8 byte order mark before the first row dropped; a row
// listed twice the same is one row, twice differently a refusal.
std::map<std::string, RecordEntry> parse_wheel_record(std::string text, const std::string& wheel) {
  auto parsed = r::parse_record(record_text_without_bom(std::move(text)), wheel + "!RECORD");
  if (!parsed.diagnostics.empty()) refuse(wheel, "RECORD", parsed.diagnostics.front().message);
  std::map<std::string, RecordEntry> out;
  for (const auto& row : parsed.rows) {
    const std::string path(row.path);
    if (const auto why = zip::bad_name(path); !why.empty()) refuse(wheel, path, "a RECORD row refused for " + why);
    RecordEntry e;
    e.algorithm = std::string(row.hash_algo());
    if (!e.algorithm.empty() && !r::is_record_digest(e.algorithm))
      refuse(wheel, path,
             fmt::format("RECORD hashes it with {}, which is not taken (sha256, sha384 or sha512)", e.algorithm));
    e.hash = std::string(row.hash);
    e.size = row.size();
    const auto [it, fresh] = out.emplace(zip::normal_name(path), e);
    if (!fresh && !(it->second == e)) refuse(wheel, path, "listed twice in RECORD, with different hashes or sizes");
  }
  return out;
}

// Why a console or GUI script's name is refused, or empty. pypa/installer writes any name that
// stays in bin/ (`.tool`, `a..b`); a folder in it, `.`, `..` and control bytes are refused.
std::string bad_script_name(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return "not a file name";
  if (name.find('/') != std::string_view::npos || name.find('\\') != std::string_view::npos) return "a folder in it";
  return zip::bad_name(name);
}

}  // namespace

[[noreturn]] void refuse(const std::string& wheel, const std::string& member, const std::string& why) {
  throw r::Error(
      fmt::format("{}: {}{}; nothing was installed", wheel, member.empty() ? "" : zip::shown(member) + ": ", why));
}

// Where a wheel member goes: the scheme folder and the path below it.
std::string target_of(const ValidatedWheel& w, const std::string& name, const r::EnvLayout& layout) {
  const std::string data = w.dist_info.substr(0, w.dist_info.size() - 10) + ".data/";
  const std::string pure = layout.purelib() ? layout.purelib()->path : layout.root;
  const std::string plat = layout.platlib() ? layout.platlib()->path : pure;
  if (!name.starts_with(data)) return (w.root_is_purelib ? pure : plat) + "/" + name;
  const std::string rest = name.substr(data.size());
  const auto slash = rest.find('/');
  const std::string scheme = rest.substr(0, slash), below = rest.substr(slash + 1);
  if (scheme == "purelib") return pure + "/" + below;
  if (scheme == "platlib") return plat + "/" + below;
  if (scheme == "scripts") return layout.root + "/bin/" + below;
  if (scheme == "headers")
    return fmt::format("{}/include/site/python{}/{}/{}", layout.root, layout.python_version.value_or("3"), w.name,
                       below);
  return layout.root + "/" + below;  // data
}

// A shebang line naming `python`, as pypa/installer's scripts.py builds it: `#!PATH` where the
// kernel can run it (no space, at most 127 bytes with `#!` and the newline: Linux cuts a longer
// line), else a /bin/sh script that execs PATH, quoted for the shell, on itself.
std::string shebang_for(const std::string& python) {
  if (python.find(' ') == std::string::npos && python.size() + 3 <= 127) return "#!" + python;
  // shlex.quote: as is when every byte is one the shell takes bare, else single-quoted.
  const bool bare = !python.empty() && std::all_of(python.begin(), python.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("@%+=:,./-_", c) != nullptr;
  });
  std::string quoted = python;
  if (!bare) {
    quoted = "'";
    for (char c : python) quoted += c == '\'' ? std::string("'\"'\"'") : std::string(1, c);
    quoted += "'";
  }
  return "#!/bin/sh\n'''exec' " + quoted + " \"$0\" \"$@\"\n' '''";
}

std::vector<ScriptEntry> script_entries(const std::string& entry_points) {
  std::vector<ScriptEntry> out;
  std::string section;
  for (auto raw : r::split(entry_points, '\n')) {
    const auto line = r::trim(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      section = std::string(r::trim(line.substr(1, line.size() - 2)));
      continue;
    }
    if (section != "console_scripts" && section != "gui_scripts") continue;
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    ScriptEntry e;
    e.name = std::string(r::trim(line.substr(0, eq)));
    e.value = std::string(r::trim(line.substr(eq + 1)));
    std::string ref = e.value;
    if (const auto bracket = ref.find('['); bracket != std::string::npos)
      ref = std::string(r::trim(ref.substr(0, bracket)));
    const auto colon = ref.find(':');
    e.module = std::string(r::trim(std::string_view(ref).substr(0, colon)));
    if (colon != std::string::npos) e.attr = std::string(r::trim(std::string_view(ref).substr(colon + 1)));
    out.push_back(std::move(e));
  }
  return out;
}

namespace {

// pypa/installer's entry point pattern: `[\w.]+` (a word character: a letter, digit or `_`, any
// non-ASCII letter too) for the module and for the callable.
bool dotted_words(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || static_cast<unsigned char>(c) >= 0x80;
  });
}

}  // namespace

std::string entry_point_problem(const ScriptEntry& e) {
  if (!dotted_words(e.module)) return "names no module (MODULE:CALLABLE)";
  if (e.attr.empty()) return "names no callable (MODULE:CALLABLE): its script could call nothing";
  if (!dotted_words(e.attr)) return "names no callable a script can call (MODULE:CALLABLE)";
  return "";
}

// Console and GUI scripts from entry_points.txt, as pypa/installer writes them.
std::vector<std::pair<std::string, std::string>> scripts_of(const std::string& entry_points,
                                                            const std::string& python) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : script_entries(entry_points)) {
    const std::string top = e.attr.substr(0, e.attr.find('.'));
    out.emplace_back(e.name, fmt::format("{}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom {} import {}\n"
                                         "if __name__ == \"__main__\":\n"
                                         "    sys.argv[0] = re.sub(r\"(-script\\.pyw|\\.exe)?$\", \"\", sys.argv[0])\n"
                                         "    sys.exit({}())\n",
                                         shebang_for(python), e.module, top, e.attr));
  }
  return out;
}

ValidatedWheel validate_wheel(const std::string& path) {
  const MappedFile file(path);
  auto w = validate_wheel_bytes(file.data(), file.size(), path);
  const auto parsed_name = r::parse_wheel_name(r::base_name(path));
  if (!parsed_name) refuse(path, "", "its file name is not a wheel's (NAME-VERSION-TAGS.whl)");
  if (r::normalize_name(parsed_name->name) != r::normalize_name(w.name))
    refuse(path, w.dist_info, fmt::format("names {}, but the file name says {}", w.name, parsed_name->name));
  // Equal as PEP 440 versions (1.0 is 1.0.0), or as text where either is none: pytz's 2010i is
  // one pypa/installer and pip 23 install.
  const auto v_file = r::Version::parse(parsed_name->version), v_info = r::Version::parse(w.version);
  const bool same = v_file && v_info ? *v_file == *v_info : parsed_name->version == w.version;
  if (!same)
    refuse(path, w.dist_info,
           fmt::format("has version {}, but the file name says {}", w.version, parsed_name->version));
  w.name_tags = parsed_name->tags;
  return w;
}

void check_usable(const ValidatedWheel& w, const std::vector<std::string>& supported,
                  const std::string& python_version) {
  r::WheelName name;
  name.tags = w.name_tags.empty() ? w.tags : w.name_tags;
  if (!r::tag_rank(name, supported)) refuse(w.path, "", r::unsupported_tags_text(name, supported));
  if (!w.requires_python || python_version.empty()) return;
  const auto spec = r::SpecifierSet::parse(*w.requires_python);
  const auto v = r::Version::parse(python_version);
  if (spec && v && !spec->contains(*v, true))
    refuse(w.path, w.dist_info + "/METADATA",
           fmt::format("its Requires-Python is {}, and this environment's Python is {}", *w.requires_python,
                       python_version));
}

namespace {

// The archive's files (its folder entries install nothing).
std::vector<ZipMember> members_of(const zip::Archive& archive) {
  std::vector<ZipMember> out;
  for (std::size_t i = 0; i < archive.entries().size(); ++i) {
    const zip::Entry& e = archive.entries()[i];
    if (e.folder) continue;
    ZipMember m;
    m.name = e.name;
    m.entry = i;
    m.method = e.method;
    m.crc = e.crc;
    m.compressed = e.compressed;
    m.size = e.size;
    m.data_offset = e.data_offset;
    m.executable = e.executable();
    out.push_back(std::move(m));
  }
  return out;
}

// The one .dist-info folder, and the name and version its name gives.
void take_dist_info(ValidatedWheel& w, const std::string& path) {
  std::set<std::string> infos;
  for (const auto& m : w.members) {
    const auto top = m.name.substr(0, m.name.find('/'));
    if (top.ends_with(".dist-info")) infos.insert(top);
  }
  if (infos.size() != 1)
    refuse(path, "", infos.empty() ? "no .dist-info folder" : fmt::format("{} .dist-info folders", infos.size()));
  w.dist_info = *infos.begin();
  const std::string stem = w.dist_info.substr(0, w.dist_info.size() - 10);
  const auto dash = stem.find('-');
  if (dash == std::string::npos) refuse(path, w.dist_info, "its name has no version");
  w.name = stem.substr(0, dash);
  w.version = stem.substr(dash + 1);
}

// Where each member lands, by scheme: the root, .data/purelib and .data/platlib are one
// site-packages in the environments cudafix writes, so `a/x` and `.data/purelib/a/x` collide.
std::map<std::string, const ZipMember*> targets_of(const ValidatedWheel& w, const std::string& path) {
  const std::string data_prefix = w.name + "-" + w.version + ".data/";
  std::map<std::string, const ZipMember*> by_target;
  for (const auto& m : w.members) {
    const auto top = m.name.substr(0, m.name.find('/'));
    if (top.ends_with(".data") && top + "/" != data_prefix) refuse(path, m.name, "a .data folder of another dist");
    std::string key = "site/" + m.name;
    if (m.name.starts_with(data_prefix)) {
      const auto slash = m.name.find('/', data_prefix.size());
      const std::string scheme = m.name.substr(data_prefix.size(), slash - data_prefix.size());
      static const std::set<std::string> schemes{"purelib", "platlib", "scripts", "headers", "data"};
      if (!schemes.count(scheme)) refuse(path, m.name, fmt::format("an unknown .data scheme '{}'", scheme));
      if (slash == std::string::npos) refuse(path, m.name, "a .data scheme that is a file, not a folder");
      const std::string below = m.name.substr(slash + 1);
      key = (scheme == "purelib" || scheme == "platlib" ? std::string("site") : scheme) + "/" + below;
      const std::string rel = scheme == "data" ? below : scheme == "scripts" ? "bin/" + below : "";
      if (const auto why = r::protected_file(rel); !why.empty())
        refuse(path, m.name, fmt::format("it would write {}", why));
    }
    if (const auto [it, fresh] = by_target.emplace(key, &m); !fresh)
      refuse(path, m.name, fmt::format("it would write the file {} writes too", it->second->name));
  }
  return by_target;
}

// Each console or GUI script: a callable named, a name that is a file of its own in bin/, and
// no .data/scripts/ file or folder of that name.
void check_scripts(const ValidatedWheel& w, const std::map<std::string, const ZipMember*>& by_target,
                   const std::string& path) {
  for (const auto& entry : script_entries(w.entry_points)) {
    const std::string& name = entry.name;
    const std::string ep = w.dist_info + "/entry_points.txt";
    if (const auto why = entry_point_problem(entry); !why.empty())
      refuse(path, ep, fmt::format("the entry point '{} = {}' {}", zip::shown(name), zip::shown(entry.value), why));
    if (const auto why = bad_script_name(name); !why.empty())
      refuse(path, ep, fmt::format("a script named '{}' ({})", zip::shown(name), why));
    if (const auto why = r::protected_file("bin/" + name); !why.empty())
      refuse(path, ep, fmt::format("a script named '{}' would replace {}", name, why));
    // A .data/scripts/ file of that name, or a folder (`.data/scripts/NAME/x`): the script's file
    // and the folder cannot both be bin/NAME.
    const std::string file = "scripts/" + name, folder = file + "/";
    auto in_scripts = by_target.find(file);
    if (in_scripts == by_target.end()) in_scripts = by_target.lower_bound(folder);
    if (in_scripts != by_target.end() && (in_scripts->first == file || in_scripts->first.starts_with(folder)))
      refuse(path, ep,
             fmt::format("a script named '{}', which the wheel's .data/scripts/ holds too ({})", name,
                         in_scripts->second->name));
  }
}

// RECORD lists every member with a hash, and nothing else; a size, where it gives one, is the
// member's. Each member takes its hash from it.
void check_record(ValidatedWheel& w, const zip::Archive& archive, const std::string& record_text,
                  const std::string& path) {
  const auto record = parse_wheel_record(record_text, path);
  std::set<std::string> names;
  for (auto& m : w.members) {
    names.insert(m.name);
    // RECORD's signatures (RECORD.jws, RECORD.p7s) sign RECORD, so it cannot hash them: they are
    // installed unchecked, as pip and pypa/installer install them, and the installed RECORD
    // lists them with their hashes, as every file installed, so that an uninstall removes them.
    if (m.name == w.dist_info + "/RECORD" || m.name == w.dist_info + "/RECORD.jws" ||
        m.name == w.dist_info + "/RECORD.p7s")
      continue;
    const auto it = record.find(m.name);
    if (it == record.end()) refuse(path, m.name, "not listed in RECORD");
    if (it->second.hash.empty()) refuse(path, m.name, "RECORD gives it no hash");
    if (it->second.size && *it->second.size != m.size)
      refuse(path, m.name, fmt::format("RECORD says {} bytes, the archive {}", *it->second.size, m.size));
    m.record_algorithm = it->second.algorithm;
    m.record_hash = it->second.hash;
  }
  // A row may name a folder entry of the archive (`pkg/`), which installs nothing.
  for (const zip::Entry& e : archive.entries())
    if (e.folder) names.insert(e.name + "/");
  for (const auto& [name, e] : record)
    if (!names.count(name)) refuse(path, name, "listed in RECORD but not in the archive");
}

}  // namespace

ValidatedWheel validate_wheel_bytes(const unsigned char* d, std::size_t size, const std::string& path) {
  const zip::Archive archive = as_install_refusal([&] { return zip::Archive(d, size, path); });
  ValidatedWheel w;
  w.path = path;
  w.size = size;
  w.unpacked = archive.unpacked();
  w.members = members_of(archive);
  take_dist_info(w, path);
  const auto by_target = targets_of(w, path);
  const auto text_of = [&](const std::string& member) -> std::optional<std::string> {
    const zip::Entry* e = archive.find(w.dist_info + "/" + member);
    if (!e) return std::nullopt;
    return as_install_refusal([&] { return archive.read(*e, zip::k_max_metadata); });
  };
  for (const char* required : {"METADATA", "WHEEL", "RECORD"})
    if (std::none_of(w.members.begin(), w.members.end(),
                     [&](const ZipMember& m) { return m.name == w.dist_info + "/" + required; }))
      refuse(path, w.dist_info, fmt::format("no {}", required));
  // METADATA is pip's to read, not the installer's, but for its Name: the spelling pip list
  // shows, which is how every command names the dist to a user.
  if (const auto* md = archive.find(w.dist_info + "/METADATA"); md->size > zip::k_max_metadata)
    refuse(path, md->name,
           fmt::format("{} bytes, over the {} MiB a metadata member may have", md->size, zip::k_max_metadata >> 20));
  const auto project = r::header_value(*text_of("METADATA"), "Name");
  if (!project || project->empty()) refuse(path, w.dist_info + "/METADATA", "no Name header");
  if (r::normalize_name(*project) != r::normalize_name(w.name))
    refuse(path, w.dist_info + "/METADATA",
           fmt::format("its Name is {}, its folder's {}", zip::shown(*project), w.name));
  w.project = *project;
  w.requires_python = r::header_value(*text_of("METADATA"), "Requires-Python");
  const auto wheel_text = text_of("WHEEL");
  const auto version = r::header_value(*wheel_text, "Wheel-Version");
  if (!version || version->substr(0, version->find('.')) != "1")
    refuse(path, w.dist_info + "/WHEEL",
           fmt::format("Wheel-Version {} (only 1.x is installed)", version.value_or("missing")));
  w.root_is_purelib = r::header_value(*wheel_text, "Root-Is-Purelib").value_or("true") == "true";
  for (auto line : r::split(*wheel_text, '\n'))
    if (line.starts_with("Tag:")) w.tags.emplace_back(r::trim(line.substr(4)));
  w.entry_points = text_of("entry_points.txt").value_or("");
  check_scripts(w, by_target, path);
  check_record(w, archive, *text_of("RECORD"), path);
  return w;
}

std::vector<std::string> check_targets(const ValidatedWheel& w, const r::EnvLayout& layout) {
  std::map<std::string, std::string> writers;  // target -> the member (or script) that writes it
  const auto claim = [&](const std::string& target, const std::string& by) {
    const std::string normal = r::lexically_normal(target);
    if (!r::is_within(normal, layout.root)) refuse(w.path, by, "it would be written outside the environment");
    if (const auto why = r::protected_file(r::relative_to(normal, layout.root)); !why.empty())
      refuse(w.path, by, fmt::format("it would write {}", why));
    if (const auto [it, fresh] = writers.emplace(normal, by); !fresh)
      refuse(w.path, by, fmt::format("it would write {}, which {} writes too", normal, it->second));
  };
  for (const auto& m : w.members) {
    if (m.name == w.dist_info + "/RECORD" || m.name == w.dist_info + "/INSTALLER" ||
        m.name == w.dist_info + "/REQUESTED")
      continue;
    claim(target_of(w, m.name, layout), m.name);
  }
  for (const auto& [name, body] : scripts_of(w.entry_points, "python"))
    claim(layout.root + "/bin/" + name, w.dist_info + "/entry_points.txt (the script " + name + ")");
  std::vector<std::string> targets;
  for (const auto& [target, by] : writers) targets.push_back(target);
  return targets;
}

std::string wheel_file_name(const ValidatedWheel& w) {
  std::vector<std::string> parts[3];
  for (const auto& tag : w.tags) {
    const auto pieces = r::split(tag, '-');
    if (pieces.size() != 3) continue;
    for (std::size_t i = 0; i < 3; ++i)
      if (std::find(parts[i].begin(), parts[i].end(), pieces[i]) == parts[i].end()) parts[i].emplace_back(pieces[i]);
  }
  if (parts[0].empty()) refuse(w.path, w.dist_info + "/WHEEL", "no Tag line, so no file name can be given");
  std::string name = w.name;
  std::replace(name.begin(), name.end(), '-', '_');
  return fmt::format("{}-{}-{}-{}-{}.whl", name, w.version, fmt::join(parts[0], "."), fmt::join(parts[1], "."),
                     fmt::join(parts[2], "."));
}

}  // namespace cudafix::installer
