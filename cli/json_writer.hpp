// A streaming JSON writer: appends to one buffer, so a 1 MB scan document costs no allocation
// per value. Strings are repaired to valid UTF-8 (U+FFFD); the innermost object holding a
// repaired string gets "lossy": true when it closes. Keys are written in call order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
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
  // As nlohmann's dump() and Python write a double: the shortest text that reads back the same, a
  // whole number with ".0", and NaN or an infinity (which JSON has no word for) as null.
  JsonWriter& value(double v);
  JsonWriter& null();
  // An array of strings.
  JsonWriter& strings(const std::vector<std::string>& list);
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

// A document whose keys are known before their values: a command that learns its answers out of
// order (fix, guard) sets each key where it learns it, in the order the document lists them (a key
// set again keeps its place, as in an ordered map), and every value is written through the one
// writer the document goes out through, renderers of whole documents (a plan) included.
class JsonFields {
 public:
  using Value = std::function<void(JsonWriter&)>;
  JsonFields& set(std::string_view key, Value value);
  JsonFields& set_null(std::string_view key) {
    return set(key, [](JsonWriter& w) { w.null(); });
  }
  template <class T>
  requires(!std::is_invocable_v<T, JsonWriter&>) JsonFields& set(std::string_view key, T value) {
    return set(key, [v = std::move(value)](JsonWriter& w) { write_value(w, v); });
  }
  // Each key and its value, into the object `w` has open.
  void write(JsonWriter& w) const;

 private:
  static void write_value(JsonWriter& w, const std::vector<std::string>& v) { w.strings(v); }
  static void write_value(JsonWriter& w, const std::string& v) { w.value(v); }
  template <class T>
  static void write_value(JsonWriter& w, const T& v) {
    w.value(v);
  }
  std::vector<std::pair<std::string, Value>> fields_;
};

}  // namespace cudafix::cli
