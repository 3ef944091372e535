#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "resolver/base/parallel.hpp"
#include "resolver/base/path_index.hpp"
#include "resolver/env/fs_walk.hpp"
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

// A signal arriving while a folder is listed (the loader probe's child exiting, Ctrl-Z and fg,
// a profiler's timer) makes getdents64 return early with room left in the buffer: a walk that
// took that for the end of the folder lost a third of torch/include/ATen/ops in a quarter of
// `doctor --threads 8` runs on a busy 2-core machine, and reported its files "not on disk".
TEST(WalkTree, ListsEveryEntryWhileSignalsArrive) {
  test::TempDir t;
  constexpr std::size_t k_files = 6000;  // about ten getdents64 calls of 64 KB
  for (std::size_t f = 0; f < k_files; ++f)
    test::write_file(t.path() + "/wide/a_file_name_as_long_as_a_torch_header_" + std::to_string(f) + ".h", "");
  // A handler that does nothing: an ignored signal would be dropped before it is ever pending.
  struct sigaction no_op {};
  struct sigaction before {};
  no_op.sa_handler = [](int) {};
  no_op.sa_flags = SA_RESTART;
  ASSERT_EQ(::sigaction(SIGUSR1, &no_op, &before), 0);
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    // Sent to the process, so that the kernel hands it to a thread that is walking.
    sigset_t mine;
    sigemptyset(&mine);
    sigaddset(&mine, SIGUSR1);
    ::pthread_sigmask(SIG_BLOCK, &mine, nullptr);
    while (!stop.load()) {
      ::kill(::getpid(), SIGUSR1);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  std::size_t short_walks = 0;
  for (int round = 0; round < 30; ++round)
    for (unsigned threads : {1U, 2U, 4U})
      if (walk_tree({t.path()}, threads).size() != k_files + 1) ++short_walks;
  stop = true;
  sender.join();
  ::sigaction(SIGUSR1, &before, nullptr);
  EXPECT_EQ(short_walks, 0U) << "walks that missed entries, of 90";
}

// The walk cache trusts a folder's stamp only on local filesystems; NFS caches attributes and FUSE
// answers what its daemon says, and one mounted anywhere below a root keeps the cache off.
TEST(WalkTree, OnlyLocalFilesystemsAreTrustedToStampEveryChange) {
  const std::string mountinfo =
      "21 26 0:20 / /proc rw,relatime - proc proc rw\n"
      "26 1 254:1 / / rw,relatime - ext4 /dev/vda rw\n"
      "30 26 0:40 / /home/u/nfs rw - nfs4 srv:/x rw\n"
      "31 26 0:41 / /opt/venv/lib/python3.12/site-packages/big rw - fuse.sshfs h:/p rw\n"
      "32 26 0:42 / /mnt/my\\040disk rw,relatime shared:5 - xfs /dev/sdb rw\n";
  EXPECT_TRUE(stamps_show_every_change({"/srv/venv/lib/python3.12/site-packages"}, mountinfo));
  EXPECT_FALSE(stamps_show_every_change({"/home/u/nfs/venv/site-packages"}, mountinfo)) << "on NFS";
  EXPECT_FALSE(stamps_show_every_change({"/opt/venv/lib/python3.12/site-packages"}, mountinfo)) << "FUSE below";
  EXPECT_TRUE(stamps_show_every_change({"/opt/venv/lib/python3.12/site-packages/big2"}, mountinfo))
      << "a sibling's name is not a folder below";
  EXPECT_TRUE(stamps_show_every_change({"/mnt/my disk/venv"}, mountinfo)) << "an escaped mount point";
  EXPECT_FALSE(stamps_show_every_change({"/mnt/my disk/venv", "/home/u/nfs/site"}, mountinfo)) << "every root counts";
  EXPECT_TRUE(stamps_show_every_change({"/home/u/nfs/site"}, mountinfo + "40 30 0:50 / /home/u/nfs rw - tmpfs t rw\n"))
      << "a later mount on the same point hides the earlier";
  EXPECT_FALSE(stamps_show_every_change({"/srv/site"}, "")) << "no mount table, no cache";
}

TEST(ParallelFor, RunsEveryItemOnceAndNestsWithoutDeadlock) {
  std::vector<std::atomic<int>> hits(5000);
  parallel_for(50, 8, [&](std::size_t i) { parallel_for(100, 8, [&](std::size_t j) { ++hits[i * 100 + j]; }); });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ParallelFor, AnExceptionReachesTheCallerAfterTheOtherCallsReturn) {
  // Every item but 5 waits until item 5 has thrown (and a little longer, for the throw to reach
  // parallel_for's catch), so at that moment the 8 workers hold at most items 0 to 7: none of
  // items 8 to 63 may start after it.
  std::atomic<int> running{0};
  std::atomic<int> started{0};
  std::atomic<int> finished{0};
  std::atomic<bool> thrown{false};
  std::atomic<std::size_t> highest{0};
  try {
    parallel_for(64, 8, [&](std::size_t i) {
      ++started;
      ++running;
      for (std::size_t seen = highest.load(); i > seen && !highest.compare_exchange_weak(seen, i);) {
      }
      if (i == 5) {
        thrown = true;
        throw std::runtime_error("item 5");
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!thrown && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ++finished;
      --running;
    });
    ADD_FAILURE() << "parallel_for returned normally";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "item 5") << "the exception the call threw";
  }
  EXPECT_EQ(running.load(), 1) << "only the throwing call is left unfinished, none still runs";
  EXPECT_EQ(finished.load(), started.load() - 1) << "every other call that started returned first";
  EXPECT_LE(highest.load(), 7u) << "items after the exception were started";
  const int after = started.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(started.load(), after) << "a call started after parallel_for returned";
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
