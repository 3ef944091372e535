#include <gtest/gtest.h>

#include "resolver/base/text.hpp"

#include <sys/stat.h>

#include "resolver/base/diagnostic.hpp"
#include "tests/support/process.hpp"

namespace cudafix::resolver {

TEST(NormalizeName, FollowsPep503) {
  EXPECT_EQ(normalize_name("nvidia_cudnn_cu12"), "nvidia-cudnn-cu12");
  EXPECT_EQ(normalize_name("Friendly.-_Bard"), "friendly-bard");
  EXPECT_EQ(normalize_name("PyYAML"), "pyyaml");
}

TEST(LexicallyNormal, ResolvesDotDotWithoutTouchingDisk) {
  EXPECT_EQ(lexically_normal("/v/lib/python3.12/site-packages/../../../bin/pip"), "/v/bin/pip");
  EXPECT_EQ(lexically_normal("/a/./b//c/"), "/a/b/c");
  EXPECT_EQ(lexically_normal("/../x"), "/x");
  EXPECT_EQ(lexically_normal("../x"), "../x");
}

TEST(JoinNormal, EqualsTheLexicalNormalOfTheJoinedPath) {
  for (const std::string rel :
       {"torch/lib/libc10.so", "a/.hidden/b", "a/..b/c", "a/b..", ".x", "..x/y", "a/./b", "./a", "a/.", "a/../b",
        "../../../bin/pip", "..", ".", "a//b", "a/b/", "a/b/..", "x.py", "a/...", "a/.../b"}) {
    EXPECT_EQ(join_normal("/v/site", rel), lexically_normal("/v/site/" + rel)) << rel;
    EXPECT_EQ(join_normal("/v/site/", rel), lexically_normal("/v/site/" + rel)) << rel;
  }
  EXPECT_EQ(join_normal("/v/site", "../../../bin/pip"), "/bin/pip");
  EXPECT_EQ(join_normal("/v/site", "/abs/../x"), "/x");  // an absolute row stands alone
  EXPECT_EQ(join_normal("/v/lib/site", "a/.hidden/b"), "/v/lib/site/a/.hidden/b");
}

// The ownership pass looks a clean row up without joining it: clean must mean that joining
// changes nothing, and anything else must be called unclean.
TEST(IsCleanRelative, IsTrueExactlyWhenJoiningNeedsNoNormalisation) {
  for (const std::string rel : {"torch/lib/libc10.so", "a/.hidden/b", "a/..b/c", "a/b..", ".x", "..x/y", "x.py",
                                "a/...", "a/.../b", "__pycache__/x.pyc"}) {
    EXPECT_TRUE(is_clean_relative(rel)) << rel;
    EXPECT_EQ(lexically_normal("/v/site/" + rel), "/v/site/" + rel) << rel;
  }
  for (const std::string rel : {"", "/abs", "a/./b", "./a", "a/.", "a/../b", "../../../bin/pip", "..", ".", "a//b",
                                "a/b/", "a/b/..", "//a", "a/..", "../x"})
    EXPECT_FALSE(is_clean_relative(rel)) << rel;
  // Every path of up to 11 characters from 'a', '.' and '/': long enough for a "/." or "//" to
  // fall at each place of the 8-character steps the check takes.
  std::string rel;
  std::size_t checked = 0;
  for (std::size_t len = 1; len <= 11; ++len) {
    std::size_t count = 1;
    for (std::size_t i = 0; i < len; ++i) count *= 3;
    rel.assign(len, 'a');
    for (std::size_t k = 0; k < count; ++k) {
      for (std::size_t i = 0, v = k; i < len; ++i, v /= 3) rel[i] = "a./"[v % 3];
      const bool joined_is_normal = lexically_normal("/v/site/" + rel) == "/v/site/" + rel;
      if (is_clean_relative(rel) != joined_is_normal) ADD_FAILURE() << rel;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 265719U);
}

TEST(IsWithin, RejectsSiblingPrefixes) {
  EXPECT_TRUE(is_within("/v/lib/x", "/v"));
  EXPECT_TRUE(is_within("/v", "/v"));
  EXPECT_FALSE(is_within("/venv2/x", "/venv"));
}

TEST(ToValidUtf8, ReplacesBadBytesAndSaysSo) {
  bool lossy = false;
  EXPECT_EQ(to_valid_utf8("caf\xc3\xa9", &lossy), "caf\xc3\xa9");
  EXPECT_FALSE(lossy);
  EXPECT_EQ(to_valid_utf8("a\xff"
                          "b",
                          &lossy),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_TRUE(lossy);
  lossy = false;
  EXPECT_EQ(to_valid_utf8("\xc0\xaf", &lossy), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
  EXPECT_TRUE(lossy);
}

TEST(LooksLikeSharedObject, KnowsVersionedAndExtensionNames) {
  EXPECT_TRUE(looks_like_shared_object("libcudnn.so.9"));
  EXPECT_TRUE(looks_like_shared_object("libcublas.so.13.1.0.3"));
  EXPECT_TRUE(looks_like_shared_object("_C.cpython-312-x86_64-linux-gnu.so"));
  EXPECT_TRUE(looks_like_shared_object("libcrypto-5409cd36.so.1.1.1k"));  // auditwheel-vendored OpenSSL
  EXPECT_FALSE(looks_like_shared_object("libfoo.so.py"));
  EXPECT_FALSE(looks_like_shared_object("README.sources"));
}

TEST(ReadFile, ReadsWholeFilesOfAnySizeAndFilesThatReportNoSize) {
  test::TempDir t;
  std::string big;
  for (int i = 0; big.size() < 3'000'000; ++i) big += "torch/lib/file" + std::to_string(i) + ".py,sha256=abc,12\n";
  test::write_file(t.path() + "/RECORD", big);
  EXPECT_EQ(read_file(t.path() + "/RECORD"), big);
  EXPECT_EQ(try_read_file(t.path() + "/RECORD"), big);
  test::write_file(t.path() + "/empty", "");
  EXPECT_EQ(try_read_file(t.path() + "/empty"), "");
  // /proc files say their size is 0 and still have text.
  const auto status = try_read_file("/proc/self/status");
  ASSERT_TRUE(status);
  EXPECT_NE(status->find("Name:"), std::string::npos);
}

TEST(TryReadFile, RefusesAFifoAFolderAndAMissingFileWithoutWaiting) {
  test::TempDir t;
  ASSERT_EQ(::mkfifo((t.path() + "/METADATA").c_str(), 0600), 0);
  EXPECT_FALSE(try_read_file(t.path() + "/METADATA"));  // would block forever if opened to read
  EXPECT_FALSE(try_read_file(t.path()));
  EXPECT_FALSE(try_read_file(t.path() + "/absent"));
  EXPECT_THROW((void)read_file(t.path() + "/absent"), Error);
}

}  // namespace cudafix::resolver
