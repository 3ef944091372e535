// End-to-end: the real cudafix binary on real directories: a venv made by `python3 -m venv`
// with wheels installed by its own pip, the corpus venv materialised, the demo, and hostile
// environments.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "resolver/base/cache_file.hpp"
#include "resolver/base/text.hpp"
#include "resolver/elf/elf_writer.hpp"
#include "tests/e2e/cudafix_run.hpp"
#include "tests/support/process.hpp"

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::run_shell;
using test::RunResult;
using test::shell_quote;
using test::TempDir;
using test::write_file;
using ::testing::HasSubstr;

using test::k_bin;
using test::k_fixtures;
using test::k_no_cache;
using test::k_python;
using test::k_source;

RunResult cudafix(const std::string& args) {
  return run_shell("env -u VIRTUAL_ENV " + shell_quote(k_bin) + " " + args);
}

json run_json(const std::string& args, int expected_exit = 0) {
  const auto r = test::cudafix_json(args);
  EXPECT_EQ(r.exit_code, expected_exit) << args << "\n" << r.out.substr(0, 2000);
  return r.doc;
}

const json* find_by(const json& list, const std::string& key, const std::string& value) {
  for (const auto& item : list)
    if (item.contains(key) && item[key].is_string() && item[key] == value) return &item;
  return nullptr;
}

const json* resolution_of(const json& object, const std::string& needed) {
  return find_by(object["resolutions"], "needed", needed);
}

// A listing of every entry below `dir` with size and mtime: what "nothing was written" means.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::none);
       it != fs::recursive_directory_iterator(); ++it) {
    std::error_code ec;
    const auto st = fs::symlink_status(it->path(), ec);
    std::string v = std::to_string(static_cast<int>(st.type()));
    if (fs::is_regular_file(st))
      v += ":" + std::to_string(fs::file_size(it->path())) + ":" +
           std::to_string(fs::last_write_time(it->path()).time_since_epoch().count());
    out[it->path().string()] = v;
  }
  return out;
}

// --- a real venv, real pip ---------------------------------------------------------------

class RealVenv : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    venv_ = tmp_->path() + "/venv";
    const std::string w = k_fixtures + "/wheel";
    const std::string gpulib = test::make_wheel(
        tmp_->path(), "gpulib 1.0 gpulib/__init__.py=" + w +
                          "/gpulib/__init__.py gpulib/_ext.cpython-311-x86_64-linux-gnu.so=" + w +
                          "/gpulib/_ext.so gpulib.libs/libvend.so.1=" + w + "/gpulib.libs/libvend.so.1");
    const std::string plugin =
        test::make_wheel(tmp_->path(), "gpuplugin 2.0 gpuplugin/_plugin.cpython-311-x86_64-linux-gnu.so=" + w +
                                           "/gpuplugin/_plugin.so --requires gpulib");
    ASSERT_NO_FATAL_FAILURE(test::make_venv(venv_, {gpulib, plugin}));
    site_ = test::site_packages(venv_);
  }
  static void TearDownTestSuite() { delete tmp_; }

  // What the real loader maps, read from /proc/self/maps after loading `paths` in order.
  static std::string loaded_after(const std::vector<std::string>& paths) {
    std::string code =
        "import ctypes,sys\nfor p in sys.argv[1:]: ctypes.CDLL(p, "
        "ctypes.RTLD_GLOBAL)\nprint(open('/proc/self/maps').read())";
    std::string cmd = shell_quote(venv_ + "/bin/python3") + " -c " + shell_quote(code);
    for (const auto& p : paths) cmd += " " + shell_quote(p);
    return run_shell(cmd).out;
  }

  static inline TempDir* tmp_ = nullptr;
  static inline std::string venv_;
  static inline std::string site_;
};

TEST_F(RealVenv, ScanSeesPipsDistsAndWhereEachNeededResolves) {
  const json j = run_json("scan --venv " + shell_quote(venv_) + k_no_cache);
  EXPECT_EQ(j["schema"], 1);
  EXPECT_EQ(j["command"], "scan");
  const json* gpulib = find_by(j["dists"], "dist", "gpulib-1.0.dist-info");
  ASSERT_NE(gpulib, nullptr);
  EXPECT_EQ((*gpulib)["installer"], "pip");
  EXPECT_TRUE((*gpulib)["missing"].empty());
  ASSERT_NE(find_by(j["dists"], "name", "pip"), nullptr);  // the venv's own pip is a dist too

  const json* ext = find_by(j["objects"], "path", "gpulib/_ext.cpython-311-x86_64-linux-gnu.so");
  ASSERT_NE(ext, nullptr);
  EXPECT_EQ((*ext)["owners"], json::array({"gpulib-1.0.dist-info"}));
  const json* vend = resolution_of(*ext, "libvend.so.1");
  ASSERT_NE(vend, nullptr);
  EXPECT_EQ((*vend)["path"], "gpulib.libs/libvend.so.1");
  EXPECT_EQ((*vend)["reason"], "rpath");
  EXPECT_EQ((*vend)["via"], "gpulib/_ext.cpython-311-x86_64-linux-gnu.so");

  // gpuplugin has no search path for libvend.so.1; it gets it because gpulib, which it
  // requires, is imported first.
  const json* plugin = find_by(j["objects"], "path", "gpuplugin/_plugin.cpython-311-x86_64-linux-gnu.so");
  ASSERT_NE(plugin, nullptr);
  const json* pv = resolution_of(*plugin, "libvend.so.1");
  ASSERT_NE(pv, nullptr);
  EXPECT_EQ((*pv)["reason"], "already loaded");
  EXPECT_EQ((*pv)["path"], "gpulib.libs/libvend.so.1");
}

TEST_F(RealVenv, PredictionMatchesWhatTheRealLoaderMaps) {
  const json j = run_json("why gpulib/_ext.cpython-311-x86_64-linux-gnu.so --venv " + shell_quote(venv_) + k_no_cache);
  ASSERT_TRUE(j["resolves"]);
  const json* vend = find_by(j["tree"]["children"], "needed", "libvend.so.1");
  ASSERT_NE(vend, nullptr);
  const std::string predicted = resolver::real_path_of(site_ + "/" + (*vend)["path"].get<std::string>());
  const std::string maps = loaded_after({site_ + "/gpulib/_ext.cpython-311-x86_64-linux-gnu.so"});
  EXPECT_THAT(maps, HasSubstr(predicted));
  // The plugin alone fails in the real loader, as the model says it would without gpulib.
  const auto alone = run_shell(shell_quote(venv_ + "/bin/python3") + " -c " +
                               shell_quote("import ctypes,sys; ctypes.CDLL(sys.argv[1])") + " " +
                               shell_quote(site_ + "/gpuplugin/_plugin.cpython-311-x86_64-linux-gnu.so"));
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_THAT(alone.out, HasSubstr("libvend.so.1"));
  EXPECT_THAT(loaded_after({site_ + "/gpulib/_ext.cpython-311-x86_64-linux-gnu.so",
                            site_ + "/gpuplugin/_plugin.cpython-311-x86_64-linux-gnu.so"}),
              HasSubstr(predicted));
}

