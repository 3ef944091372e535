#include "installer/wheel/install.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "installer/txn/file_ops.hpp"
#include "installer/wheel/mapped_file.hpp"
#include "installer/wheel/read.hpp"
#include "installer/wheel/zip_reader.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/parallel.hpp"
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

[[noreturn]] void refuse(const std::string& wheel, const std::string& member, const std::string& why) {
  throw r::Error(
      fmt::format("{}: {}{}; nothing was installed", wheel, member.empty() ? "" : zip::shown(member) + ": ", why));
}

// The zip reader's refusals, said as the installer's.
template <typename F>
auto as_install_refusal(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const r::Error& e) {
    throw r::Error(std::string(e.what()) + "; nothing was installed");
  }
}

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

// Console and GUI scripts from entry_points.txt, as pypa/installer writes them.
std::vector<std::pair<std::string, std::string>> scripts_of(const std::string& entry_points,
                                                            const std::string& python) {
  std::vector<std::pair<std::string, std::string>> out;
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
    const std::string name(r::trim(line.substr(0, eq)));
    std::string ref(r::trim(line.substr(eq + 1)));
    if (const auto bracket = ref.find('['); bracket != std::string::npos)
      ref = std::string(r::trim(ref.substr(0, bracket)));
    const auto colon = ref.find(':');
    const std::string module = ref.substr(0, colon);
    const std::string attr = colon == std::string::npos ? "" : ref.substr(colon + 1);
    const std::string top = attr.substr(0, attr.find('.'));
    out.emplace_back(name, fmt::format("{}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom {} import {}\n"
                                       "if __name__ == \"__main__\":\n"
                                       "    sys.argv[0] = re.sub(r\"(-script\\.pyw|\\.exe)?$\", \"\", sys.argv[0])\n"
                                       "    sys.exit({}())\n",
                                       shebang_for(python), module, top, attr));
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

// Whether an errno says the file system has no room left (ENOSPC; EDQUOT, a quota's).
bool out_of_space(int err) { return err == ENOSPC || err == EDQUOT; }

// A member's bytes written to `fd` whole; returns RECORD's form of its SHA-256, and feeds
// `other` (RECORD's digest when not SHA-256); the CRC is checked by the reader. Its blocks are
// reserved first (posix_fallocate): a mapped file's pages get their blocks when first written,
// and a file system found full then raises SIGBUS, which no check can catch. Reserved, it is
// inflated by libdeflate straight into the file mapped for writing (its size is known: no
// streaming, no copy); where the file system cannot reserve (EOPNOTSUPP, EINVAL), it is
// streamed through write(2), whose ENOSPC is an error like any other. `full(errno)` throws
// the refusal for a file system without room.
std::string write_member(const zip::Archive& archive, const zip::Entry& e, int fd, const std::string& path,
                         std::optional<r::DigestStream>& other, const std::function<void(int)>& full) {
  r::Sha256Stream hash;
  if (e.size == 0) {
    as_install_refusal([&] { archive.extract(e, nullptr); });
    return hash.record_digest();
  }
  const int err = txn::reserve_blocks(fd, e.size, path);
  if (out_of_space(err)) full(err);
  if (err == EOPNOTSUPP || err == EINVAL) {
    as_install_refusal([&] {
      archive.stream(e, [&](const unsigned char* p, std::size_t n) {
        txn::write_all(fd, p, n, path);
        hash.update(p, n);
        if (other) other->update(p, n);
      });
    });
    return hash.record_digest();
  }
  if (err != 0) throw r::Error(fmt::format("{}: posix_fallocate: {}", path, std::strerror(err)));
  void* p = ::mmap(nullptr, e.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw r::Error(fmt::format("{}: mmap: {}", path, std::strerror(errno)));
  const std::unique_ptr<void, std::function<void(void*)>> unmap(p, [&](void* q) { ::munmap(q, e.size); });
  auto* out = static_cast<unsigned char*>(p);
  as_install_refusal([&] { archive.extract(e, out); });
  hash.update(out, e.size);
  if (other) other->update(out, e.size);
  return hash.record_digest();
}

// The mount point of the file system holding `path` (a real path): its highest folder on the
// same device. What a full-disk message names.
std::string mount_point_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path;
  std::string at = path;
  for (std::string up = r::parent_dir(at); up != at; at = up, up = r::parent_dir(at)) {
    struct stat above {};
    if (::stat(up.c_str(), &above) != 0 || above.st_dev != st.st_dev) break;
  }
  return at;
}

// What staging a wheel needs free, beyond its files' blocks: room for what else the transaction
// writes (RECORD, INSTALLER, console scripts, folders, the journal's records of each file's put).
std::uint64_t staging_margin(std::uint64_t blocks_bytes, std::size_t files) {
  return std::max<std::uint64_t>(blocks_bytes / 100, std::uint64_t{4} << 20) + std::uint64_t{files} * 1024;
}

}  // namespace

