#include "installer/wheel_install.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <libdeflate.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "installer/mapped_file.hpp"
#include "installer/txn/file_ops.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/dist_info.hpp"
#include "resolver/pep/pep440.hpp"
#include "resolver/pep/wheel_name.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer {
namespace {

namespace fs = std::filesystem;
namespace r = cudafix::resolver;

constexpr std::uint64_t k_max_unpacked = std::uint64_t{64} << 30;
constexpr std::uint64_t k_ratio_floor = std::uint64_t{1} << 20;  // members above this are ratio-checked
constexpr std::uint64_t k_max_ratio = 1000;

std::uint16_t u16(const unsigned char* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
std::uint32_t u32(const unsigned char* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[3]} << 24);
}

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

// Why a member name is refused, or empty.
std::string bad_name(std::string_view name) {
  if (name.empty()) return "an empty name";
  if (!valid_utf8(name)) return "a name that is not UTF-8";
  for (char c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "a NUL or control character in its name";
  if (name.find('\\') != std::string_view::npos) return "a backslash in its name";
  if (name.front() == '/') return "an absolute path";
  if (name.size() >= 2 && name[1] == ':') return "a drive letter";
  for (auto part : r::split(name, '/'))
    if (part == "..") return "a '..' component";
  return "";
}

// Whether an extra field holds a ZIP64 record (header id 1).
bool has_zip64_extra(const unsigned char* extra, std::size_t n) {
  for (std::size_t i = 0; i + 4 <= n;) {
    const std::uint16_t id = u16(extra + i), len = u16(extra + i + 2);
    if (id == 1) return true;
    i += 4 + len;
  }
  return false;
}

[[noreturn]] void refuse(const std::string& wheel, const std::string& member, const std::string& why) {
  throw r::Error(fmt::format("{}: {}{}; nothing was installed", wheel, member.empty() ? "" : member + ": ", why));
}

struct RecordEntry {
  std::string hash;
  std::uint64_t size = 0;
  bool has = false;
};

std::map<std::string, RecordEntry> parse_wheel_record(std::string text, const std::string& wheel) {
  auto parsed = r::parse_record(std::move(text), wheel + "!RECORD");
  if (!parsed.diagnostics.empty()) refuse(wheel, "RECORD", parsed.diagnostics.front().message);
  std::map<std::string, RecordEntry> out;
  for (const auto& row : parsed.rows) {
    RecordEntry e;
    if (row.hash_algo() == "sha256") {
      e.hash = std::string(row.hash);
      e.has = true;
    } else if (!row.hash_algo().empty()) {
      refuse(wheel, std::string(row.path), fmt::format("RECORD hashes it with {}, not sha256", row.hash_algo()));
    }
    e.size = row.size().value_or(0);
    if (!out.emplace(std::string(row.path), e).second) refuse(wheel, std::string(row.path), "listed twice in RECORD");
  }
  return out;
}

// Inflates (or copies) one member's data, feeding each piece to `sink`; checks CRC and size.
template <typename Sink>
void inflate_member(const unsigned char* data, const ZipMember& m, const std::string& wheel, Sink&& sink) {
  std::uint32_t crc = static_cast<std::uint32_t>(::crc32(0, nullptr, 0));
  std::uint64_t total = 0;
  const auto feed = [&](const unsigned char* p, std::size_t n) {
    crc = static_cast<std::uint32_t>(::crc32_z(crc, p, n));
    total += n;
    sink(p, n);
  };
  const unsigned char* in = data + m.data_offset;
  if (m.method == 0) {
    feed(in, static_cast<std::size_t>(m.compressed));
  } else {
    z_stream z{};
    if (::inflateInit2(&z, -MAX_WBITS) != Z_OK) refuse(wheel, m.name, "zlib could not start");
    thread_local std::vector<unsigned char> out(std::size_t{1} << 20);
    z.next_in = const_cast<unsigned char*>(in);
    std::uint64_t left = m.compressed;
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      if (z.avail_in == 0 && left > 0) {
        const auto chunk = static_cast<uInt>(std::min<std::uint64_t>(left, std::uint64_t{1} << 30));
        z.avail_in = chunk;
        left -= chunk;
      }
      z.next_out = out.data();
      z.avail_out = static_cast<uInt>(out.size());
      rc = ::inflate(&z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) {
        ::inflateEnd(&z);
        refuse(wheel, m.name, fmt::format("its deflate data is damaged ({})", z.msg ? z.msg : "zlib error"));
      }
      feed(out.data(), out.size() - z.avail_out);
      if (total > m.size) break;
      if (rc != Z_STREAM_END && z.avail_in == 0 && left == 0 && z.avail_out != 0) {
        ::inflateEnd(&z);
        refuse(wheel, m.name, "its deflate data ends early (a truncated wheel)");
      }
    }
    ::inflateEnd(&z);
  }
  if (total != m.size)
    refuse(wheel, m.name, fmt::format("it inflates to {} bytes, not the {} declared", total, m.size));
  if (crc != m.crc) refuse(wheel, m.name, "its CRC does not match the central directory's");
}