TEST_F(RealVenv, FindsTheVenvThroughVirtualEnvAndPath) {
  const auto by_env =
      run_shell("VIRTUAL_ENV=" + shell_quote(venv_) + " " + shell_quote(k_bin) + " scan --json" + k_no_cache);
  ASSERT_EQ(by_env.exit_code, 0) << by_env.out;
  EXPECT_EQ(json::parse(by_env.out)["layout"]["found_by"], "$VIRTUAL_ENV");
  const auto by_path = run_shell("env -u VIRTUAL_ENV PATH=" + shell_quote(venv_ + "/bin:/usr/bin:/bin") + " " +
                                 shell_quote(k_bin) + " scan --json" + k_no_cache);
  ASSERT_EQ(by_path.exit_code, 0) << by_path.out;
  const json j = json::parse(by_path.out);
  EXPECT_EQ(j["layout"]["found_by"], "python3 on PATH");
  EXPECT_EQ(j["venv"], venv_);
}

TEST_F(RealVenv, WhyExitsOneWhenTheProviderIsGoneAndSaysWhereItLooked) {
  // A copy of the venv, so the shared one stays intact; the vendored library deleted.
  TempDir copy;
  ASSERT_EQ(run_shell("cp -a " + shell_quote(venv_) + " " + shell_quote(copy.path() + "/v")).exit_code, 0);
  const std::string v = copy.path() + "/v";
  const std::string copy_site = v + site_.substr(venv_.size());
  fs::remove(copy_site + "/gpulib.libs/libvend.so.1");
  const auto r = cudafix("why libvend.so.1 --color never --venv " + shell_quote(v) + k_no_cache);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("does not resolve"));
  EXPECT_THAT(r.out,
              HasSubstr("gpulib.libs/libvend.so.1 [rpath of gpulib/_ext.cpython-311-x86_64-linux-gnu.so]: not found"));
  const json j = run_json("scan --venv " + shell_quote(v) + k_no_cache);
  const json* d = find_by(j["dists"], "dist", "gpulib-1.0.dist-info");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ((*d)["missing"], json::array({"gpulib.libs/libvend.so.1"}));
}

TEST_F(RealVenv, ReadOnlyCommandsWriteNothing) {
  const auto before = snapshot(venv_);
  run_json("scan --venv " + shell_quote(venv_));
  run_json("why libvend.so.1 --venv " + shell_quote(venv_));
  EXPECT_EQ(snapshot(venv_), before);
}

// --- the walk cache: the same answers as a full listing, however pip changed the venv ------

TEST(WalkCache, AnswersAsAFullListingWouldAfterRealPipInstallsAndUninstalls) {
  TempDir t;
  const std::string venv = t.path() + "/venv";
  const std::string w = k_fixtures + "/wheel";
  const std::string gpulib =
      test::make_wheel(t.path(), "gpulib 1.0 gpulib/__init__.py=" + w +
                                     "/gpulib/__init__.py gpulib/_ext.cpython-311-x86_64-linux-gnu.so=" + w +
                                     "/gpulib/_ext.so gpulib.libs/libvend.so.1=" + w + "/gpulib.libs/libvend.so.1");
  const std::string plugin =
      test::make_wheel(t.path(), "gpuplugin 2.0 gpuplugin/_plugin.cpython-311-x86_64-linux-gnu.so=" + w +
                                     "/gpuplugin/_plugin.so --requires gpulib");
  ASSERT_NO_FATAL_FAILURE(test::make_venv(venv, {gpulib, plugin}));
  const std::string cache = "CUDAFIX_CACHE_DIR=" + shell_quote(t.path() + "/cache") + " ";
  const std::string scan = "scan --json --venv " + shell_quote(venv) + k_no_cache;
  auto cached = [&] { return run_shell("env -u VIRTUAL_ENV " + cache + shell_quote(k_bin) + " " + scan).out; };
  auto uncached = [&] { return cudafix(scan + " --no-cache").out; };
  // The folders walked and, of those, the ones taken from the cache, as --timings reports them.
  auto reuse = [&] {
    const auto r =
        run_shell("env -u VIRTUAL_ENV " + cache + shell_quote(k_bin) + " " + scan + " --timings 2>&1 >/dev/null");
    const auto at = r.out.find("walk cache:");
    unsigned reused = 0, folders = 0;
    EXPECT_EQ(at == std::string::npos ? 0 : std::sscanf(r.out.c_str() + at, "walk cache: %u of %u", &reused, &folders),
              2)
        << r.out;
    return std::pair{reused, folders};
  };
  std::this_thread::sleep_for(cudafix::resolver::settle_time() + std::chrono::milliseconds(100));  // the folders settle
  EXPECT_EQ(cached(), uncached());
  const auto [reused, folders] = reuse();
  EXPECT_GT(folders, 10u);
  EXPECT_EQ(reused, folders);

  const auto removed = test::venv_pip(venv, "uninstall -y -q gpuplugin");
  ASSERT_EQ(removed.exit_code, 0) << removed.out;
  EXPECT_EQ(cached(), uncached()) << "right after pip uninstall";
  const auto installed = test::venv_pip(venv, "install -q --no-index --no-deps " + shell_quote(plugin));
  ASSERT_EQ(installed.exit_code, 0) << installed.out;
  // The first scan after the install: the folders pip changed no longer match their stamps, so
  // they are listed again, however long the scan itself takes (a scan after that may trust
  // them again once they have settled, which under the sanitizers' slowness they may have).
  const auto [reused_after, folders_after] = reuse();
  EXPECT_LT(reused_after, folders_after) << "the folders pip changed were listed again";
  EXPECT_GT(reused_after, folders_after / 2) << "and only those";
  const std::string after = cached();
  EXPECT_EQ(after, uncached()) << "right after pip install";
  EXPECT_THAT(after, HasSubstr("gpuplugin/_plugin.cpython-311-x86_64-linux-gnu.so"));

  // --no-cache keeps nothing; without CUDAFIX_CACHE_DIR the cache is under $XDG_CACHE_HOME.
  const std::string none = t.path() + "/none";
  const auto nothing_kept = run_shell("env -u VIRTUAL_ENV CUDAFIX_CACHE_DIR=" + shell_quote(none) + " " +
                                      shell_quote(k_bin) + " " + scan + " --no-cache");
  EXPECT_EQ(nothing_kept.exit_code, 0);
  EXPECT_EQ(nothing_kept.out, after) << "--no-cache reads the same venv to the same answer";
  EXPECT_FALSE(fs::exists(none));
  const auto xdg =
      run_shell("env -u VIRTUAL_ENV -u CUDAFIX_CACHE_DIR XDG_CACHE_HOME=" + shell_quote(t.path() + "/xdg") + " " +
                shell_quote(k_bin) + " " + scan);
  EXPECT_EQ(xdg.exit_code, 0);
  EXPECT_EQ(xdg.out, after);
  EXPECT_TRUE(fs::is_directory(t.path() + "/xdg/cudafix"));
}

