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

TEST(JsonWriter, InvalidUtf8IsReplacedAndReported) {
  bool lossy = false;
  EXPECT_EQ(round_trip("a\"\xff\\b", &lossy), "a\"\xEF\xBF\xBD\\b");
  EXPECT_TRUE(lossy);
}

}  // namespace
}  // namespace cudafix::cli