// A member's bytes written to `fd` whole: a deflated one inflated by libdeflate straight into the
// file mapped for writing (its size is known, so no streaming and no copy), a stored one copied
// from the mapped wheel; CRC and size checked; returns RECORD's form of its SHA-256.
std::string write_member(const unsigned char* data, const ZipMember& m, const std::string& wheel, int fd,
                         const std::string& path) {
  if (::ftruncate(fd, static_cast<off_t>(m.size)) != 0)
    throw r::Error(fmt::format("{}: {}", path, std::strerror(errno)));
  r::Sha256Stream hash;
  if (m.size == 0) {
    if (m.method == 8 && m.compressed > 2) refuse(wheel, m.name, "it inflates to more than the 0 bytes declared");
    return hash.record_digest();
  }
  void* p = ::mmap(nullptr, m.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw r::Error(fmt::format("{}: mmap: {}", path, std::strerror(errno)));
  auto* out = static_cast<unsigned char*>(p);
  const unsigned char* in = data + m.data_offset;
  std::string failed;
  if (m.method == 0) {
    std::memcpy(out, in, m.size);
  } else {
    thread_local std::unique_ptr<libdeflate_decompressor, decltype(&libdeflate_free_decompressor)> d(
        libdeflate_alloc_decompressor(), &libdeflate_free_decompressor);
    const auto rc = libdeflate_deflate_decompress(d.get(), in, m.compressed, out, m.size, nullptr);
    if (rc == LIBDEFLATE_SHORT_OUTPUT) failed = "it inflates to fewer bytes than declared";
    if (rc == LIBDEFLATE_INSUFFICIENT_SPACE) failed = "it inflates to more bytes than declared";
    if (rc == LIBDEFLATE_BAD_DATA) failed = "its deflate data is damaged";
  }
  if (failed.empty() && static_cast<std::uint32_t>(libdeflate_crc32(0, out, m.size)) != m.crc)
    failed = "its CRC does not match the central directory's";
  if (failed.empty()) hash.update(out, m.size);
  ::munmap(p, m.size);
  if (!failed.empty()) refuse(wheel, m.name, failed);
  return hash.record_digest();
}

// Where a wheel member goes: the scheme folder and the path below it.
std::string target_of(const ValidatedWheel& w, const std::string& name, const r::EnvLayout& layout) {
  const std::string data = w.dist_info.substr(0, w.dist_info.size() - 10) + ".data/";
  const std::string pure = layout.purelib() ? layout.purelib()->path : layout.root;
  const std::string plat = layout.platlib() ? layout.platlib()->path : pure;
  if (!name.starts_with(data)) return (w.root_is_purelib ? pure : plat) + "/" + name;
  const std::string rest = name.substr(data.size());
  const auto slash = rest.find('/');
  const std::string scheme = rest.substr(0, slash), below = rest.substr(slash + 1);
  if (scheme == "purelib") return pure + "/" + below;
  if (scheme == "platlib") return plat + "/" + below;
  if (scheme == "scripts") return layout.root + "/bin/" + below;
  if (scheme == "headers")
    return fmt::format("{}/include/site/python{}/{}/{}", layout.root, layout.python_version.value_or("3"), w.name,
                       below);
  return layout.root + "/" + below;  // data
}

// Console and GUI scripts from entry_points.txt, as pypa/installer writes them.
std::vector<std::pair<std::string, std::string>> scripts_of(const std::string& entry_points,
                                                            const std::string& python) {
  std::vector<std::pair<std::string, std::string>> out;
  std::string section;
  for (auto raw : r::split(entry_points, '\n')) {
    const auto line = r::trim(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      section = std::string(line.substr(1, line.size() - 2));
      continue;
    }
    if (section != "console_scripts" && section != "gui_scripts") continue;
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string name(r::trim(line.substr(0, eq)));
    std::string ref(r::trim(line.substr(eq + 1)));
    if (const auto bracket = ref.find('['); bracket != std::string::npos)
      ref = std::string(r::trim(ref.substr(0, bracket)));
    const auto colon = ref.find(':');
    const std::string module = ref.substr(0, colon);
    const std::string attr = colon == std::string::npos ? "" : ref.substr(colon + 1);
    const std::string top = attr.substr(0, attr.find('.'));
    out.emplace_back(name, fmt::format("#!{}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom {} import {}\n"
                                       "if __name__ == \"__main__\":\n"
                                       "    sys.argv[0] = re.sub(r\"(-script\\.pyw|\\.exe)?$\", \"\", sys.argv[0])\n"
                                       "    sys.exit({}())\n",
                                       python, module, top, attr));
  }
  return out;
}

}  // namespace