// A file system whose ctime the cache does not trust (ramfs stands in for NFS and FUSE, which a
// test cannot mount): the scan reads everything, says why under --timings, and keeps nothing.
TEST(WalkCache, IsNotUsedWhereTheFileSystemIsNotOneItTrusts) {
  const auto probe = run_shell("unshare -m true");
  if (probe.exit_code != 0) GTEST_SKIP() << "no mount namespaces here: " << probe.out;
  TempDir t;
  const std::string mnt = t.path() + "/mnt", cache = t.path() + "/cache";
  fs::create_directories(mnt);
  const std::string site = mnt + "/site", meta = site + "/foo-1.0.dist-info/METADATA";
  const std::string inner =
      "mount -t ramfs ramfs " + shell_quote(mnt) + " && mkdir -p " + shell_quote(site + "/foo-1.0.dist-info") +
      " && printf 'Name: foo\\nVersion: 1.0\\n' > " + shell_quote(meta) + " && sleep " +
      std::to_string(static_cast<double>(cudafix::resolver::settle_time().count()) / 1000.0 + 0.1) +
      " && for i in 1 2; do env -u VIRTUAL_ENV CUDAFIX_CACHE_DIR=" + shell_quote(cache) + " " + shell_quote(k_bin) +
      " scan --venv " + shell_quote(site) + " --json --timings >/dev/null; done";
  const auto r = run_shell("unshare -m sh -c " + shell_quote(inner));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("walk cache: not used: a file system at or below the roots is not one whose "
                               "ctime the cache trusts"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("unchanged")));
  EXPECT_FALSE(fs::exists(cache)) << "nothing kept";
}

// --- the corpus: a real CUDA 13 torch venv, materialised ------------------------------------

class CorpusVenv : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    venv_ = tmp_->path() + "/venv";
    const auto r = run_shell("zcat " + shell_quote(k_source + "/tests/data/good_torch_cu130_venv.json.gz") + " | " +
                             shell_quote(k_bin) + " materialize - " + shell_quote(venv_));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    scan_ = new json(run_json("scan --venv " + shell_quote(venv_) + k_no_cache));
  }
  static void TearDownTestSuite() {
    delete scan_;
    delete tmp_;
  }
  static inline TempDir* tmp_ = nullptr;
  static inline std::string venv_;
  static inline json* scan_ = nullptr;
};

TEST_F(CorpusVenv, SeesEveryDistAndEveryElfObject) {
  const json& j = *scan_;
  EXPECT_EQ(j["summary"]["dists"], 197);
  EXPECT_EQ(j["summary"]["objects"], 846);
  EXPECT_EQ(j["summary"]["record_rows"], 68923);
  EXPECT_TRUE(j["diagnostics"].empty()) << j["diagnostics"].dump();
}

TEST_F(CorpusVenv, TorchFindsTheVenvsCudaLibrariesThroughItsRpath) {
  const json* cuda = find_by((*scan_)["objects"], "path", "torch/lib/libtorch_cuda.so");
  ASSERT_NE(cuda, nullptr);
  for (const char* soname : {"libcublas.so.13", "libnccl.so.2", "libcusparseLt.so.0", "libcufile.so.0"}) {
    const json* r = resolution_of(*cuda, soname);
    ASSERT_NE(r, nullptr) << soname;
    EXPECT_NE((*r)["path"], nullptr) << soname;
  }
  // In the import of torch, libtorch_python.so (mapped first, breadth-first) brought cuDNN in
  // through its own RPATH; libtorch_cuda.so finds it loaded.
  const json* cudnn = resolution_of(*cuda, "libcudnn.so.9");
  ASSERT_NE(cudnn, nullptr);
  EXPECT_EQ((*cudnn)["path"], "nvidia/cudnn/lib/libcudnn.so.9");
  const json* py = find_by((*scan_)["objects"], "path", "torch/lib/libtorch_python.so");
  ASSERT_NE(py, nullptr);
  const json* first = resolution_of(*py, "libcudnn.so.9");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ((*first)["reason"], "rpath");
  EXPECT_EQ((*first)["via"], "torch/lib/libtorch_python.so");
}

TEST_F(CorpusVenv, EveryUnresolvedNeededIsExplained) {
  EXPECT_EQ((*scan_)["summary"]["unexplained_needed"], 0);
  std::map<std::string, std::string> kinds;
  for (const auto& o : (*scan_)["objects"])
    for (const auto& r : o["resolutions"])
      if (r["path"].is_null()) kinds[r["needed"]] = r["explanation"]["kind"];
  EXPECT_EQ(kinds["libcuda.so.1"], "driver-library");
  EXPECT_EQ(kinds["libc10.so"], "earlier-import");  // torchaudio does not declare torch
  EXPECT_EQ(kinds["libcufile.so.0"], "loaded-by-sibling");
  EXPECT_EQ(kinds["libibverbs.so.1"], "optional-library");
  EXPECT_GT((*scan_)["summary"]["unresolved_needed"].get<int>(), 0);
}

TEST_F(CorpusVenv, JsonIsTheSameOnEveryRun) {
  const auto a = cudafix("scan --json --venv " + shell_quote(venv_) + k_no_cache);
  const auto b = cudafix("scan --json --venv " + shell_quote(venv_) + k_no_cache + " --threads 1");
  EXPECT_EQ(a.out, b.out);
  // From 4 threads on, dist-info is read while the tree is walked and ELF while paths are indexed
  // (--threads is capped at the cores this process may run on, so only where it has 4 or more).
  const auto c = cudafix("scan --json --venv " + shell_quote(venv_) + k_no_cache + " --threads 8");
  EXPECT_EQ(a.out, c.out);
  const auto d = cudafix("doctor --json --venv " + shell_quote(venv_) + k_no_cache + " --threads 1");
  const auto e = cudafix("doctor --json --venv " + shell_quote(venv_) + k_no_cache + " --threads 8");
  EXPECT_EQ(d.out, e.out);
  // Runs that succeeded, on the whole corpus: not two copies of one failure.
  for (const auto* r : {&a, &b, &c, &d, &e}) EXPECT_EQ(r->exit_code, 0) << r->out.substr(0, 500);
  const json scan = json::parse(a.out);
  EXPECT_EQ(scan["summary"]["dists"], 197);
  EXPECT_EQ(scan["summary"]["objects"], 846);
  EXPECT_EQ(scan["summary"]["record_rows"], 68923);
  const json doctor = json::parse(d.out);
  EXPECT_EQ(doctor["summary"]["errors"], 0);
  EXPECT_FALSE(doctor["findings"].empty());
}