ValidatedWheel validate_wheel(const std::string& path) {
  const MappedFile file(path);
  auto w = validate_wheel_bytes(file.data(), file.size(), path);
  const auto parsed_name = r::parse_wheel_name(r::base_name(path));
  if (!parsed_name) refuse(path, "", "its file name is not a wheel's (NAME-VERSION-TAGS.whl)");
  if (r::normalize_name(parsed_name->name) != r::normalize_name(w.name))
    refuse(path, w.dist_info, fmt::format("names {}, but the file name says {}", w.name, parsed_name->name));
  const auto v_file = r::Version::parse(parsed_name->version), v_info = r::Version::parse(w.version);
  if (!v_file || !v_info || !(*v_file == *v_info))
    refuse(path, w.dist_info,
           fmt::format("has version {}, but the file name says {}", w.version, parsed_name->version));
  return w;
}

ValidatedWheel validate_wheel_bytes(const unsigned char* d, std::size_t size, const std::string& path) {
  const zip::Archive archive = as_install_refusal([&] { return zip::Archive(d, size, path); });
  ValidatedWheel w;
  w.path = path;
  w.size = size;
  w.unpacked = archive.unpacked();
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
    w.members.push_back(std::move(m));
  }

  // The wheel's own rules.
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
  const std::string data_prefix = stem + ".data/";
  std::map<std::string, const ZipMember*> by_name;
  // Where each member lands, by scheme: the root, .data/purelib and .data/platlib are one
  // site-packages in the environments cudafix writes, so `a/x` and `.data/purelib/a/x` collide.
  std::map<std::string, const ZipMember*> by_target;
  for (const auto& m : w.members) {
    by_name[m.name] = &m;
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
  const auto text_of = [&](const std::string& member) -> std::optional<std::string> {
    const zip::Entry* e = archive.find(w.dist_info + "/" + member);
    if (!e) return std::nullopt;
    return as_install_refusal([&] { return archive.read(*e, zip::k_max_metadata); });
  };
  for (const char* required : {"METADATA", "WHEEL", "RECORD"})
    if (!by_name.count(w.dist_info + "/" + required)) refuse(path, w.dist_info, fmt::format("no {}", required));
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
  const auto wheel_text = text_of("WHEEL");
  const auto version = r::header_value(*wheel_text, "Wheel-Version");
  if (!version || version->substr(0, version->find('.')) != "1")
    refuse(path, w.dist_info + "/WHEEL",
           fmt::format("Wheel-Version {} (only 1.x is installed)", version.value_or("missing")));
  w.root_is_purelib = r::header_value(*wheel_text, "Root-Is-Purelib").value_or("true") == "true";
  for (auto line : r::split(*wheel_text, '\n'))
    if (line.starts_with("Tag:")) w.tags.emplace_back(r::trim(line.substr(4)));
  w.entry_points = text_of("entry_points.txt").value_or("");
  for (const auto& [name, body] : scripts_of(w.entry_points, "python")) {
    (void)body;
    const std::string ep = w.dist_info + "/entry_points.txt";
    if (const auto why = bad_script_name(name); !why.empty())
      refuse(path, ep, fmt::format("a script named '{}' ({})", zip::shown(name), why));
    if (const auto why = r::protected_file("bin/" + name); !why.empty())
      refuse(path, ep, fmt::format("a script named '{}' would replace {}", name, why));
    if (by_target.count("scripts/" + name))
      refuse(path, ep, fmt::format("a script named '{}', which the wheel's .data/scripts/ holds too", name));
  }
  // RECORD lists every member with a hash, and nothing else; a size, where it gives one, is the member's.
  const auto record = parse_wheel_record(*text_of("RECORD"), path);
  for (auto& m : w.members) {
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
  for (const auto& [name, e] : record)
    if (!by_name.count(name)) refuse(path, name, "listed in RECORD but not in the archive");
  return w;
}

void check_targets(const ValidatedWheel& w, const r::EnvLayout& layout) {
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
}

namespace {

// A file a wheel writes: where it goes, where it is staged, and what RECORD says of it.
struct Staged {
  std::string target, staged, hash;
  std::uint64_t size = 0;
  bool executable = false;
  bool put_already = false;  // an earlier wheel of the transaction writes it too: its put stands
};

// One wheel being staged: the file read again and held to what was validated (a file changed
// since, shorter or with other members, would otherwise be read at the old offsets), and each
// member's staged file.
struct WheelStaging {
  WheelStaging(const ValidatedWheel& wheel, const r::EnvLayout& layout)
      : w(wheel),
        file(wheel.path),
        archive(as_install_refusal([&] { return zip::Archive(file.data(), file.size(), wheel.path); })),
        staged(wheel.members.size()) {
    check_targets(w, layout);
    const auto same = [&](const ZipMember& m) {
      if (m.entry >= archive.entries().size()) return false;
      const zip::Entry& e = archive.entries()[m.entry];
      return e.name == m.name && e.crc == m.crc && e.size == m.size && e.compressed == m.compressed &&
             e.data_offset == m.data_offset && e.method == m.method;
    };
    if (file.size() != w.size || !std::all_of(w.members.begin(), w.members.end(), same))
      refuse(w.path, "", "the file changed after it was validated");
  }
  const ValidatedWheel& w;
  const MappedFile file;
  const zip::Archive archive;
  std::vector<Staged> staged;  // the members', then the generated files

  [[nodiscard]] bool generated_member(const std::string& name) const {
    return name == w.dist_info + "/RECORD" || name == w.dist_info + "/INSTALLER" || name == w.dist_info + "/REQUESTED";
  }
  // Every file the install writes, normal: the members (RECORD, INSTALLER and REQUESTED are
  // written anew), the console scripts and the dist-info's own.
  [[nodiscard]] std::vector<std::string> targets(const r::EnvLayout& layout) const {
    std::vector<std::string> out;
    for (const auto& m : w.members)
      if (!generated_member(m.name)) out.push_back(r::lexically_normal(target_of(w, m.name, layout)));
    for (const auto& [name, body] : scripts_of(w.entry_points, "python"))
      out.push_back(r::lexically_normal(layout.root + "/bin/" + name));
    const std::string site = w.root_is_purelib ? layout.purelib()->path : layout.platlib()->path;
    for (const char* own : {"/RECORD", "/INSTALLER", "/REQUESTED"})
      out.push_back(r::lexically_normal(site + "/" + w.dist_info + own));
    return out;
  }
};

// Wheels staged into one transaction's new/: what their members share while they are inflated
// side by side (the folders made, the first failure, the progress), and each wheel's files.
class Stager {
 public:
  Stager(const r::EnvLayout& layout, txn::Transaction& tx,
         const std::function<void(std::uint64_t, std::uint64_t)>& progress)
      : layout_(layout), tx_(tx), root_(layout.root_real), python_(layout.root + "/bin/python"), progress_(progress) {}

  // Free space first: the staged copies sit beside the files they replace until the renames. (And
  // the bytes the progress counts to.)
  void check_free_space(const std::vector<std::unique_ptr<WheelStaging>>& wheels) {
    for (const auto& ws : wheels) total_ += ws->w.unpacked;
    struct statvfs fs_stat {};
    if (::statvfs(tx_.new_dir().c_str(), &fs_stat) != 0) return;
    free_bytes_ = std::uint64_t{fs_stat.f_bavail} * fs_stat.f_frsize;
    const std::uint64_t block = std::max<std::uint64_t>(fs_stat.f_frsize, 1);
    std::size_t files = 0;
    for (const auto& ws : wheels) {
      for (const auto& m : ws->w.members) needed_ += (m.size + block - 1) / block * block;
      files += ws->w.members.size();
    }
    needed_ += staging_margin(needed_, files);
    staging_what_ = wheels.size() == 1 ? "the wheel" : fmt::format("the {} wheels", wheels.size());
    if (free_bytes_ < needed_)
      throw r::Error(
          fmt::format("{}: {} MiB free on the environment's file system, {} MiB needed to stage {}; "
                      "nothing was installed",
                      root_, free_bytes_ >> 20, (needed_ + (1 << 20) - 1) >> 20, wheel_names(wheels)));
  }

  // The members of `wheels` inflated on `threads` threads, the largest first whichever wheel
  // holds it, so that the threads finish together. The first failure stops the members not yet
  // begun. A full disk is said once every thread is done, before what it caused elsewhere (a
  // folder that could not be made).
  void stage_members(const std::vector<WheelStaging*>& wheels, unsigned threads) {
    std::vector<std::pair<WheelStaging*, std::size_t>> order;
    for (WheelStaging* ws : wheels)
      for (std::size_t i = 0; i < ws->w.members.size(); ++i) order.emplace_back(ws, i);
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return a.first->w.members[a.second].size > b.first->w.members[b.second].size;
    });
    r::parallel_for(order.size(), threads, [&](std::size_t k) {
      if (stop_) return;
      try {
        stage_member(*order[k].first, order[k].second);
      } catch (const DiskFull&) {
        stop_ = true;
      } catch (...) {
        stop_ = true;
        const std::lock_guard lock(mutex_);
        if (!failed_) failed_ = std::current_exception();
      }
    });
    if (fullest_) throw r::Error(fullest_->second);
    if (failed_) std::rethrow_exception(failed_);
  }

  // The generated files: console scripts, INSTALLER, REQUESTED, and RECORD last (cudafix's
  // hashes of what it staged). Returns what the wheel writes; its puts are planned later.
  StagedWheel finish(WheelStaging& ws, bool requested) {
    const ValidatedWheel& w = ws.w;
    StagedWheel out;
    const std::string site = w.root_is_purelib ? layout_.purelib()->path : layout_.platlib()->path;
    const std::string info = site + "/" + w.dist_info;
    const auto add_generated = [&](const std::string& target, const std::string& text, bool executable) {
      Staged s;
      s.target = target;
      s.staged = staged_path(target);
      make_parent(s.staged);
      s.put_already = restage(s.staged);
      txn::append_synced(s.staged, text);
      if (executable) ::chmod(s.staged.c_str(), 0755);
      s.hash = r::sha256_of_file(s.staged);
      s.size = text.size();
      s.executable = executable;
      ws.staged.push_back(std::move(s));
    };
    for (const auto& [name, body] : scripts_of(w.entry_points, python_)) {
      add_generated(layout_.root + "/bin/" + name, body, true);
      out.generated.push_back(layout_.root + "/bin/" + name);
    }
    add_generated(info + "/INSTALLER", "cudafix\n", false);
    out.generated.push_back(info + "/INSTALLER");
    if (requested) {
      add_generated(info + "/REQUESTED", "", false);
      out.generated.push_back(info + "/REQUESTED");
    }
    std::string record;
    for (const auto& s : ws.staged) {
      if (s.target.empty()) continue;
      std::string rel = r::relative_to(s.target, site);
      if (rel == s.target) rel = "../../../" + r::relative_to(s.target, layout_.root);  // bin/, include/ from the site
      record += fmt::format("{},sha256={},{}\n", rel, s.hash, s.size);
    }
    record += w.dist_info + "/RECORD,,\n";
    Staged s;
    s.target = info + "/RECORD";
    s.staged = staged_path(s.target);
    make_parent(s.staged);
    s.put_already = restage(s.staged);
    txn::append_synced(s.staged, record);
    s.hash = r::sha256_of_file(s.staged);  // not listed in RECORD, but what a rollback compares
    ws.staged.push_back(std::move(s));
    for (const auto& f : ws.staged) {
      if (f.target.empty()) continue;
      out.targets.push_back(f.target);
      out.bytes += f.size;
      out.puts.push_back({f.staged, f.target, f.hash, f.put_already});
    }
    return out;
  }

  void done() {
    if (progress_) progress_(total_, total_);  // the bar's end (RECORD and INSTALLER are not counted)
  }

 private:
  struct DiskFull {};
  const r::EnvLayout& layout_;
  txn::Transaction& tx_;
  const std::string root_, python_;
  const std::function<void(std::uint64_t, std::uint64_t)>& progress_;
  std::uint64_t free_bytes_ = 0, needed_ = 0, total_ = 0;
  std::string staging_what_ = "the wheel";  // what needed_ stages, as the full-disk refusal says
  std::atomic<std::uint64_t> written_{0};
  std::mutex mutex_;                                              // fullest_, failed_
  std::optional<std::pair<std::uint64_t, std::string>> fullest_;  // the member's size, the refusal
  std::exception_ptr failed_;
  std::atomic<bool> stop_{false};
  std::mutex folders_mutex_;
  std::set<std::string> folders_;

  static std::string wheel_names(const std::vector<std::unique_ptr<WheelStaging>>& wheels) {
    std::vector<std::string> names;
    for (const auto& ws : wheels) names.emplace_back(r::base_name(ws->w.path));
    return fmt::format("{}", fmt::join(names, ", "));
  }
  void wrote(std::uint64_t n) {
    const auto now = written_ += n;
    if (progress_) progress_(now, total_);
  }
  [[nodiscard]] std::string staged_path(const std::string& target) const {
    return tx_.new_dir() + "/" + r::relative_to(target, root_);
  }
  // A path several wheels of one transaction write is staged at one place (new/ holds only this
  // transaction's staging): a later wheel's bytes replace the earlier one's there, as pip
  // installing them in order leaves the file, and the one put planned for it stands, so that
  // what is on disk is moved aside once and undone once. Returns whether it was staged before.
  static bool restage(const std::string& staged_file) {
    if (!txn::exists_nofollow(staged_file)) return false;
    txn::remove_file(staged_file);
    return true;
  }
  void make_parent(const std::string& p) {
    const std::string parent = r::parent_dir(p);
    const std::lock_guard<std::mutex> lock(folders_mutex_);
    if (folders_.insert(parent).second) txn::make_dirs(parent);
  }
  // Space another process takes from here on is found when a file's blocks are reserved. Where
  // several threads find the disk full at once, each is heard and the largest member named (the
  // one the space was taken from, whichever thread got there first).
  std::function<void(int)> full(const std::string& wheel, const std::string& member, std::uint64_t size) {
    return [this, wheel, member, size](int err) {
      std::string refusal;
      try {
        refuse(wheel, member,
               fmt::format("the file system at {} is full ({}) with its {} bytes still to write: {} MiB needed to "
                           "stage {}, {} MiB were free when staging began (another process has taken space since)",
                           mount_point_of(root_), std::strerror(err), size, (needed_ + (1 << 20) - 1) >> 20,
                           staging_what_, free_bytes_ >> 20));
      } catch (const r::Error& e) {
        refusal = e.what();
      }
      {
        const std::lock_guard lock(mutex_);
        if (!fullest_ || size > fullest_->first) fullest_ = std::pair{size, refusal};
      }
      throw DiskFull{};
    };
  }
  void stage_member(WheelStaging& ws, std::size_t index);
};

