#include <gtest/gtest.h>

#include "resolver/base/text.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <string>
#include <utility>
#include <vector>

#include "resolver/base/closest.hpp"
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

namespace {

// Python's posixpath.normpath of each path, an oracle that is not ours: one python3 run for all.
std::vector<std::string> python_normpath(const std::vector<std::string>& paths) {
  test::TempDir dir;
  std::string in;
  for (const auto& p : paths) in += p + '\0';
  test::write_file(dir.path() + "/in", in);
  const auto r = test::run_shell(
      "python3 -c 'import posixpath,sys; d=open(sys.argv[1],\"rb\").read().split(b\"\\0\")[:-1]; "
      "sys.stdout.buffer.write(b\"\".join(posixpath.normpath(p)+b\"\\0\" for p in d))' " +
      test::shell_quote(dir.path() + "/in"));
  EXPECT_EQ(r.exit_code, 0) << r.out.substr(0, 500);
  std::vector<std::string> out;
  for (std::size_t start = 0, nul; (nul = r.out.find('\0', start)) != std::string::npos; start = nul + 1)
    out.push_back(r.out.substr(start, nul - start));
  EXPECT_EQ(out.size(), paths.size());
  return out;
}

}  // namespace

TEST(JoinNormal, EqualsPythonsNormpathOfTheJoinedPath) {
  // Hand-written, for the rows a RECORD can hold that need normalising.
  const std::vector<std::pair<std::string, std::string>> expected = {{"a/./b", "/v/site/a/b"},
                                                                     {"./a", "/v/site/a"},
                                                                     {"a/.", "/v/site/a"},
                                                                     {"a/../b", "/v/site/b"},
                                                                     {"../../../bin/pip", "/bin/pip"},
                                                                     {"..", "/v"},
                                                                     {".", "/v/site"},
                                                                     {"a//b", "/v/site/a/b"},
                                                                     {"a/b/", "/v/site/a/b"},
                                                                     {"a/b/..", "/v/site/a"},
                                                                     {"../../../../..", "/"},
                                                                     {"a/...", "/v/site/a/..."},
                                                                     {"a/.../b", "/v/site/a/.../b"},
                                                                     {"..x/y", "/v/site/..x/y"},
                                                                     {"a/b..", "/v/site/a/b.."}};
  for (const auto& [rel, want] : expected) {
    EXPECT_EQ(join_normal("/v/site", rel), want) << rel;
    EXPECT_EQ(join_normal("/v/site/", rel), want) << rel;
  }
  EXPECT_EQ(join_normal("/v/site", "/abs/../x"), "/x");  // an absolute row stands alone
  EXPECT_EQ(join_normal("/v/lib/site", "a/.hidden/b"), "/v/lib/site/a/.hidden/b");
  // And against Python's posixpath.normpath for every row above and the clean ones.
  std::vector<std::string> rels = {"torch/lib/libc10.so", "a/.hidden/b", ".x", "x.py", "a/b/c/../../d/./e//f/"};
  for (const auto& [rel, want] : expected) rels.push_back(rel);
  std::vector<std::string> joined;
  for (const auto& rel : rels) joined.push_back("/v/site/" + rel);
  const auto oracle = python_normpath(joined);
  ASSERT_EQ(oracle.size(), rels.size());
  for (std::size_t i = 0; i < rels.size(); ++i) EXPECT_EQ(join_normal("/v/site", rels[i]), oracle[i]) << rels[i];
}

