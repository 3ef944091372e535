// A streaming JSON writer: appends to one buffer, so a 1 MB scan document costs no allocation
// per value. Strings are repaired to valid UTF-8 (U+FFFD); the innermost object holding a
// repaired string gets "lossy": true when it closes. Keys are written in call order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cudafix::cli {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);
  // A string value; returns true when bytes had to be replaced.
  bool string(std::string_view s);
  JsonWriter& value(std::string_view s) {
    string(s);
    return *this;
  }
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(std::int64_t v);
  JsonWriter& value(std::uint64_t v);
  JsonWriter& value(int v) { return value(static_cast<std::int64_t>(v)); }
  JsonWriter& value(bool v);
  JsonWriter& null();
  // Text already valid JSON (a value produced by another writer).
  JsonWriter& raw(std::string_view json);

  // Room for `bytes` of output, so that a large document is not copied as it grows.
  void reserve(std::size_t bytes) { out_.reserve(bytes); }
  [[nodiscard]] const std::string& str() const { return out_; }
  [[nodiscard]] std::string take() { return std::move(out_); }

 private:
  void before_value();
  bool write_string(std::string_view s);
  std::string out_;
  struct Open {
    bool first = true;  // no element written yet
    bool object = false;
    bool lossy = false;  // a string in it was repaired
  };
  std::vector<Open> open_;
  bool after_key_ = false;
};

}  // namespace cudafix::cli
