#include "installer/wheel/pack.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>

#include "resolver/base/shared_library.hpp"
#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer {
namespace r = cudafix::resolver;
namespace {

// libarchive's writer, loaded the first time a wheel is packed (resolver/base/shared_library.hpp says why).
#define LIBARCHIVE_WRITER(X)                      \
  X(write_new, archive_write_new)                 \
  X(write_free, archive_write_free)               \
  X(set_format_zip, archive_write_set_format_zip) \
  X(set_options, archive_write_set_options)       \
  X(open_filename, archive_write_open_filename)   \
  X(write_header, archive_write_header)           \
  X(write_data, archive_write_data)               \
  X(close, archive_write_close)                   \
  X(error_string, archive_error_string)           \
  X(entry_new, archive_entry_new)                 \
  X(entry_free, archive_entry_free)               \
  X(set_pathname, archive_entry_set_pathname)     \
  X(set_size, archive_entry_set_size)             \
  X(set_filetype, archive_entry_set_filetype)     \
  X(set_perm, archive_entry_set_perm)             \
  X(set_mtime, archive_entry_set_mtime)
CUDAFIX_SHARED_LIBRARY_TABLE(LibArchiveWriter, LIBARCHIVE_WRITER);
#undef LIBARCHIVE_WRITER

const LibArchiveWriter& writer() {
  static const LibArchiveWriter lib = r::load_functions<LibArchiveWriter>("libarchive.so.13", "write wheels");
  return lib;
}

// What pip's own wheel builds leave out of an installed dist: what installers write, byte code.
bool installer_written(const std::string& dist_info, const std::string& path) {
  for (const char* f : {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"})
    if (path == dist_info + "/" + f) return true;
  return path.ends_with(".pyc") || path.find("/__pycache__/") != std::string::npos;
}

std::string wheel_tag(const std::string& dist_info_dir) {
  const auto text = r::try_read_file(dist_info_dir + "/WHEEL");
  if (text)
    for (auto line : r::split(*text, '\n'))
      if (line.starts_with("Tag:")) return std::string(r::trim(line.substr(4)));
  return "py3-none-any";
}

class ZipOut {
 public:
  explicit ZipOut(const std::string& path) : path_(path), a_(writer().write_new(), writer().write_free) {
    const auto& w = writer();
    if (!a_ || w.set_format_zip(a_.get()) != ARCHIVE_OK ||
        w.set_options(a_.get(), "zip:compression=deflate") != ARCHIVE_OK ||
        w.open_filename(a_.get(), path.c_str()) != ARCHIVE_OK)
      throw r::Error(fmt::format("{}: cannot write the wheel: {}", path, message()));
  }
  void add(const std::string& member, std::string_view bytes, int perm) {
    const auto& w = writer();
    std::unique_ptr<archive_entry, decltype(&::archive_entry_free)> e(w.entry_new(), w.entry_free);
    w.set_pathname(e.get(), member.c_str());
    w.set_size(e.get(), static_cast<la_int64_t>(bytes.size()));
    w.set_filetype(e.get(), AE_IFREG);
    w.set_perm(e.get(), static_cast<mode_t>(perm));
    w.set_mtime(e.get(), 315532800, 0);  // 1980-01-01, zip's first date: the same bytes give the same wheel
    if (w.write_header(a_.get(), e.get()) != ARCHIVE_OK ||
        (!bytes.empty() && w.write_data(a_.get(), bytes.data(), bytes.size()) != static_cast<la_ssize_t>(bytes.size())))
      throw r::Error(fmt::format("{}: cannot write {} into the wheel: {}", path_, member, message()));
  }
  void close() {
    if (writer().close(a_.get()) != ARCHIVE_OK)
      throw r::Error(fmt::format("{}: cannot finish the wheel: {}", path_, message()));
  }

 private:
  std::string message() {
    const char* s = a_ ? writer().error_string(a_.get()) : nullptr;
    return s ? s : "unknown error";
  }
  std::string path_;
  std::unique_ptr<archive, decltype(&::archive_write_free)> a_;
};

std::string record_digest(std::string_view bytes) {
  r::Sha256Stream h;
  h.update(bytes.data(), bytes.size());
  return h.record_digest();
}

}  // namespace

std::string pack_installed_dist(const r::Environment& env, int dist, const std::string& out_dir) {
  const auto& d = env.dists.at(static_cast<std::size_t>(dist));
  const std::string dist_info_dir = r::join_normal(d.site_dir, d.dir_name);
  const std::string name = r::normalize_name(d.metadata.name);
  std::string escaped = name;  // PEP 427 escapes the name's '-' as '_'
  std::replace(escaped.begin(), escaped.end(), '-', '_');
  const std::string file_name = escaped + "-" + d.metadata.version + "-" + wheel_tag(dist_info_dir) + ".whl";
  std::string path = r::join_normal(out_dir, file_name);
  const std::string tmp = path + ".part";
  ZipOut zip(tmp);
  std::string record;
  std::set<std::string> members;
  auto add = [&](const std::string& member, const std::string& abs) {
    if (!members.insert(member).second) return;
    const auto bytes = r::try_read_file(abs);
    if (!bytes)
      throw r::Error(
          fmt::format("cannot pack {}: {} is listed in its RECORD but cannot be read (a metadata-only dist "
                      "has nothing to pack)",
                      d.dir_name, env.display(abs)));
    struct stat st {};
    const int perm = ::stat(abs.c_str(), &st) == 0 && (st.st_mode & 0111) ? 0755 : 0644;
    zip.add(member, *bytes, perm);
    record += fmt::format("{},sha256={},{}\n", member, record_digest(*bytes), bytes->size());
  };
  for (const auto& row : d.record) {
    const std::string member(row.path);
    if (installer_written(d.dir_name, member)) continue;
    const std::string abs = r::join_normal(d.site_dir, row.path);
    if (!r::is_within(abs, d.site_dir))
      throw r::Error(
          fmt::format("cannot pack {}: its RECORD lists {} outside the site folder (scripts and data files "
                      "are not carried)",
                      d.dir_name, row.path));
    add(member, abs);
  }
  for (const char* f : {"METADATA", "WHEEL"}) add(d.dir_name + "/" + f, dist_info_dir + "/" + f);
  record += d.dir_name + "/RECORD,,\n";
  zip.add(d.dir_name + "/RECORD", record, 0644);
  zip.close();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw r::Error(fmt::format("{}: cannot rename into place", path));
  return path;
}

}  // namespace cudafix::installer