// The ownership pass looks a clean row up without joining it: clean must mean that joining
// changes nothing, and anything else must be called unclean.
TEST(IsCleanRelative, IsTrueExactlyWhenJoiningNeedsNoNormalisation) {
  for (const std::string rel : {"torch/lib/libc10.so", "a/.hidden/b", "a/..b/c", "a/b..", ".x", "..x/y", "x.py",
                                "a/...", "a/.../b", "__pycache__/x.pyc"})
    EXPECT_TRUE(is_clean_relative(rel)) << rel;
  for (const std::string rel : {"", "/abs", "a/./b", "./a", "a/.", "a/../b", "../../../bin/pip", "..", ".", "a//b",
                                "a/b/", "a/b/..", "//a", "a/..", "../x"})
    EXPECT_FALSE(is_clean_relative(rel)) << rel;
  // Every path of up to 11 characters from 'a', '.' and '/': long enough for a "/." or "//" to
  // fall at each place of the 8-character steps the check takes.
  // Clean means exactly that Python's posixpath.normpath leaves the joined path as it is.
  std::vector<std::string> rels, joined;
  for (std::size_t len = 1; len <= 11; ++len) {
    std::size_t count = 1;
    for (std::size_t i = 0; i < len; ++i) count *= 3;
    std::string rel(len, 'a');
    for (std::size_t k = 0; k < count; ++k) {
      for (std::size_t i = 0, v = k; i < len; ++i, v /= 3) rel[i] = "a./"[v % 3];
      rels.push_back(rel);
      joined.push_back("/v/site/" + rel);
    }
  }
  ASSERT_EQ(rels.size(), 265719U);
  const auto oracle = python_normpath(joined);
  ASSERT_EQ(oracle.size(), rels.size());
  std::size_t clean = 0;
  for (std::size_t i = 0; i < rels.size(); ++i) {
    const bool joined_is_normal = oracle[i] == joined[i];
    clean += joined_is_normal;
    if (is_clean_relative(rels[i]) != joined_is_normal) ADD_FAILURE() << rels[i];
    // join_normal agrees with the oracle on every relative one, clean or not (an absolute row
    // stands alone, above).
    if (rels[i].front() != '/' && join_normal("/v/site", rels[i]) != oracle[i])
      ADD_FAILURE() << "join_normal " << rels[i];
  }
  EXPECT_GT(clean, 1000u);
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

// Issue 51, item 3: a file that says it is empty (a /proc file, one on a FUSE mount) is read no
// further than the bound either. /proc/kallsyms is a regular file of size 0 that holds megabytes;
// before, it was read whole whatever the bound.
TEST(TryReadFile, AFileOfNoSizeIsReadNoFurtherThanTheBound) {
  struct stat st {};
  const auto whole = try_read_file("/proc/kallsyms");
  if (::stat("/proc/kallsyms", &st) != 0 || st.st_size != 0 || !whole || whole->size() < (std::size_t{1} << 20))
    GTEST_SKIP() << "no /proc/kallsyms of size 0 holding a megabyte or more here";
  int err = 0;
  EXPECT_FALSE(try_read_file_at(AT_FDCWD, "/proc/kallsyms", 65536, &err));
  EXPECT_EQ(err, EFBIG);
  EXPECT_FALSE(try_read_file("/proc/kallsyms", (std::size_t{1} << 20) - 1));
  const auto status = try_read_file("/proc/self/status", 1 << 20);
  ASSERT_TRUE(status) << "a small one within the bound is read whole";
  EXPECT_NE(status->find("Name:"), std::string::npos);
}

// "Did you mean": a typo, a swap of two letters, a word of a dashed name; nothing for a word
// close to no name, however short the names.
TEST(ClosestNames, OffersTheNamesATypoIsNearAndNothingFarther) {
  const std::vector<std::string> commands = {"scan", "why", "doctor", "plan", "fix", "rollback"};
  EXPECT_EQ(closest_names("doctr", commands), std::vector<std::string>{"doctor"});
  EXPECT_EQ(closest_names("fxi", commands), std::vector<std::string>{"fix"});
  EXPECT_EQ(closest_names("rollbak", commands), std::vector<std::string>{"rollback"});
  EXPECT_EQ(closest_names("frob", commands), std::vector<std::string>{});
  EXPECT_EQ(closest_names("zzz", commands), std::vector<std::string>{});
  const std::vector<std::string> dists = {"torch", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "triton"};
  EXPECT_EQ(closest_names("torhc", dists), std::vector<std::string>{"torch"});
  EXPECT_EQ(closest_names("cudnn", dists), (std::vector<std::string>{"nvidia-cudnn-cu12", "nvidia-cudnn-cu13"}));
  EXPECT_EQ(closest_names("cudnn", dists, 1), std::vector<std::string>{"nvidia-cudnn-cu12"});
  EXPECT_EQ(closest_names("x", {"x", "x"}), std::vector<std::string>{"x"}) << "a name listed twice is offered once";
}

}  // namespace cudafix::resolver
