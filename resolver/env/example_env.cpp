#include "resolver/env/example_env.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <unordered_set>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/elf/elf_writer.hpp"

namespace fs = std::filesystem;

namespace cudafix::resolver::inline env {
namespace {

class TreeWriter {
 public:
  explicit TreeWriter(std::string root) : root_(std::move(root)) {}

  // Writes `content` at `rel` (relative to root), refusing anything that would land outside it.
  void write(const std::string& rel, std::string_view content) {
    const std::string abs = checked(rel);
    ensure_dir(parent_dir(abs));
    const int fd = ::open(abs.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(fmt::format("cannot write {}: {}", abs, std::strerror(errno)));
    const ssize_t w = content.empty() ? 0 : ::write(fd, content.data(), content.size());
    ::close(fd);
    if (w != static_cast<ssize_t>(content.size())) throw Error(fmt::format("cannot write {}", abs));
  }

  void write_elf(const std::string& rel, const ElfSpec& spec) {
    const std::string abs = checked(rel);
    ensure_dir(parent_dir(abs));
    write_shared_object(abs, spec);
  }

  void symlink(const std::string& target, const std::string& rel) {
    const std::string abs = checked(rel);
    ensure_dir(parent_dir(abs));
    if (::symlink(target.c_str(), abs.c_str()) != 0 && errno != EEXIST)
      throw Error(fmt::format("cannot link {}: {}", abs, std::strerror(errno)));
  }

  void ensure_dir(const std::string& abs) {
    if (dirs_.count(abs)) return;
    std::error_code ec;
    fs::create_directories(abs, ec);
    if (ec) throw Error(fmt::format("cannot create {}: {}", abs, ec.message()));
    dirs_.insert(abs);
  }

 private:
  std::string checked(const std::string& rel) const {
    const std::string abs = lexically_normal(root_ + "/" + rel);
    if (!is_within(abs, root_) || abs == root_) throw Error(fmt::format("example path '{}' leaves {}", rel, root_));
    return abs;
  }

  std::string root_;
  std::unordered_set<std::string> dirs_;
};

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"')
      out += "\"\"";
    else
      out.push_back(c);
  }
  return out + "\"";
}

ElfSpec spec_from(const nlohmann::json& e) {
  ElfSpec spec;
  if (e.contains("soname")) spec.soname = e["soname"].get<std::string>();
  if (e.contains("needed")) spec.needed = e["needed"].get<std::vector<std::string>>();
  if (e.contains("rpath")) spec.rpath = e["rpath"].get<std::string>();
  if (e.contains("runpath")) spec.runpath = e["runpath"].get<std::string>();
  if (e.contains("class") && e["class"].get<int>() == 32) {
    spec.elf_class = 1;
    spec.machine = 3;  // EM_386
  }
  if (e.contains("flags_1")) spec.flags_1 = e["flags_1"].get<std::uint64_t>();
  return spec;
}

// Copy k of a path: its first folder renamed, so copies live side by side.
std::string renamed(const std::string& path, int copy) {
  if (copy == 0 || path.starts_with("..")) return path;
  const auto slash = path.find('/');
  const std::string head = slash == std::string::npos ? path : path.substr(0, slash);
  const std::string tail = slash == std::string::npos ? "" : path.substr(slash);
  if (head.ends_with(".dist-info")) {
    const auto dash = head.find('-');
    return fmt::format("{}_c{}{}{}", head.substr(0, dash), copy, head.substr(dash), tail);
  }
  return fmt::format("c{}_{}{}", copy, head, tail);
}

}  // namespace

