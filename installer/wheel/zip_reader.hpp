// The one zip reader: every wheel cudafix reads (installing, planning from a --find-links folder,
// a body in pip's or uv's cache, and by range requests from an index) goes through it. It reads
// the archive from its own structures, never trusting one of them alone:
//   the end: the end of central directory record searched back over the last 64 KiB + 22 bytes
//     (the longest comment), the last one whose central directory ends where it (or its ZIP64
//     end record) begins; bytes after the archive are accepted, as Python's zipfile and
//     pypa/installer accept them (a signature, a second upload's tail); bytes before it are not
//     (a self-extractor's stub: no wheel has one). ZIP64 is read: the locator, the ZIP64 end
//     record (its entry count, the central directory's size and offset), and each member's
//     ZIP64 extra field in the central directory and in its local header. One disk only.
//   entries: at most k_max_entries; encryption, links, devices, FIFOs and sockets (the Unix mode
//     in the external attributes) and compression other than stored (0) and deflate (8) refused.
//   names: refused for an empty name, bytes that are not UTF-8, NUL and control characters, a
//     backslash, an absolute path, a drive letter (`C:` followed by `/` or nothing; `a:b` is a
//     name), a `..` segment. Then normalised (`.` and empty segments dropped: `a/./x` and `a//x`
//     are `a/x`) and refused when two members share a normal name, or one member's name is a
//     folder of another's.
//   headers: each local header where the central directory says, agreeing with it on the name
//     (byte for byte), the compression, and, unless the local header defers them to a data
//     descriptor (flag bit 3), the CRC and both sizes.
//   layout: every member's local header and data inside the file, before the central directory;
//     no two members' ranges overlap (a zip bomb's layout); a stored member's compressed size
//     equal to its size.
//   sizes: a member at most k_max_member, all of them together at most k_max_total bytes; a
//     member over k_ratio_floor inflating by at most k_max_ratio:1.
// Reading a member: into a caller's buffer of exactly its size (libdeflate, whole), streamed in
// pieces of at most k_piece bytes (zlib), or a window of it; CRC and size checked at the end of
// every whole read, and never more bytes produced than the central directory declares. Text
// members are read whole only up to a cap the caller gives (a wheel's metadata: k_max_metadata).
//
// Each refusal is a resolver::Error "LABEL: MEMBER: what is wrong" (the member left out where
// none is at fault).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cudafix::installer::zip {

inline constexpr std::uint64_t k_max_entries = 1'000'000;               // torch has 15,000
inline constexpr std::uint64_t k_max_member = std::uint64_t{64} << 30;  // 64 GiB
inline constexpr std::uint64_t k_max_total = std::uint64_t{64} << 30;   // 64 GiB, all members
inline constexpr std::uint64_t k_ratio_floor = std::uint64_t{1} << 20;  // members above are ratio-checked
inline constexpr std::uint64_t k_max_ratio = 1000;
// WHEEL, METADATA, RECORD and entry_points.txt: read whole, so capped (torch's RECORD is 2 MB, the
// largest METADATA on PyPI a few). A member over it is refused by name, before it is inflated.
inline constexpr std::uint64_t k_max_metadata = std::uint64_t{16} << 20;  // 16 MiB
inline constexpr std::size_t k_piece = std::size_t{1} << 20;              // a streamed read's pieces
inline constexpr std::size_t k_end_search = 65535 + 22;                   // the end record and its comment

struct Entry {
  std::string name;      // normalised; a folder's without its trailing `/`
  std::string raw_name;  // as the archive writes it
  std::uint16_t made_by = 0, flags = 0, method = 0;
  std::uint32_t crc = 0, external = 0;
  std::uint64_t compressed = 0, size = 0;
  std::uint64_t local_offset = 0;  // the local header
  std::uint64_t data_offset = 0;   // the data: known once the local header is read
  bool folder = false;
  // The Unix mode in the external attributes' high half, whatever system the "made by" field
  // names: Python's zipfile on any system, and tools on macOS (19), write it there, and pip and
  // pypa/installer read it there regardless (0 where none was written).
  [[nodiscard]] unsigned unix_mode() const { return external >> 16; }
  // As pip and pypa/installer judge it: a regular file's mode with an execute bit.
  [[nodiscard]] bool executable() const;
};

