#include "installer/wheel/zip_reader.hpp"

#include <fmt/format.h>
#include <libdeflate.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::installer::zip {
namespace {

namespace r = cudafix::resolver;

constexpr std::uint32_t k_end_sig = 0x06054b50, k_locator_sig = 0x07064b50, k_end64_sig = 0x06064b50;
constexpr std::uint32_t k_central_sig = 0x02014b50, k_local_sig = 0x04034b50;
constexpr std::uint32_t k_zip64_marker = 0xffffffff;

std::uint16_t u16(const unsigned char* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
std::uint32_t u32(const unsigned char* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[3]} << 24);
}
std::uint64_t u64(const unsigned char* p) { return u32(p) | (std::uint64_t{u32(p + 4)} << 32); }

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

// The ZIP64 extra field (header id 1) of `n` bytes of extra data: the values of the fields the
// header marks with 0xffffffff, in the order the format gives (size, compressed size, local
// header offset). Throws when the extra data is damaged or lacks a field marked.
struct Zip64Fields {
  bool size = false, compressed = false, offset = false;
};
void read_zip64_extra(const unsigned char* extra, std::size_t n, Zip64Fields want, std::uint64_t& size,
                      std::uint64_t& compressed, std::uint64_t* offset, const std::string& label,
                      const std::string& member) {
  for (std::size_t i = 0; i + 4 <= n;) {
    const std::uint16_t id = u16(extra + i), len = u16(extra + i + 2);
    if (i + 4 + len > n) refuse(label, member, "its extra field runs past its end");
    if (id == 1) {
      const unsigned char* f = extra + i + 4;
      std::size_t at = 0;
      const auto next = [&](std::uint64_t& into) {
        if (at + 8 > len) refuse(label, member, "its ZIP64 extra field is too short for the sizes it stands for");
        into = u64(f + at);
        at += 8;
      };
      if (want.size) next(size);
      if (want.compressed) next(compressed);
      if (want.offset && offset) next(*offset);
      return;
    }
    i += 4 + std::size_t{len};
  }
  if (want.size || want.compressed || want.offset) refuse(label, member, "ZIP64 markers but no ZIP64 extra field");
}

// pieces of a deflate stream inflated with zlib, fed to `sink` until it returns false or the
// stream ends; at most `limit` bytes produced (one more is seen, to tell "more than declared").
template <typename Sink>
std::uint64_t inflate_pieces(const unsigned char* in, std::uint64_t in_size, std::uint64_t limit,
                             const std::string& label, const Entry& e, Sink&& sink, bool& ended) {
  z_stream z{};
  if (::inflateInit2(&z, -MAX_WBITS) != Z_OK) refuse(label, e.raw_name, "zlib could not start");
  const std::unique_ptr<z_stream, decltype(&::inflateEnd)> guard(&z, &::inflateEnd);
  thread_local std::vector<unsigned char> out(k_piece);
  z.next_in = const_cast<unsigned char*>(in);
  std::uint64_t left = in_size, total = 0;
  ended = false;
  while (!ended) {
    if (z.avail_in == 0 && left > 0) {
      const auto chunk = static_cast<uInt>(std::min<std::uint64_t>(left, std::uint64_t{1} << 30));
      z.avail_in = chunk;
      left -= chunk;
    }
    z.next_out = out.data();
    z.avail_out = static_cast<uInt>(out.size());
    const int rc = ::inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
      refuse(label, e.raw_name, fmt::format("its deflate data is damaged ({})", z.msg ? z.msg : "zlib error"));
    const std::size_t got = out.size() - z.avail_out;
    ended = rc == Z_STREAM_END;
    if (got == 0 && !ended) {
      if (z.avail_in == 0 && left == 0) refuse(label, e.raw_name, "its deflate data ends early (a truncated member)");
      if (rc == Z_BUF_ERROR) refuse(label, e.raw_name, "its deflate data is damaged (no progress)");
    }
    total += got;
    if (total > limit) return total;  // more than asked for: the caller says what that means
    if (!sink(out.data(), got)) return total;
  }
  return total;
}

}  // namespace

void refuse(const std::string& label, const std::string& member, const std::string& why) {
  throw r::Error(fmt::format("{}: {}{}", label, member.empty() ? "" : shown(member) + ": ", why));
}

