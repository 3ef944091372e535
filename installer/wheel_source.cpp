#include "installer/wheel_source.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "resolver/base/shared_library.hpp"
#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer {
namespace r = cudafix::resolver;
namespace {

// ELF objects hold their dynamic section anywhere in the file; wheels of CUDA libraries hold
// objects of a gigabyte. Members up to this size are read whole for their dynamic section.
constexpr la_int64_t k_max_elf_member = la_int64_t{4} << 30;
// METADATA and RECORD: far larger than any real one (torch's RECORD is 2 MB).
constexpr std::size_t k_max_text_member = std::size_t{256} << 20;

// libarchive, loaded the first time a wheel is read (resolver/shared_library.hpp says why).
struct LibArchive {
  decltype(&::archive_read_new) read_new;
  decltype(&::archive_read_free) read_free;
  decltype(&::archive_read_support_format_zip) support_format_zip;
  decltype(&::archive_read_open_filename) open_filename;
  decltype(&::archive_read_open_memory) open_memory;
  decltype(&::archive_read_next_header) next_header;
  decltype(&::archive_read_data) read_data;
  decltype(&::archive_error_string) error_string;
  decltype(&::archive_entry_pathname) entry_pathname;
  decltype(&::archive_entry_size) entry_size;
  decltype(&::archive_entry_size_is_set) entry_size_is_set;
};

// Throws r::Error when libarchive cannot be loaded (and tries again on the next call).
const LibArchive& libarchive() {
  static const LibArchive lib = [] {
    // Every libarchive 3 has this SONAME; the headers the calls are checked against are 3's.
    const r::SharedLibrary so("libarchive.so.13", "read wheels");
    LibArchive l{};
    so.bind(l.read_new, "archive_read_new");
    so.bind(l.read_free, "archive_read_free");
    so.bind(l.support_format_zip, "archive_read_support_format_zip");
    so.bind(l.open_filename, "archive_read_open_filename");
    so.bind(l.open_memory, "archive_read_open_memory");
    so.bind(l.next_header, "archive_read_next_header");
    so.bind(l.read_data, "archive_read_data");
    so.bind(l.error_string, "archive_error_string");
    so.bind(l.entry_pathname, "archive_entry_pathname");
    so.bind(l.entry_size, "archive_entry_size");
    so.bind(l.entry_size_is_set, "archive_entry_size_is_set");
    return l;
  }();
  return lib;
}

// libarchive's message for the last error; it has none for some damaged inputs.
std::string error_text(archive* a) {
  const char* s = libarchive().error_string(a);
  return s ? s : "unknown error";
}

}  // namespace

bool looks_like_elf_member(std::string_view path) { return r::looks_like_shared_object(r::base_name(path)); }

r::Wheel complete_wheel(r::Wheel w, std::string metadata_text, std::string record_text, const std::string& path) {
  if (w.dist_info.empty()) throw r::Error(fmt::format("{}: no {{name}}-{{version}}.dist-info/METADATA inside", path));
  if (record_text.empty()) throw r::Error(fmt::format("{}: no {}/RECORD inside", path, w.dist_info));
  auto md = r::parse_metadata(metadata_text, path + ":" + w.dist_info + "/METADATA");
  w.metadata = std::move(md.metadata);
  w.record = r::parse_record(std::move(record_text), path + ":" + w.dist_info + "/RECORD");
  if (r::normalize_name(w.metadata.name) != w.wheel_name.normalized || w.metadata.version != w.wheel_name.version)
    throw r::Error(fmt::format("{}: its METADATA says {} {}, its file name {} {}", path, w.metadata.name,
                               w.metadata.version, w.wheel_name.name, w.wheel_name.version));
  return w;
}

bool compatible_here(const r::WheelName& name, const std::vector<std::string>& supported_tags) {
  return std::any_of(name.tags.begin(), name.tags.end(), [&](const std::string& t) {
    return std::find(supported_tags.begin(), supported_tags.end(), t) != supported_tags.end();
  });
}

