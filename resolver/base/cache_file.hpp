// The files cudafix keeps between runs in its cache folder ($CUDAFIX_CACHE_DIR, else
// $XDG_CACHE_HOME/cudafix, else ~/.cache/cudafix): what the walk listed in each folder
// (walk_cache.hpp) and the dynamic sections read from each ELF object (elf_store.hpp). Each kind
// says what it keeps and when a kept answer still holds; this header owns what they share.
//
// Every cache file is:
//   8 bytes of magic (the kind and its version); u32 0x01020304 (the byte order: native); u32 0;
//   the payload, which the kind lays out;
//   u64 PathHash of the payload.
// A file is written whole to a temporary name and renamed over the old one (no fsync: a file torn
// by a crash fails its hash), never written in place, so that a reader's mapping of it cannot
// shrink (only a file truncated in place by hand while a scan maps it would make the scan
// fault). A file whose magic, byte order or hash is wrong is reported and not used.
#pragma once

#include <sys/stat.h>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "resolver/base/path_index.hpp"

namespace cudafix::resolver::inline base {

class AtomicFile;

// A change to a file or folder within the same clock tick as cudafix read it would leave its
// ctime as it was, so only what had been still for this long when the run started is kept ("racily
// clean", as git calls it); 2 s covers file systems that keep whole seconds.
inline constexpr std::chrono::milliseconds k_settle{2000};
// k_settle, or the milliseconds $CUDAFIX_CACHE_SETTLE_MS gives (read once): the tests, on file
// systems with nanosecond stamps, set it so that they need not wait 2 s for what they wrote.
[[nodiscard]] std::chrono::milliseconds settle_time();

// The cache files of one kind kept in the folder: the most recently written.
inline constexpr std::size_t k_kept_files = 32;

// Who a file or folder is: what changes when its contents, or the entries of a folder, change.
// ctime cannot be set by a user; an entry created, removed or renamed in a folder changes the
// folder's ctime and mtime; a file written changes its mtime, ctime and perhaps size; a file or
// folder replaced is another inode, and one mounted over another device.
struct Stamp {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;
  std::int64_t ctime_sec = 0;
  std::int64_t mtime_sec = 0;
  std::uint32_t ctime_nsec = 0;
  std::uint32_t mtime_nsec = 0;
  bool operator==(const Stamp&) const = default;
};
inline constexpr std::size_t k_stamp_bytes = 48;  // as a cache file stores it

// The fields statx must fill for a stamp.
inline constexpr unsigned k_stamp_mask = STATX_TYPE | STATX_INO | STATX_SIZE | STATX_CTIME | STATX_MTIME;
[[nodiscard]] Stamp stamp_of(const struct statx& st);
[[nodiscard]] Stamp stamp_of(const struct stat& st);
// The stamp of `name` from `dir_fd`, as statx(2) takes them (AT_EMPTY_PATH: of dir_fd itself);
// none when it cannot be read, or when `type` (S_IFDIR, S_IFREG; 0: any) is not the file's type.
[[nodiscard]] std::optional<Stamp> stamp_at(int dir_fd, const char* name, int flags, unsigned type = 0);

// Whether a file or folder with this stamp, seen by a run that started at `run_start` (wall
// clock), has been still long enough to be kept.
[[nodiscard]] bool settled(const Stamp& stamp, std::chrono::system_clock::time_point run_start);

// The file of one kind ("walk", "elf") for one environment, named by its roots, in `cache_dir`.
[[nodiscard]] std::string cache_file_name(std::string_view cache_dir, std::string_view kind,
                                          const std::vector<std::string>& roots);

// A cache file's payload, mapped from the page cache (reading a 2 MB file into fresh memory cost
// 4 to 8 ms on a VM whose host hands out memory 4 KB at a time); empty when there is no file, and
// then also `problem` when there was one that could not be used.
struct MappedCache {
  std::shared_ptr<const char> mapping;
  std::string_view payload;
  std::string problem;
  std::uint64_t hash = 0;  // the payload's hash as the file gives it
};
// With Checksum::later, the hash is left to the caller (checksum_holds), who can check the
// payload's records on another core meanwhile.
enum class Checksum { now, later };
[[nodiscard]] MappedCache map_cache_file(const std::string& file, std::string_view magic,  // magic: 8 bytes
                                         Checksum checksum = Checksum::now);
[[nodiscard]] bool checksum_holds(const MappedCache& mapped);

// The payload's bytes on their way to the file, through one reused buffer (writing a cache
// touches no fresh memory), hashed as they go.
class CacheWriter {
 public:
  explicit CacheWriter(AtomicFile& file);
  CacheWriter& append(std::string_view bytes);
  template <class T>
  CacheWriter& put(T value) {
    return append(std::string_view(reinterpret_cast<const char*>(&value), sizeof value));
  }
  CacheWriter& put(const Stamp& s);

 private:
  friend std::string store_cache_file(const std::string&, std::string_view, const std::function<void(CacheWriter&)>&);
  CacheWriter& raw(std::string_view bytes);
  void flush();

  AtomicFile& file_;
  PathHash hash_;
  std::unique_ptr<char[]> buf_;
  std::size_t used_ = 0;
};

// Writes `file` whole with the payload `write` produces, makes its folder (mode 0700) when
// missing, and removes the least recently written files of its kind there beyond k_kept_files.
// Returns what went wrong, or "" when it was written.
[[nodiscard]] std::string store_cache_file(const std::string& file, std::string_view magic,
                                           const std::function<void(CacheWriter&)>& write);

// Reads a payload front to back, checking that each read stays inside it.
class CacheReader {
 public:
  explicit CacheReader(std::string_view bytes) : rest_(bytes) {}
  template <class T>
  bool get(T& value) {
    if (rest_.size() < sizeof value) return false;
    std::memcpy(&value, rest_.data(), sizeof value);
    rest_.remove_prefix(sizeof value);
    return true;
  }
  bool get(Stamp& s);
  bool take(std::size_t n, std::string_view& bytes);
  [[nodiscard]] std::string_view rest() const { return rest_; }

 private:
  std::string_view rest_;
};

}  // namespace cudafix::resolver::inline base
