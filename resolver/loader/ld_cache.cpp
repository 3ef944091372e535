#include "resolver/loader/ld_cache.hpp"

#include <elf.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline loader {
namespace {

constexpr std::string_view k_old_magic = "ld.so-1.7.0";
constexpr std::string_view k_new_magic = "glibc-ld.so.cache1.1";
constexpr std::size_t k_new_header = 48;
constexpr std::size_t k_new_entry = 24;
constexpr std::size_t k_old_header = 16;
constexpr std::size_t k_old_entry = 12;
constexpr std::uint32_t k_extension_magic = 0xEAA42174;
constexpr std::uint32_t k_tag_glibc_hwcaps = 1;
constexpr std::uint64_t k_hwcap_extension = 1ULL << 62;

template <class T>
T load_at(const std::string& b, std::size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof v);
  return v;
}

}  // namespace

std::int32_t ld_cache_flags_for(std::uint16_t machine, std::uint8_t elf_class) {
  constexpr std::int32_t libc6 = 0x0003;
  if (elf_class == ELFCLASS64 && machine == EM_X86_64) return libc6 | 0x0300;
  if (elf_class == ELFCLASS64 && machine == EM_AARCH64) return libc6 | 0x0a00;
  if (elf_class == ELFCLASS64 && machine == EM_PPC64) return libc6 | 0x0500;
  if (elf_class == ELFCLASS64 && machine == EM_S390) return libc6 | 0x0400;
  return libc6;
}

LdCache LdCache::parse(const std::string& b, const std::string& file) {
  LdCache cache;
  cache.file_ = file;
  // An empty file is no cache, as glibc reads one (it ignores a file too short for a header).
  if (b.empty()) return cache;
  auto fail = [&](std::size_t off, const std::string& what) {
    return Error(fmt::format("{} (offset {:#x}): malformed ld.so.cache: {}", file, off, what));
  };
  std::size_t base = 0;
  if (b.size() >= k_old_header && b.compare(0, k_old_magic.size(), k_old_magic) == 0) {
    const auto nlibs = load_at<std::uint32_t>(b, 12);
    if (nlibs > (b.size() - k_old_header) / k_old_entry) throw fail(12, "old-format entry count runs past the end");
    base = (k_old_header + nlibs * k_old_entry + 7) & ~std::size_t{7};
  }
  if (b.size() < base + k_new_header || b.compare(base, k_new_magic.size(), k_new_magic) != 0) {
    if (base) return cache;  // old format alone: glibc 2.32+ ignores it too
    throw fail(0, "no glibc-ld.so.cache1.1 header");
  }
  const auto nlibs = load_at<std::uint32_t>(b, base + 20);
  const auto len_strings = load_at<std::uint32_t>(b, base + 24);
  const auto ext_off = load_at<std::uint32_t>(b, base + 32);
  const std::size_t avail = b.size() - base;
  if (nlibs > (avail - k_new_header) / k_new_entry)
    throw fail(base + 20, fmt::format("{} entries do not fit in the file", nlibs));
  // A cut file is refused whole, not read as far as it goes: ldconfig writes the string table
  // after the entries and the extension sections after that, so a cache cut short loses them.
  if (len_strings > avail - k_new_header - std::size_t{nlibs} * k_new_entry)
    throw fail(base + 24, fmt::format("the string table of {} bytes runs past the end", len_strings));
  auto string_at = [&](std::uint32_t off) -> std::string {
    if (off >= avail) throw fail(base + off, "string offset past the end");
    const char* s = b.data() + base + off;
    const void* nul = std::memchr(s, 0, avail - off);
    if (!nul) throw fail(base + off, "unterminated string");
    return std::string(s, static_cast<const char*>(nul));
  };

  std::vector<std::string> hwcaps;
  if (ext_off && std::size_t{ext_off} + 8 <= avail && load_at<std::uint32_t>(b, base + ext_off) == k_extension_magic) {
    const auto count = load_at<std::uint32_t>(b, base + ext_off + 4);
    if (count > (avail - ext_off - 8) / 16) throw fail(base + ext_off, "extension section count runs past the end");
    for (std::uint32_t i = 0; i < count; ++i) {
      const std::size_t s = base + ext_off + 8 + std::size_t{i} * 16;
      const auto tag = load_at<std::uint32_t>(b, s);
      const auto off = load_at<std::uint32_t>(b, s + 8);
      const auto size = load_at<std::uint32_t>(b, s + 12);
      if (off > avail || size > avail - off) throw fail(s, fmt::format("extension section {} runs past the end", tag));
      if (tag != k_tag_glibc_hwcaps) continue;
      if (size % 4) throw fail(s, "glibc-hwcaps section of a size that is no multiple of 4");
      for (std::uint32_t k = 0; k < size / 4; ++k)
        hwcaps.push_back(string_at(load_at<std::uint32_t>(b, base + off + std::size_t{k} * 4)));
    }
  }

  cache.entries_.reserve(nlibs);
  for (std::uint32_t i = 0; i < nlibs; ++i) {
    const std::size_t e = base + k_new_header + i * k_new_entry;
    LdCacheEntry entry;
    entry.flags = load_at<std::int32_t>(b, e);
    entry.soname = string_at(load_at<std::uint32_t>(b, e + 4));
    entry.path = string_at(load_at<std::uint32_t>(b, e + 8));
    const auto hwcap = load_at<std::uint64_t>(b, e + 16);
    if (hwcap & k_hwcap_extension) {
      const auto index = static_cast<std::uint32_t>(hwcap);
      if (index >= hwcaps.size()) throw fail(e + 16, fmt::format("glibc-hwcaps index {} out of range", index));
      entry.hwcaps_subdir = hwcaps[index];
    } else if (hwcap != 0) {
      continue;  // legacy hwcap bits: glibc 2.37+ ignores such entries
    }
    cache.by_soname_.emplace(entry.soname, cache.entries_.size());
    cache.entries_.push_back(std::move(entry));
  }
  return cache;
}