// Ctrl-Z and fg, over and over while a scan runs: each stop interrupts the listing of whatever
// folder it finds, and a walk that took the short listing for the whole folder lost files (13 of
// 20 such scans did before the walk read every folder to its end).
TEST_F(CorpusVenv, AScanStoppedAndContinuedSeesTheSameTree) {
  const std::string args = " scan --json --threads 2 --venv " + shell_quote(venv_) + k_no_cache;
  const auto quiet = run_shell(shell_quote(k_bin) + args);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.out.substr(0, 800);
  TempDir tmp;
  const std::string out = shell_quote(tmp.path() + "/scan.json");
  for (int round = 0; round < 3; ++round) {
    // Both kills quiet: the shell may reap the scan between them, and "kill: No such process" on
    // the output this test parses failed a CI run.
    const auto stopped =
        run_shell(shell_quote(k_bin) + args + " > " + out +
                  " & p=$!; while kill -STOP $p 2>/dev/null; do kill -CONT $p 2>/dev/null; sleep 0.002; done; "
                  "wait $p && cat " +
                  out);
    ASSERT_EQ(stopped.exit_code, 0) << stopped.out.substr(0, 800);
    // The summaries first (files walked, dists missing files): a readable failure.
    EXPECT_EQ(json::parse(stopped.out)["summary"], json::parse(quiet.out)["summary"]) << "round " << round;
    EXPECT_TRUE(stopped.out == quiet.out) << "round " << round << ": the two scans differ";
  }
}

// --- the demo ----------------------------------------------------------------------------

TEST(Demo, WalksTheWorkflowBreakingAndRepairingTheExampleInAMinutesRead) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/demo";
  const auto r = cudafix("demo " + shell_quote(dir) + " --color never");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // Before the break: the shared files of three pairs and the mixed majors.
  EXPECT_THAT(r.out, HasSubstr("22 paths (shared objects among them) are written by both nvidia-cudnn-cu12 9.10.2.21 "
                               "and nvidia-cudnn-cu13 9.19.0.56"));
  EXPECT_THAT(r.out, HasSubstr("45 paths (shared objects among them) are written by both nvidia-nccl-cu12 2.27.3 "
                               "and nvidia-nccl-cu13 2.28.9"));
  EXPECT_THAT(r.out, HasSubstr("3 paths (shared objects among them) are written by both nvidia-cusparselt-cu12 0.7.1 "
                               "and nvidia-cusparselt-cu13 0.8.0"));
  EXPECT_THAT(r.out, HasSubstr("warning[mixed-cuda-major]"));
  // The dry run of pip's uninstall of all three leftovers at once, then the break it predicts:
  // every CUDA 13 namesake left metadata-only.
  EXPECT_THAT(r.out, HasSubstr("$ cudafix plan remove nvidia-cudnn-cu12 nvidia-nccl-cu12 nvidia-cusparselt-cu12 "));
  EXPECT_THAT(r.out, HasSubstr("nvidia-cudnn-cu13 9.19.0.56 would be left metadata-only: all 22 of its files deleted"));
  EXPECT_THAT(r.out, HasSubstr("nvidia-nccl-cu13 2.28.9 would be left metadata-only: all 45 of its files deleted"));
  EXPECT_THAT(r.out, HasSubstr("nvidia-cusparselt-cu13 0.8.0 would be left metadata-only: all 3 of its files deleted"));
  EXPECT_THAT(r.out, HasSubstr("error[metadata-only] #1 nvidia-cudnn-cu13 9.19.0.56 is installed but all 8 of its "
                               "libraries are gone"));
  EXPECT_THAT(r.out, HasSubstr("error[metadata-only] #2 nvidia-cusparselt-cu13 0.8.0 is installed but its only "
                               "library is gone"));
  EXPECT_THAT(r.out, HasSubstr("error[metadata-only] #3 nvidia-nccl-cu13 2.28.9 is installed but its only library "
                               "is gone"));
  // The repair of all three from the folder the demo packed, in one transaction of three steps,
  // rolled back and done again; then nothing to do.
  EXPECT_THAT(r.out, HasSubstr("1. reinstall nvidia-cudnn-cu13 9.19.0.56 from " + dir + "/demo-wheels/"));
  EXPECT_THAT(r.out, HasSubstr("2. reinstall nvidia-cusparselt-cu13 0.8.0 from " + dir + "/demo-wheels/"));
  EXPECT_THAT(r.out, HasSubstr("3. reinstall nvidia-nccl-cu13 2.28.9 from " + dir + "/demo-wheels/"));
  EXPECT_THAT(r.out, HasSubstr("fixed " + dir + ": 3 steps\n"));
  EXPECT_THAT(r.out, HasSubstr("after:  0 errors, 0 warnings"));
  EXPECT_THAT(r.out, HasSubstr("rolled back"));
  EXPECT_THAT(r.out, HasSubstr("nothing to do: " + dir + " needs no step"));
  const std::size_t lines = static_cast<std::size_t>(std::count(r.out.begin(), r.out.end(), '\n'));
  EXPECT_LT(lines, 124u) << "the demo is meant to be read in a minute";
  // It leaves the environment repaired: doctor finds no error, pip-style history shows the walk.
  const auto doctor = cudafix("doctor --venv " + shell_quote(dir) + " --ld-library-path ''" + k_no_cache);
  EXPECT_EQ(doctor.exit_code, 0) << doctor.out;
  const auto history = run_json("history --venv " + shell_quote(dir));
  std::vector<std::string> commands;
  for (const auto& t : history["transactions"]) commands.push_back(t["command"]);
  EXPECT_EQ(commands, std::vector<std::string>(
                          {"fix", "rollback " + history["transactions"][2]["id"].get<std::string>(), "fix"}));
  // torch's libcudnn.so.9 resolves to the reinstalled file inside the environment.
  const auto why =
      cudafix("why libcudnn.so.9 --color never --ld-library-path '' --venv " + shell_quote(dir) + k_no_cache);
  EXPECT_EQ(why.exit_code, 0) << why.out;
  EXPECT_THAT(why.out, HasSubstr("nvidia/cudnn/lib/libcudnn.so.9 (nvidia_cudnn_cu13-9.19.0.56.dist-info)"));
  // And so do NCCL's and cuSPARSELt's, the other two the cleanup broke.
  for (const auto& [soname, owner] : {std::pair<std::string, std::string>{"libnccl.so.2",
                                                                          "nvidia/nccl/lib/libnccl.so.2 "
                                                                          "(nvidia_nccl_cu13-2.28.9"},
                                      {"libcusparseLt.so.0",
                                       "nvidia/cusparselt/lib/libcusparseLt.so.0 "
                                       "(nvidia_cusparselt_cu13-0.8.0"}}) {
    const auto other =
        cudafix("why " + soname + " --color never --ld-library-path '' --venv " + shell_quote(dir) + k_no_cache);
    EXPECT_EQ(other.exit_code, 0) << other.out;
    EXPECT_THAT(other.out, HasSubstr(owner)) << other.out;
  }
}