ValidatedWheel validate_wheel(const std::string& path) {
  const MappedFile file(path);
  auto w = validate_wheel_bytes(file.data(), file.size(), path);
  const auto parsed_name = r::parse_wheel_name(r::base_name(path));
  if (!parsed_name) refuse(path, "", "its file name is not a wheel's (NAME-VERSION-TAGS.whl)");
  if (r::normalize_name(parsed_name->name) != r::normalize_name(w.name))
    refuse(path, w.dist_info, fmt::format("names {}, but the file name says {}", w.name, parsed_name->name));
  const auto v_file = r::Version::parse(parsed_name->version), v_info = r::Version::parse(w.version);
  if (!v_file || !v_info || !(*v_file == *v_info))
    refuse(path, w.dist_info,
           fmt::format("has version {}, but the file name says {}", w.version, parsed_name->version));
  return w;
}

ValidatedWheel validate_wheel_bytes(const unsigned char* d, std::size_t size, const std::string& path) {
  if (size < 22) refuse(path, "", "too short to be a zip archive");
  // The end of central directory record, searched back over the comment's largest size.
  std::size_t eocd = std::string::npos;
  for (std::size_t i = size - 22 + 1; i-- > (size > 65557 ? size - 65557 : 0);)
    if (u32(d + i) == 0x06054b50 && i + 22 + u16(d + i + 20) == size) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos) refuse(path, "", "no end of central directory record (not a zip, or truncated)");
  if (eocd >= 20 && u32(d + eocd - 20) == 0x07064b50)
    refuse(path, "", "a ZIP64 archive, which cudafix does not read yet");
  const std::uint16_t entries = u16(d + eocd + 10);
  const std::uint32_t cd_size = u32(d + eocd + 12), cd_offset = u32(d + eocd + 16);
  if (u16(d + eocd + 4) != 0 || u16(d + eocd + 6) != 0 || entries != u16(d + eocd + 8))
    refuse(path, "", "a multi-disk archive");
  if (entries == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff)
    refuse(path, "", "ZIP64 markers in the end record");
  if (std::uint64_t{cd_offset} + cd_size > eocd) refuse(path, "", "the central directory lies outside the file");

  ValidatedWheel w;
  w.path = path;
  std::set<std::string> names;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // local header start, data end
  std::size_t at = cd_offset;
  for (std::uint16_t i = 0; i < entries; ++i) {
    if (at + 46 > std::uint64_t{cd_offset} + cd_size || u32(d + at) != 0x02014b50)
      refuse(path, "", fmt::format("central directory entry {} is damaged", i));
    const std::uint16_t made_by = u16(d + at + 4), flags = u16(d + at + 8), method = u16(d + at + 10);
    const std::uint32_t crc = u32(d + at + 16), csize = u32(d + at + 20), usize = u32(d + at + 24);
    const std::uint16_t name_len = u16(d + at + 28), extra_len = u16(d + at + 30), comment_len = u16(d + at + 32);
    const std::uint32_t external = u32(d + at + 38), local = u32(d + at + 42);
    if (at + 46 + name_len > std::uint64_t{cd_offset} + cd_size)
      refuse(path, "", "a central directory name runs past it");
    const std::string name(reinterpret_cast<const char*>(d + at + 46), name_len);
    const bool zip64_extra = at + 46 + name_len + extra_len <= std::uint64_t{cd_offset} + cd_size &&
                             has_zip64_extra(d + at + 46 + name_len, extra_len);
    at += 46 + name_len + extra_len + comment_len;
    // Shown with control characters escaped, so that the message itself stays readable.
    std::string shown;
    for (char c : valid_utf8(name) ? name : r::to_valid_utf8(name))
      shown += static_cast<unsigned char>(c) < 0x20 || c == 0x7f
                   ? fmt::format("\\x{:02x}", static_cast<unsigned char>(c))
                   : std::string(1, c);
    if (const auto why = bad_name(name); !why.empty()) refuse(path, shown, "refused for " + why);
    if (!names.insert(name).second) refuse(path, name, "a second member of this name");
    if (csize == 0xffffffff || usize == 0xffffffff || local == 0xffffffff || zip64_extra)
      refuse(path, name, "ZIP64 sizes or extra field (ZIP64 is not read yet)");
    if (flags & 1) refuse(path, name, "encrypted");
    const unsigned mode = (made_by >> 8) == 3 ? (external >> 16) : 0;
    const unsigned type = mode & S_IFMT;
    if (type == S_IFLNK) refuse(path, name, "a symbolic link");
    if (type == S_IFCHR || type == S_IFBLK || type == S_IFIFO || type == S_IFSOCK)
      refuse(path, name, "a device, FIFO or socket");
    if (method != 0 && method != 8)
      refuse(path, name, fmt::format("compression method {} (only stored and deflate)", method));
    // The local header must agree with the central directory.
    if (std::uint64_t{local} + 30 > cd_offset || u32(d + local) != 0x04034b50)
      refuse(path, name, "its local header is missing or damaged");
    const std::uint16_t lflags = u16(d + local + 6), lmethod = u16(d + local + 8);
    const std::uint16_t lname = u16(d + local + 26), lextra = u16(d + local + 28);
    if (local + 30 + lname > cd_offset ||
        std::string_view(reinterpret_cast<const char*>(d + local + 30), lname) != name)
      refuse(path, name, "its local header names another file");
    if (lmethod != method) refuse(path, name, "its local header and the central directory disagree on compression");
    if (u32(d + local + 18) == 0xffffffff || u32(d + local + 22) == 0xffffffff ||
        (local + 30 + lname + lextra <= cd_offset && has_zip64_extra(d + local + 30 + lname, lextra)))
      refuse(path, name, "ZIP64 sizes or extra field (ZIP64 is not read yet)");
    if (!(lflags & 8) && (u32(d + local + 14) != crc || u32(d + local + 18) != csize || u32(d + local + 22) != usize))
      refuse(path, name, "its local header and the central directory disagree on CRC or sizes");
    const std::uint64_t data_offset = std::uint64_t{local} + 30 + lname + lextra;
    if (data_offset + csize > cd_offset) refuse(path, name, "its data runs past the members' end");
    ranges.emplace_back(local, data_offset + csize);
    if (usize > k_ratio_floor && csize > 0 && usize / csize > k_max_ratio)
      refuse(path, name, fmt::format("a compression ratio over {}:1 ({} bytes from {})", k_max_ratio, usize, csize));
    w.unpacked += usize;
    if (name.ends_with("/")) continue;  // a folder entry
    ZipMember m;
    m.name = name;
    m.method = method;
    m.crc = crc;
    m.compressed = csize;
    m.size = usize;
    m.data_offset = data_offset;
    // As pip and pypa/installer judge it: a regular file's mode with an execute bit.
    m.executable = type == S_IFREG && (mode & 0111) != 0;
    w.members.push_back(std::move(m));
  }
  if (w.unpacked > k_max_unpacked)
    refuse(path, "", fmt::format("{} bytes unpacked, over the 64 GiB limit", w.unpacked));
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) refuse(path, "", "two members' data overlap (a zip bomb's layout)");

  // The wheel's own rules.
  std::set<std::string> infos;
  for (const auto& m : w.members) {
    const auto top = m.name.substr(0, m.name.find('/'));
    if (top.ends_with(".dist-info")) infos.insert(top);
  }
  if (infos.size() != 1)
    refuse(path, "", infos.empty() ? "no .dist-info folder" : fmt::format("{} .dist-info folders", infos.size()));
  w.dist_info = *infos.begin();
  const std::string stem = w.dist_info.substr(0, w.dist_info.size() - 10);
  const auto dash = stem.find('-');
  if (dash == std::string::npos) refuse(path, w.dist_info, "its name has no version");
  w.name = stem.substr(0, dash);
  w.version = stem.substr(dash + 1);
  const std::string data_prefix = stem + ".data/";
  std::map<std::string, const ZipMember*> by_name;
  for (const auto& m : w.members) {
    by_name[m.name] = &m;
    const auto top = m.name.substr(0, m.name.find('/'));
    if (top.ends_with(".data") && top + "/" != data_prefix) refuse(path, m.name, "a .data folder of another dist");
    if (m.name.starts_with(data_prefix)) {
      const std::string scheme =
          m.name.substr(data_prefix.size(), m.name.find('/', data_prefix.size()) - data_prefix.size());
      static const std::set<std::string> schemes{"purelib", "platlib", "scripts", "headers", "data"};
      if (!schemes.count(scheme)) refuse(path, m.name, fmt::format("an unknown .data scheme '{}'", scheme));
    }
  }
  const auto text_of = [&](const std::string& member) -> std::optional<std::string> {
    const auto it = by_name.find(w.dist_info + "/" + member);
    if (it == by_name.end()) return std::nullopt;
    std::string out;
    inflate_member(d, *it->second, path,
                   [&](const unsigned char* p, std::size_t n) { out.append(reinterpret_cast<const char*>(p), n); });
    return out;
  };
  for (const char* required : {"METADATA", "WHEEL", "RECORD"})
    if (!by_name.count(w.dist_info + "/" + required)) refuse(path, w.dist_info, fmt::format("no {}", required));
  const auto wheel_text = text_of("WHEEL");
  const auto version = r::header_value(*wheel_text, "Wheel-Version");
  if (!version || version->substr(0, version->find('.')) != "1")
    refuse(path, w.dist_info + "/WHEEL",
           fmt::format("Wheel-Version {} (only 1.x is installed)", version.value_or("missing")));
  w.root_is_purelib = r::header_value(*wheel_text, "Root-Is-Purelib").value_or("true") == "true";
  for (auto line : r::split(*wheel_text, '\n'))
    if (line.starts_with("Tag:")) w.tags.emplace_back(r::trim(line.substr(4)));
  w.entry_points = text_of("entry_points.txt").value_or("");
  for (const auto& [name, body] : scripts_of(w.entry_points, "python")) {
    (void)body;
    if (name.empty() || name.find('/') != std::string::npos || name.find("..") != std::string::npos ||
        name.front() == '.')
      refuse(path, w.dist_info + "/entry_points.txt", fmt::format("a script named '{}'", name));
  }
  // RECORD lists every member with its hash and size, and nothing else.
  const auto record = parse_wheel_record(*text_of("RECORD"), path);
  for (auto& m : w.members) {
    if (m.name == w.dist_info + "/RECORD" || m.name == w.dist_info + "/RECORD.jws" ||
        m.name == w.dist_info + "/RECORD.p7s")
      continue;
    const auto it = record.find(m.name);
    if (it == record.end()) refuse(path, m.name, "not listed in RECORD");
    if (!it->second.has) refuse(path, m.name, "RECORD gives it no sha256");
    if (it->second.size != m.size)
      refuse(path, m.name, fmt::format("RECORD says {} bytes, the archive {}", it->second.size, m.size));
    m.record_hash = it->second.hash;
  }
  for (const auto& [name, e] : record)
    if (!by_name.count(name)) refuse(path, name, "listed in RECORD but not in the archive");
  return w;
}

