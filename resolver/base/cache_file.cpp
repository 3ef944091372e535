#include "resolver/base/cache_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "resolver/base/atomic_file.hpp"
#include "resolver/base/diagnostic.hpp"

namespace cudafix::resolver::inline base {
namespace {

constexpr std::uint32_t k_byte_order = 0x01020304;
constexpr std::size_t k_header = 16;
constexpr std::size_t k_trailer = 8;
constexpr std::size_t k_buffer = 1 << 16;

// The files of the kind that starts `prefix` ("walk-") in a folder, oldest first, beyond the
// newest `keep`.
std::vector<std::filesystem::path> surplus_cache_files(const std::filesystem::path& dir, std::string_view prefix,
                                                       std::size_t keep) {
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> files;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix) || !name.ends_with(".bin")) continue;
    std::error_code tec;
    const auto t = it->last_write_time(tec);
    if (!tec) files.emplace_back(t, it->path());
  }
  if (files.size() <= keep) return {};
  std::sort(files.begin(), files.end());
  std::vector<std::filesystem::path> out;
  for (std::size_t i = 0; i + keep < files.size(); ++i) out.push_back(files[i].second);
  return out;
}

std::shared_ptr<const char> map_file(int fd, std::size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  return {static_cast<const char*>(p), [size](const char* q) { ::munmap(const_cast<char*>(q), size); }};
}

}  // namespace

Stamp stamp_of(const struct statx& st) {
  return {makedev(st.stx_dev_major, st.stx_dev_minor),
          st.stx_ino,
          st.stx_size,
          st.stx_ctime.tv_sec,
          st.stx_mtime.tv_sec,
          st.stx_ctime.tv_nsec,
          st.stx_mtime.tv_nsec};
}

Stamp stamp_of(const struct stat& st) {
  return {st.st_dev,
          st.st_ino,
          static_cast<std::uint64_t>(st.st_size),
          st.st_ctim.tv_sec,
          st.st_mtim.tv_sec,
          static_cast<std::uint32_t>(st.st_ctim.tv_nsec),
          static_cast<std::uint32_t>(st.st_mtim.tv_nsec)};
}

std::optional<Stamp> stamp_at(int dir_fd, const char* name, int flags, unsigned type) {
  struct statx st {};
  if (::statx(dir_fd, name, flags, k_stamp_mask, &st) != 0) return std::nullopt;
  if (type != 0 && (st.stx_mode & S_IFMT) != type) return std::nullopt;
  return stamp_of(st);
}

std::chrono::milliseconds settle_time() {
  static const std::chrono::milliseconds settle = [] {
    const char* ms = std::getenv("CUDAFIX_CACHE_SETTLE_MS");
    if (ms == nullptr || *ms == '\0') return k_settle;
    char* end = nullptr;
    const long long value = std::strtoll(ms, &end, 10);
    return *end == '\0' && value >= 0 && value <= 3'600'000 ? std::chrono::milliseconds(value) : k_settle;
  }();
  return settle;
}

bool settled(const Stamp& stamp, std::chrono::system_clock::time_point run_start) {
  const auto ctime =
      std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::seconds(stamp.ctime_sec) + std::chrono::nanoseconds(stamp.ctime_nsec)));
  return ctime + settle_time() <= run_start;
}

std::string cache_file_name(std::string_view cache_dir, std::string_view kind, const std::vector<std::string>& roots) {
  PathHash h;
  for (const auto& r : roots) h.add(r).add(std::string_view("\0", 1));
  return fmt::format("{}/{}-{:016x}.bin", cache_dir, kind, h.value());
}

MappedCache map_cache_file(const std::string& file, std::string_view magic, Checksum checksum) {
  MappedCache c;
  auto reject = [&](const std::string& why) {
    c.mapping.reset();
    c.payload = {};
    c.problem = fmt::format("{}: {}", file, why);
    return c;
  };
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return c;  // none yet
    return reject(std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= static_cast<off_t>(k_header + k_trailer))
    c.mapping = map_file(fd, static_cast<std::size_t>(st.st_size));
  ::close(fd);
  if (!c.mapping) return reject("not a cache file, or unreadable");
  const std::string_view b(c.mapping.get(), static_cast<std::size_t>(st.st_size));
  std::uint32_t order = 0;
  std::memcpy(&order, b.data() + magic.size(), sizeof order);
  if (!b.starts_with(magic) || order != k_byte_order) return reject("not a cache file of this version");
  c.payload = b.substr(k_header, b.size() - k_header - k_trailer);
  std::memcpy(&c.hash, b.data() + b.size() - k_trailer, sizeof c.hash);
  if (checksum == Checksum::now && !checksum_holds(c)) return reject("its checksum does not match");
  return c;
}

bool checksum_holds(const MappedCache& mapped) { return PathHash().add(mapped.payload).value() == mapped.hash; }

CacheWriter::CacheWriter(AtomicFile& file) : file_(file), buf_(std::make_unique_for_overwrite<char[]>(k_buffer)) {}

CacheWriter& CacheWriter::append(std::string_view bytes) {
  hash_.add(bytes);
  return raw(bytes);
}

CacheWriter& CacheWriter::put(const Stamp& s) {
  return put(s.device).put(s.inode).put(s.size).put(s.ctime_sec).put(s.mtime_sec).put(s.ctime_nsec).put(s.mtime_nsec);
}

CacheWriter& CacheWriter::raw(std::string_view bytes) {
  while (!bytes.empty()) {
    if (used_ == k_buffer) flush();
    const std::size_t n = std::min(bytes.size(), k_buffer - used_);
    std::memcpy(buf_.get() + used_, bytes.data(), n);
    used_ += n;
    bytes.remove_prefix(n);
  }
  return *this;
}

void CacheWriter::flush() {
  file_.write(std::string_view(buf_.get(), used_));
  used_ = 0;
}

std::string store_cache_file(const std::string& file, std::string_view magic,
                             const std::function<void(CacheWriter&)>& write) {
  const std::filesystem::path path(file);
  const std::filesystem::path dir = path.parent_path();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    std::filesystem::create_directories(dir.parent_path(), ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return fmt::format("cannot make {}: {}", dir.string(), std::strerror(errno));
  }
  try {
    AtomicFile out(file);
    CacheWriter w(out);
    w.raw(magic).raw(std::string_view(reinterpret_cast<const char*>(&k_byte_order), sizeof k_byte_order));
    w.raw(std::string_view("\0\0\0\0", 4));
    write(w);
    const std::uint64_t hash = w.hash_.value();
    w.raw(std::string_view(reinterpret_cast<const char*>(&hash), sizeof hash));
    w.flush();
    out.commit_unsynced();
  } catch (const Error& e) {
    return e.what();
  }
  const std::string name = path.filename().string();
  for (const auto& old : surplus_cache_files(dir, name.substr(0, name.find('-') + 1), k_kept_files))
    std::filesystem::remove(old, ec);
  return {};
}

bool CacheReader::get(Stamp& s) {
  return get(s.device) && get(s.inode) && get(s.size) && get(s.ctime_sec) && get(s.mtime_sec) && get(s.ctime_nsec) &&
         get(s.mtime_nsec);
}

bool CacheReader::take(std::size_t n, std::string_view& bytes) {
  if (rest_.size() < n) return false;
  bytes = rest_.substr(0, n);
  rest_.remove_prefix(n);
  return true;
}

}  // namespace cudafix::resolver::inline base