TEST(Scan, SharedPathsAreGroupedByFolderAndOwnersInScanAndDoctorAndListedWithVerbose) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/demo";
  // The demo's example before its walk: both cuDNNs, both NCCLs and both cuSPARSELts installed.
  ASSERT_EQ(
      cudafix("materialize " + shell_quote(test::k_source + "/cli/demo_env.json") + " " + shell_quote(dir)).exit_code,
      0);
  const auto grouped = cudafix("scan --color never --venv " + shell_quote(dir) + k_no_cache);
  EXPECT_THAT(grouped.out,
              HasSubstr("Paths listed by more than one dist (70)\n  22 paths under nvidia/cudnn/ are listed by "
                        "both nvidia-cudnn-cu12 9.10.2.21 and nvidia-cudnn-cu13 9.19.0.56"));
  // doctor's evidence says one thing of many paths once, with their folder; -v lists each.
  const auto doctor = cudafix("doctor --select shared-path --color never --venv " + shell_quote(dir) + k_no_cache);
  EXPECT_THAT(doctor.out, HasSubstr("paths under nvidia/nccl/include/: bytes on disk are no owner's"));
  EXPECT_THAT(doctor.out, HasSubstr("`pip uninstall nvidia-nccl-cu12` would delete all 45 shared paths"));
  const auto doctor_all =
      cudafix("doctor -v --select shared-path --color never --venv " + shell_quote(dir) + k_no_cache);
  EXPECT_THAT(doctor_all.out, HasSubstr("nvidia/nccl/include/nccl.h: bytes on disk are no owner's"));
  const auto all = cudafix("scan -v --color never --venv " + shell_quote(dir) + k_no_cache);
  EXPECT_THAT(all.out, HasSubstr("  nvidia/cudnn/lib/libcudnn.so.9\n    owners: nvidia_cudnn_cu12-9.10.2.21.dist-info, "
                                 "nvidia_cudnn_cu13-9.19.0.56.dist-info"));
}

// The text scan shows the model: each dist with its version, files and ELF objects; -v each
// object with its SONAME and where each NEEDED resolves, and why.
TEST(Scan, TextListsEveryDistWithItsFilesAndObjectsAndVerboseHowEachNeededResolves) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/demo";
  ASSERT_EQ(
      cudafix("materialize " + shell_quote(test::k_source + "/cli/demo_env.json") + " " + shell_quote(dir)).exit_code,
      0);
  const auto doc = test::cudafix_json("scan --venv " + shell_quote(dir) + k_no_cache);
  const auto text = cudafix("scan --color never --venv " + shell_quote(dir) + k_no_cache);
  EXPECT_THAT(text.out, HasSubstr(fmt::format("\nDists ({})\n", doc.doc["dists"].size())));
  // Each dist's line agrees with the JSON model: its version, its RECORD's rows, its objects.
  for (const auto& d : doc.doc["dists"]) {
    std::size_t objects = 0;
    for (const auto& o : doc.doc["objects"])
      for (const auto& owner : o["owners"]) objects += owner == d["dist"] ? 1 : 0;
    const std::size_t files = d["files"];
    const std::string line =
        fmt::format("\n  {} {}  {} file{}, {} ELF object{}\n", d["name"].get<std::string>(),
                    d["version"].get<std::string>(), files, files == 1 ? "" : "s", objects, objects == 1 ? "" : "s");
    EXPECT_THAT(text.out, HasSubstr(line)) << d.dump().substr(0, 300);
  }
  EXPECT_THAT(text.out, ::testing::Not(HasSubstr("NEEDED libcudnn_ops.so.9")));
  const auto verbose = cudafix("scan -v --color never --venv " + shell_quote(dir) + k_no_cache);
  EXPECT_THAT(verbose.out, HasSubstr("    nvidia/cudnn/lib/libcudnn_adv.so.9 SONAME libcudnn_adv.so.9\n      NEEDED "
                                     "libcudnn_ops.so.9 => nvidia/cudnn/lib/libcudnn_ops.so.9 [runpath of "
                                     "nvidia/cudnn/lib/libcudnn_adv.so.9]\n"));
}

// -q prints the errors only, as pip -q does: no warning, no info footer, no header or hint; the
// exit code is doctor's.
TEST(Doctor, QuietPrintsTheErrorFindingsAloneWithTheSameExitCode) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/demo";
  ASSERT_EQ(
      cudafix("materialize " + shell_quote(test::k_source + "/cli/demo_env.json") + " " + shell_quote(dir)).exit_code,
      0);
  const std::string args = "doctor --color never --venv " + shell_quote(dir) + k_no_cache;
  const auto full = cudafix(args);
  const auto doc = test::cudafix_json("doctor --venv " + shell_quote(dir) + k_no_cache);
  ASSERT_GT(doc.doc["summary"]["errors"].get<int>(), 0) << full.out.substr(0, 2000);
  ASSERT_GT(doc.doc["summary"]["warnings"].get<int>(), 0) << full.out.substr(0, 2000);
  ASSERT_THAT(full.out, HasSubstr("explained findings (info) not shown"));
  const auto quiet = cudafix(args + " -q");
  EXPECT_EQ(quiet.exit_code, full.exit_code);
  EXPECT_EQ(quiet.exit_code, 1);
  std::size_t errors = 0;
  for (const auto line : resolver::split(quiet.out, '\n')) errors += line.starts_with("error[") ? 1 : 0;
  EXPECT_EQ(errors, static_cast<std::size_t>(doc.doc["summary"]["errors"].get<int>())) << quiet.out;
  for (const char* gone : {"warning[", "info[", "not shown", "cudafix doctor ", "see: cudafix explain"})
    EXPECT_THAT(quiet.out, ::testing::Not(HasSubstr(gone))) << gone;
  EXPECT_THAT(quiet.out, HasSubstr("next: cudafix plan remove nvidia-cudnn-cu12"));
}

