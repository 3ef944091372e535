#include <gtest/gtest.h>

#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "resolver/fs_walk.hpp"
#include "resolver/parallel.hpp"
#include "resolver/path_index.hpp"
#include "tests/support/process.hpp"

namespace cudafix::resolver {
namespace {

namespace fs = std::filesystem;

// A tree shaped like a site-packages: many small folders, a few deep chains, one wide folder,
// a symlinked folder, a FIFO and a __pycache__ whose contents must not be listed.
std::string make_tree(const std::string& root) {
  for (int p = 0; p < 60; ++p) {
    const std::string pkg = root + "/pkg" + std::to_string(p);
    for (int s = 0; s < 5; ++s) test::write_file(pkg + "/sub" + std::to_string(s) + "/m.py", "");
    test::write_file(pkg + "/lib" + std::to_string(p) + ".so.1", "");
    test::write_file(pkg + "/__pycache__/m.cpython-312.pyc", "");
  }
  std::string deep = root + "/deep";
  for (int d = 0; d < 40; ++d) deep += "/d" + std::to_string(d);
  test::write_file(deep + "/leaf.txt", "");
  for (int f = 0; f < 3000; ++f) test::write_file(root + "/wide/f" + std::to_string(f), "");
  fs::create_directory_symlink(root + "/pkg0", root + "/linked");
  ::mkfifo((root + "/fifo").c_str(), 0600);
  return root;
}

std::map<std::string, EntryType> listed(const WalkResult& w) {
  std::map<std::string, EntryType> out;
  w.for_each([&](const WalkEntry& e) { EXPECT_TRUE(out.emplace(std::string(e.path), e.type).second) << e.path; });
  return out;
}

TEST(WalkTree, EveryThreadCountListsTheSameEntriesOnce) {
  test::TempDir t;
  const std::string root = make_tree(t.path() + "/site");
  const auto one = listed(walk_tree({root}, 1, {"__pycache__"}));
  // 60 packages x (itself, 5 sub folders, 5 files, the .so, __pycache__) + 41 deep folders and a
  // leaf + the wide folder and its 3000 files + the symlink + the FIFO.
  EXPECT_EQ(one.size(), 60u * 13 + 42 + 3001 + 2);
  EXPECT_EQ(one.at(root + "/linked"), EntryType::symlink);
  EXPECT_EQ(one.count(root + "/linked/sub0"), 0u) << "a symlinked folder is not followed";
  EXPECT_EQ(one.at(root + "/pkg3/__pycache__"), EntryType::directory);
  EXPECT_EQ(one.count(root + "/pkg3/__pycache__/m.cpython-312.pyc"), 0u) << "a pruned folder is not entered";
  EXPECT_EQ(one.at(root + "/fifo"), EntryType::other);
  EXPECT_EQ(one.at(root + "/wide/f2999"), EntryType::file);
  for (unsigned threads : {2u, 3u, 8u, 16u}) {
    const auto w = walk_tree({root}, threads, {"__pycache__"});
    EXPECT_EQ(listed(w), one) << threads << " threads";
    EXPECT_EQ(w.size(), one.size());
    w.for_each([](const WalkEntry& e) {
      EXPECT_EQ(e.hash, path_hash(e.path));
      EXPECT_EQ(e.shared_object_name, e.path.ends_with(".so.1"));
    });
  }
}

TEST(WalkTree, EveryRootIsWalkedWhateverTheThreadCount) {
  test::TempDir t;
  const std::string purelib = make_tree(t.path() + "/lib/site");
  const std::string platlib = t.path() + "/lib64/site";
  test::write_file(platlib + "/only/here.so", "");
  const auto one = listed(walk_tree({purelib}, 1, {"__pycache__"}));
  for (unsigned threads : {1u, 2u, 5u}) {
    const auto both = listed(walk_tree({purelib, platlib}, threads, {"__pycache__"}));
    EXPECT_EQ(both.size(), one.size() + 2) << threads << " threads";
    EXPECT_EQ(both.at(platlib + "/only/here.so"), EntryType::file) << threads << " threads";
    EXPECT_EQ(both.count(purelib + "/wide/f0"), 1u) << threads << " threads";
  }
}

TEST(WalkTree, AnUnreadableRootIsADiagnosticNotACrash) {
  test::TempDir t;
  const auto w = walk_tree({t.path() + "/absent"}, 4);
  EXPECT_EQ(w.size(), 0u);
  ASSERT_EQ(w.diagnostics.size(), 1u);
  EXPECT_EQ(w.diagnostics[0].file, t.path() + "/absent");
  EXPECT_NE(w.diagnostics[0].message.find("cannot list"), std::string::npos);
}

// The walk stops reading a folder at a getdents64 that left room for more only where the
// filesystem is known to fill the buffer; FUSE and NFS may answer a part at a time, and one
// mounted anywhere below a root makes the walk read every folder to the end.
TEST(WalkTree, AShortListingEndsAFolderOnlyWhereTheFilesystemFillsTheBuffer) {
  const std::string mountinfo =
      "21 26 0:20 / /proc rw,relatime - proc proc rw\n"
      "26 1 254:1 / / rw,relatime - ext4 /dev/vda rw\n"
      "30 26 0:40 / /home/u/nfs rw - nfs4 srv:/x rw\n"
      "31 26 0:41 / /opt/venv/lib/python3.12/site-packages/big rw - fuse.sshfs h:/p rw\n"
      "32 26 0:42 / /mnt/my\\040disk rw,relatime shared:5 - xfs /dev/sdb rw\n";
  EXPECT_TRUE(short_read_ends_listing({"/srv/venv/lib/python3.12/site-packages"}, mountinfo));
  EXPECT_FALSE(short_read_ends_listing({"/home/u/nfs/venv/site-packages"}, mountinfo)) << "on NFS";
  EXPECT_FALSE(short_read_ends_listing({"/opt/venv/lib/python3.12/site-packages"}, mountinfo)) << "FUSE below";
  EXPECT_TRUE(short_read_ends_listing({"/opt/venv/lib/python3.12/site-packages/big2"}, mountinfo))
      << "a sibling's name is not a folder below";
  EXPECT_TRUE(short_read_ends_listing({"/mnt/my disk/venv"}, mountinfo)) << "an escaped mount point";
  EXPECT_FALSE(short_read_ends_listing({"/mnt/my disk/venv", "/home/u/nfs/site"}, mountinfo)) << "every root counts";
  EXPECT_TRUE(short_read_ends_listing({"/home/u/nfs/site"}, mountinfo + "40 30 0:50 / /home/u/nfs rw - tmpfs t rw\n"))
      << "a later mount on the same point hides the earlier";
  EXPECT_FALSE(short_read_ends_listing({"/srv/site"}, "")) << "no mount table, no shortcut";
}

TEST(ParallelFor, RunsEveryItemOnceAndNestsWithoutDeadlock) {
  std::vector<std::atomic<int>> hits(5000);
  parallel_for(50, 8, [&](std::size_t i) { parallel_for(100, 8, [&](std::size_t j) { ++hits[i * 100 + j]; }); });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ParallelFor, AnExceptionReachesTheCallerAfterTheOtherCallsReturn) {
  std::atomic<int> running{0};
  std::atomic<int> finished{0};
  EXPECT_THROW(parallel_for(64, 8,
                            [&](std::size_t i) {
                              ++running;
                              if (i == 5) throw std::runtime_error("item 5");
                              ++finished;
                              --running;
                            }),
               std::runtime_error);
  EXPECT_EQ(running.load(), 1) << "only the throwing call is left unfinished, none still runs";
  EXPECT_LT(finished.load(), 64);
}

TEST(RunInDependencyOrder, EachTaskStartsOnlyAfterThoseItWaitsFor) {
  // A diamond repeated: task 4k+3 waits for 4k+1 and 4k+2, which wait for 4k, which waits for 4k-1.
  constexpr std::size_t n = 200;
  std::vector<std::vector<std::size_t>> waits_for(n);
  for (std::size_t k = 0; k < n / 4; ++k) {
    if (k > 0) waits_for[4 * k] = {4 * k - 1};
    waits_for[4 * k + 1] = {4 * k};
    waits_for[4 * k + 2] = {4 * k};
    waits_for[4 * k + 3] = {4 * k + 1, 4 * k + 2};
  }
  std::vector<std::atomic<bool>> done(n);
  std::atomic<int> early{0};
  run_in_dependency_order(waits_for, 8, [&](std::size_t t) {
    for (std::size_t w : waits_for[t]) early += !done[w].load();
    done[t] = true;
  });
  EXPECT_EQ(early.load(), 0);
  for (const auto& d : done) EXPECT_TRUE(d.load());
  EXPECT_THROW(run_in_dependency_order(waits_for, 8,
                                       [&](std::size_t t) {
                                         if (t == 7) throw std::runtime_error("task 7");
                                       }),
               std::runtime_error);
}

}  // namespace
}  // namespace cudafix::resolver