// Where the central directory is, from the end structures.
struct End {
  std::uint64_t entries = 0, cd_offset = 0, cd_size = 0;
  std::uint64_t end_at = 0;  // where the end structures begin (the ZIP64 end record's, or the end record's)
  bool zip64 = false;
};

// Why a member name is refused, or empty.
[[nodiscard]] std::string bad_name(std::string_view name);
// `.` and empty segments dropped (a trailing `/` kept). Only for names bad_name() accepts.
[[nodiscard]] std::string normal_name(std::string_view name);

// The parsing functions, over bytes of the archive wherever they came from (a mapped file, the
// ranges fetched from an index). Each throws resolver::Error naming `label`.
//
// The end structures from `n` bytes of the file that end with it: `tail` holds the file's bytes
// from `tail_at` to its end.
[[nodiscard]] End parse_end(const unsigned char* tail, std::size_t n, std::uint64_t tail_at, const std::string& label);
// Every entry of the central directory (`n` == end.cd_size bytes), names checked and normalised,
// duplicates refused; sizes and offsets read from ZIP64 extra fields where the entry says so.
[[nodiscard]] std::vector<Entry> parse_central_directory(const unsigned char* cd, std::size_t n, const End& end,
                                                         const std::string& label);
// The offset of `e`'s data, from `n` bytes of the file starting at its local header, which must
// agree with the central directory's entry.
[[nodiscard]] std::uint64_t parse_local_header(const unsigned char* p, std::size_t n, const Entry& e,
                                               const std::string& label);

// A whole archive in memory (a mapped file, a cache body), validated as a whole when made: every
// check above. The bytes must outlive it.
class Archive {
 public:
  Archive(const unsigned char* data, std::size_t size, std::string label);
  [[nodiscard]] const std::vector<Entry>& entries() const { return entries_; }
  // The file members (folders left out), in archive order.
  [[nodiscard]] std::vector<const Entry*> files() const;
  // The entry of that normal name, or null.
  [[nodiscard]] const Entry* find(std::string_view name) const;
  [[nodiscard]] std::uint64_t unpacked() const { return unpacked_; }
  [[nodiscard]] const std::string& label() const { return label_; }

  // The member's bytes into `out`, which holds exactly e.size bytes; CRC checked.
  void extract(const Entry& e, unsigned char* out) const;
  // The member's bytes in pieces of at most k_piece, in order; CRC and size checked at the end.
  void stream(const Entry& e, const std::function<void(const unsigned char*, std::size_t)>& sink) const;
  // Bytes [offset, offset + n) of the member into `out` (fewer where the member ends first);
  // returns how many. Inflated from the member's start, at most offset + n bytes produced.
  std::size_t window(const Entry& e, std::uint64_t offset, unsigned char* out, std::size_t n) const;
  // A member read whole into a string, refused when it declares more than `cap` bytes.
  [[nodiscard]] std::string read(const Entry& e, std::uint64_t cap) const;

 private:
  const unsigned char* data_;
  std::size_t size_;
  std::string label_;
  std::vector<Entry> entries_;
  std::uint64_t unpacked_ = 0;
};

// A refusal: "LABEL: MEMBER: WHY" (no MEMBER when empty).
[[noreturn]] void refuse(const std::string& label, const std::string& member, const std::string& why);
// A name as a message shows it: control characters escaped, bytes that are not UTF-8 replaced.
[[nodiscard]] std::string shown(std::string_view name);

}  // namespace cudafix::installer::zip
