// The command lines guard reads as uninstalls (resolver/plan/uninstall_command.hpp): pip's and
// uv's, their options skipped as they parse them, and requirement files read as pip reads them.
#include "resolver/plan/uninstall_command.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>

#include "resolver/base/text.hpp"
#include "tests/support/process.hpp"

namespace cudafix::resolver {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

UninstallCommand parsed(const std::vector<std::string>& argv) {
  const auto c = parse_uninstall_command(argv);
  EXPECT_TRUE(c.has_value());
  return c.value_or(UninstallCommand{});
}

TEST(UninstallCommand, PipByEveryNameItIsRunBy) {
  for (const std::vector<std::string>& argv : {std::vector<std::string>{"pip", "uninstall", "-y", "torch"},
                                               {"pip3", "uninstall", "-y", "torch"},
                                               {"/v/bin/pip3.12", "uninstall", "-y", "torch"},
                                               {"python", "-m", "pip", "uninstall", "-y", "torch"},
                                               {"/v/bin/python3", "-m", "pip", "uninstall", "-y", "torch"},
                                               {"python3.13t", "-Im", "pip", "uninstall", "-y", "torch"},
                                               {"python3", "-X", "utf8", "-mpip", "uninstall", "-y", "torch"}}) {
    const auto c = parsed(argv);
    EXPECT_EQ(c.tool, "pip");
    EXPECT_THAT(c.requirements, ElementsAre("torch")) << argv[0];
    EXPECT_TRUE(c.yes);
  }
}

TEST(UninstallCommand, PipsOptionsAreSkippedWithTheirValues) {
  const auto c = parsed({"pip", "--isolated", "--log", "uninstall", "-v", "uninstall", "--timeout=5",
                         "--root-user-action", "ignore", "-yq", "-r", "a.txt", "--requirement=b.txt", "-rc.txt",
                         "--requirem", "d.txt", "x==1.0", "--", "-notanoption"});
  EXPECT_TRUE(c.yes);
  EXPECT_THAT(c.requirement_files, ElementsAre("a.txt", "b.txt", "c.txt", "d.txt"));
  EXPECT_THAT(c.requirements, ElementsAre("x==1.0", "-notanoption"));
}

TEST(UninstallCommand, UvPipUninstallWithItsOwnOptions) {
  const auto c = parsed({"uv", "--directory", "/proj", "-q", "pip", "uninstall", "--python", "/v/bin/python", "-r",
                         "req.txt", "--requirements=more.txt", "--system", "nvidia-cudnn-cu12", "-p", "3.12", "torch"});
  EXPECT_EQ(c.tool, "uv");
  EXPECT_TRUE(c.yes) << "uv never asks";
  EXPECT_THAT(c.requirements, ElementsAre("nvidia-cudnn-cu12", "torch"));
  EXPECT_THAT(c.requirement_files, ElementsAre("req.txt", "more.txt"));
}

TEST(UninstallCommand, WhatIsNoUninstallIsNone) {
  for (const std::vector<std::string>& argv : {std::vector<std::string>{"pip", "install", "torch"},
                                               {"pip", "--log", "uninstall", "list"},
                                               {"python", "script.py", "uninstall"},
                                               {"python", "-c", "import pip", "uninstall"},
                                               {"uv", "pip", "install", "x"},
                                               {"uv", "uninstall", "x"},
                                               {"sh", "-c", "pip uninstall -y x"},
                                               {"pipx", "uninstall", "x"},
                                               {}}) {
    EXPECT_FALSE(parse_uninstall_command(argv).has_value()) << (argv.empty() ? "" : argv[0]);
  }
}

TEST(UninstallCommand, TheProjectARequirementNames) {
  EXPECT_EQ(requirement_project("torch==2.1"), "torch");
  EXPECT_EQ(requirement_project("  NVIDIA_cudnn.CU12[extra] >= 9; python_version > '3'"), "NVIDIA_cudnn.CU12");
  EXPECT_EQ(requirement_project("name @ https://x/y.whl"), "name");
  EXPECT_EQ(requirement_project("pkg-"), "pkg");
  EXPECT_EQ(requirement_project("./dir"), std::nullopt);
  EXPECT_EQ(requirement_project("dist/x-1.0-py3-none-any.whl"), std::nullopt);
  EXPECT_EQ(requirement_project("https://x/y"), std::nullopt);
  EXPECT_EQ(requirement_project("-e ."), std::nullopt);
  EXPECT_EQ(requirement_project(""), std::nullopt);
}

TEST(UninstallCommand, RequirementFilesAsPipReadsThem) {
  test::TempDir t;
  test::write_file(t.path() + "/sub/more.txt", "beta\n-r ../loop.txt\n");
  test::write_file(t.path() + "/loop.txt", "-r sub/more.txt\n");
  test::write_file(t.path() + "/req.txt",
                   "# comment\nalpha==1 # trailing\n\n--index-url https://x#y\nlong\\\n-name\n-r sub/more.txt\n"
                   "gamma#not-a-comment\r\n-c constraints.txt\n");
  const auto read = read_requirement_files({t.path() + "/req.txt", t.path() + "/missing.txt"});
  EXPECT_THAT(read.requirements, ElementsAre("alpha==1", "long-name", "beta", "gamma#not-a-comment"));
  // The loop between more.txt and loop.txt is a cycle, said; the missing file too.
  ASSERT_EQ(read.problems.size(), 2u) << ::testing::PrintToString(read.problems);
  EXPECT_THAT(read.problems[0], HasSubstr("more.txt: recursively includes itself (named again by -r in "));
  EXPECT_THAT(read.problems[1], HasSubstr("missing.txt: cannot be read: missing"));
  EXPECT_THAT(read_requirement_files({}).requirements, IsEmpty());
  // Nested deeper than the bound: said, what was read above it kept.
  for (int i = 0; i < 6; ++i)
    test::write_file(t.path() + "/chain" + std::to_string(i) + ".txt",
                     "n" + std::to_string(i) + "\n-r chain" + std::to_string(i + 1) + ".txt\n");
  const auto deep = read_requirement_files({t.path() + "/chain0.txt"}, {.depth = 4});
  EXPECT_THAT(deep.requirements, ElementsAre("n0", "n1", "n2", "n3"));
  ASSERT_EQ(deep.problems.size(), 1u) << ::testing::PrintToString(deep.problems);
  EXPECT_THAT(deep.problems[0], HasSubstr("chain4.txt: requirement files nested deeper than 4; not read"));
}

// Issue 51, item 2: twelve lines of `-r r.txt` in r.txt. Before, each line read the file again,
// eight levels deep: 12^8 reads and a problem for each of the 12^9 lines past the depth bound,
// 4.7 GB in guard. The file is read once, its cycle said once, naming it.
TEST(UninstallCommand, ARequirementFileThatIncludesItselfIsReadOnceAndItsCycleSaid) {
  test::TempDir t;
  std::string twelve = "alpha\n";
  for (int i = 0; i < 12; ++i) twelve += "-r r.txt\n";
  test::write_file(t.path() + "/r.txt", twelve);
  const auto read = read_requirement_files({t.path() + "/r.txt"});
  EXPECT_THAT(read.requirements, ElementsAre("alpha"));
  ASSERT_EQ(read.problems.size(), 1u) << ::testing::PrintToString(read.problems);
  EXPECT_THAT(read.problems[0], HasSubstr(t.path() + "/r.txt: recursively includes itself"));
  // A cycle through other spellings of the files and a symlink is one cycle too.
  test::write_file(t.path() + "/d/a.txt", "beta\n-r ../b.txt\n-r ./../d/a.txt\n");
  test::write_file(t.path() + "/b.txt", "gamma\n-r link.txt\n");
  std::filesystem::create_symlink("d/a.txt", t.path() + "/link.txt");
  const auto round = read_requirement_files({t.path() + "/d/a.txt"});
  EXPECT_THAT(round.requirements, ElementsAre("beta", "gamma"));
  ASSERT_EQ(round.problems.size(), 2u) << ::testing::PrintToString(round.problems);
  EXPECT_THAT(round.problems[0], HasSubstr("link.txt: recursively includes itself (named again by -r in "));
  EXPECT_THAT(round.problems[1], HasSubstr("a.txt: recursively includes itself"));
}

// No cycle, the same growth: ten files each naming the next twelve times. A file read once is
// not read again (its requirements are listed already): ten reads, where pip would read 12^9.
TEST(UninstallCommand, AFileNamedOverAndOverIsReadOnce) {
  test::TempDir t;
  for (int i = 0; i < 10; ++i) {
    std::string text = "name" + std::to_string(i) + "\n";
    for (int k = 0; k < 12 && i < 9; ++k) text += "-r f" + std::to_string(i + 1) + ".txt\n";
    test::write_file(t.path() + "/f" + std::to_string(i) + ".txt", text);
  }
  const auto read = read_requirement_files({t.path() + "/f0.txt", t.path() + "/f5.txt"});
  EXPECT_EQ(read.requirements.size(), 10u) << ::testing::PrintToString(read.requirements);
  EXPECT_EQ(read.requirements.front(), "name0");
  EXPECT_EQ(read.requirements.back(), "name9");
  EXPECT_THAT(read.problems, IsEmpty());
}

// Distinct files, none over its own bound, are bounded together: 16 MiB and 100,000 lines in
// all, each said where it was met; what was read before stays.
TEST(UninstallCommand, RequirementFilesAreBoundedTogether) {
  test::TempDir t;
  std::string list;
  for (int i = 0; i < 20; ++i) {
    const std::string name = "big" + std::to_string(i) + ".txt";
    test::write_file(t.path() + "/" + name, "first" + std::to_string(i) + "\n" + std::string(1000, '#') + "\n" +
                                                std::string(900'000, ' ') + "\n");
    list += "-r " + name + "\n";
  }
  test::write_file(t.path() + "/all.txt", list);
  const auto bytes = read_requirement_files({t.path() + "/all.txt"});
  ASSERT_EQ(bytes.problems.size(), 1u) << ::testing::PrintToString(bytes.problems);
  EXPECT_THAT(bytes.problems[0], HasSubstr("requirement files over 16777216 bytes together; the rest not read"));
  EXPECT_GE(bytes.requirements.size(), 15u);
  EXPECT_LT(bytes.requirements.size(), 20u);
  EXPECT_EQ(bytes.requirements.front(), "first0");

  std::string many;
  for (int i = 0; i < 120'000; ++i) many += "n" + std::to_string(i) + "\n";
  test::write_file(t.path() + "/many.txt", many);
  const auto lines = read_requirement_files({t.path() + "/many.txt"});
  ASSERT_EQ(lines.problems.size(), 1u) << ::testing::PrintToString(lines.problems);
  EXPECT_THAT(lines.problems[0], HasSubstr("many.txt: requirement files of over 100000 lines together"));
  EXPECT_EQ(lines.requirements.size(), 100'000u);
}

// Issue 51, item 3: a FIFO, a device, a sparse file of 64 GiB and a /proc file of size 0 that
// holds megabytes, named by -r: none hangs the read or is read whole; each is said by name.
TEST(UninstallCommand, AFifoADeviceAndAHugeFileAreRefusedUnread) {
  test::TempDir t;
  ASSERT_EQ(::mkfifo((t.path() + "/fifo.txt").c_str(), 0600), 0);
  test::write_file(t.path() + "/sparse.txt", "");
  ASSERT_EQ(::truncate((t.path() + "/sparse.txt").c_str(), std::int64_t{64} << 30), 0);
  test::write_file(t.path() + "/r.txt", "alpha\n-r fifo.txt\n-r /dev/zero\n-r sparse.txt\n-r /proc/kallsyms\nbeta\n");
  const auto read = read_requirement_files({t.path() + "/r.txt"});
  EXPECT_THAT(read.requirements, ElementsAre("alpha", "beta"));
  ASSERT_GE(read.problems.size(), 3u) << ::testing::PrintToString(read.problems);
  EXPECT_THAT(read.problems[0], HasSubstr("fifo.txt: cannot be read: no regular file"));
  EXPECT_THAT(read.problems[1], HasSubstr("/dev/zero: cannot be read: no regular file"));
  EXPECT_THAT(read.problems[2], HasSubstr("sparse.txt: cannot be read: larger than 1048576 bytes"));
  struct stat st {};
  const auto kallsyms = try_read_file("/proc/kallsyms");
  if (::stat("/proc/kallsyms", &st) == 0 && st.st_size == 0 && kallsyms && kallsyms->size() > (std::size_t{1} << 20)) {
    ASSERT_EQ(read.problems.size(), 4u) << ::testing::PrintToString(read.problems);
    EXPECT_THAT(read.problems[3], HasSubstr("/proc/kallsyms: cannot be read: larger than 1048576 bytes"));
  }
}

}  // namespace
}  // namespace cudafix::resolver