StagedWheel stage_wheel(const ValidatedWheel& w, const r::EnvLayout& layout, txn::Transaction& tx, unsigned threads,
                        bool requested, const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  std::atomic<std::uint64_t> written_so_far{0};
  const auto wrote = [&](std::uint64_t n) {
    const auto now = written_so_far += n;
    if (progress) progress(now, w.unpacked);
  };
  const MappedFile file(w.path);
  const std::string root = layout.root_real;
  // Free space first: the staged copy sits beside the files it replaces until the renames.
  struct statvfs fs_stat {};
  if (::statvfs(tx.new_dir().c_str(), &fs_stat) == 0) {
    const std::uint64_t free_bytes = std::uint64_t{fs_stat.f_bavail} * fs_stat.f_frsize;
    const std::uint64_t needed = w.unpacked + (std::uint64_t{64} << 20);
    if (free_bytes < needed)
      throw r::Error(
          fmt::format("{}: {} MiB free on the environment's file system, {} MiB needed to stage {}; "
                      "nothing was installed",
                      root, free_bytes >> 20, needed >> 20, r::base_name(w.path)));
  }
  const std::string python = layout.root + "/bin/python";
  StagedWheel out;
  struct Staged {
    std::string target, staged, hash;
    std::uint64_t size = 0;
    bool executable = false;
  };
  std::vector<Staged> staged(w.members.size());
  const std::string record_member = w.dist_info + "/RECORD";
  std::mutex folders_mutex;
  std::set<std::string> folders;
  const auto staged_path = [&](const std::string& target) { return tx.new_dir() + "/" + r::relative_to(target, root); };
  const auto make_parent = [&](const std::string& p) {
    const std::string parent = r::parent_dir(p);
    std::lock_guard<std::mutex> lock(folders_mutex);
    if (folders.insert(parent).second) fs::create_directories(parent);
  };
  // Largest first, so the threads finish together.
  std::vector<std::size_t> order(w.members.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return w.members[a].size > w.members[b].size; });
  r::parallel_for(order.size(), threads, [&](std::size_t k) {
    const ZipMember& m = w.members[order[k]];
    if (m.name == record_member || m.name == w.dist_info + "/INSTALLER" || m.name == w.dist_info + "/REQUESTED") return;
    Staged& s = staged[order[k]];
    s.target = target_of(w, m.name, layout);
    if (!r::is_within(r::lexically_normal(s.target), layout.root))
      refuse(w.path, m.name, "it would be written outside the environment");
    s.staged = staged_path(s.target);
    const bool script = m.name.starts_with(w.dist_info.substr(0, w.dist_info.size() - 10) + ".data/scripts/");
    s.executable = m.executable;
    make_parent(s.staged);
    const int fd = ::open(s.staged.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, s.executable ? 0755 : 0644);
    if (fd < 0) throw r::Error(fmt::format("{}: {}", s.staged, std::strerror(errno)));
    if (!script) {
      const std::string digest = write_member(file.data(), m, w.path, fd, s.staged);
      txn::start_writeback(fd);
      ::close(fd);
      if (digest != m.record_hash) refuse(w.path, m.name, "its bytes do not match RECORD's sha256");
      s.hash = digest;
      s.size = m.size;
      if (s.executable) ::chmod(s.staged.c_str(), 0755);
      wrote(m.size);
      return;
    }
    r::Sha256Stream wheel_hash, written_hash;
    bool first = true;
    std::uint64_t written = 0;
    inflate_member(file.data(), m, w.path, [&](const unsigned char* p, std::size_t n) {
      wheel_hash.update(p, n);
      // A script's `#!python` line names this environment's interpreter, as installers rewrite it.
      if (first && n >= 8 && std::memcmp(p, "#!python", 8) == 0) {
        const std::size_t eol = std::find(p, p + n, '\n') - p;
        const std::string line = "#!" + python;
        written_hash.update(line.data(), line.size());
        txn::write_all(fd, line.data(), line.size(), s.staged);
        written += line.size();
        p += eol;
        n -= eol;
      }
      first = false;
      written_hash.update(p, n);
      txn::write_all(fd, p, n, s.staged);
      written += n;
    });
    ::close(fd);
    if (wheel_hash.record_digest() != m.record_hash) refuse(w.path, m.name, "its bytes do not match RECORD's sha256");
    s.hash = written_hash.record_digest();
    s.size = written;
    wrote(m.size);
    if (s.executable) ::chmod(s.staged.c_str(), 0755);
  });
  // The generated files: console scripts, INSTALLER, REQUESTED, and RECORD last.
  const std::string site = w.root_is_purelib ? layout.purelib()->path : layout.platlib()->path;
  const std::string info = site + "/" + w.dist_info;
  const auto add_generated = [&](const std::string& target, const std::string& text, bool executable) {
    Staged s;
    s.target = target;
    s.staged = staged_path(target);
    make_parent(s.staged);
    ::unlink(s.staged.c_str());
    txn::append_synced(s.staged, text);
    if (executable) ::chmod(s.staged.c_str(), 0755);
    s.hash = r::sha256_of_file(s.staged);
    s.size = text.size();
    s.executable = executable;
    staged.push_back(std::move(s));
  };
  for (const auto& [name, body] : scripts_of(w.entry_points, python))
    add_generated(layout.root + "/bin/" + name, body, true);
  add_generated(info + "/INSTALLER", "cudafix\n", false);
  if (requested) add_generated(info + "/REQUESTED", "", false);
  std::string record;
  for (const auto& s : staged) {
    if (s.target.empty()) continue;
    std::string rel = r::relative_to(s.target, site);
    if (rel == s.target) rel = "../../../" + r::relative_to(s.target, layout.root);  // bin/, include/ from the site
    record += fmt::format("{},sha256={},{}\n", rel, s.hash, s.size);
  }
  record += w.dist_info + "/RECORD,,\n";
  {
    Staged s;
    s.target = info + "/RECORD";
    s.staged = staged_path(s.target);
    make_parent(s.staged);
    ::unlink(s.staged.c_str());
    txn::append_synced(s.staged, record);
    staged.push_back(std::move(s));
  }
  // One batch: the staged data durable before any rename makes it live.
  if (progress) progress(w.unpacked, w.unpacked);  // the bar's end (RECORD and INSTALLER are not counted)
  txn::sync_file_system(tx.new_dir());
  for (const auto& s : staged) {
    if (s.target.empty()) continue;
    tx.put(s.staged, s.target);
    out.targets.push_back(s.target);
    out.bytes += s.size;
  }
  return out;
}

std::string wheel_file_name(const ValidatedWheel& w) {
  std::vector<std::string> parts[3];
  for (const auto& tag : w.tags) {
    const auto pieces = r::split(tag, '-');
    if (pieces.size() != 3) continue;
    for (std::size_t i = 0; i < 3; ++i)
      if (std::find(parts[i].begin(), parts[i].end(), pieces[i]) == parts[i].end()) parts[i].emplace_back(pieces[i]);
  }
  if (parts[0].empty()) refuse(w.path, w.dist_info + "/WHEEL", "no Tag line, so no file name can be given");
  std::string name = w.name;
  std::replace(name.begin(), name.end(), '-', '_');
  return fmt::format("{}-{}-{}-{}-{}.whl", name, w.version, fmt::join(parts[0], "."), fmt::join(parts[1], "."),
                     fmt::join(parts[2], "."));
}

}  // namespace cudafix::installer