MaterializeStats materialize_environment(const nlohmann::json& desc, const std::string& dir_in,
                                         const MaterializeOptions& options) {
  MaterializeStats stats;
  const std::string dir = lexically_normal(fs::absolute(dir_in).string());
  std::error_code ec;
  const std::string python = desc.value("python", "3.12.0");
  const auto parts = split(python, '.');
  const std::string version = parts.size() >= 2 ? fmt::format("{}.{}", parts[0], parts[1]) : python;
  const std::string site = desc.value("site_packages", fmt::format("lib/python{}/site-packages", version));
  TreeWriter tree(dir);
  if (options.into_venv) {
    if (!fs::is_regular_file(dir + "/pyvenv.cfg", ec))
      throw Error(fmt::format("{} is not a venv (no pyvenv.cfg); refusing to add an example environment to it", dir));
    for (const auto& d : desc.at("dists"))
      if (fs::exists(dir + "/" + site + "/" + d.at("dist_info").get<std::string>(), ec))
        throw Error(fmt::format("{} already holds {}", dir, d.at("dist_info").get<std::string>()));
  } else {
    if (fs::exists(dir, ec) && !fs::is_empty(dir, ec))
      throw Error(fmt::format("{} is not empty; refusing to write an example environment into it", dir));
    tree.write("pyvenv.cfg", fmt::format("home = {}\ninclude-system-site-packages = false\nversion = {}\n",
                                         parent_dir(options.python), python));
    tree.symlink(options.python, "bin/python3");
    tree.symlink("lib", "lib64");
  }
  tree.ensure_dir(dir + "/" + site);
  const nlohmann::json empty_elf = nlohmann::json::object();
  const nlohmann::json& elf = desc.contains("elf") ? desc["elf"] : empty_elf;
  const std::string filler(options.max_filler, 'x');
  std::unordered_set<std::string> absent;
  if (desc.contains("absent"))
    for (const auto& a : desc["absent"]) absent.insert(a.get<std::string>());

  for (int copy = 0; copy < std::max(options.copies, 1); ++copy) {
    std::unordered_set<std::string> written;
    for (const auto& d : desc.at("dists")) {
      const std::string di = renamed(d.at("dist_info").get<std::string>(), copy);
      std::string metadata;
      for (const auto& h : d.at("metadata_headers")) {
        std::string line = h.get<std::string>();
        if (copy && line.starts_with("Name: ")) line += fmt::format("-c{}", copy);
        metadata += line + "\n";
      }
      tree.write(site + "/" + di + "/METADATA", metadata + "\n");
      std::string record;
      for (const auto& row : d.value("record", nlohmann::json::array())) {
        const std::string path = renamed(row.at(0).get<std::string>(), copy);
        record += fmt::format("{},{},{}\n", csv_field(path), csv_field(row.at(1).get<std::string>()),
                              csv_field(row.at(2).get<std::string>()));
        // The dist-info's own files are written below; RECORD itself last.
        static const std::unordered_set<std::string> own{"METADATA",  "RECORD",        "INSTALLER",      "WHEEL",
                                                         "REQUESTED", "top_level.txt", "direct_url.json"};
        if (path.starts_with(di + "/") && own.count(path.substr(di.size() + 1))) continue;
        if (!written.insert(path).second) continue;
        const std::string original = row.at(0).get<std::string>();
        if (absent.count(original)) continue;
        if (elf.contains(original)) {
          tree.write_elf(site + "/" + path, spec_from(elf[original]));
          ++stats.elf_objects;
        } else {
          const std::string size = row.at(2).get<std::string>();
          const std::size_t n = size.empty() ? 0 : std::min<std::size_t>(std::stoull(size), options.max_filler);
          tree.write(site + "/" + path, std::string_view(filler).substr(0, n));
        }
        ++stats.files;
      }
      tree.write(site + "/" + di + "/RECORD", record);
      for (const char* name : {"INSTALLER", "WHEEL", "REQUESTED", "top_level.txt", "direct_url.json"})
        if (d.contains(name)) tree.write(site + "/" + di + "/" + name, d[name].get<std::string>());
      ++stats.dists;
    }
    // Objects no RECORD lists (built in place, copied in by hand) exist too.
    for (const auto& [path, e] : elf.items()) {
      const std::string p = renamed(path, copy);
      if (written.count(p) || absent.count(path)) continue;
      tree.write_elf(site + "/" + p, spec_from(e));
      ++stats.elf_objects;
      ++stats.files;
    }
  }
  return stats;
}

}  // namespace cudafix::resolver::inline env