LdCache LdCache::load(const std::string& file) {
  // The null device, like a missing file, is no cache: `--ld-so-cache /dev/null` models a host
  // without one. Any other device is refused by read_file (it may never end).
  struct stat st {};
  const bool null_device = ::stat(file.c_str(), &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
  std::error_code ec;
  if (null_device || !std::filesystem::exists(file, ec)) {
    LdCache empty;
    empty.file_ = file;
    return empty;
  }
  return parse(read_file(file), file);
}

std::optional<std::string> LdCache::lookup(const std::string& soname, std::uint16_t machine, std::uint8_t elf_class,
                                           const std::vector<std::string>& hwcaps_priority) const {
  const auto want = ld_cache_flags_for(machine, elf_class);
  const LdCacheEntry* best = nullptr;
  std::size_t best_rank = SIZE_MAX;
  auto [it, end] = by_soname_.equal_range(soname);
  // Entries of one soname come out in reverse insertion order; walk them all and keep the
  // best-ranked: a supported glibc-hwcaps subfolder by priority, then the first plain entry.
  std::vector<std::size_t> idx;
  for (; it != end; ++it) idx.push_back(it->second);
  std::sort(idx.begin(), idx.end());
  for (auto i : idx) {
    const auto& e = entries_[i];
    if (e.flags != want) continue;
    std::size_t rank = hwcaps_priority.size();
    if (e.hwcaps_subdir) {
      const auto pos = std::find(hwcaps_priority.begin(), hwcaps_priority.end(), *e.hwcaps_subdir);
      if (pos == hwcaps_priority.end()) continue;
      rank = static_cast<std::size_t>(pos - hwcaps_priority.begin());
    }
    if (rank < best_rank) {
      best = &e;
      best_rank = rank;
    }
  }
  if (!best) return std::nullopt;
  return best->path;
}

}  // namespace cudafix::resolver::inline loader
