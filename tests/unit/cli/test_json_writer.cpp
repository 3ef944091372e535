#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <limits>
#include <string>
#include <vector>

#include "cli/json_writer.hpp"

namespace cudafix::cli {
namespace {

// What a script reading --json gets back for a string the writer was given.
std::string round_trip(const std::string& s, bool* lossy = nullptr) {
  JsonWriter w;
  w.begin_array();
  const bool replaced = w.string(s);
  w.end_array();
  if (lossy) *lossy = replaced;
  return nlohmann::json::parse(w.str()).at(0).get<std::string>();
}

TEST(JsonWriter, EscapedStringsComeBackAsWritten) {
  for (const std::string& s :
       {std::string("plain/path/libcudnn.so.9"), std::string("nvidia-cudnn-cu13; extra == \"cudnn\""),
        std::string("C:\\dir\\\"quoted\"\\"), std::string("line\nbreak\tand\rreturn"),
        std::string("ctl\x01\x1f end", 9), std::string("caf\xc3\xa9 \"and\" \\"), std::string("\"")}) {
    bool lossy = true;
    EXPECT_EQ(round_trip(s, &lossy), s);
    EXPECT_FALSE(lossy) << s;
  }
}

// Strings are checked 8 bytes at a time: every byte that needs escaping must be caught wherever
// it falls in a word or in the tail, and the bytes next to the ones that do must not be.
TEST(JsonWriter, EveryByteThatNeedsEscapingIsEscapedAtEveryPosition) {
  for (std::size_t len : {1U, 7U, 8U, 9U, 16U, 19U}) {
    for (std::size_t at = 0; at < len; ++at) {
      for (int b = 1; b < 0x80; ++b) {
        std::string s(len, 'a');
        s[at] = static_cast<char>(b);
        const bool needs = b < 0x20 || b == '"' || b == '\\';
        JsonWriter w;
        w.begin_array();
        w.string(s);
        w.end_array();
        EXPECT_EQ(w.str().size() == len + 4, !needs) << "byte " << b << " at " << at << " of " << len;
        EXPECT_EQ(nlohmann::json::parse(w.str()).at(0).get<std::string>(), s) << b << " at " << at;
      }
      std::string high(len, 'a');
      high[at] = '\xff';
      bool lossy = false;
      round_trip(high, &lossy);
      EXPECT_TRUE(lossy) << "0xff at " << at << " of " << len;
    }
  }
  EXPECT_EQ(round_trip(std::string(1, '\0')), std::string(1, '\0'));
}

TEST(JsonWriter, InvalidUtf8IsReplacedAndReported) {
  bool lossy = false;
  EXPECT_EQ(round_trip("a\"\xff\\b", &lossy), "a\"\xEF\xBF\xBD\\b");
  EXPECT_TRUE(lossy);
}

// Seconds and phases (fix's, guard's, the probe's) are doubles: written as nlohmann's dump()
// wrote them when those documents were built with it, so that a script sees the same text; a
// value JSON cannot hold is null, not text no parser reads.
TEST(JsonWriter, DoublesAreWrittenAsNlohmannWritesThem) {
  for (double v : {0.0, 1.0, 2.5, 0.1, 1.0 / 3, 0.000123, 1e-05, 1e-07, 12345.678, 1e20, -0.25}) {
    JsonWriter w;
    w.value(v);
    EXPECT_EQ(w.str(), nlohmann::json(v).dump()) << v;
    EXPECT_EQ(nlohmann::json::parse(w.str()).get<double>(), v);
  }
  JsonWriter w;
  w.begin_array().value(std::numeric_limits<double>::quiet_NaN()).value(std::numeric_limits<double>::infinity());
  w.end_array();
  EXPECT_EQ(w.str(), "[null,null]");
}

// A document whose values are learned out of order keeps its keys in the order first set: a key
// set again (fix's "changed", guard's "before") keeps its place and takes the last value.
TEST(JsonFields, AKeySetAgainKeepsItsPlaceAndItsLastValue) {
  JsonFields doc;
  doc.set("schema", 1).set("changed", false).set_null("before").set("steps", std::vector<std::string>{"a", "b"});
  doc.set("changed", true).set("before", [](JsonWriter& w) { w.begin_object().key("errors").value(0).end_object(); });
  JsonWriter w;
  w.begin_object();
  doc.write(w);
  w.end_object();
  EXPECT_EQ(w.str(), R"({"schema":1,"changed":true,"before":{"errors":0},"steps":["a","b"]})");
}

}  // namespace
}  // namespace cudafix::cli
