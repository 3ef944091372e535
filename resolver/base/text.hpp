// Small string and path helpers shared by every reader. Look here before writing another.
#pragma once

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cudafix::resolver::inline base {

// PEP 503 normalised project name: lower case, runs of [-_.] become one '-'.
[[nodiscard]] std::string normalize_name(std::string_view name);

[[nodiscard]] std::string_view trim(std::string_view s);
[[nodiscard]] std::vector<std::string_view> split(std::string_view s, char sep);
// Splits a colon-separated search path; empty entries are kept as "" (glibc treats them as ".").
[[nodiscard]] std::vector<std::string> split_search_path(std::string_view s);

// Lexical normalisation without touching the disk: removes "." and "x/..", keeps leading "..".
[[nodiscard]] std::string lexically_normal(std::string_view path);
// Eight bytes at a time ("Bit Twiddling Hacks"): `c` in every byte of a word, and the high bit of
// each byte of `v` that is zero, and of no other byte.
[[nodiscard]] constexpr std::uint64_t bytes_of(unsigned char c) { return 0x0101010101010101ULL * c; }
[[nodiscard]] constexpr std::uint64_t zero_bytes(std::uint64_t v) {
  constexpr std::uint64_t low7 = 0x7f7f7f7f7f7f7f7fULL;
  return ~(((v & low7) + low7) | v | low7);
}

// True when `rel` is relative and already normal: no "." or ".." part, no empty part, no
// trailing slash. Joined to a folder such a path needs no normalisation.
[[nodiscard]] bool is_clean_relative(std::string_view rel);
// `rel` joined to the absolute folder `dir`, lexically normalised (an absolute `rel` stands alone).
// Clean relative paths, the common case in RECORD, skip the normalisation.
[[nodiscard]] std::string join_normal(std::string_view dir, std::string_view rel);
// The same into `out`, reusing its buffer (the scan joins 70,000 of them).
void join_normal(std::string_view dir, std::string_view rel, std::string& out);
// True when `path` (normalised, absolute) is `dir` or lies below it.
[[nodiscard]] bool is_within(std::string_view path, std::string_view dir);
// `path` relative to `dir` when within it, else `path` itself.
[[nodiscard]] std::string relative_to(std::string_view path, std::string_view dir);
[[nodiscard]] std::string parent_dir(std::string_view path);
// realpath(3), or the lexically normal path when it cannot be resolved (a dangling link).
[[nodiscard]] std::string real_path_of(const std::string& path);
[[nodiscard]] std::string_view base_name(std::string_view path);

// The length of the valid UTF-8 sequence that starts `s` (1 for ASCII), or 0 when it is not one
// (overlong forms, surrogates and values past U+10FFFF are not).
[[nodiscard]] std::size_t utf8_sequence_length(std::string_view s);
// The offset of the first byte of `s` that is not valid UTF-8, or npos.
[[nodiscard]] std::size_t first_invalid_utf8(std::string_view s);
// Replaces invalid UTF-8 with U+FFFD; `lossy` is set when anything was replaced.
[[nodiscard]] std::string to_valid_utf8(std::string_view s, bool* lossy = nullptr);

// What an OS error on `path` means, in words: strerror's, except that EACCES and EPERM are
// "permission denied" (pip's words), followed, when `path` (or the nearest folder above it that
// can be looked at) belongs to another user than the one running cudafix, by whose it is and
// what to do: "(/v/lib belongs to root, mode 0700: run cudafix as root, its owner)".
[[nodiscard]] std::string os_error_text(int err, const std::string& path);
// Why a file that try_read_file* could not read was not read: "missing", "permission denied
// (...)", "no regular file", or strerror's words.
[[nodiscard]] std::string why_unread(int err, const std::string& path);
// "cannot read PATH: permission denied (...)" and the like, for `errno` just set.
[[nodiscard]] std::string cannot(std::string_view what, const std::string& path, int err);

// Reads a whole small file; throws Error naming the file on failure.
[[nodiscard]] std::string read_file(const std::filesystem::path& path);
// The same, or nullopt when it is no regular file, cannot be read (/proc files count) or is
// larger than `max_bytes` (a sparse file planted in cudafix's state costs no disk at any size).
[[nodiscard]] std::optional<std::string> try_read_file(const std::filesystem::path& path,
                                                       std::uint64_t max_bytes = UINT64_MAX);
// The same for `name` in the folder open as `dir_fd` (openat(2): no lookup of the folder again).
// `error`, when given, gets the errno of a failed open or read (EINVAL: no regular file, EFBIG:
// over `max_bytes`).
[[nodiscard]] std::optional<std::string> try_read_file_at(int dir_fd, const char* name,
                                                          std::uint64_t max_bytes = UINT64_MAX, int* error = nullptr);

// The whole of `s` as a decimal number, or nullopt (empty, trailing junk, out of range).
template <typename T>
[[nodiscard]] std::optional<T> to_number(std::string_view s) {
  T v{};
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// For unordered containers keyed by std::string and looked up by string_view, with no string
// made per lookup.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// Compiled bytecode's folder: listed in RECORDs, never walked, never a finding.
[[nodiscard]] inline bool in_pycache(std::string_view path) {
  return path.find("/__pycache__/") != std::string_view::npos;
}

// Names like libfoo.so, libfoo.so.1, libfoo.so.1.2 and Python's foo.cpython-312-x86_64-linux-gnu.so.
[[nodiscard]] bool looks_like_shared_object(std::string_view file_name);

}  // namespace cudafix::resolver::inline base
