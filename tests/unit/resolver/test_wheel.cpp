// Wheel file names (PEP 427) and the tags an interpreter accepts (PEP 425, as packaging.tags
// orders them for CPython on Linux): checked tag for tag against packaging's own sys_tags run by
// Debian's Python.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "resolver/base/text.hpp"
#include "resolver/pep/wheel_name.hpp"
#include "tests/support/process.hpp"

namespace cudafix::resolver {
namespace {

using ::testing::Contains;
using ::testing::Not;

TEST(WheelName, ANameExpandsItsCompressedTagSet) {
  const auto w =
      parse_wheel_name("nvidia_cudnn_cu13-9.19.0.56-py3-none-manylinux_2_27_x86_64.manylinux2014_x86_64.whl");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->normalized, "nvidia-cudnn-cu13");
  EXPECT_EQ(w->version, "9.19.0.56");
  EXPECT_EQ(w->tags, std::vector<std::string>({"py3-none-manylinux_2_27_x86_64", "py3-none-manylinux2014_x86_64"}));
}

TEST(WheelName, ABuildTagIsKeptApart) {
  const auto w = parse_wheel_name("torch-2.11.0+cu130-1-cp312-cp312-linux_x86_64.whl");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->version, "2.11.0+cu130");
  EXPECT_EQ(w->build, "1");
  EXPECT_EQ(w->tags, std::vector<std::string>({"cp312-cp312-linux_x86_64"}));
}

TEST(WheelName, WhatIsNoWheelNameIsRefused) {
  EXPECT_FALSE(parse_wheel_name("torch-2.11.0.tar.gz"));
  EXPECT_FALSE(parse_wheel_name("torch-2.11.0-cp312.whl"));
  EXPECT_FALSE(parse_wheel_name("torch--2.11.0-cp312-cp312-linux_x86_64.whl"));
}

TEST(SupportedTags, ManylinuxUpToTheHostsGlibcAndNothingNewer) {
  const auto tags = supported_tags({3, 12, "", "x86_64", false, 2, 36});
  EXPECT_EQ(tags.front(), "cp312-cp312-manylinux_2_36_x86_64");
  EXPECT_THAT(tags, Contains("cp312-cp312-manylinux2014_x86_64"));
  EXPECT_THAT(tags, Contains("py3-none-manylinux_2_27_x86_64"));
  EXPECT_THAT(tags, Contains("cp39-abi3-linux_x86_64"));
  EXPECT_THAT(tags, Contains("py3-none-any"));
  EXPECT_THAT(tags, Not(Contains("cp312-cp312-manylinux_2_39_x86_64")));
  EXPECT_THAT(tags, Not(Contains("cp311-cp311-manylinux_2_17_x86_64")));
  EXPECT_THAT(tags, Not(Contains("py3-none-manylinux_2_17_aarch64")));
}

// packaging.tags (Debian's python3-packaging, 23.0 in bookworm; pip's copy, 21.3 in pip 23, has
// no cpXY-none-any) run by the host's Python: its cpython_tags and compatible_tags
// for `version` and `abi` over `platforms` (comma-separated), one tag a line.
std::vector<std::string> packaging_tags(const std::string& version, const std::string& abi,
                                        const std::string& platforms) {
  const std::string code =
      "from packaging import tags as t\n"
      "import itertools, sys\n"
      "v = tuple(int(x) for x in sys.argv[1].split('.'))\n"
      "plats = sys.argv[3].split(',')\n"
      "it = itertools.chain(t.cpython_tags(v, [sys.argv[2]], plats),\n"
      "                     t.compatible_tags(v, 'cp%d%d' % v, plats))\n"
      "print('\\n'.join(str(x) for x in it))\n";
  const auto r = test::run_shell("/usr/bin/python3 -c " + test::shell_quote(code) + " " + version + " " + abi + " " +
                                 test::shell_quote(platforms) + " 2>&1");
  std::vector<std::string> out;
  if (r.exit_code != 0) return out;
  for (auto line : split(r.out, '\n'))
    if (!line.empty()) out.emplace_back(line);
  return out;
}

std::string joined(const std::vector<std::string>& v, std::size_t from, std::size_t to) {
  std::string out;
  for (std::size_t i = from; i < std::min(to, v.size()); ++i) out += v[i] + ",";
  return out;
}

// packaging's platform list for glibc 2.N on `arch` (_linux_platforms), written out.
std::string manylinux_platforms(const std::string& arch, int minor, int oldest) {
  std::string out;
  for (int m = minor; m >= oldest; --m) {
    out += fmt::format("manylinux_2_{}_{},", m, arch);
    if (m == 17) out += "manylinux2014_" + arch + ",";
    if (m == 12) out += "manylinux2010_" + arch + ",";
    if (m == 5) out += "manylinux1_" + arch + ",";
  }
  return out + "linux_" + arch;
}

