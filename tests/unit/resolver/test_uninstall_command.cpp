// The command lines guard reads as uninstalls (resolver/plan/uninstall_command.hpp): pip's and
// uv's, their options skipped as they parse them, and requirement files read as pip reads them.
#include "resolver/plan/uninstall_command.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/process.hpp"

namespace cudafix::resolver {
namespace {

using ::testing::ElementsAre;
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
  const auto read = read_requirement_files({t.path() + "/req.txt", t.path() + "/missing.txt"}, 4);
  ASSERT_GE(read.requirements.size(), 4u);
  EXPECT_EQ(read.requirements[0], "alpha==1");
  EXPECT_EQ(read.requirements[1], "long-name");
  EXPECT_EQ(read.requirements[2], "beta");
  EXPECT_EQ(read.requirements.back(), "gamma#not-a-comment");
  // The loop between more.txt and loop.txt ends at the depth bound, said; the missing file too.
  ASSERT_EQ(read.problems.size(), 2u);
  EXPECT_THAT(read.problems[0], ::testing::HasSubstr("nested deeper than 4"));
  EXPECT_THAT(read.problems[1], ::testing::HasSubstr("missing.txt: cannot be read"));
  EXPECT_THAT(read_requirement_files({}).requirements, IsEmpty());
}

}  // namespace
}  // namespace cudafix::resolver
