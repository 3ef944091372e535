#include <gtest/gtest.h>

#include "resolver/text.hpp"

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

}  // namespace cudafix::resolver
