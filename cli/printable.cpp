#include "cli/printable.hpp"

#include <fmt/format.h>

#include <cstdint>

#include "resolver/base/text.hpp"

namespace cudafix::cli {
namespace {

// "512 bytes", "12.3 KB", "199.0 MB": decimal units, as the rest of cudafix's output.
std::string amount(std::size_t bytes) {
  if (bytes < 10'000) return fmt::format("{} {}", bytes, bytes == 1 ? "byte" : "bytes");
  const auto b = static_cast<double>(bytes);
  if (bytes < 1'000'000) return fmt::format("{:.1f} KB", b / 1e3);
  if (bytes < 1'000'000'000) return fmt::format("{:.1f} MB", b / 1e6);
  return fmt::format("{:.1f} GB", b / 1e9);
}

std::uint32_t code_point(std::string_view seq) {
  const auto* p = reinterpret_cast<const unsigned char*>(seq.data());
  if (seq.size() == 1) return p[0];
  std::uint32_t cp = p[0] & (0x7FU >> seq.size());
  for (std::size_t k = 1; k < seq.size(); ++k) cp = (cp << 6) | (p[k] & 0x3FU);
  return cp;
}

bool hidden_or_control(std::uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

void escape_byte(unsigned char c, std::string& out) {
  switch (c) {
    case '\n':
      out += "\\n";
      return;
    case '\r':
      out += "\\r";
      return;
    case '\t':
      out += "\\t";
      return;
    default:
      out += fmt::format("\\x{:02x}", c);
  }
}

}  // namespace

std::string printable(std::string_view text, std::size_t limit) {
  std::string out;
  out.reserve(std::min(text.size(), limit) + 16);
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t len = resolver::utf8_sequence_length(text.substr(i));
    if (i + std::max<std::size_t>(len, 1) > limit) break;
    const auto c = static_cast<unsigned char>(text[i]);
    if (len == 0 || (len == 1 && (c < 0x20 || c == 0x7F))) {
      escape_byte(c, out);
      ++i;
      continue;
    }
    const std::string_view seq = text.substr(i, len);
    if (len > 1 && hidden_or_control(code_point(seq)))
      out += fmt::format("\\u{:04x}", code_point(seq));
    else
      out += seq;
    i += len;
  }
  if (i < text.size()) out += fmt::format("\u2026 ({} more)", amount(text.size() - i));
  return out;
}

std::string printable_lines(std::string_view text) {
  std::string out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto nl = text.find('\n', start);
    const auto end = nl == std::string_view::npos ? text.size() : nl;
    out += printable(text.substr(start, end - start), k_line_limit);
    if (nl == std::string_view::npos) break;
    out += '\n';
    start = nl + 1;
  }
  return out;
}

}  // namespace cudafix::cli
