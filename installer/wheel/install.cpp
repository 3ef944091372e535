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

StagedWheel stage_wheel(const ValidatedWheel& w, const r::EnvLayout& layout, txn::Transaction& tx, unsigned threads,
                        bool requested, const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  check_targets(w, layout);
  std::atomic<std::uint64_t> written_so_far{0};
  const auto wrote = [&](std::uint64_t n) {
    const auto now = written_so_far += n;
    if (progress) progress(now, w.unpacked);
  };
  // The wheel read again, and held to what was validated: a file changed since (shorter, other
  // members) would otherwise be read at the old offsets.
  const MappedFile file(w.path);
  const zip::Archive archive = as_install_refusal([&] { return zip::Archive(file.data(), file.size(), w.path); });
  const auto same = [&](const ZipMember& m) {
    if (m.entry >= archive.entries().size()) return false;
    const zip::Entry& e = archive.entries()[m.entry];
    return e.name == m.name && e.crc == m.crc && e.size == m.size && e.compressed == m.compressed &&
           e.data_offset == m.data_offset && e.method == m.method;
  };
  if (file.size() != w.size || !std::all_of(w.members.begin(), w.members.end(), same))
    refuse(w.path, "", "the file changed after it was validated");
  const std::string root = layout.root_real;
  // Free space first: the staged copy sits beside the files it replaces until the renames.
  std::uint64_t free_bytes = 0, needed = 0;
  struct statvfs fs_stat {};
  if (::statvfs(tx.new_dir().c_str(), &fs_stat) == 0) {
    free_bytes = std::uint64_t{fs_stat.f_bavail} * fs_stat.f_frsize;
    const std::uint64_t block = std::max<std::uint64_t>(fs_stat.f_frsize, 1);
    for (const auto& m : w.members) needed += (m.size + block - 1) / block * block;
    needed += staging_margin(needed, w.members.size());
    if (free_bytes < needed)
      throw r::Error(
          fmt::format("{}: {} MiB free on the environment's file system, {} MiB needed to stage {}; "
                      "nothing was installed",
                      root, free_bytes >> 20, (needed + (1 << 20) - 1) >> 20, r::base_name(w.path)));
  }
  txn::test_pause("staging");
  // Space another process takes from here on is found when a file's blocks are reserved. Where
  // several threads find the disk full at once, each is heard and the largest member named (the
  // one the space was taken from, whichever thread got there first).
  struct DiskFull {};
  std::mutex full_mutex;
  std::optional<std::pair<std::uint64_t, std::string>> fullest;  // the member's size, the refusal
  const auto full = [&](const std::string& member, std::uint64_t size) {
    return [&, member, size](int err) {
      std::string refusal;
      try {
        refuse(w.path, member,
               fmt::format("the file system at {} is full ({}) with its {} bytes still to write: {} MiB needed to "
                           "stage the wheel, {} MiB were free when staging began (another process has taken "
                           "space since)",
                           mount_point_of(root), std::strerror(err), size, (needed + (1 << 20) - 1) >> 20,
                           free_bytes >> 20));
      } catch (const r::Error& e) {
        refusal = e.what();
      }
      {
        const std::lock_guard lock(full_mutex);
        if (!fullest || size > fullest->first) fullest = std::pair{size, refusal};
      }
      throw DiskFull{};
    };
  };
  const std::string python = layout.root + "/bin/python";
  StagedWheel out;
  struct Staged {
    std::string target, staged, hash;
    std::uint64_t size = 0;
    bool executable = false;
    bool put_already = false;  // an earlier wheel of the transaction writes it too: its put stands
  };
  std::vector<Staged> staged(w.members.size());
  const std::string record_member = w.dist_info + "/RECORD";
  std::mutex folders_mutex;
  std::set<std::string> folders;
  const auto staged_path = [&](const std::string& target) { return tx.new_dir() + "/" + r::relative_to(target, root); };
  // A path several wheels of one transaction write is staged at one place (new/ holds only this
  // transaction's staging): a later wheel's bytes replace the earlier one's there, as pip
  // installing them in order leaves the file, and the one put planned for it stands, so that
  // what is on disk is moved aside once and undone once. Returns whether it was staged before.
  const auto restage = [&](const std::string& staged_file) {
    if (!txn::exists_nofollow(staged_file)) return false;
    txn::remove_file(staged_file);
    return true;
  };
  const auto make_parent = [&](const std::string& p) {
    const std::string parent = r::parent_dir(p);
    std::lock_guard<std::mutex> lock(folders_mutex);
    if (folders.insert(parent).second) txn::make_dirs(parent);
  };
  // Largest first, so the threads finish together.
  std::vector<std::size_t> order(w.members.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return w.members[a].size > w.members[b].size; });
  const auto stage_member = [&](std::size_t k) {
    const ZipMember& m = w.members[order[k]];
    if (m.name == record_member || m.name == w.dist_info + "/INSTALLER" || m.name == w.dist_info + "/REQUESTED") return;
    const zip::Entry& e = archive.entries()[m.entry];
    Staged& s = staged[order[k]];
    s.target = target_of(w, m.name, layout);
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
      const std::string digest = write_member(archive, e, fd, s.staged, wheel_digest, full(m.name, m.size));
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
        const std::string line = first == Line::skipping ? "#!" + python + "\n" : head;
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
      archive.stream(e, [&](const unsigned char* p, std::size_t n) {
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
  };
  // The first failure stops the members not yet begun. A full disk is said once every thread is
  // done, before what it caused elsewhere (a folder that could not be made).
  std::atomic<bool> stop{false};
  std::exception_ptr failed;
  r::parallel_for(order.size(), threads, [&](std::size_t k) {
    if (stop) return;
    try {
      stage_member(k);
    } catch (const DiskFull&) {
      stop = true;
    } catch (...) {
      stop = true;
      const std::lock_guard lock(full_mutex);
      if (!failed) failed = std::current_exception();
    }
  });
  if (fullest) throw r::Error(fullest->second);
  if (failed) std::rethrow_exception(failed);
  // The generated files: console scripts, INSTALLER, REQUESTED, and RECORD last.
  const std::string site = w.root_is_purelib ? layout.purelib()->path : layout.platlib()->path;
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
    staged.push_back(std::move(s));
    out.generated.push_back(target);
  };
  for (const auto& [name, body] : scripts_of(w.entry_points, python))
    add_generated(layout.root + "/bin/" + name, body, true);
  add_generated(info + "/INSTALLER", "cudafix\n", false);
  if (requested) add_generated(info + "/REQUESTED", "", false);
  std::string record;
  for (const auto& s : staged) {
    if (s.target.empty()) continue;
    std::string rel = r::relative_to(s.target, site);
    if (rel == s.target) rel = "../../../" + r::relative_to(s.target, layout.root);  // bin/, include/ from the site
    record += fmt::format("{},sha256={},{}\n", rel, s.hash, s.size);
  }
  record += w.dist_info + "/RECORD,,\n";
  {
    Staged s;
    s.target = info + "/RECORD";
    s.staged = staged_path(s.target);
    make_parent(s.staged);
    s.put_already = restage(s.staged);
    txn::append_synced(s.staged, record);
    s.hash = r::sha256_of_file(s.staged);  // not listed in RECORD, but what a rollback compares
    staged.push_back(std::move(s));
  }
  // One batch: the staged data durable before any rename makes it live.
  if (progress) progress(w.unpacked, w.unpacked);  // the bar's end (RECORD and INSTALLER are not counted)
  txn::sync_file_system(tx.new_dir());
  for (const auto& s : staged) {
    if (s.target.empty()) continue;
    if (s.put_already)
      tx.restaged(s.target, s.hash);
    else
      tx.put(s.staged, s.target, 0755, s.hash);
    out.targets.push_back(s.target);
    out.bytes += s.size;
  }
  return out;
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
