#include "installer/wheel/read.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "installer/wheel/mapped_file.hpp"
#include "installer/wheel/ranged_read.hpp"
#include "installer/wheel/zip_reader.hpp"
#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer {
namespace r = cudafix::resolver;
namespace {

// ELF objects hold their dynamic section anywhere in the file; wheels of CUDA libraries hold
// objects of a gigabyte. Members up to this size are read for their dynamic section (one that
// no window places is inflated from its start).
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

namespace {

// The members that matter, from the archive (validated whole by zip::Archive): METADATA and
// RECORD (read whole up to zip::k_max_metadata) and each ELF object's dynamic section, read by
// ranges (installer/wheel/ranged_read.hpp) from the bytes in memory: a CUDA library's few
// hundred kilobytes, not its gigabyte inflated.
r::Wheel read_members(const unsigned char* data, std::size_t size, const std::string& path,
                      const std::vector<std::string>& supported_tags, WheelReadCost* cost) {
  r::Wheel w;
  w.file = path;
  const auto name = r::parse_wheel_name(r::base_name(path));
  if (!name) throw r::Error(fmt::format("{}: not a wheel file name (name-version-python-abi-platform.whl)", path));
  w.wheel_name = *name;
  w.tag_rank = r::tag_rank(*name, supported_tags);
  w.compatible = w.tag_rank.has_value();
  const zip::Archive archive(data, size, path);
  std::string metadata_text, record_text;
  std::vector<zip::Entry> objects;
  for (const zip::Entry* e : archive.files()) {
    const auto first = e->name.substr(0, e->name.find('/'));
    const bool in_dist_info = first.ends_with(".dist-info");
    if (in_dist_info && e->name == first + "/METADATA") {
      metadata_text = archive.read(*e, zip::k_max_metadata);
      w.dist_info = first;
    } else if (in_dist_info && e->name == first + "/RECORD") {
      record_text = archive.read(*e, zip::k_max_metadata);
    } else if (looks_like_elf_member(e->name) && e->size > 0 && e->size <= k_max_elf_member) {
      objects.push_back(*e);
    }
  }
  // The archive checked every range against the file; these come from its own entries.
  const auto read = [&](const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges) {
    std::vector<std::string> out;
    for (const auto& [first, last] : ranges) {
      if (last >= size)
        throw r::Error(fmt::format("{}: its zip structures name bytes {}-{}, past its end", path, first, last));
      out.emplace_back(reinterpret_cast<const char*>(data) + first, last - first + 1);
    }
    return out;
  };
  // The bytes are all here: only exact places (RangeLimits::mid_stream).
  RangeLimits exact;
  exact.mid_stream = false;
  auto got = read_members_by_ranges(read, size, std::move(objects), w.dist_info, path, exact, InvalidElf::leave_out,
                                    std::string_view(reinterpret_cast<const char*>(data), size));
  w.elf = std::move(got.elf);
  if (cost) {
    cost->read += got.read;
    cost->inflated += got.inflated;
    cost->objects_from_start += got.objects_from_start;
    cost->objects_by_map += got.objects_by_map;
  }
  return complete_wheel(std::move(w), std::move(metadata_text), std::move(record_text), path);
}

}  // namespace

namespace {

// A file's identity and stamps: a write to it changes its ctime, which no one can set back.
struct Stamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  std::int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const Stamp&) const = default;
};

std::optional<Stamp> stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return Stamp{st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec,
               st.st_ctim.tv_sec * 1'000'000'000LL + st.st_ctim.tv_nsec};
}

// The wheels this run has read, by path: `fix` plans from a wheel and then binds the plan to
// it, and the second read (its SHA-256 above all: a second of CPU for a gigabyte) is the first's
// value while the file is unchanged.
struct ReadBefore {
  std::mutex lock;
  std::map<std::string, std::pair<Stamp, r::Wheel>> wheels;
};

ReadBefore& read_before() {
  static ReadBefore memo;
  return memo;
}

}  // namespace

r::Wheel read_wheel(const std::string& path, const std::vector<std::string>& supported_tags, WheelReadCost* cost) {
  if (!r::parse_wheel_name(r::base_name(path)))
    throw r::Error(fmt::format("{}: not a wheel file name (name-version-python-abi-platform.whl)", path));
  const auto before = stamp_of(path);
  if (before) {
    const std::lock_guard guard(read_before().lock);
    const auto it = read_before().wheels.find(path);
    if (it != read_before().wheels.end() && it->second.first == *before) {
      r::Wheel w = it->second.second;
      w.tag_rank = r::tag_rank(w.wheel_name, supported_tags);
      w.compatible = w.tag_rank.has_value();
      return w;
    }
  }
  const MappedFile file(path);
  // The digest, of every byte, beside the reading of a few: both of the one mapping, so that
  // the facts and the digest are of the same bytes.
  auto digest = std::async(std::launch::async, [&] {
    return r::sha256_hex(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()));
  });
  r::Wheel w;
  try {
    w = read_members(file.data(), file.size(), path, supported_tags, cost);
  } catch (...) {
    digest.wait();
    throw;
  }
  w.sha256 = digest.get();
  if (cost) cost->hashed += file.size();
  // A file written or replaced while it was read (a copy still arriving, a swap by rename):
  // what was read may be of neither, and the path names another file now.
  const auto after = stamp_of(path);
  if (!before || !after || !(*before == *after))
    throw r::Error(fmt::format("{}: changed while it was read; read it again once nothing writes to it", path));
  const std::lock_guard guard(read_before().lock);
  read_before().wheels.insert_or_assign(path, std::pair{*after, w});
  return w;
}

r::Wheel read_wheel_memory(const void* data, std::size_t size, const std::string& file_name,
                           const std::vector<std::string>& supported_tags) {
  return read_members(static_cast<const unsigned char*>(data), size, file_name, supported_tags, nullptr);
}

}  // namespace cudafix::installer
