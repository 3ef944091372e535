// cli/printable: the one way untrusted text reaches a terminal (cut with a count, control bytes
// and hidden code points escaped, invalid UTF-8 shown byte by byte).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "cli/printable.hpp"

namespace cudafix::cli {
namespace {

TEST(Printable, PlainTextAndUtf8PassUnchanged) {
  EXPECT_EQ(printable("torch/lib/libtorch_cuda.so"), "torch/lib/libtorch_cuda.so");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x9c\x93"), "caf\xc3\xa9 \xe2\x9c\x93");
}

TEST(Printable, ControlBytesAndInvalidUtf8AreEscaped) {
  EXPECT_EQ(printable("a\x1b[2Jb\x07\x7f"), "a\\x1b[2Jb\\x07\\x7f");
  EXPECT_EQ(printable("line\nnext\r\ttab"), "line\\nnext\\r\\ttab");
  EXPECT_EQ(printable(std::string("nul\0here", 8)), "nul\\x00here");
  EXPECT_EQ(printable("bad\xff\xc3("), "bad\\xff\\xc3(");
  // C1 controls (U+009B is a CSI to many terminals) and the bidi overrides are hidden code points.
  EXPECT_EQ(printable("x\xc2\x9b"
                      "31m"),
            "x\\u009b31m");
  EXPECT_EQ(printable("evil\xe2\x80\xaetxt.so"), "evil\\u202etxt.so");
}

TEST(Printable, LongTextIsCutAtTheLimitWithACountOfWhatWasLeftOut) {
  const std::string big(20'000'000, 'x');
  const std::string shown = printable(big);
  EXPECT_EQ(shown, std::string(k_field_limit, 'x') + "\u2026 (20.0 MB more)");
  EXPECT_EQ(printable(std::string(600, 'y')), std::string(512, 'y') + "\u2026 (88 bytes more)");
  EXPECT_EQ(printable(std::string(k_line_limit, 'z'), k_line_limit), std::string(k_line_limit, 'z'));
  // Never inside a UTF-8 sequence: the 2-byte letter that would straddle the limit goes too.
  const std::string accents = std::string(511, 'a') + "\xc3\xa9\xc3\xa9";
  EXPECT_EQ(printable(accents), std::string(511, 'a') + "\u2026 (4 bytes more)");
}

TEST(Printable, LinesAreEachCutAndTheirNewlinesKept) {
  EXPECT_EQ(printable_lines("one\x1b\ntwo\n"), "one\\x1b\ntwo\n");
  const std::string two = std::string(3000, 'a') + "\nshort";
  EXPECT_EQ(printable_lines(two), std::string(k_line_limit, 'a') + "\u2026 (952 bytes more)\nshort");
}

}  // namespace
}  // namespace cudafix::cli
