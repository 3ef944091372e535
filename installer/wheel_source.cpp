#include "installer/wheel_source.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>
#include <openssl/evp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "resolver/text.hpp"

namespace cudafix::installer {
namespace r = cudafix::resolver;
namespace {

// ELF objects hold their dynamic section anywhere in the file; wheels of CUDA libraries hold
// objects of a gigabyte. Members up to this size are read whole for their dynamic section.
constexpr la_int64_t k_max_elf_member = la_int64_t{4} << 30;

std::string hex_sha256_of_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw r::Error(fmt::format("{}: cannot be read", path));
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    EVP_DigestUpdate(ctx, buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  std::string out;
  for (unsigned int i = 0; i < len; ++i) out += fmt::format("{:02x}", md[i]);
  return out;
}

bool looks_like_elf_member(std::string_view path) { return r::looks_like_shared_object(r::base_name(path)); }

}  // namespace

r::Wheel read_wheel(const std::string& path, const std::vector<std::string>& supported_tags) {
  r::Wheel w;
  w.file = path;
  const auto name = r::parse_wheel_name(r::base_name(path));
  if (!name) throw r::Error(fmt::format("{}: not a wheel file name (name-version-python-abi-platform.whl)", path));
  w.wheel_name = *name;
  w.compatible = std::any_of(name->tags.begin(), name->tags.end(), [&](const std::string& t) {
    return std::find(supported_tags.begin(), supported_tags.end(), t) != supported_tags.end();
  });
  std::unique_ptr<archive, decltype(&archive_read_free)> a(archive_read_new(), archive_read_free);
  archive_read_support_format_zip(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), 1 << 16) != ARCHIVE_OK)
    throw r::Error(fmt::format("{}: not a readable zip archive: {}", path, archive_error_string(a.get())));
  std::string metadata_text, record_text;
  std::set<std::string> dist_infos;
  archive_entry* entry = nullptr;
  for (;;) {
    const int rc = archive_read_next_header(a.get(), &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
      throw r::Error(fmt::format("{}: damaged archive: {}", path, archive_error_string(a.get())));
    const std::string member = archive_entry_pathname(entry) ? archive_entry_pathname(entry) : "";
    const auto first = member.substr(0, member.find('/'));
    if (first.ends_with(".dist-info") && member.find('/') != std::string::npos) dist_infos.insert(first);
    const bool is_metadata = first.ends_with(".dist-info") && member == first + "/METADATA";
    const bool is_record = first.ends_with(".dist-info") && member == first + "/RECORD";
    const bool is_elf = looks_like_elf_member(member) && archive_entry_size(entry) <= k_max_elf_member;
    if (!is_metadata && !is_record && !is_elf) continue;
    std::string data;
    data.resize(static_cast<std::size_t>(std::max<la_int64_t>(0, archive_entry_size(entry))));
    la_ssize_t got = 0;
    while (static_cast<std::size_t>(got) < data.size()) {
      const la_ssize_t n = archive_read_data(a.get(), data.data() + got, data.size() - static_cast<std::size_t>(got));
      if (n < 0)
        throw r::Error(fmt::format("{}: member {} cannot be read: {}", path, member, archive_error_string(a.get())));
      if (n == 0) break;
      got += n;
    }
    if (static_cast<std::size_t>(got) != data.size())
      throw r::Error(fmt::format("{}: member {} is truncated ({} of {} bytes)", path, member, got, data.size()));
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
  if (w.dist_info.empty()) throw r::Error(fmt::format("{}: no {{name}}-{{version}}.dist-info/METADATA inside", path));
  if (record_text.empty()) throw r::Error(fmt::format("{}: no {}/RECORD inside", path, w.dist_info));
  auto md = r::parse_metadata(metadata_text, path + ":" + w.dist_info + "/METADATA");
  w.metadata = std::move(md.metadata);
  w.record = r::parse_record(std::move(record_text), path + ":" + w.dist_info + "/RECORD");
  if (r::normalize_name(w.metadata.name) != w.wheel_name.normalized || w.metadata.version != w.wheel_name.version)
    throw r::Error(fmt::format("{}: its METADATA says {} {}, its file name {} {}", path, w.metadata.name,
                               w.metadata.version, w.wheel_name.name, w.wheel_name.version));
  w.sha256 = hex_sha256_of_file(path);
  return w;
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