TEST(Demo, ExampleObjectsAreRealElfThatGlibcLoads) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/demo";
  ASSERT_EQ(cudafix("demo -q " + shell_quote(dir)).exit_code, 0);
  // lib/pythonX.Y is the host python3's version, which the demo links.
  const std::string site = test::site_packages(dir);
  const std::string lib = site + "/nvidia/cu13/lib/libcublas.so.13";
  const auto r = run_shell("LD_TRACE_LOADED_OBJECTS=1 /lib64/ld-linux-x86-64.so.2 " + shell_quote(lib));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("libcublasLt.so.13 => " + site + "/nvidia/cu13/lib/libcublasLt.so.13"));
}

// The demo's environments are venvs `python3 -m venv` made, with pip: README's and
// docs/transactions.md's commands run on them as written, with the venv's own python and pip.
TEST(Demo, ItsVenvsAreRealSoPipChangesThemAndGuardAndSnapshotsUndoWhatPipDid) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/demo";
  const auto made = cudafix("demo --color never " + shell_quote(dir));
  ASSERT_EQ(made.exit_code, 0) << made.out;
  EXPECT_THAT(made.out, HasSubstr("It is a venv made by `python3 -m venv`, with pip "));
  const std::string broken = dir + "-broken";
  for (const char* made_by_venv : {"bin/python", "bin/pip", "bin/activate"})
    EXPECT_TRUE(fs::exists(broken + "/" + made_by_venv)) << made_by_venv;
  const std::string site = test::site_packages(broken);
  const std::string cudnn12 = site + "/nvidia_cudnn_cu12-9.10.2.21.dist-info";
  const std::string libcudnn = site + "/nvidia/cudnn/lib/libcudnn.so.9";
  const std::string in_broken = "cd " + shell_quote(broken) + " && env -u VIRTUAL_ENV ";
  // README's guarded cleanup: refused before pip runs, since it would break torch's cuDNN.
  const auto refused =
      run_shell(in_broken + shell_quote(k_bin) + " guard --venv . -- bin/python -m pip uninstall -y nvidia-cudnn-cu12");
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("it was not run and nothing was changed"));
  EXPECT_TRUE(fs::exists(cudnn12));
  // Run anyway: the venv's own pip uninstalls it for real, and guard undoes what it broke.
  const auto undone = run_shell(in_broken + shell_quote(k_bin) +
                                " guard --allow-break --venv . -- bin/python -m pip uninstall -y nvidia-cudnn-cu12");
  EXPECT_EQ(undone.exit_code, 1) << undone.out;
  EXPECT_THAT(undone.out, HasSubstr("Successfully uninstalled nvidia-cudnn-cu12-9.10.2.21"));
  EXPECT_THAT(undone.out, HasSubstr("undone: its "));
  EXPECT_TRUE(fs::exists(cudnn12));
  EXPECT_TRUE(fs::exists(libcudnn));
  // docs/transactions.md's snapshot, pip (the activated venv's), rollback: what pip deleted is back.
  const auto snap =
      run_shell(in_broken + "bash -c " +
                shell_quote("source bin/activate && PATH=" + shell_quote(fs::path(k_bin).parent_path().string()) +
                            ":$PATH && cudafix snapshot before-cleanup && pip uninstall -y nvidia-cudnn-cu12 && "
                            "test ! -e " +
                            shell_quote(libcudnn) + " && cudafix rollback -y --snapshot before-cleanup"));
  EXPECT_EQ(snap.exit_code, 0) << snap.out;
  EXPECT_THAT(snap.out, HasSubstr("Successfully uninstalled nvidia-cudnn-cu12-9.10.2.21"));
  EXPECT_THAT(snap.out, HasSubstr("restored snapshot 'before-cleanup': 29 files put back"));
  EXPECT_TRUE(fs::exists(cudnn12));
  EXPECT_TRUE(fs::exists(libcudnn));
  // The folder is not empty now: a second demo there refuses, saying how to run it again.
  const auto again = cudafix("demo -q " + shell_quote(dir));
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_THAT(again.out, HasSubstr("rm -rf " + dir + " " + broken));
}

