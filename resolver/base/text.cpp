#include "resolver/base/text.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "resolver/base/diagnostic.hpp"

namespace cudafix::resolver::inline base {

std::string Diagnostic::to_string() const {
  std::string where = file;
  if (line) where += fmt::format(":{}", *line);
  if (offset) where += fmt::format(" (offset {:#x})", *offset);
  return fmt::format("{}: {}", where, message);
}

std::string normalize_name(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  bool in_sep = false;
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.') {
      in_sep = true;
      continue;
    }
    if (in_sep && !out.empty()) out.push_back('-');
    in_sep = false;
    out.push_back(static_cast<char>((c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c));
  }
  return out;
}

std::string_view trim(std::string_view s) {
  const auto* ws = " \t\r\n\f\v";  // Python's \s, as PEP 440 strips
  const auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    const auto pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

std::vector<std::string> split_search_path(std::string_view s) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  for (auto part : split(s, ':')) out.emplace_back(part);
  return out;
}

std::string lexically_normal(std::string_view path) {
  const bool absolute = !path.empty() && path.front() == '/';
  std::vector<std::string_view> parts;
  for (auto part : split(path, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (!absolute) {
        parts.push_back(part);
      }
      continue;
    }
    parts.push_back(part);
  }
  std::string out = absolute ? "/" : "";
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out.push_back('/');
    out.append(parts[i]);
  }
  if (out.empty()) out = ".";
  return out;
}

std::string join_normal(std::string_view dir, std::string_view rel) {
  std::string out;
  join_normal(dir, rel, out);
  return out;
}

void join_normal(std::string_view dir, std::string_view rel, std::string& out) {
  if (!rel.empty() && rel.front() == '/') {
    out = lexically_normal(rel);
    return;
  }
  out.assign(dir);
  if (out.empty() || out.back() != '/') out.push_back('/');
  out.append(rel);
  if (!is_clean_relative(rel)) out = lexically_normal(out);
}

bool is_clean_relative(std::string_view rel) {
  const std::size_t n = rel.size();
  if (n == 0 || rel.front() == '/' || rel.back() == '/') return false;
  // Nearly every row has no part that starts with '.' or '/'. That is checked 8 character pairs
  // at a time, without a branch per character (one mispredicted at every slash cost more than
  // the rest of the ownership pass's work on a row); only the rest are looked at closely.
  const char* p = rel.data();
  std::uint64_t suspect = p[0] == '.' ? 1U : 0U;
  std::size_t i = 1;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t cur = 0, prev = 0;
    std::memcpy(&cur, p + i, 8);
    std::memcpy(&prev, p + i - 1, 8);
    suspect |= zero_bytes(prev ^ bytes_of('/')) & (zero_bytes(cur ^ bytes_of('.')) | zero_bytes(cur ^ bytes_of('/')));
  }
  for (; i < n; ++i) suspect |= static_cast<std::uint64_t>(p[i - 1] == '/' && (p[i] == '.' || p[i] == '/'));
  if (suspect == 0) return true;
  for (i = 0; i < n; ++i) {
    if (i > 0 && rel[i - 1] != '/') continue;
    if (rel[i] == '/') return false;  // an empty part
    if (rel[i] != '.') continue;
    const std::size_t after = i + 1 < n && rel[i + 1] == '.' ? i + 2 : i + 1;
    if (after == n || rel[after] == '/') return false;  // "." or ".."
  }
  return true;
}

bool is_within(std::string_view path, std::string_view dir) {
  if (dir == "/") return !path.empty() && path.front() == '/';
  if (path.size() < dir.size() || path.compare(0, dir.size(), dir) != 0) return false;
  return path.size() == dir.size() || path[dir.size()] == '/';
}

std::string relative_to(std::string_view path, std::string_view dir) {
  if (!is_within(path, dir)) return std::string(path);
  if (path.size() == dir.size()) return ".";
  return std::string(path.substr(dir == "/" ? 1 : dir.size() + 1));
}

std::string parent_dir(std::string_view path) {
  const auto pos = path.rfind('/');
  if (pos == std::string_view::npos) return ".";
  if (pos == 0) return "/";
  return std::string(path.substr(0, pos));
}

std::string real_path_of(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf)) return buf;
  return lexically_normal(path);
}

std::string_view base_name(std::string_view path) {
  const auto pos = path.rfind('/');
  return pos == std::string_view::npos ? path : path.substr(pos + 1);
}