namespace {

using ArchivePtr = std::unique_ptr<archive, decltype(&::archive_read_free)>;

// The members that matter, from an opened archive: METADATA, RECORD and each ELF object's
// dynamic section. `path` names the wheel in errors.
r::Wheel read_members(archive* a, const std::string& path, const std::vector<std::string>& supported_tags) {
  r::Wheel w;
  w.file = path;
  const auto name = r::parse_wheel_name(r::base_name(path));
  if (!name) throw r::Error(fmt::format("{}: not a wheel file name (name-version-python-abi-platform.whl)", path));
  w.wheel_name = *name;
  w.compatible = compatible_here(*name, supported_tags);
  std::string metadata_text, record_text;
  archive_entry* entry = nullptr;
  for (;;) {
    const int rc = libarchive().next_header(a, &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
      throw r::Error(fmt::format("{}: damaged archive: {}", path, error_text(a)));
    const char* member_name = libarchive().entry_pathname(entry);
    const std::string member = member_name ? member_name : "";
    const auto first = member.substr(0, member.find('/'));
    const bool in_dist_info = first.ends_with(".dist-info");
    const bool is_metadata = in_dist_info && member == first + "/METADATA";
    const bool is_record = in_dist_info && member == first + "/RECORD";
    const bool is_elf = looks_like_elf_member(member) && libarchive().entry_size(entry) <= k_max_elf_member;
    if (!is_metadata && !is_record && !is_elf) continue;
    // Read as it arrives: the size a member's header claims is not trusted for allocation.
    const la_int64_t claimed = libarchive().entry_size_is_set(entry) ? libarchive().entry_size(entry) : -1;
    const std::size_t limit = is_elf ? static_cast<std::size_t>(k_max_elf_member) : k_max_text_member;
    std::string data;
    char chunk[1 << 16];
    for (;;) {
      const la_ssize_t n = libarchive().read_data(a, chunk, sizeof chunk);
      if (n < 0) throw r::Error(fmt::format("{}: member {} cannot be read: {}", path, member, error_text(a)));
      if (n == 0) break;
      if (data.size() + static_cast<std::size_t>(n) > limit)
        throw r::Error(fmt::format("{}: member {} is larger than {} bytes", path, member, limit));
      data.append(chunk, static_cast<std::size_t>(n));
    }
    if (claimed >= 0 && data.size() != static_cast<std::size_t>(claimed))
      throw r::Error(fmt::format("{}: member {} is truncated ({} of {} bytes)", path, member, data.size(), claimed));
    if (is_metadata) {
      metadata_text = std::move(data);
      w.dist_info = first;
    } else if (is_record) {
      record_text = std::move(data);
    } else {
      const r::ElfRead elf = r::read_elf_memory(data.data(), data.size(), path + ":" + member);
      if (elf.status == r::ElfReadStatus::ok) w.elf.emplace(member, elf.info);
    }
  }
  return complete_wheel(std::move(w), std::move(metadata_text), std::move(record_text), path);
}

ArchivePtr new_zip_reader() {
  const LibArchive& lib = libarchive();
  ArchivePtr a(lib.read_new(), lib.read_free);
  lib.support_format_zip(a.get());
  return a;
}

}  // namespace

r::Wheel read_wheel(const std::string& path, const std::vector<std::string>& supported_tags) {
  if (!r::parse_wheel_name(r::base_name(path)))
    throw r::Error(fmt::format("{}: not a wheel file name (name-version-python-abi-platform.whl)", path));
  ArchivePtr a = new_zip_reader();
  if (libarchive().open_filename(a.get(), path.c_str(), 1 << 16) != ARCHIVE_OK)
    throw r::Error(fmt::format("{}: not a readable zip archive: {}", path, error_text(a.get())));
  r::Wheel w = read_members(a.get(), path, supported_tags);
  w.sha256 = r::sha256_of_file(path, r::DigestForm::hex);
  if (w.sha256.empty()) throw r::Error(fmt::format("{}: cannot be read", path));
  return w;
}

r::Wheel read_wheel_memory(const void* data, std::size_t size, const std::string& file_name,
                           const std::vector<std::string>& supported_tags) {
  ArchivePtr a = new_zip_reader();
  if (libarchive().open_memory(a.get(), data, size) != ARCHIVE_OK)
    throw r::Error(fmt::format("{}: not a readable zip archive: {}", file_name, error_text(a.get())));
  return read_members(a.get(), file_name, supported_tags);
}

FoundWheels find_wheels(const std::vector<std::string>& folders, const std::vector<std::string>& supported_tags) {
  FoundWheels out;
  for (const auto& folder : folders) {
    std::error_code ec;
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(folder, ec))
      if (e.path().extension() == ".whl")
        files.push_back(std::filesystem::absolute(e.path()).lexically_normal().string());
    if (ec) throw r::Error(fmt::format("--find-links {}: cannot be listed: {}", folder, ec.message()));
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      try {
        r::Wheel w = read_wheel(f, supported_tags);
        w.source = folder;
        out.wheels.push_back(std::move(w));
      } catch (const r::Error& e) {
        out.diagnostics.push_back({f, std::nullopt, std::nullopt, e.what()});
      }
    }
  }
  std::sort(out.wheels.begin(), out.wheels.end(), [](const r::Wheel& a, const r::Wheel& b) {
    return std::tie(a.wheel_name.normalized, a.file) < std::tie(b.wheel_name.normalized, b.file);
  });
  return out;
}

}  // namespace cudafix::installer