// An interpreter without ensurepip (Debian's python3 without python3-venv; here an ensurepip
// that fails to import, first on PYTHONPATH): the venvs are made --without-pip, the demo says
// so, and its walk still repairs the example.
TEST(Demo, AnInterpreterWithoutEnsurepipGivesVenvsWithoutPipAndTheDemoSaysSo) {
  TempDir tmp;
  test::write_file(tmp.path() + "/no-ensurepip/ensurepip.py", "raise ImportError('no ensurepip here')\n");
  const std::string dir = tmp.path() + "/demo";
  const auto r = run_shell("env -u VIRTUAL_ENV PYTHONPATH=" + shell_quote(tmp.path() + "/no-ensurepip") + " " +
                           shell_quote(k_bin) + " demo --color never " + shell_quote(dir) + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("It is a venv made by `python3 -m venv --without-pip`: "));
  EXPECT_THAT(r.out, HasSubstr("has no ensurepip, so there is no pip in it."));
  EXPECT_THAT(r.out, HasSubstr("nothing to do: " + dir + " needs no step"));
  for (const std::string& venv : {dir, dir + "-broken"}) {
    EXPECT_TRUE(fs::exists(venv + "/bin/python")) << venv;
    EXPECT_TRUE(fs::exists(venv + "/bin/activate")) << venv;
    EXPECT_FALSE(fs::exists(venv + "/bin/pip")) << venv;
  }
  // --json says the same: no pip, and where the broken copy is.
  const auto doc = run_shell("env -u VIRTUAL_ENV PYTHONPATH=" + shell_quote(tmp.path() + "/no-ensurepip") + " " +
                             shell_quote(k_bin) + " demo --json " + shell_quote(tmp.path() + "/j"));
  ASSERT_EQ(doc.exit_code, 0) << doc.out;
  const auto j = json::parse(doc.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << doc.out;
  EXPECT_EQ(j["pip"], "");
  EXPECT_EQ(j["broken_copy"], tmp.path() + "/j-broken");
  EXPECT_EQ(j["repaired"], true);
}

// --- bad input -----------------------------------------------------------------------------

class HostileVenv : public ::testing::Test {
 protected:
  void SetUp() override {
    venv_ = tmp_.path() + "/venv";
    site_ = venv_ + "/lib/python3.12/site-packages";
    fs::create_directories(site_);
    write_file(venv_ + "/pyvenv.cfg", "home = /usr/bin\nversion = 3.12.1\n");
    fs::create_directories(tmp_.path() + "/outside");
    write_file(tmp_.path() + "/outside/secret.so", "not yours");
  }
  void dist(const std::string& name, const std::string& metadata, const std::string& record) {
    write_file(site_ + "/" + name + "-1.0.dist-info/METADATA", metadata);
    write_file(site_ + "/" + name + "-1.0.dist-info/RECORD", record);
  }
  TempDir tmp_;
  std::string venv_;
  std::string site_;
};

TEST_F(HostileVenv, EscapingAndSymlinkedRecordRowsAreReportedAndNeverFollowed) {
  fs::create_symlink(tmp_.path() + "/outside", site_ + "/linked");
  dist("evil", "Name: evil\nVersion: 1.0\n",
       "evil/ok.py,,\n../../../../../../etc/passwd,,\n/etc/shadow,,\nlinked/secret.so,,\nevil/\xff\xfe.py,,\n");
  write_file(site_ + "/evil/ok.py", "");
  write_file(site_ + "/evil/\xff\xfe.py", "");
  const auto before = snapshot(tmp_.path());
  const json j = run_json("scan --venv " + shell_quote(venv_) + k_no_cache);
  std::vector<std::string> messages;
  for (const auto& d : j["diagnostics"]) messages.push_back(d["message"].get<std::string>() + " @" + d["line"].dump());
  EXPECT_THAT(messages, ::testing::Contains(HasSubstr("'../../../../../../etc/passwd' escapes the environment")));
  EXPECT_THAT(messages, ::testing::Contains(HasSubstr("'/etc/shadow' escapes the environment")));
  EXPECT_THAT(messages, ::testing::Contains(HasSubstr("goes through the symlinked folder")));
  // Nothing outside the environment is read as an object, nothing anywhere is written.
  for (const auto& o : j["objects"]) EXPECT_THAT(o["path"].dump(), ::testing::Not(HasSubstr("secret")));
  EXPECT_EQ(snapshot(tmp_.path()), before);
  const json* evil = find_by(j["dists"], "dist", "evil-1.0.dist-info");
  ASSERT_NE(evil, nullptr);
  // A RECORD that is not UTF-8 is one pip cannot read either: the removal is judged unsafe and
  // the document names the file and the byte; the escaping and symlinked rows are never among
  // what is deleted.
  const json plan = run_json("plan remove evil --venv " + shell_quote(venv_) + k_no_cache, 1);
  EXPECT_EQ(plan["safe"], false);
  EXPECT_THAT(plan["refused"].dump(), HasSubstr("evil-1.0.dist-info/RECORD")) << plan.dump();
  EXPECT_THAT(plan["refused"].dump(), HasSubstr("it is not UTF-8 (byte 0xff")) << plan.dump();
  for (const auto& p : plan["pip_would_delete"]) {
    EXPECT_THAT(p.get<std::string>(), ::testing::Not(HasSubstr("passwd")));
    EXPECT_THAT(p.get<std::string>(), ::testing::Not(HasSubstr("shadow")));
    EXPECT_THAT(p.get<std::string>(), ::testing::Not(HasSubstr("secret")));
  }
  EXPECT_EQ(snapshot(tmp_.path()), before) << "plan remove changes nothing";
  // The text output names the escaping rows too, and survives the name that is not UTF-8.
  const auto text = cudafix("scan --color never --venv " + shell_quote(venv_) + k_no_cache);
  EXPECT_EQ(text.exit_code, 0) << text.out;
  EXPECT_THAT(text.out, HasSubstr("escapes the environment"));
  EXPECT_THAT(text.out, ::testing::Not(HasSubstr("\xff\xfe")));
}

TEST_F(HostileVenv, NonUtf8NamesAreReplacedAndMarkedLossy) {
  dist("enc", "Name: enc\nVersion: 1.0\n", "enc/gone-\xff.so,,\n");
  const json j = run_json("scan --venv " + shell_quote(venv_) + k_no_cache);
  const json* d = find_by(j["dists"], "dist", "enc-1.0.dist-info");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ((*d)["missing"][0], "enc/gone-\xEF\xBF\xBD.so");
  EXPECT_EQ((*d)["lossy"], true);
}

TEST_F(HostileVenv, MalformedMetadataRecordAndElfAreDiagnosedAndTheScanGoesOn) {
  dist("bad", "this is not a header\n", "ok.py,sha256=%%%,12\n\"unterminated,,\n");
  write_file(site_ + "/good-1.0.dist-info/METADATA", "Name: good\nVersion: 1.0\n");
  write_file(site_ + "/good-1.0.dist-info/RECORD", "libgood.so,,\n");
  resolver::write_shared_object(site_ + "/libgood.so", {});
  write_file(site_ + "/libtrunc.so", std::string("\x7f"
                                                 "ELF\x02\x01\x01",
                                                 7));
  // A dynamic segment that points past the end of the file.
  resolver::ElfSpec spec;
  spec.soname = "libbig.so";
  std::string bytes = resolver::make_shared_object(spec);
  const auto phoff = 64 + 56;  // second program header: PT_DYNAMIC
  const std::uint64_t far = 1u << 30;
  std::memcpy(bytes.data() + phoff + 8, &far, sizeof far);
  write_file(site_ + "/libbig.so", bytes);

  const json j = run_json("scan --venv " + shell_quote(venv_) + k_no_cache);
  std::map<std::string, std::vector<json>> by_file;
  for (const auto& d : j["diagnostics"])
    by_file[fs::path(d["file"].get<std::string>()).filename().string()].push_back(d);
  ASSERT_TRUE(by_file.count("METADATA"));
  const auto& md = by_file["METADATA"];
  const auto garbage = std::find_if(md.begin(), md.end(), [](const json& d) { return d["line"] == 1; });
  ASSERT_NE(garbage, md.end());
  EXPECT_THAT((*garbage)["message"].get<std::string>(), HasSubstr("not a header line"));
  EXPECT_TRUE(std::any_of(md.begin(), md.end(), [](const json& d) { return d["message"] == "no Name header"; }));
  ASSERT_TRUE(by_file.count("RECORD"));
  EXPECT_THAT(by_file["RECORD"][0]["message"].get<std::string>(), HasSubstr("malformed hash"));
  EXPECT_THAT(by_file["RECORD"][1]["message"].get<std::string>(), HasSubstr("unterminated"));
  EXPECT_EQ(by_file["RECORD"][1]["line"], 2);
  ASSERT_TRUE(by_file.count("libtrunc.so"));
  ASSERT_TRUE(by_file.count("libbig.so"));
  EXPECT_THAT(by_file["libbig.so"][0]["message"].get<std::string>(), HasSubstr("outside the file"));
  EXPECT_EQ(by_file["libbig.so"][0]["offset"], far);
  // The good dist and object are still there.
  EXPECT_NE(find_by(j["dists"], "dist", "good-1.0.dist-info"), nullptr);
  EXPECT_NE(find_by(j["objects"], "path", "libgood.so"), nullptr);
}

// --- exit codes and errors -------------------------------------------------------------------

TEST(Errors, CouldNotRunExitsTwoWithAPreciseMessage) {
  TempDir tmp;
  auto r = cudafix("scan --venv " + shell_quote(tmp.path()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("cudafix: error: " + tmp.path() + " is not a Python environment"));
  r = cudafix("scan --venv /nonexistent/venv");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("cudafix: error: --venv: /nonexistent/venv does not exist\n"));
  r = cudafix("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("cudafix: error: unknown command 'frobnicate'; the commands are: scan, why, doctor"));
  r = cudafix("scan --color sometimes");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("cudafix: error: --color: 'sometimes' is not one of auto, always, never\n"));
  r = cudafix("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("why"));
}

TEST(Errors, JsonErrorsAreJsonToo) {
  TempDir tmp;
  const auto r = run_shell(shell_quote(k_bin) + " scan --json --venv " + shell_quote(tmp.path()) + " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 2);
  const auto j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["schema"], 1);
  EXPECT_THAT(j["error"].get<std::string>(), HasSubstr("is not a Python environment"));
}

TEST(Errors, ABadRulesFileNamesFileAndLine) {
  TempDir tmp;
  const std::string rules = tmp.path() + "/rules.toml";
  std::ofstream(rules) << "[driver.x]\nwhy = \"x\"\nsonames = [\"a\",\n";
  const std::string demo = tmp.path() + "/d";
  ASSERT_EQ(cudafix("demo -q " + shell_quote(demo)).exit_code, 0);
  const auto r = cudafix("scan --venv " + shell_quote(demo) + " --rules " + shell_quote(rules));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr(rules + ":3:"));
}

TEST(Rules, UserRulesExtendTheKnowledge) {
  TempDir tmp;
  const std::string demo = tmp.path() + "/d";
  ASSERT_EQ(cudafix("demo -q " + shell_quote(demo)).exit_code, 0);
  // Without knowing libfabric is optional, its NEEDED is unexplained; a venv's cudafix.toml
  // that drops the group makes it so.
  const auto baseline = run_json("scan --venv " + shell_quote(demo) + k_no_cache);
  const auto kind_of_libfabric = [&] {
    // The demo leaves its example repaired: only explained and warned-of NEEDED are left.
    const json d = run_json("doctor --select unresolved-library --venv " + shell_quote(demo) + k_no_cache, 0);
    for (const auto& f : d["findings"])
      if (f["sonames"] == json({"libfabric.so.1"}))
        return std::make_pair(f["message"].get<std::string>(), f["severity"]);
    return std::make_pair(std::string("(no finding for libfabric.so.1)"), json());
  };
  const auto before = kind_of_libfabric();
  EXPECT_THAT(before.first, HasSubstr("(optional-library)"));
  EXPECT_EQ(before.second, "info");
  std::ofstream(demo + "/cudafix.toml") << "[optional.libfabric]\nwhy = \"x\"\nsonames = []\n";
  const json j = run_json("scan --venv " + shell_quote(demo) + k_no_cache);
  // Exactly one more NEEDED is unexplained: nvshmem's libfabric transport's libfabric.so.1.
  EXPECT_EQ(j["summary"]["unexplained_needed"].get<int>(), baseline["summary"]["unexplained_needed"].get<int>() + 1);
  const auto after = kind_of_libfabric();
  EXPECT_THAT(after.first, HasSubstr("(unexplained)"));
  EXPECT_EQ(after.second, "warning");
}

}  // namespace
}  // namespace cudafix