std::string shown(std::string_view name) {
  std::string out;
  for (char c : valid_utf8(name) ? std::string(name) : r::to_valid_utf8(name))
    out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? fmt::format("\\x{:02x}", static_cast<unsigned char>(c))
                                                             : std::string(1, c);
  return out;
}

bool Entry::executable() const {
  const unsigned mode = unix_mode();
  return (mode & S_IFMT) == S_IFREG && (mode & 0111) != 0;
}

std::string bad_name(std::string_view name) {
  if (name.empty()) return "an empty name";
  if (!valid_utf8(name)) return "a name that is not UTF-8";
  for (char c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "a NUL or control character in its name";
  if (name.find('\\') != std::string_view::npos) return "a backslash in its name";
  if (name.front() == '/') return "an absolute path";
  const bool letter = (name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z');
  if (letter && name.size() >= 2 && name[1] == ':' && (name.size() == 2 || name[2] == '/')) return "a drive letter";
  for (auto part : r::split(name, '/'))
    if (part == "..") return "a '..' component";
  if (normal_name(name).empty() || normal_name(name) == "/") return "a name of nothing but '.' and empty segments";
  return "";
}

std::string normal_name(std::string_view name) {
  std::string out;
  for (auto part : r::split(name, '/')) {
    if (part.empty() || part == ".") continue;
    if (!out.empty()) out += '/';
    out += part;
  }
  if (name.ends_with("/") && !out.empty()) out += '/';
  return out;
}

End parse_end(const unsigned char* d, std::size_t n, std::uint64_t tail_at, const std::string& label) {
  if (n < 22) refuse(label, "", "too short to be a zip archive");
  const std::size_t lowest = n > k_end_search ? n - k_end_search : 0;
  bool saw_signature = false;
  for (std::size_t i = n - 22 + 1; i-- > lowest;) {
    if (u32(d + i) != k_end_sig || i + 22 + u16(d + i + 20) > n) continue;
    saw_signature = true;
    End e;
    e.entries = u16(d + i + 10);
    e.cd_size = u32(d + i + 12);
    e.cd_offset = u32(d + i + 16);
    e.end_at = tail_at + i;
    const bool disks = u16(d + i + 4) != 0 || u16(d + i + 6) != 0 || u16(d + i + 8) != e.entries;
    if (i >= 20 && u32(d + i - 20) == k_locator_sig) {
      const std::uint64_t record = u64(d + i - 20 + 8);
      if (u32(d + i - 20 + 4) != 0 || u32(d + i - 20 + 16) > 1) refuse(label, "", "a multi-disk ZIP64 archive");
      // Compared without adding to the offset, which a hostile record makes wrap past 2^64.
      if (record < tail_at || record - tail_at > i - 20 || (i - 20) - (record - tail_at) < 56)
        refuse(label, "", "its ZIP64 end record lies outside the file, or overlaps its locator");
      const unsigned char* z = d + (record - tail_at);
      if (u32(z) != k_end64_sig) refuse(label, "", "its ZIP64 locator points at no ZIP64 end record");
      if (u32(z + 16) != 0 || u32(z + 20) != 0 || u64(z + 24) != u64(z + 32))
        refuse(label, "", "a multi-disk ZIP64 archive");
      e.entries = u64(z + 32);
      e.cd_size = u64(z + 40);
      e.cd_offset = u64(z + 48);
      e.end_at = record;
      e.zip64 = true;
    } else if (disks) {
      refuse(label, "", "a multi-disk archive");
    } else if (e.entries == 0xffff || e.cd_size == k_zip64_marker || e.cd_offset == k_zip64_marker) {
      refuse(label, "", "ZIP64 markers in the end record, but no ZIP64 locator");
    }
    // The central directory ends where the end structures begin; an end record that says
    // otherwise is a comment's or trailing bytes' look-alike, or follows data before the archive.
    if (e.cd_offset > e.end_at || e.cd_size != e.end_at - e.cd_offset) continue;
    if (e.entries > k_max_entries)
      refuse(label, "", fmt::format("{} entries, over the limit of {}", e.entries, k_max_entries));
    if (e.entries > e.cd_size / 46) refuse(label, "", "more entries than its central directory can hold");
    return e;
  }
  refuse(label, "",
         saw_signature ? "no end of central directory record whose central directory ends where it begins "
                         "(bytes before the archive, or a damaged end)"
                       : "no end of central directory record (not a zip, or truncated)");
}

std::vector<Entry> parse_central_directory(const unsigned char* c, std::size_t n, const End& end,
                                           const std::string& label) {
  if (n != end.cd_size) refuse(label, "", "the central directory is not the size its end record gives");
  std::vector<Entry> out;
  out.reserve(static_cast<std::size_t>(end.entries));
  std::map<std::string, std::string> normal;  // normal name (no trailing '/') -> raw name
  std::set<std::string> files;
  std::size_t at = 0;
  for (std::uint64_t i = 0; i < end.entries; ++i) {
    if (n - at < 46 || u32(c + at) != k_central_sig)
      refuse(label, "", fmt::format("central directory entry {} is damaged", i));
    Entry e;
    e.made_by = u16(c + at + 4);
    e.flags = u16(c + at + 8);
    e.method = u16(c + at + 10);
    e.crc = u32(c + at + 16);
    e.compressed = u32(c + at + 20);
    e.size = u32(c + at + 24);
    const std::size_t name_len = u16(c + at + 28), extra_len = u16(c + at + 30), comment_len = u16(c + at + 32);
    e.external = u32(c + at + 38);
    e.local_offset = u32(c + at + 42);
    if (n - at - 46 < name_len + extra_len + comment_len)
      refuse(label, "", fmt::format("central directory entry {} runs past the central directory", i));
    e.raw_name.assign(reinterpret_cast<const char*>(c + at + 46), name_len);
    if (const auto why = bad_name(e.raw_name); !why.empty()) refuse(label, e.raw_name, "refused for " + why);
    const Zip64Fields want{e.size == k_zip64_marker, e.compressed == k_zip64_marker, e.local_offset == k_zip64_marker};
    if (u16(c + at + 34) != 0 && u16(c + at + 34) != 0xffff) refuse(label, e.raw_name, "on another disk");
    read_zip64_extra(c + at + 46 + name_len, extra_len, want, e.size, e.compressed, &e.local_offset, label, e.raw_name);
    at += 46 + name_len + extra_len + comment_len;
    e.folder = e.raw_name.ends_with("/");
    e.name = normal_name(e.raw_name);
    if (e.folder) e.name.pop_back();
    if (e.flags & 1) refuse(label, e.raw_name, "encrypted");
    const unsigned type = e.unix_mode() & S_IFMT;
    if (type == S_IFLNK) refuse(label, e.raw_name, "a symbolic link");
    if (type == S_IFCHR || type == S_IFBLK || type == S_IFIFO || type == S_IFSOCK)
      refuse(label, e.raw_name, "a device, FIFO or socket");
    if (type == S_IFDIR && !e.folder) refuse(label, e.raw_name, "a folder whose name does not end with '/'");
    if (e.method != 0 && e.method != 8)
      refuse(label, e.raw_name, fmt::format("compression method {} (only stored and deflate)", e.method));
    // Sizes, from the central directory alone (the local header must agree with it).
    if (e.method == 0 && e.compressed != e.size)
      refuse(label, e.raw_name,
             fmt::format("stored, but its compressed size ({}) is not its size ({})", e.compressed, e.size));
    if (e.size > k_max_member)
      refuse(label, e.raw_name, fmt::format("{} bytes, over the limit of {} for one member", e.size, k_max_member));
    if (e.size > k_ratio_floor && e.size / k_max_ratio > e.compressed)
      refuse(label, e.raw_name,
             fmt::format("a compression ratio over {}:1 ({} bytes from {})", k_max_ratio, e.size, e.compressed));
    if (e.folder && e.size != 0) refuse(label, e.raw_name, "a folder entry that holds data");
    if (const auto [it, fresh] = normal.emplace(e.name, e.raw_name); !fresh) {
      // Two folder entries of one folder are harmless; anything else names one target twice.
      if (!(e.folder && files.count(e.name) == 0 && it->second.ends_with("/")))
        refuse(label, e.raw_name,
               it->second == e.raw_name
                   ? std::string("a second member of this name")
                   : fmt::format("a second member of this name once normalised ({} is {} too)", it->second, e.name));
    }
    if (!e.folder) files.insert(e.name);
    out.push_back(std::move(e));
  }
  // A file whose name is another member's folder: one of the two could not be written.
  for (const auto& e : out)
    for (auto slash = e.name.find('/'); slash != std::string::npos; slash = e.name.find('/', slash + 1))
      if (files.count(e.name.substr(0, slash)))
        refuse(label, e.raw_name, fmt::format("its folder {} is a file of the archive too", e.name.substr(0, slash)));
  return out;
}

std::uint64_t parse_local_header(const unsigned char* p, std::size_t n, const Entry& e, const std::string& label) {
  if (n < 30 || u32(p) != k_local_sig) refuse(label, e.raw_name, "its local header is missing or damaged");
  const std::uint16_t flags = u16(p + 6), method = u16(p + 8);
  const std::size_t name_len = u16(p + 26), extra_len = u16(p + 28);
  if (n - 30 < name_len + extra_len) refuse(label, e.raw_name, "its local header runs past the members");
  if (std::string_view(reinterpret_cast<const char*>(p + 30), name_len) != e.raw_name)
    refuse(label, e.raw_name, "its local header names another file");
  if (method != e.method)
    refuse(label, e.raw_name, "its local header and the central directory disagree on compression");
  if ((flags & 1) != (e.flags & 1))
    refuse(label, e.raw_name, "its local header and the central directory disagree on encryption");
  std::uint64_t csize = u32(p + 18), usize = u32(p + 22);
  const std::uint32_t crc = u32(p + 14);
  // A ZIP64 local header holds both sizes in its extra field when either is marked.
  const bool marked = csize == k_zip64_marker || usize == k_zip64_marker;
  if (marked)
    read_zip64_extra(p + 30 + name_len, extra_len, {true, true, false}, usize, csize, nullptr, label, e.raw_name);
  if (!(flags & 8) && (crc != e.crc || csize != e.compressed || usize != e.size))
    refuse(label, e.raw_name, "its local header and the central directory disagree on CRC or sizes");
  return e.local_offset + 30 + name_len + extra_len;
}

Archive::Archive(const unsigned char* data, std::size_t size, std::string label)
    : data_(data), size_(size), label_(std::move(label)) {
  const End end = parse_end(data, size, 0, label_);
  entries_ = parse_central_directory(data + end.cd_offset, static_cast<std::size_t>(end.cd_size), end, label_);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // local header start, data end
  ranges.reserve(entries_.size());
  for (auto& e : entries_) {
    if (e.local_offset >= end.cd_offset) refuse(label_, e.raw_name, "its local header lies past the members");
    e.data_offset =
        parse_local_header(data + e.local_offset, static_cast<std::size_t>(end.cd_offset - e.local_offset), e, label_);
    if (e.data_offset > end.cd_offset || e.compressed > end.cd_offset - e.data_offset)
      refuse(label_, e.raw_name,
             fmt::format("its data ({} bytes at {}) runs past the members' end ({})", e.compressed, e.data_offset,
                         end.cd_offset));
    unpacked_ += e.size;
    if (unpacked_ > k_max_total)
      refuse(label_, "", fmt::format("over {} bytes unpacked, the limit for one archive", k_max_total));
    ranges.emplace_back(e.local_offset, e.data_offset + e.compressed);
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) {
      const auto owner = [&](std::uint64_t local) {
        for (const auto& e : entries_)
          if (e.local_offset == local) return e.raw_name;
        return std::string();
      };
      refuse(label_, owner(ranges[i].first),
             fmt::format("its data overlaps {}'s (a zip bomb's layout)", shown(owner(ranges[i - 1].first))));
    }
}

std::vector<const Entry*> Archive::files() const {
  std::vector<const Entry*> out;
  for (const auto& e : entries_)
    if (!e.folder) out.push_back(&e);
  return out;
}

const Entry* Archive::find(std::string_view name) const {
  for (const auto& e : entries_)
    if (!e.folder && e.name == name) return &e;
  return nullptr;
}

void Archive::extract(const Entry& e, unsigned char* out) const {
  const unsigned char* in = data_ + e.data_offset;
  if (e.size == 0) {
    if (e.method == 8 && e.compressed > 2) refuse(label_, e.raw_name, "it inflates to more than the 0 bytes declared");
  } else if (e.method == 0) {
    std::memcpy(out, in, e.size);  // compressed == size, within the file: checked when made
  } else {
    thread_local std::unique_ptr<libdeflate_decompressor, decltype(&libdeflate_free_decompressor)> d(
        libdeflate_alloc_decompressor(), &libdeflate_free_decompressor);
    if (!d) refuse(label_, e.raw_name, "libdeflate could not start");
    const auto rc = libdeflate_deflate_decompress(d.get(), in, e.compressed, out, e.size, nullptr);
    if (rc == LIBDEFLATE_SHORT_OUTPUT) refuse(label_, e.raw_name, "it inflates to fewer bytes than declared");
    if (rc == LIBDEFLATE_INSUFFICIENT_SPACE) refuse(label_, e.raw_name, "it inflates to more bytes than declared");
    if (rc != LIBDEFLATE_SUCCESS) refuse(label_, e.raw_name, "its deflate data is damaged");
  }
  if (static_cast<std::uint32_t>(libdeflate_crc32(0, out, e.size)) != e.crc)
    refuse(label_, e.raw_name, "its CRC does not match the central directory's");
}

void Archive::stream(const Entry& e, const std::function<void(const unsigned char*, std::size_t)>& sink) const {
  std::uint32_t crc = 0;
  std::uint64_t total = 0;
  const auto feed = [&](const unsigned char* p, std::size_t n) {
    crc = static_cast<std::uint32_t>(libdeflate_crc32(crc, p, n));
    total += n;
    sink(p, n);
    return true;
  };
  const unsigned char* in = data_ + e.data_offset;
  if (e.method == 0) {
    for (std::uint64_t at = 0; at < e.size; at += k_piece)
      feed(in + at, static_cast<std::size_t>(std::min<std::uint64_t>(k_piece, e.size - at)));
  } else {
    bool ended = false;
    const std::uint64_t produced = inflate_pieces(in, e.compressed, e.size, label_, e, feed, ended);
    if (produced > e.size)
      refuse(label_, e.raw_name, fmt::format("it inflates to more than the {} bytes declared", e.size));
  }
  if (total != e.size)
    refuse(label_, e.raw_name, fmt::format("it inflates to {} bytes, not the {} declared", total, e.size));
  if (crc != e.crc) refuse(label_, e.raw_name, "its CRC does not match the central directory's");
}

std::size_t Archive::window(const Entry& e, std::uint64_t offset, unsigned char* out, std::size_t n) const {
  if (offset >= e.size) return 0;
  const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n, e.size - offset));
  if (e.method == 0) {
    std::memcpy(out, data_ + e.data_offset + offset, want);
    return want;
  }
  std::uint64_t at = 0;
  std::size_t copied = 0;
  bool ended = false;
  const auto take = [&](const unsigned char* p, std::size_t got) {
    const std::uint64_t from = std::max(at, offset), to = std::min<std::uint64_t>(at + got, offset + want);
    if (to > from) {
      std::memcpy(out + (from - offset), p + (from - at), static_cast<std::size_t>(to - from));
      copied = static_cast<std::size_t>(to - offset);
    }
    at += got;
    return at < offset + want;
  };
  (void)inflate_pieces(data_ + e.data_offset, e.compressed, offset + want + k_piece, label_, e, take, ended);
  if (copied < want) refuse(label_, e.raw_name, fmt::format("it inflates to fewer than the {} bytes declared", e.size));
  return copied;
}

std::string Archive::read(const Entry& e, std::uint64_t cap) const {
  if (e.size > cap)
    refuse(label_, e.raw_name,
           fmt::format("{} bytes, over the {} bytes a member read whole may have ({} MiB)", e.size, cap, cap >> 20));
  std::string out(static_cast<std::size_t>(e.size), '\0');
  extract(e, reinterpret_cast<unsigned char*>(out.data()));
  return out;
}

}  // namespace cudafix::installer::zip
