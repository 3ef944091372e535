#include "installer/wheel/read.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <set>

#include "installer/wheel/mapped_file.hpp"
#include "installer/wheel/zip_reader.hpp"
#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer {
namespace r = cudafix::resolver;
namespace {

// ELF objects hold their dynamic section anywhere in the file; wheels of CUDA libraries hold
// objects of a gigabyte. Members up to this size are read whole for their dynamic section.
constexpr std::uint64_t k_max_elf_member = std::uint64_t{4} << 30;

}  // namespace

bool looks_like_elf_member(std::string_view path) { return r::looks_like_shared_object(r::base_name(path)); }

std::string record_text_without_bom(std::string text) {
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  return text;
}

r::Wheel complete_wheel(r::Wheel w, std::string metadata_text, std::string record_text, const std::string& path) {
  if (w.dist_info.empty()) throw r::Error(fmt::format("{}: no {{name}}-{{version}}.dist-info/METADATA inside", path));
  if (record_text.empty()) throw r::Error(fmt::format("{}: no {}/RECORD inside", path, w.dist_info));
  auto md = r::parse_metadata(metadata_text, path + ":" + w.dist_info + "/METADATA");
  w.metadata = std::move(md.metadata);
  w.record = r::parse_record(record_text_without_bom(std::move(record_text)), path + ":" + w.dist_info + "/RECORD");
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

// The members that matter, from the archive (validated whole by zip::Archive): METADATA and
// RECORD (read whole up to zip::k_max_metadata) and each ELF object's dynamic section.
r::Wheel read_members(const unsigned char* data, std::size_t size, const std::string& path,
                      const std::vector<std::string>& supported_tags) {
  r::Wheel w;
  w.file = path;
  const auto name = r::parse_wheel_name(r::base_name(path));
  if (!name) throw r::Error(fmt::format("{}: not a wheel file name (name-version-python-abi-platform.whl)", path));
  w.wheel_name = *name;
  w.compatible = compatible_here(*name, supported_tags);
  const zip::Archive archive(data, size, path);
  std::string metadata_text, record_text;
  for (const zip::Entry* e : archive.files()) {
    const auto first = e->name.substr(0, e->name.find('/'));
    const bool in_dist_info = first.ends_with(".dist-info");
    if (in_dist_info && e->name == first + "/METADATA") {
      metadata_text = archive.read(*e, zip::k_max_metadata);
      w.dist_info = first;
    } else if (in_dist_info && e->name == first + "/RECORD") {
      record_text = archive.read(*e, zip::k_max_metadata);
    } else if (looks_like_elf_member(e->name) && e->size > 0 && e->size <= k_max_elf_member) {
      // Into an anonymous mapping: a member that claims more than its data holds costs only the
      // pages its data fills before the reader refuses it.
      void* p = ::mmap(nullptr, e->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) throw r::Error(fmt::format("{}: {}: cannot map {} bytes", path, e->name, e->size));
      const std::unique_ptr<void, std::function<void(void*)>> unmap(p, [&](void* q) { ::munmap(q, e->size); });
      archive.extract(*e, static_cast<unsigned char*>(p));
      const r::ElfRead elf = r::read_elf_memory(p, e->size, path + ":" + e->name);
      if (elf.status == r::ElfReadStatus::ok) w.elf.emplace(e->name, elf.info);
    }
  }
  return complete_wheel(std::move(w), std::move(metadata_text), std::move(record_text), path);
}

}  // namespace

r::Wheel read_wheel(const std::string& path, const std::vector<std::string>& supported_tags) {
  if (!r::parse_wheel_name(r::base_name(path)))
    throw r::Error(fmt::format("{}: not a wheel file name (name-version-python-abi-platform.whl)", path));
  const MappedFile file(path);
  r::Wheel w = read_members(file.data(), file.size(), path, supported_tags);
  w.sha256 = r::sha256_of_file(path, r::DigestForm::hex);
  if (w.sha256.empty()) throw r::Error(fmt::format("{}: cannot be read", path));
  return w;
}

r::Wheel read_wheel_memory(const void* data, std::size_t size, const std::string& file_name,
                           const std::vector<std::string>& supported_tags) {
  return read_members(static_cast<const unsigned char*>(data), size, file_name, supported_tags);
}

}  // namespace cudafix::installer
