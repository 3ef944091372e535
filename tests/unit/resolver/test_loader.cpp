// The loader model against the real loader: every fixture (compiled by CMake from
// tests/fixtures) and a few real system libraries are resolved by the model and by glibc's
// ld.so in trace mode (and by libtree where it models the case), and the answers must agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <sys/wait.h>
#include <cerrno>

#include "resolver/base/text.hpp"
#include "resolver/loader/loader.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/process.hpp"

namespace cudafix::resolver {
namespace {

using test::run_shell;
using test::shell_quote;

const std::string k_fixtures = test::fixtures_dir();

const HostInfo& host() {
  static const HostInfo h = detect_host();
  return h;
}

std::string realpath_or(const std::string& p) { return real_path_of(p); }

// "name => /real/path" or "name => not found", one per object glibc maps or fails to find.
using Answers = std::multiset<std::string>;

std::string env_prefix(const std::optional<std::string>& llp) {
  return "env -i " + (llp ? "LD_LIBRARY_PATH=" + shell_quote(*llp) + " " : std::string());
}

Answers parse_trace(const std::string& out) {
  Answers a;
  for (auto raw : split(out, '\n')) {
    const auto line = trim(raw);
    const auto arrow = line.find(" => ");
    if (arrow == std::string_view::npos) continue;  // vdso, the loader itself
    const std::string name(line.substr(0, arrow));
    auto rest = line.substr(arrow + 4);
    if (rest.starts_with("not found")) {
      a.insert(name + " => not found");
      continue;
    }
    rest = rest.substr(0, rest.rfind(" ("));
    a.insert(name + " => " + realpath_or(std::string(rest)));
  }
  return a;
}

Answers glibc_answers(const std::string& root, const std::optional<std::string>& llp, const std::string& wrap = "") {
  const std::string cmd =
      env_prefix(llp) + "LD_TRACE_LOADED_OBJECTS=1 " + shell_quote(host().ld_so) + " " + shell_quote(root);
  const auto r = run_shell(wrap.empty() ? cmd : wrap + " " + shell_quote(cmd));
  return parse_trace(r.out);
}

struct ModelRun {
  std::shared_ptr<ElfCache> elf_cache = std::make_shared<ElfCache>();  // what process points into
  Process process;
  Answers answers;
};

ModelRun model_answers(const std::string& root, const std::optional<std::string>& llp,
                       const std::string& cache = "/etc/ld.so.cache") {
  LoaderConfig config;
  config.host = host();
  if (llp) config.ld_library_path = split_search_path(*llp);
  ModelRun run;
  LoaderModel model(config, run.elf_cache, std::make_shared<LdCache>(LdCache::load(cache)));
  EXPECT_GE(model.load(run.process, root), 0);
  // glibc prints each object when first mapped, and each name it could not find.
  for (const auto& o : run.process.objects) {
    for (std::size_t k = 0; k < o.needed.size(); ++k) {
      const auto& r = o.needed[k];
      if (!r.found()) {
        run.answers.insert(r.name + " => not found");
      } else if (r.kind != ReasonKind::already_loaded) {
        run.answers.insert(r.name + " => " + realpath_or(*r.path));
      }
    }
  }
  return run;
}

// The objects libtree finds outside the system folders: "/real/path [reason]" or "name not found".
std::set<std::string> libtree_answers(const std::string& root, const std::optional<std::string>& llp) {
  const auto r = run_shell(env_prefix(llp) + "libtree -p " + shell_quote(root));
  std::set<std::string> out;
  bool first = true;
  for (auto raw : split(r.out, '\n')) {
    std::string line(raw);
    if (line.find("\xe2\x94\x8a") != std::string::npos || line.starts_with("Error")) continue;  // "┊" detail lines
    // Drop the tree drawing: everything up to the first '/' or letter after it.
    const auto start = line.find_first_not_of(" \xe2\x94\x80\x82\x9c\x94\x90\x98\x8c\xa4\xac\xb4\xbc\x83");
    if (start == std::string::npos) continue;
    line = std::string(trim(line.substr(start)));
    if (line.empty()) continue;
    if (first) {  // the root itself
      first = false;
      continue;
    }
    if (line.ends_with(" not found")) {
      out.insert(line);
      continue;
    }
    const auto br = line.rfind(" [");
    if (br == std::string::npos) continue;
    std::string reason = line.substr(br + 2, line.size() - br - 3);
    if (reason.starts_with("rpath")) reason = "rpath";  // "rpath of 1": libtree counts depth
    out.insert(realpath_or(line.substr(0, br)) + " [" + reason + "]");
  }
  return out;
}

// The model's answers in libtree's terms, for objects outside the system folders.
std::set<std::string> model_in_libtree_terms(const ModelRun& run) {
  std::set<std::string> out;
  for (const auto& o : run.process.objects)
    for (const auto& r : o.needed) {
      if (r.name == "libc.so.6") continue;  // libtree hides libc, found or not
      if (!r.found()) {
        out.insert(r.name + " not found");
        continue;
      }
      if (r.kind == ReasonKind::already_loaded || r.kind == ReasonKind::ld_cache || r.kind == ReasonKind::default_path)
        continue;
      const std::string reason =
          r.kind == ReasonKind::ld_library_path ? "LD_LIBRARY_PATH" : std::string(to_string(r.kind));
      out.insert(realpath_or(*r.path) + " [" + reason + "]");
    }
  return out;
}

struct Case {
  const char* name;
  const char* root;
  const char* llp;  // LD_LIBRARY_PATH relative to the fixtures, or nullptr
  bool libtree;     // libtree models this case (it knows no glibc-hwcaps)
};

class LoaderVsGlibc : public ::testing::TestWithParam<Case> {};

TEST_P(LoaderVsGlibc, ModelAgreesWithLdSoAndLibtree) {
  const Case& c = GetParam();
  const std::string root = k_fixtures + "/" + c.root;
  std::optional<std::string> llp;
  if (c.llp) llp = k_fixtures + "/" + c.llp;
  const auto glibc = glibc_answers(root, llp);
  ASSERT_FALSE(glibc.empty()) << "ld.so printed nothing for " << root;
  const auto model = model_answers(root, llp);
  EXPECT_EQ(model.answers, glibc);
  if (c.libtree) {
    EXPECT_EQ(model_in_libtree_terms(model), libtree_answers(root, llp));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, LoaderVsGlibc,
    ::testing::Values(Case{"RpathBeatsLdLibraryPath", "rpath_runpath/librpath.so", "rpath_runpath/b", true},
                      Case{"LdLibraryPathBeatsRunpath", "rpath_runpath/librunpath.so", "rpath_runpath/b", true},
                      Case{"RunpathAlone", "rpath_runpath/librunpath.so", nullptr, true},
                      Case{"InheritedRpathChain", "chain/libtop.so", nullptr, true},
                      Case{"RunpathStopsInheritance", "chain/libtop_rp.so", nullptr, true},
                      Case{"OriginThroughSymlinkedFolder", "symlinked_origin/top/link/libA.so", nullptr, true},
                      Case{"LdLibraryPathOnly", "ld_library_path/libneeds.so", "ld_library_path/only", true},
                      Case{"LdLibraryPathUnset", "ld_library_path/libneeds.so", nullptr, true},
                      Case{"NodeflibSkipsCacheAndSystemFolders", "nodeflib/libnodeflib.so", nullptr, true},
                      Case{"WrongClassSkipped", "wrong_class/libusewc.so", nullptr, true},
                      Case{"GlibcHwcapsSubfolderFirst", "hwcaps/libusehw.so", nullptr, false}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(LoaderVsGlibcSystem, RealSystemLibrariesResolveAlike) {
  // Real trees with dozens of objects: the libraries cudafix itself links.
  for (const char* lib : {"libcurl.so.4", "libarchive.so.13", "libelf.so.1"}) {
    std::string path;
    for (const auto& dir : host().default_dirs)
      if (std::filesystem::exists(dir + "/" + lib)) {
        path = dir + "/" + lib;
        break;
      }
    if (path.empty()) continue;
    const auto glibc = glibc_answers(path, std::nullopt);
    ASSERT_FALSE(glibc.empty()) << lib;
    EXPECT_EQ(model_answers(path, std::nullopt).answers, glibc) << lib;
  }
}

TEST(LoaderVsGlibcCache, LdSoCacheBuiltByLdconfig) {
  // A real cache from the real ldconfig, put in place for glibc in a private mount namespace
  // so the host's cache is never touched.
  test::TempDir tmp;
  const std::string cache = tmp.path() + "/ld.so.cache";
  const auto made =
      run_shell("ldconfig -X -C " + shell_quote(cache) + " -f " + shell_quote(k_fixtures + "/ld_cache/ld.so.conf"));
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const std::string root = k_fixtures + "/ld_cache/libusecache.so";
  const std::string wrap = "unshare -m sh -c 'mount --bind " + cache + " /etc/ld.so.cache && exec sh -c \"$0\"'";
  const auto probe = run_shell("unshare -m true");
  if (probe.exit_code != 0) GTEST_SKIP() << "no mount namespaces here: " << probe.out;
  const auto glibc = glibc_answers(root, std::nullopt, wrap);
  ASSERT_TRUE(glibc.count("libcached.so.7 => " + realpath_or(k_fixtures + "/ld_cache/cachedir/libcached.so.7")))
      << "glibc did not use the test cache";
  const auto model = model_answers(root, std::nullopt, cache);
  EXPECT_EQ(model.answers, glibc);
  const auto& r = model.process.objects[0].needed;
  const auto it = std::find_if(r.begin(), r.end(), [](const Resolution& x) { return x.name == "libcached.so.7"; });
  ASSERT_NE(it, r.end());
  EXPECT_EQ(it->kind, ReasonKind::ld_cache);
  // Without that cache the library is not found, by either.
  EXPECT_TRUE(model_answers(root, std::nullopt).answers.count("libcached.so.7 => not found"));
}

TEST(LdCacheFormat, ReadsEveryEntryOfTheHostCacheAsLdconfigDoes) {
  const auto cache = LdCache::load("/etc/ld.so.cache");
  const auto listed = run_shell("ldconfig -p");
  ASSERT_EQ(listed.exit_code, 0);
  std::size_t lines = 0;
  for (auto raw : split(listed.out, '\n')) {
    const auto line = trim(raw);
    const auto arrow = line.find(" => ");
    if (arrow == std::string_view::npos) continue;
    ++lines;
    const std::string soname(line.substr(0, line.find(' ')));
    const std::string path(line.substr(arrow + 4));
    const bool found = std::any_of(cache.entries().begin(), cache.entries().end(),
                                   [&](const LdCacheEntry& e) { return e.soname == soname && e.path == path; });
    EXPECT_TRUE(found) << soname << " => " << path;
  }
  EXPECT_GT(lines, 10u);
  EXPECT_EQ(cache.entries().size(), lines);
}

TEST(LdCacheFormat, RejectsTruncatedAndGarbageCachesWithOffsets) {
  const std::string good = read_file("/etc/ld.so.cache");
  EXPECT_THROW((void)LdCache::parse("not a cache at all, long enough to have a header....", "x"), Error);
  ASSERT_GT(good.size(), 120u);
  for (std::size_t cut : {std::size_t{30}, std::size_t{60}, good.size() / 2, good.size() - 1}) {
    bool rejected = false;
    try {
      (void)LdCache::parse(good.substr(0, cut), "cut");
    } catch (const Error& e) {
      rejected = true;
      EXPECT_NE(std::string(e.what()).find("offset"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cut"), std::string::npos) << "names the file: " << e.what();
    }
    EXPECT_TRUE(rejected) << "the cache cut at " << cut << " of " << good.size() << " bytes was parsed";
  }
  // The whole cache parses, so the cuts above are what was rejected.
  EXPECT_NO_THROW((void)LdCache::parse(good, "whole"));
}

TEST(LdCacheFormat, AnEmptyFileIsNoCacheAsGlibcReadsIt) {
  // What `--ld-so-cache /dev/null` gives the model: a host without a cache, nothing found in it.
  const auto null_device = LdCache::load("/dev/null");
  EXPECT_FALSE(null_device.lookup("libc.so.6", 62, 2, {}));
  EXPECT_FALSE(LdCache::parse("", "empty").lookup("libc.so.6", 62, 2, {}));
  EXPECT_TRUE(LdCache::load("/etc/ld.so.cache").lookup("libc.so.6", 62, 2, {})) << "the host's finds libc";
}

TEST(LoaderModel, ReportsEveryPlaceLookedWhenNotFound) {
  const auto run = model_answers(k_fixtures + "/chain/libtop_rp.so", std::nullopt);
  const LoadedObject* mid = nullptr;
  for (const auto& o : run.process.objects)
    if (o.elf && o.elf->soname == "libmid_rp.so") mid = &o;
  ASSERT_NE(mid, nullptr);
  ASSERT_EQ(mid->needed.front().name, "libleaf.so");
  const auto& r = mid->needed.front();
  EXPECT_FALSE(r.found());
  std::set<ReasonKind> steps;
  for (const auto& s : r.searched) steps.insert(s.source);
  // RUNPATH set: no RPATH of the chain; then RUNPATH, the cache, the system folders.
  EXPECT_FALSE(steps.count(ReasonKind::rpath));
  EXPECT_TRUE(steps.count(ReasonKind::runpath));
  EXPECT_TRUE(steps.count(ReasonKind::ld_cache));
  EXPECT_TRUE(steps.count(ReasonKind::default_path));
}

TEST(LoaderModel, WhatIfAFileDisappearsFallsBackAlongTheSearchOrder) {
  LoaderConfig config;
  config.host = host();
  config.ld_library_path = {k_fixtures + "/rpath_runpath/b"};
  LoaderModel model(config, std::make_shared<ElfCache>(), std::make_shared<LdCache>(LdCache::load("/etc/ld.so.cache")));
  Process p;
  ASSERT_EQ(model.load(p, k_fixtures + "/rpath_runpath/librpath.so"), 0);
  const auto a = realpath_or(k_fixtures + "/rpath_runpath/a/libx.so");
  const auto first = model.resolve(p, 0, "libx.so");
  ASSERT_TRUE(first.found());
  EXPECT_EQ(realpath_or(*first.path), a);
  const auto fallback = model.resolve(p, 0, "libx.so", {a});
  ASSERT_TRUE(fallback.found());
  EXPECT_EQ(realpath_or(*fallback.path), realpath_or(k_fixtures + "/rpath_runpath/b/libx.so"));
  EXPECT_EQ(fallback.kind, ReasonKind::ld_library_path);
}

// A planned install that writes a library into a glibc-hwcaps subfolder that does not exist yet:
// the what-if's loader must look there first, as glibc will once the files are written.
TEST(LoaderModel, WhatIfAPlannedHwcapsSubfolderIsSearchedFirst) {
  if (host().hwcaps_subdirs.empty()) GTEST_SKIP() << "this glibc has no glibc-hwcaps subfolders";
  test::TempDir t;
  const std::string dir = real_path_of(t.path());
  const std::string plain = dir + "/libx.so";
  std::filesystem::copy_file(k_fixtures + "/rpath_runpath/a/libx.so", plain);
  const std::string hwcaps = dir + "/glibc-hwcaps";
  const std::string sub = hwcaps + "/" + host().hwcaps_subdirs.front();
  const std::string planned = sub + "/libx.so";
  LoaderConfig config;
  config.host = host();
  config.ld_library_path = {dir};
  auto elf = std::make_shared<ElfCache>();
  LoaderModel model(config, elf, nullptr);
  const Process empty;
  const auto before = model.resolve(empty, -1, "libx.so");
  ASSERT_TRUE(before.found());
  EXPECT_EQ(*before.path, plain);

  elf->put(planned, read_elf_file(plain));
  LoaderConfig changes;
  changes.added = std::make_shared<const std::unordered_set<std::string>>(std::unordered_set<std::string>{planned});
  changes.added_dirs = std::make_shared<const std::set<std::string>>(std::set<std::string>{hwcaps, sub});
  const auto after = model.what_if(changes)->resolve(empty, -1, "libx.so");
  ASSERT_TRUE(after.found());
  EXPECT_EQ(*after.path, planned) << "the planned hwcaps copy comes before the folder's own";
  EXPECT_EQ(after.kind, ReasonKind::ld_library_path);
}

TEST(HostInfo, ComesFromTheHostLoader) {
  EXPECT_FALSE(host().default_dirs.empty());
  EXPECT_FALSE(host().ld_so.empty());
  EXPECT_FALSE(host().platform.empty());
  EXPECT_EQ(host().lib, host().default_dirs.front().substr(1));
}

// The scan starts ld.so --help before its walk and reads it afterwards; a scan that fails in
// between must still reap it, or a long-lived caller collects zombies.
TEST(HostInfo, AskedInTheBackgroundTheLoaderAnswersAlikeAndIsAlwaysReaped) {
  {
    HostDetection asked;
    const HostInfo h = asked.get();
    EXPECT_EQ(h.default_dirs, host().default_dirs);
    EXPECT_EQ(h.hwcaps_subdirs, host().hwcaps_subdirs);
  }
  { HostDetection never_read; }
  errno = 0;
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1) << "a child of this process is left behind";
  EXPECT_EQ(errno, ECHILD);
}

TEST(HostInfo, ParsesLdSoHelp) {
  HostInfo h;
  parse_ld_so_help(
      "Shared library search path:\n  (libraries located via /etc/ld.so.cache)\n  /lib64 (system search path)\n"
      "  /usr/lib64 (system search path)\n\nSubdirectories of glibc-hwcaps directories, in priority order:\n"
      "  x86-64-v4\n  x86-64-v3 (supported, searched)\n  x86-64-v2 (supported, searched)\n\nLegacy HWCAP:\n  tls\n",
      h);
  EXPECT_EQ(h.default_dirs, (std::vector<std::string>{"/lib64", "/usr/lib64"}));
  EXPECT_EQ(h.hwcaps_subdirs, (std::vector<std::string>{"x86-64-v3", "x86-64-v2"}));
}

}  // namespace
}  // namespace cudafix::resolver

namespace cudafix::resolver {
namespace {

// Inputs the fuzzers once crashed on (tests/fuzz/regressions): each must now be a clean Error
// or a cache, never a crash.
TEST(LdCacheFormat, FuzzRegressionsParseOrFailCleanly) {
  std::size_t seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(test::source_dir() + "/tests/fuzz/regressions")) {
    if (e.path().filename().string().rfind("ld_cache-", 0) != 0) continue;
    ++seen;
    try {
      (void)LdCache::parse(read_file(e.path()), e.path().string()).lookup("libc.so.6", 62, 2, {});
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("malformed ld.so.cache"), std::string::npos) << err.what();
    }
  }
  EXPECT_GT(seen, 0u);
}

}  // namespace
}  // namespace cudafix::resolver

namespace cudafix::resolver {
namespace {

// LD_PRELOAD objects are mapped before the program's NEEDED, so a preloaded soname wins over
// the program's own RPATH, as glibc does it.
TEST(LoaderModel, PreloadedSonameWinsOverRpath) {
  const std::string preload = k_fixtures + "/rpath_runpath/b/libx.so";
  const std::string root = k_fixtures + "/rpath_runpath/librpath.so";
  const auto glibc = run_shell("env -i LD_PRELOAD=" + shell_quote(preload) + " LD_TRACE_LOADED_OBJECTS=1 " +
                               shell_quote(host().ld_so) + " " + shell_quote(root));
  ASSERT_NE(glibc.out.find(real_path_of(preload)), std::string::npos) << glibc.out;
  ASSERT_EQ(glibc.out.find("rpath_runpath/a/libx.so"), std::string::npos) << glibc.out;

  LoaderConfig config;
  config.host = host();
  config.preload = {preload};
  config.main_executable = root;  // the program is the root, as under ld.so
  auto elf = std::make_shared<ElfCache>();
  LoaderModel model(config, elf, std::make_shared<LdCache>(LdCache::load("/etc/ld.so.cache")));
  const Process p = model.start_process();
  const LoadedObject& main = p.objects[static_cast<std::size_t>(p.main)];
  ASSERT_EQ(main.needed.front().name, "libx.so");
  EXPECT_EQ(main.needed.front().kind, ReasonKind::already_loaded);
  EXPECT_EQ(real_path_of(*main.needed.front().path), real_path_of(preload));
}

}  // namespace
}  // namespace cudafix::resolver