void Stager::stage_member(WheelStaging& ws, std::size_t index) {
  const ValidatedWheel& w = ws.w;
  const ZipMember& m = w.members[index];
  if (ws.generated_member(m.name)) return;
  const zip::Entry& e = ws.archive.entries()[m.entry];
  Staged& s = ws.staged[index];
  s.target = target_of(w, m.name, layout_);
  s.staged = staged_path(s.target);
  const bool script = m.name.starts_with(w.dist_info.substr(0, w.dist_info.size() - 10) + ".data/scripts/");
  s.executable = m.executable;
  make_parent(s.staged);
  s.put_already = restage(s.staged);
  // O_EXCL: two members of one wheel never share a staged file (check_targets refused that).
  const int fd = txn::open_file(s.staged, O_RDWR | O_CREAT | O_EXCL, s.executable ? 0755 : 0644);
  // RECORD's digest of the wheel's bytes where it is not SHA-256, the digest the new RECORD gives.
  std::optional<r::DigestStream> wheel_digest;
  if (m.record_algorithm != "sha256") wheel_digest.emplace(m.record_algorithm);
  if (!script) {
    const std::string digest = write_member(ws.archive, e, fd, s.staged, wheel_digest, full(w.path, m.name, m.size));
    txn::start_writeback(fd);
    ::close(fd);
    if ((wheel_digest ? wheel_digest->record_digest() : digest) != m.record_hash)
      refuse(w.path, m.name, fmt::format("its bytes do not match RECORD's {}", m.record_algorithm));
    s.hash = digest;
    s.size = m.size;
    if (s.executable) ::chmod(s.staged.c_str(), 0755);
    wrote(m.size);
    return;
  }
  r::Sha256Stream wheel_hash, written_hash;
  // A script's `#!python` line names this environment's interpreter, as pypa/installer's
  // fix_shebang rewrites it: the whole first line replaced, however many pieces it spans.
  enum class Line { unread, skipping, copying } first = Line::unread;
  std::string head;  // the first bytes, until 8 tell whether the line is `#!python`
  std::uint64_t written = 0;
  const auto put = [&](const void* p, std::size_t n) {
    written_hash.update(p, n);
    txn::write_all(fd, p, n, s.staged);
    written += n;
  };
  const auto rewrite = [&](const unsigned char* p, std::size_t n) {
    if (first == Line::unread) {
      const std::size_t take = std::min<std::size_t>(n, 8 - head.size());
      head.append(reinterpret_cast<const char*>(p), take);
      p += take;
      n -= take;
      if (head.size() < 8) return;  // more to come, or the member ends (flushed below)
      first = head == "#!python" ? Line::skipping : Line::copying;
      const std::string line = first == Line::skipping ? "#!" + python_ + "\n" : head;
      put(line.data(), line.size());
    }
    if (first == Line::skipping) {
      const auto* eol = static_cast<const unsigned char*>(std::memchr(p, '\n', n));
      if (!eol) return;
      first = Line::copying;
      n -= static_cast<std::size_t>(eol + 1 - p);
      p = eol + 1;
    }
    if (n) put(p, n);
  };
  as_install_refusal([&] {
    ws.archive.stream(e, [&](const unsigned char* p, std::size_t n) {
      wheel_hash.update(p, n);
      if (wheel_digest) wheel_digest->update(p, n);
      rewrite(p, n);
    });
  });
  if (first == Line::unread) put(head.data(), head.size());  // a script of fewer than 8 bytes
  ::close(fd);
  if ((wheel_digest ? wheel_digest->record_digest() : wheel_hash.record_digest()) != m.record_hash)
    refuse(w.path, m.name, fmt::format("its bytes do not match RECORD's {}", m.record_algorithm));
  s.hash = written_hash.record_digest();
  s.size = written;
  wrote(m.size);
  if (s.executable) ::chmod(s.staged.c_str(), 0755);
}

}  // namespace

