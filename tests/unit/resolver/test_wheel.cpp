// Wheel file names (PEP 427) and the tags an interpreter accepts (PEP 425, as packaging.tags
// orders them for CPython on glibc Linux).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "resolver/pep/wheel_name.hpp"

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
  const auto tags = supported_tags("3.12", "2.36", "x86_64");
  EXPECT_EQ(tags.front(), "cp312-cp312-manylinux_2_36_x86_64");
  EXPECT_THAT(tags, Contains("cp312-cp312-manylinux2014_x86_64"));
  EXPECT_THAT(tags, Contains("py3-none-manylinux_2_27_x86_64"));
  EXPECT_THAT(tags, Contains("cp39-abi3-linux_x86_64"));
  EXPECT_THAT(tags, Contains("py3-none-any"));
  EXPECT_THAT(tags, Not(Contains("cp312-cp312-manylinux_2_39_x86_64")));
  EXPECT_THAT(tags, Not(Contains("cp311-cp311-manylinux_2_17_x86_64")));
  EXPECT_THAT(tags, Not(Contains("py3-none-manylinux_2_17_aarch64")));
}

}  // namespace
}  // namespace cudafix::resolver
