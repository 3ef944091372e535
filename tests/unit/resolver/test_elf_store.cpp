#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "resolver/base/path_index.hpp"
#include "resolver/base/text.hpp"
#include "resolver/elf/elf_store.hpp"
#include "resolver/env/walk_cache.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/process.hpp"

namespace cudafix::resolver {
namespace {

namespace fs = std::filesystem;

const std::string k_fixtures = test::fixtures_dir();

void expect_same(const ElfRead& a, const ElfRead& b, const std::string& what) {
  EXPECT_EQ(a.status, b.status) << what;
  EXPECT_EQ(a.info.elf_class, b.info.elf_class) << what;
  EXPECT_EQ(a.info.machine, b.info.machine) << what;
  EXPECT_EQ(a.info.type, b.info.type) << what;
  EXPECT_EQ(a.info.soname, b.info.soname) << what;
  EXPECT_EQ(a.info.needed, b.info.needed) << what;
  EXPECT_EQ(a.info.rpath, b.info.rpath) << what;
  EXPECT_EQ(a.info.runpath, b.info.runpath) << what;
  EXPECT_EQ(a.info.flags_1, b.info.flags_1) << what;
  EXPECT_EQ(a.diagnostic.file, b.diagnostic.file) << what;
  EXPECT_EQ(a.diagnostic.offset, b.diagnostic.offset) << what;
  EXPECT_EQ(a.diagnostic.message, b.diagnostic.message) << what;
}

// Real objects built by the compiler, a linker script named like a library, an object cut short,
// and a name whose file is gone.
struct Objects {
  test::TempDir t;
  std::string dir = t.path() + "/site";
  std::string store = elf_store_file(t.path() + "/cache", {dir});
  std::vector<std::string> candidates{dir + "/libflags.so", dir + "/libtop.so", dir + "/libscript.so",
                                      dir + "/libcut.so", dir + "/libgone.so"};
  Objects() {
    fs::create_directories(dir);
    fs::copy_file(k_fixtures + "/reader/libflags.so", candidates[0]);
    fs::copy_file(k_fixtures + "/chain/libtop.so", candidates[1]);
    test::write_file(candidates[2], "INPUT(libc.so.6)\n");
    test::write_file(candidates[3], read_file(candidates[0]).substr(0, 40));
  }
  std::vector<ElfRead> read(ElfStoreReport& report, unsigned threads = 2) const {
    return read_elf_files(candidates, threads, store, report);
  }
  void expect_as_read_from_disk(const std::vector<ElfRead>& reads) const {
    ASSERT_EQ(reads.size(), candidates.size());
    for (std::size_t i = 0; i < reads.size(); ++i) expect_same(reads[i], read_elf_file(candidates[i]), candidates[i]);
  }
};

void let_settle() { std::this_thread::sleep_for(settle_time() + std::chrono::milliseconds(100)); }

TEST(ElfStore, AnUnchangedObjectIsAnsweredFromTheStoreAndAChangedOneIsReadAgain) {
  Objects o;
  let_settle();
  ElfStoreReport first;
  const auto reads = o.read(first);
  EXPECT_EQ(first.objects, 5u);
  EXPECT_EQ(first.reused, 0u);
  EXPECT_TRUE(first.written) << first.problem;
  o.expect_as_read_from_disk(reads);
  EXPECT_EQ(reads[0].status, ElfReadStatus::ok);
  EXPECT_EQ(reads[2].status, ElfReadStatus::not_elf);
  EXPECT_EQ(reads[3].status, ElfReadStatus::invalid);
  EXPECT_EQ(reads[4].status, ElfReadStatus::invalid);

  for (unsigned threads : {1u, 4u}) {
    ElfStoreReport again;
    o.expect_as_read_from_disk(o.read(again, threads));
    EXPECT_EQ(again.reused, 4u) << "every object but the one that cannot be opened";
    EXPECT_FALSE(again.written) << "nothing changed, nothing written";
  }

  // One object replaced by another (a new inode), one grown in place (the same inode).
  fs::copy_file(k_fixtures + "/reader/libplain.so", o.dir + "/new.so");
  fs::rename(o.dir + "/new.so", o.candidates[1]);
  std::ofstream(o.candidates[0], std::ios::binary | std::ios::app) << "x";
  ElfStoreReport changed;
  const auto after = o.read(changed);
  o.expect_as_read_from_disk(after);
  EXPECT_EQ(changed.reused, 2u);
  EXPECT_TRUE(changed.written);
  EXPECT_EQ(after[1].info.soname, "libplain.so") << "the replacement's own SONAME";
  EXPECT_EQ(reads[1].info.soname, "libtop.so");
}

TEST(ElfStore, AnObjectChangedWithinTheSettleTimeIsNeverKept) {
  Objects o;
  ElfStoreReport first, second;
  (void)o.read(first);
  o.expect_as_read_from_disk(o.read(second));
  EXPECT_EQ(second.reused, 0u);
}

TEST(ElfStore, ABrokenStoreIsReportedIgnoredAndWrittenAgain) {
  Objects o;
  let_settle();
  ElfStoreReport first;
  (void)o.read(first);
  ASSERT_TRUE(first.written);
  const std::string good = read_file(o.store);
  auto expect_ignored = [&](const std::string& bytes, const std::string& why) {
    test::write_file(o.store, bytes);
    ElfStoreReport r;
    o.expect_as_read_from_disk(o.read(r));
    EXPECT_EQ(r.reused, 0u) << why;
    EXPECT_NE(r.problem.find(why), std::string::npos) << r.problem;
    EXPECT_TRUE(r.written) << why;
    ElfStoreReport whole;
    (void)o.read(whole);
    EXPECT_EQ(whole.reused, 4u) << why << ": the file written again is whole";
  };
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x01;
  expect_ignored(flipped, "checksum");
  expect_ignored(good.substr(0, 10), "not a cache file");
  expect_ignored(std::string(good.size(), 'x'), "not a cache file");
  // A walk cache where the ELF store should be: the magic says which kind a file is.
  std::string walk = good;
  walk.replace(0, 8, "cfxwalk4");
  expect_ignored(walk, "not a cache file of this version");
}

// Inputs the fuzzer once crashed on (tests/fuzz/regressions/cache-*), made into cache files as
// fuzz_cache makes them: the first byte picks the kind, the rest is the payload.
TEST(CacheFiles, FuzzerRegressionsAreReportedNotCrashes) {
  test::TempDir t;
  int seen = 0;
  for (const auto& e : fs::directory_iterator(test::source_dir() + "/tests/fuzz/regressions")) {
    if (!e.path().filename().string().starts_with("cache-")) continue;
    ++seen;
    const std::string input = read_file(e.path().string());
    ASSERT_FALSE(input.empty());
    const std::string payload = input.substr(1);
    const bool walk = (input[0] & 1) == 0;
    const std::uint32_t order = 0x01020304, zero = 0;
    const std::uint64_t hash = PathHash().add(payload).value();
    std::string file = walk ? "cfxwalk4" : "cfxelf01";
    file.append(reinterpret_cast<const char*>(&order), 4).append(reinterpret_cast<const char*>(&zero), 4);
    file.append(payload).append(reinterpret_cast<const char*>(&hash), 8);
    const std::string path = t.path() + "/" + e.path().filename().string();
    test::write_file(path, file);
    const std::string problem = walk ? WalkCache::load(path, 1).problem() : ElfStore::load(path).problem();
    EXPECT_NE(problem.find(path), std::string::npos) << e.path() << ": " << problem;
  }
  EXPECT_GT(seen, 0);
}

}  // namespace
}  // namespace cudafix::resolver