namespace cudafix {
namespace {

TEST(LoaderOptions, LdLibraryPathOptionIsTheOneTheModelUses) {
  // libneeds.so finds libonly.so only through LD_LIBRARY_PATH: the option decides, not the
  // environment cudafix itself runs in.
  TempDir tmp;
  const std::string site = tmp.path() + "/prefix/lib/python3.12/site-packages";
  fs::create_directories(site + "/pkg-1.0.dist-info");
  std::ofstream(site + "/pkg-1.0.dist-info/METADATA") << "Name: pkg\nVersion: 1.0\n";
  std::ofstream(site + "/pkg-1.0.dist-info/RECORD") << "pkg/libneeds.so,,\n";
  fs::create_directories(site + "/pkg");
  fs::copy_file(k_fixtures + "/ld_library_path/libneeds.so", site + "/pkg/libneeds.so");
  const std::string only = k_fixtures + "/ld_library_path/only";
  const auto without =
      cudafix("why libonly.so --color never --venv " + shell_quote(site) + " --ld-library-path ''" + k_no_cache);
  EXPECT_EQ(without.exit_code, 1) << without.out;
  EXPECT_THAT(without.out, HasSubstr("libonly.so => not found"));
  EXPECT_THAT(without.out, ::testing::Not(HasSubstr(only)));
  const auto with = run_shell("env -u VIRTUAL_ENV LD_LIBRARY_PATH=/nonexistent " + shell_quote(k_bin) +
                              " why libonly.so --color never --venv " + shell_quote(site) + " --ld-library-path " +
                              shell_quote(only) + k_no_cache);
  EXPECT_EQ(with.exit_code, 0) << with.out;
  EXPECT_THAT(with.out, HasSubstr("[LD_LIBRARY_PATH]"));
  // By default the caller's LD_LIBRARY_PATH is the one modelled.
  const auto inherited =
      run_shell("env -u VIRTUAL_ENV LD_LIBRARY_PATH=" + shell_quote(only) + " " + shell_quote(k_bin) +
                " why libonly.so --color never --venv " + shell_quote(site) + k_no_cache);
  EXPECT_EQ(inherited.exit_code, 0) << inherited.out;
  EXPECT_THAT(inherited.out, HasSubstr("libonly.so => " + only + "/libonly.so [LD_LIBRARY_PATH]"));
  // And the option overrides what the caller has.
  const auto overridden =
      run_shell("env -u VIRTUAL_ENV LD_LIBRARY_PATH=" + shell_quote(only) + " " + shell_quote(k_bin) +
                " why libonly.so --color never --ld-library-path '' --venv " + shell_quote(site) + k_no_cache);
  EXPECT_EQ(overridden.exit_code, 1) << overridden.out;
  EXPECT_THAT(overridden.out, HasSubstr("libonly.so => not found"));
}

}  // namespace
}  // namespace cudafix
