#include "cli/json_writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "resolver/base/text.hpp"

namespace cudafix::cli {

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!open_.empty()) {
    if (!open_.back().first) out_.push_back(',');
    open_.back().first = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_.push_back('{');
  open_.push_back({true, true, false});
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  if (open_.back().lossy) out_ += open_.back().first ? "\"lossy\":true" : ",\"lossy\":true";
  out_.push_back('}');
  open_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_.push_back('[');
  open_.push_back({true, false, false});
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  out_.push_back(']');
  open_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view k) {
  before_value();
  write_string(k);
  out_.push_back(':');
  after_key_ = true;
  return *this;
}

bool JsonWriter::string(std::string_view s) {
  before_value();
  return write_string(s);
}

namespace {

// True when `s` is ASCII with nothing to escape (no control character, quote or backslash), the
// case of nearly every string a scan writes (a megabyte of paths): checked 8 bytes at a time.
bool plain_ascii(std::string_view s) {
  constexpr std::uint64_t highs = 0x8080808080808080ULL;
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, s.data() + i, 8);
    // With no high bit set, a byte below 0x20 is one whose subtraction of 0x20 borrows.
    if ((w & highs) || ((w - resolver::bytes_of(0x20)) & ~w & highs) ||
        resolver::zero_bytes(w ^ resolver::bytes_of('"')) || resolver::zero_bytes(w ^ resolver::bytes_of('\\')))
      return false;
  }
  for (; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80 || c < 0x20 || c == '"' || c == '\\') return false;
  }
  return true;
}

}  // namespace

bool JsonWriter::write_string(std::string_view s) {
  bool lossy = false;
  // Most strings are plain ASCII paths: check once, copy once. Markers hold quotes: copy the
  // runs between escapes whole.
  out_.push_back('"');
  if (plain_ascii(s)) {
    out_.append(s);
  } else {
    const bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
    const std::string repaired = ascii ? std::string() : resolver::to_valid_utf8(s, &lossy);
    const std::string_view valid = ascii ? s : std::string_view(repaired);
    std::size_t run = 0;
    for (std::size_t i = 0; i < valid.size(); ++i) {
      const auto c = static_cast<unsigned char>(valid[i]);
      if (c >= 0x20 && c != '"' && c != '\\') continue;
      out_.append(valid.substr(run, i - run));
      run = i + 1;
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\r':
          out_ += "\\r";
          break;
        case '\t':
          out_ += "\\t";
          break;
        default:
          out_ += fmt::format("\\u{:04x}", c);
      }
    }
    out_.append(valid.substr(run));
  }
  out_.push_back('"');
  if (lossy)
    for (auto it = open_.rbegin(); it != open_.rend(); ++it)
      if (it->object) {
        it->lossy = true;
        break;
      }
  return lossy;
}

JsonWriter& JsonWriter::value(std::int64_t v) {
  before_value();
  fmt::format_to(std::back_inserter(out_), "{}", v);
  return *this;
}

JsonWriter& JsonWriter::value(std::uint64_t v) {
  before_value();
  fmt::format_to(std::back_inserter(out_), "{}", v);
  return *this;
}

JsonWriter& JsonWriter::value(bool v) {
  before_value();
  out_ += v ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::value(double v) {
  if (!std::isfinite(v)) return null();
  before_value();
  const std::size_t start = out_.size();
  fmt::format_to(std::back_inserter(out_), "{}", v);
  if (out_.find_first_of(".e", start) == std::string::npos) out_ += ".0";
  return *this;
}

JsonWriter& JsonWriter::strings(const std::vector<std::string>& list) {
  begin_array();
  for (const auto& s : list) value(s);
  return end_array();
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

JsonWriter& JsonWriter::raw(std::string_view json) {
  before_value();
  out_.append(json);
  return *this;
}

JsonFields& JsonFields::set(std::string_view key, Value value) {
  for (auto& [k, v] : fields_)
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  fields_.emplace_back(std::string(key), std::move(value));
  return *this;
}

void JsonFields::write(JsonWriter& w) const {
  for (const auto& [k, v] : fields_) {
    w.key(k);
    v(w);
  }
}

}  // namespace cudafix::cli