std::vector<StagedWheel> stage_wheels(const std::vector<const ValidatedWheel*>& wheels, const r::EnvLayout& layout,
                                      txn::Transaction& tx, unsigned threads, bool requested,
                                      const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  std::vector<std::unique_ptr<WheelStaging>> staging;
  for (const ValidatedWheel* w : wheels) staging.push_back(std::make_unique<WheelStaging>(*w, layout));
  Stager stager(layout, tx, progress);
  stager.check_free_space(staging);
  txn::test_pause("staging");
  // Side by side where no two wheels write one path; else one wheel after the other, so that the
  // later one's bytes replace the earlier one's where both write.
  std::set<std::string> seen;
  bool shared = false;
  for (const auto& ws : staging)
    for (const auto& target : ws->targets(layout)) shared = !seen.insert(target).second || shared;
  std::vector<WheelStaging*> all;
  for (const auto& ws : staging) all.push_back(ws.get());
  std::vector<StagedWheel> out;
  if (shared) {
    for (WheelStaging* ws : all) {
      stager.stage_members({ws}, threads);
      out.push_back(stager.finish(*ws, requested));
    }
  } else {
    stager.stage_members(all, threads);
    for (WheelStaging* ws : all) out.push_back(stager.finish(*ws, requested));
  }
  stager.done();
  // One batch: the staged data durable before any rename makes it live.
  txn::sync_file_system(tx.new_dir());
  return out;
}

void plan_puts(const StagedWheel& wheel, txn::Transaction& tx) {
  for (const auto& p : wheel.puts) {
    if (p.again)
      tx.restaged(p.target, p.hash);
    else
      tx.put(p.staged, p.target, 0755, p.hash);
  }
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
