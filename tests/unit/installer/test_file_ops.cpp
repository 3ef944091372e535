// installer/txn/file_ops: the removal of a large tree on every core removes all of it, and
// nothing a symlink inside it points at.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "installer/txn/file_ops.hpp"
#include "tests/support/process.hpp"

namespace cudafix::installer::txn {
namespace {

namespace fs = std::filesystem;

void touch(const fs::path& p) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "x";
}

TEST(RemoveTreeOnEveryCore, RemovesEveryFolderAndFileButNothingALinkPointsAt) {
  test::TempDir dir;
  const fs::path outside = fs::path(dir.path()) / "outside";
  touch(outside / "canary");
  const fs::path tree = fs::path(dir.path()) / "tree";
  for (int a = 0; a < 20; ++a)
    for (int b = 0; b < 5; ++b) {
      const fs::path folder = tree / ("a" + std::to_string(a)) / ("b" + std::to_string(b)) / "c";
      for (int f = 0; f < 7; ++f) touch(folder / ("f" + std::to_string(f)));
      fs::create_directories(folder / "empty");
    }
  touch(tree / "top-file");
  fs::create_directory_symlink(outside, tree / "a3" / "link-to-outside");
  fs::create_symlink(outside / "canary", tree / "a4" / "link-to-canary");

  remove_tree_on_every_core(tree.string());
  EXPECT_FALSE(fs::exists(fs::symlink_status(tree)));
  EXPECT_TRUE(fs::exists(outside / "canary"));
}

TEST(RemoveTreeOnEveryCore, AFileOrNothingAtThePathIsNoError) {
  test::TempDir dir;
  const fs::path file = fs::path(dir.path()) / "file";
  touch(file);
  remove_tree_on_every_core(file.string());
  EXPECT_FALSE(fs::exists(file));
  EXPECT_NO_THROW(remove_tree_on_every_core((fs::path(dir.path()) / "gone").string()));
}

}  // namespace
}  // namespace cudafix::installer::txn
