#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include "resolver/base/path_index.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/fs_walk.hpp"
#include "resolver/env/walk_cache.hpp"
#include "tests/support/process.hpp"

namespace cudafix::resolver {
namespace {

namespace fs = std::filesystem;

std::map<std::string, EntryType> listed(const WalkResult& w) {
  std::map<std::string, EntryType> out;
  w.for_each([&](const WalkEntry& e) { EXPECT_TRUE(out.emplace(std::string(e.path), e.type).second) << e.path; });
  return out;
}

// A small site: packages with subfolders, a shared object, a symlink and a __pycache__.
void make_site(const std::string& site) {
  for (int p = 0; p < 20; ++p) {
    const std::string pkg = site + "/pkg" + std::to_string(p);
    for (int s = 0; s < 3; ++s) test::write_file(pkg + "/sub" + std::to_string(s) + "/m.py", "");
    test::write_file(pkg + "/lib" + std::to_string(p) + ".so.1", "");
    test::write_file(pkg + "/__pycache__/m.cpython-312.pyc", "");
  }
  fs::create_symlink("lib1.so.1", site + "/pkg1/libone.so");
}

// Folders the walk enters: the site, 20 packages, their 3 subfolders each.
constexpr std::size_t k_folders = 1 + 20 * 4;

// Waits until every folder written so far is older than the settle time, so that a walk keeps
// its listing (a folder changed within settle_time() of a walk is listed again next time).
void let_settle() { std::this_thread::sleep_for(settle_time() + std::chrono::milliseconds(100)); }

struct Site {
  test::TempDir t;
  std::string site = t.path() + "/site";
  std::string cache = walk_cache_file(t.path() + "/cache", {site});
  Site() { make_site(site); }
  [[nodiscard]] WalkResult walk(unsigned threads = 2) const {
    return walk_tree({site}, threads, {"__pycache__"}, cache);
  }
  [[nodiscard]] std::map<std::string, EntryType> truth() const { return listed(walk_tree({site}, 1, {"__pycache__"})); }
};

TEST(WalkCache, AnUnchangedTreeIsTakenFromTheCacheAndAChangedFolderIsListedAgain) {
  Site s;
  let_settle();
  const auto first = s.walk();
  EXPECT_EQ(first.cache.folders, k_folders);
  EXPECT_EQ(first.cache.reused, 0u);
  EXPECT_TRUE(first.cache.written) << first.cache.problem;
  EXPECT_EQ(listed(first), s.truth());
  struct stat st {};
  ASSERT_EQ(::stat(fs::path(s.cache).parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "the cache folder is the user's alone";

  for (unsigned threads : {1u, 2u, 7u}) {
    const auto again = s.walk(threads);
    EXPECT_EQ(again.cache.reused, k_folders) << threads << " threads";
    EXPECT_FALSE(again.cache.written) << "nothing changed, nothing written";
    EXPECT_EQ(listed(again), s.truth()) << threads << " threads";
    again.for_each([](const WalkEntry& e) {
      EXPECT_EQ(e.hash, path_hash(e.path));
      EXPECT_EQ(e.shared_object_name, e.path.ends_with(".so.1") || e.path.ends_with(".so"));
    });
  }

  // A file added, a folder removed, a file replaced by a symlink, a folder renamed, a new folder.
  test::write_file(s.site + "/pkg2/sub0/new.so", "");
  fs::remove_all(s.site + "/pkg3/sub1");
  fs::remove(s.site + "/pkg4/lib4.so.1");
  fs::create_symlink("/etc", s.site + "/pkg4/lib4.so.1");
  fs::rename(s.site + "/pkg5", s.site + "/pkg5b");
  test::write_file(s.site + "/pkg6/added/x.py", "");
  const auto changed = s.walk();
  const auto truth = s.truth();
  EXPECT_EQ(listed(changed), truth);
  EXPECT_EQ(truth.at(s.site + "/pkg2/sub0/new.so"), EntryType::file);
  EXPECT_EQ(truth.at(s.site + "/pkg4/lib4.so.1"), EntryType::symlink);
  EXPECT_EQ(truth.count(s.site + "/pkg3/sub1"), 0u);
  EXPECT_EQ(truth.count(s.site + "/pkg5b/sub2/m.py"), 1u);
  EXPECT_EQ(truth.count(s.site + "/pkg6/added/x.py"), 1u);
  // Listed again: the site (pkg5 renamed), pkg2/sub0, pkg3, pkg4, pkg6 and its new folder, and
  // pkg5b (a new path) with its three subfolders, whose paths the cache does not know.
  EXPECT_EQ(changed.cache.folders, k_folders + 1 - 1);
  EXPECT_EQ(changed.cache.reused, changed.cache.folders - 10);
  EXPECT_TRUE(changed.cache.written);
}

TEST(WalkCache, AFolderChangedWithinTheSettleTimeIsNeverKept) {
  Site s;  // just written: every folder's ctime is within settle_time()
  const auto first = s.walk();
  EXPECT_TRUE(first.cache.written);
  const auto second = s.walk();
  EXPECT_EQ(second.cache.reused, 0u) << "a folder changed in the same clock tick as its listing would look unchanged";
  EXPECT_EQ(listed(second), s.truth());
}

TEST(WalkCache, ABrokenCacheFileIsReportedIgnoredAndWrittenAgain) {
  Site s;
  let_settle();
  ASSERT_TRUE(s.walk().cache.written);
  const std::string good = read_file(s.cache);
  ASSERT_GT(good.size(), 200u);
  auto expect_ignored = [&](const std::string& bytes, const std::string& why) {
    test::write_file(s.cache, bytes);
    const auto w = s.walk();
    EXPECT_EQ(w.cache.reused, 0u) << why;
    EXPECT_NE(w.cache.problem.find(why), std::string::npos) << w.cache.problem;
    EXPECT_NE(w.cache.problem.find(s.cache), std::string::npos) << "the problem names the file";
    EXPECT_EQ(listed(w), s.truth()) << why;
    EXPECT_TRUE(w.cache.written) << why;
    EXPECT_EQ(s.walk().cache.reused, k_folders) << why << ": the file written again is whole";
  };
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x20;
  expect_ignored(flipped, "checksum");
  expect_ignored(good.substr(0, good.size() - 9), "checksum");  // the trailer is the hash
  expect_ignored(good.substr(0, 20), "not a cache file");
  expect_ignored("garbage that is long enough to have a header and a trailer, but is not a cache", "not a cache file");
  expect_ignored(std::string(good.size(), '\0'), "not a cache file");

  // A file whose checksum is right but whose entry names a path: a name with a slash would put
  // an entry outside its folder. The last entry's name is the last bytes of the file.
  std::string hostile = good;
  const std::size_t trailer = hostile.size() - 8;
  hostile[trailer - 2] = '/';
  const std::uint64_t h = PathHash().add(std::string_view(hostile).substr(16, trailer - 16)).value();
  std::memcpy(hostile.data() + trailer, &h, sizeof h);
  expect_ignored(hostile, "holds '/'");
}

TEST(WalkCache, AnUnwritableCacheFolderIsReportedAndTheWalkIsWhole) {
  Site s;
  test::write_file(s.t.path() + "/cache", "a file where the cache folder would be");
  const auto w = s.walk();
  EXPECT_FALSE(w.cache.written);
  EXPECT_FALSE(w.cache.problem.empty());
  EXPECT_EQ(listed(w), s.truth());
}

TEST(WalkCache, OnlyTheNewestCacheFilesAreKept) {
  Site s;
  const std::string dir = fs::path(s.cache).parent_path();
  fs::create_directories(dir);
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (std::size_t i = 0; i < k_kept_files + 5; ++i) {
    const std::string f = dir + "/walk-" + std::to_string(i) + ".bin";
    test::write_file(f, "");
    fs::last_write_time(f, old + std::chrono::seconds(i));
  }
  test::write_file(dir + "/other.txt", "");
  EXPECT_TRUE(s.walk().cache.written);
  std::size_t kept = 0;
  for (const auto& e : fs::directory_iterator(dir)) kept += e.path().filename().string().starts_with("walk-");
  EXPECT_EQ(kept, k_kept_files);
  EXPECT_TRUE(fs::exists(s.cache)) << "the file just written is the newest";
  EXPECT_FALSE(fs::exists(dir + "/walk-0.bin")) << "the oldest go first";
  EXPECT_TRUE(fs::exists(dir + "/walk-" + std::to_string(k_kept_files + 4) + ".bin"));
  EXPECT_TRUE(fs::exists(dir + "/other.txt")) << "only cache files are removed";
}

TEST(WalkCache, EachSetOfRootsHasItsOwnFile) {
  EXPECT_EQ(walk_cache_file("/c", {"/a"}), walk_cache_file("/c", {"/a"}));
  EXPECT_NE(walk_cache_file("/c", {"/a"}), walk_cache_file("/c", {"/b"}));
  EXPECT_NE(walk_cache_file("/c", {"/a", "/b"}), walk_cache_file("/c", {"/ab"}));
  EXPECT_TRUE(walk_cache_file("/c", {"/a"}).starts_with("/c/walk-"));
}

}  // namespace
}  // namespace cudafix::resolver
