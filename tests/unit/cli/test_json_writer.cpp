#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

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

}  // namespace
}  // namespace cudafix::cli