std::size_t utf8_sequence_length(std::string_view s) {
  if (s.empty()) return 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  std::size_t len = 0;
  std::uint32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((p[k] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[k] & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are invalid too.
  if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
      (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
    return 0;
  return len;
}

std::size_t first_invalid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    // Eight ASCII bytes at a time: RECORD text is almost all ASCII.
    if (i + 8 <= s.size()) {
      std::uint64_t v;
      std::memcpy(&v, s.data() + i, 8);
      if ((v & bytes_of(0x80)) == 0) {
        i += 8;
        continue;
      }
    }
    const std::size_t len = utf8_sequence_length(s.substr(i));
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string to_valid_utf8(std::string_view s, bool* lossy) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t len = utf8_sequence_length(s.substr(i));
    if (len == 0) {
      out.append("\xEF\xBF\xBD");
      if (lossy) *lossy = true;
      ++i;
      continue;
    }
    out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

namespace {

// Reads all of `fd` into `out`, or returns the errno that stopped it. A regular file (`st`, the
// caller's fstat of it) is read into a string of its size in one go (growing a string 64 KB at a
// time copied torch's 1.5 MB RECORD many times over); one that reports no size (a pipe, /proc) is
// read to end of input, but no further than `max_bytes` (EFBIG past it): its size says nothing
// of what it holds, and /proc/kallsyms, a regular file of size 0, holds megabytes.
int read_all(int fd, const struct stat& st, std::string& out, std::uint64_t max_bytes = UINT64_MAX) {
  const std::size_t size = S_ISREG(st.st_mode) ? static_cast<std::size_t>(st.st_size) : 0;
  out.resize(size);
  // One byte past the bound tells a file over it.
  const std::size_t cap = max_bytes >= SIZE_MAX ? SIZE_MAX : static_cast<std::size_t>(max_bytes) + 1;
  std::size_t have = 0;
  while (size == 0 || have < size) {
    if (have == out.size()) out.resize(std::min(cap, std::max<std::size_t>(65536, out.size() * 2)));
    const ssize_t r = ::read(fd, out.data() + have, out.size() - have);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) break;
    have += static_cast<std::size_t>(r);
    if (size == 0 && have > max_bytes) return EFBIG;
  }
  out.resize(have);
  return 0;
}

// A user's name, or "uid N" where the password database has none.
std::string user_name(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  char buf[4096];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found && found->pw_name) return found->pw_name;
  return fmt::format("uid {}", uid);
}

}  // namespace

std::string os_error_text(int err, const std::string& path) {
  if (err != EACCES && err != EPERM) return std::strerror(err);
  // The first of the path and its folders that can be looked at: a file in a folder of mode 0700
  // cannot, the folder can.
  std::string at = path;
  struct stat st {};
  while (!at.empty() && ::stat(at.c_str(), &st) != 0) {
    const std::string up = parent_dir(at);
    if (up == at) return "permission denied";
    at = up;
  }
  if (at.empty() || st.st_uid == ::geteuid()) return "permission denied";
  const std::string owner = user_name(st.st_uid);
  return fmt::format("permission denied ({} belongs to {}, mode {:04o}: run cudafix as {}, its owner)", at, owner,
                     st.st_mode & 07777, owner);
}

std::string why_unread(int err, const std::string& path) {
  if (err == ENOENT) return "missing";
  if (err == EINVAL) return "no regular file";
  if (err == EFBIG) return "too large";
  return os_error_text(err, path);
}

std::string cannot(std::string_view what, const std::string& path, int err) {
  return fmt::format("cannot {} {}: {}", what, path, os_error_text(err, path));
}

std::string read_file(const std::filesystem::path& path) {
  // O_NONBLOCK and a regular file only: a FIFO or a device (/dev/zero) planted in a file's place
  // must not hang the read or grow it without end.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(cannot("read", path.string(), errno));
  struct stat st {};
  std::string out;
  const int err = ::fstat(fd, &st) != 0 ? errno : !S_ISREG(st.st_mode) ? EINVAL : read_all(fd, st, out);
  if (err == EINVAL && !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("cannot read {}: not a regular file (a FIFO, a device or a folder)", path.string()));
  }
  ::close(fd);
  if (err != 0) throw Error(cannot("read", path.string(), err));
  return out;
}

std::optional<std::string> try_read_file(const std::filesystem::path& path, std::uint64_t max_bytes) {
  return try_read_file_at(AT_FDCWD, path.c_str(), max_bytes);
}

std::optional<std::string> try_read_file_at(int dir_fd, const char* name, std::uint64_t max_bytes, int* error) {
  // O_NONBLOCK: a FIFO in the file's place must not hang the open; it is then refused as not a
  // regular file. One open and one fstat, where a stat first would look the path up twice.
  const int fd = ::openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  int err = fd < 0 ? errno : 0;
  std::optional<std::string> out;
  if (fd >= 0) {
    struct stat st {};
    if (::fstat(fd, &st) != 0)
      err = errno;
    else if (!S_ISREG(st.st_mode))
      err = EINVAL;
    else if (static_cast<std::uint64_t>(st.st_size) > max_bytes)
      err = EFBIG;
    else if (out.emplace(); (err = read_all(fd, st, *out, max_bytes)) != 0)
      out.reset();
    ::close(fd);
  }
  if (error) *error = err;
  return out;
}

bool looks_like_shared_object(std::string_view name) {
  const auto pos = name.find(".so");
  if (pos == std::string_view::npos || pos == 0) return false;
  const auto rest = name.substr(pos + 3);
  if (rest.empty()) return true;
  if (rest.front() != '.') return looks_like_shared_object(rest);  // e.g. "libx.soft.so"
  // Version components each start with a digit: ".so.1.1.1k" yes, ".so.py" no.
  for (auto comp : split(rest.substr(1), '.'))
    if (comp.empty() || comp.front() < '0' || comp.front() > '9') return looks_like_shared_object(rest);
  return true;
}

}  // namespace cudafix::resolver::inline base