TEST(SupportedTags, EveryTagInPackagingsOrderForGlibcAndMuslTargets) {
  if (test::run_shell("/usr/bin/python3 -c 'from packaging import tags'").exit_code != 0)
    GTEST_SKIP() << "no Debian python3-packaging to compare with (.ci/install-deps --test installs it)";
  struct Case {
    TagTarget target;
    std::string abi, platforms;
  };
  const std::vector<Case> cases{
      {{3, 11, "", "x86_64", false, 2, 36}, "cp311", manylinux_platforms("x86_64", 36, 5)},
      {{3, 12, "", "aarch64", false, 2, 28}, "cp312", manylinux_platforms("aarch64", 28, 17)},
      {{3, 10, "", "x86_64", true, 1, 2},
       "cp310",
       "musllinux_1_2_x86_64,musllinux_1_1_x86_64,musllinux_1_0_x86_64,"
       "linux_x86_64"},
  };
  for (const auto& c : cases) {
    const auto ours = supported_tags(c.target);
    const auto theirs = packaging_tags(fmt::format("{}.{}", c.target.major, c.target.minor), c.abi, c.platforms);
    ASSERT_FALSE(theirs.empty()) << c.abi;
    EXPECT_EQ(ours.size(), theirs.size()) << c.abi;
    // Compared in pieces, so that a difference shows where it is.
    for (std::size_t i = 0; i < std::max(ours.size(), theirs.size()); i += 50)
      ASSERT_EQ(joined(ours, i, i + 50), joined(theirs, i, i + 50)) << c.abi << " from tag " << i;
  }
}

TEST(SupportedTags, TheHostsOwnInterpreterGetsWhatSysTagsSays) {
  const auto r = test::run_shell(
      "/usr/bin/python3 -c 'import sys, os\nfrom packaging import tags as t\n"
      "print(\"%d %d %s\" % (sys.version_info[0], sys.version_info[1], "
      "os.confstr(\"CS_GNU_LIBC_VERSION\").split()[1]))\n"
      "print(\"\\n\".join(str(x) for x in t.sys_tags()))' 2>&1");
  if (r.exit_code != 0) GTEST_SKIP() << "no Debian python3-packaging on glibc to compare with: " << r.out;
  const auto lines = split(r.out, '\n');
  const auto head = split(lines[0], ' ');
  ASSERT_EQ(head.size(), 3u);
  TagTarget t;
  t.major = *to_number<int>(head[0]);
  t.minor = *to_number<int>(head[1]);
  t.arch = "x86_64";
  t.libc_minor = *to_number<int>(split(head[2], '.')[1]);
  if (std::string(lines[1]).find("x86_64") == std::string::npos) GTEST_SKIP() << "written for an x86_64 host";
  std::vector<std::string> theirs;
  for (std::size_t i = 1; i < lines.size(); ++i)
    if (!lines[i].empty()) theirs.emplace_back(lines[i]);
  const auto ours = supported_tags(t);
  EXPECT_EQ(ours.size(), theirs.size());
  for (std::size_t i = 0; i < std::max(ours.size(), theirs.size()); i += 50)
    ASSERT_EQ(joined(ours, i, i + 50), joined(theirs, i, i + 50)) << "from tag " << i;
}

TEST(SupportedTags, AWheelRanksByItsBestTagAndOneOfNoneIsNamedWithTheBestHere) {
  const auto tags = supported_tags({3, 11, "", "x86_64", false, 2, 36});
  const auto both = parse_wheel_name("a-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl");
  const auto any = parse_wheel_name("a-1-py3-none-any.whl");
  const auto arm = parse_wheel_name("a-1-cp311-cp311-manylinux_2_17_aarch64.whl");
  ASSERT_TRUE(both && any && arm);
  ASSERT_TRUE(tag_rank(*both, tags) && tag_rank(*any, tags));
  EXPECT_LT(*tag_rank(*both, tags), *tag_rank(*any, tags));
  EXPECT_FALSE(tag_rank(*arm, tags));
  EXPECT_EQ(unsupported_tags_text(*arm, tags),
            "its tag (cp311-cp311-manylinux_2_17_aarch64) is none this environment accepts (its best: "
            "cp311-cp311-manylinux_2_36_x86_64)");
  EXPECT_FALSE(tag_rank(*parse_wheel_name("a-1-cp399-cp399-manylinux_2_17_x86_64.whl"), tags));
}

TEST(SupportedTags, PythonPlatformAndVersionAsUvTakesThem) {
  std::string why;
  const TagTarget here{3, 11, "", "x86_64", false, 2, 36};
  const auto arm = with_python_platform(here, "aarch64-manylinux_2_28", why);
  ASSERT_TRUE(arm) << why;
  EXPECT_EQ(supported_tags(*arm).front(), "cp311-cp311-manylinux_2_28_aarch64");
  const auto gnu = with_python_platform(here, "x86_64-unknown-linux-gnu", why);
  ASSERT_TRUE(gnu) << why;
  EXPECT_EQ(supported_tags(*gnu).front(), "cp311-cp311-manylinux_2_17_x86_64");
  const auto musl = with_python_platform(here, "x86_64-unknown-linux-musl", why);
  ASSERT_TRUE(musl) << why;
  EXPECT_EQ(supported_tags(*musl).front(), "cp311-cp311-musllinux_1_2_x86_64");
  const auto ft = with_python_version(here, "3.13t", why);
  ASSERT_TRUE(ft) << why;
  EXPECT_EQ(supported_tags(*ft).front(), "cp313-cp313t-manylinux_2_36_x86_64");
  EXPECT_THAT(supported_tags(*ft), Not(Contains("cp313-abi3-linux_x86_64")));
  EXPECT_FALSE(with_python_platform(here, "sparc-manylinux_2_17", why));
  EXPECT_THAT(why, ::testing::HasSubstr("sparc"));
  EXPECT_FALSE(with_python_platform(here, "x86_64-manylinux_3_1", why));
  EXPECT_FALSE(with_python_version(here, "3", why));
}

}  // namespace
}  // namespace cudafix::resolver
