// End-to-end: `cudafix sync LOCK` (issue 56) on real venvs that pip made from wheels the tests
// build (tests/e2e/make_wheel.py), with real ELF libraries from the compiled fixtures. A lock of
// a healthy venv, the venv broken with pip, `sync` brings it back file for file; a lock whose two
// wheels write one path, one whose hash was edited, one the venv's interpreter cannot take are
// refused with the venv untouched; uv's own lock shape is read and synced; --dry-run writes
// nothing; a step whose GPU verification fails is undone.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/cudafix_run.hpp"
#include "tests/support/process.hpp"

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;

const std::string k_multi = test::k_fixtures + "/verify/torch13multi";
const std::string k_fake_cuda = test::k_fixtures + "/verify/cuda/ok";

std::string sha256_of(const std::string& file) {
  return run_shell("sha256sum " + shell_quote(file) + " | cut -d' ' -f1 | tr -d '\\n'").out;
}

using test::write_file;

std::string python_file(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  write_file(path, text);
  return path;
}

// The wheels of the healthy venv and those pip breaks it with, built once per process.
struct Wheels {
  TempDir dir;
  std::string w = dir.path() + "/wheels";
  std::string alpha1, alpha2, beta, cublas, gamma, nvshmem12, nvshmem13;
  Wheels() {
    fs::create_directories(w);
    const std::string src = dir.path();
    alpha1 = test::make_wheel(w, "alpha 1.0 alpha/__init__.py=" + python_file(src, "a1.py", "VERSION = 1\n") +
                                     " alpha/lib/libnccl.so.2=" + k_multi + "/nvidia/nccl/lib/libnccl.so.2");
    alpha2 = test::make_wheel(w, "alpha 2.0 alpha/__init__.py=" + python_file(src, "a2.py", "VERSION = 2\n"));
    beta = test::make_wheel(
        w, "beta 1.0 beta/__init__.py=" + python_file(src, "b.py", "B = 1\n") + " --requires 'alpha>=1'");
    cublas = test::make_wheel(w, "nvidia-cublas 13.1.0.3 nvidia/cu13/lib/libcublas.so.13=" + k_multi +
                                     "/nvidia/cu13/lib/libcublas.so.13 nvidia/cu13/lib/libcublasLt.so.13=" + k_multi +
                                     "/nvidia/cu13/lib/libcublasLt.so.13");
    // Another dist writing cuBLAS's library with other bytes, as pip lets it.
    gamma =
        test::make_wheel(w, "gamma 1.0 nvidia/cu13/lib/libcublas.so.13=" + k_multi + "/nvidia/cu13/lib/libnvrtc.so.13");
    // The cu12 and cu13 builds of one library at one path: NVIDIA's nvshmem case.
    nvshmem12 = test::make_wheel(w, "nvidia-nvshmem-cu12 3.3.9 nvidia/nvshmem/lib/libnvshmem_host.so.3=" + k_multi +
                                        "/nvidia/cu13/lib/libcudart.so.13");
    nvshmem13 = test::make_wheel(w, "nvidia-nvshmem-cu13 3.3.9 nvidia/nvshmem/lib/libnvshmem_host.so.3=" + k_multi +
                                        "/nvidia/cu13/lib/libnvrtc.so.13");
  }
};
const Wheels& wheels() {
  static const Wheels made;
  return made;
}

// One [[packages]] entry of a lock the test writes.
std::string package(const std::string& name, const std::string& version, const std::string& wheel_line = "") {
  std::string out = fmt::format("\n[[packages]]\nname = \"{}\"\nversion = \"{}\"\n", name, version);
  if (!wheel_line.empty()) out += "wheels = [" + wheel_line + "]\n";
  return out;
}

std::string by_url(const std::string& file, bool pinned = true) {
  return fmt::format("{{ url = \"file://{}\", hashes = {{ {} }} }}", file,
                     pinned ? "sha256 = \"" + sha256_of(file) + "\"" : "");
}

// The version pip and setuptools have in a fresh venv: the lock keeps them, without a source.
std::string seed_packages(const std::string& venv) {
  std::string out;
  for (const auto& e : fs::directory_iterator(test::site_packages(venv))) {
    const std::string n = e.path().filename().string();
    for (const std::string seed : {"pip-", "setuptools-"})
      if (n.starts_with(seed) && n.ends_with(".dist-info"))
        out += package(seed.substr(0, seed.size() - 1), n.substr(seed.size(), n.size() - seed.size() - 10));
  }
  return out;
}

// The lock of the healthy venv: alpha by a path relative to the lock's folder, beta by a file://
// URL with its hash, cuBLAS by a URL with an empty hashes table (as uv writes --find-links wheels).
std::string healthy_lock(const std::string& dir, const std::string& venv) {
  const auto& w = wheels();
  fs::create_directories(dir + "/wheels");
  fs::copy_file(w.alpha1, dir + "/wheels/" + fs::path(w.alpha1).filename().string(),
                fs::copy_options::overwrite_existing);
  const std::string alpha = fmt::format("{{ path = \"wheels/{}\", hashes = {{ sha256 = \"{}\" }} }}",
                                        fs::path(w.alpha1).filename().string(), sha256_of(w.alpha1));
  return "lock-version = \"1.0\"\ncreated-by = \"cudafix tests\"\n" + package("alpha", "1.0", alpha) +
         package("beta", "1.0", by_url(w.beta)) + package("nvidia-cublas", "13.1.0.3", by_url(w.cublas, false)) +
         seed_packages(venv);
}

std::string healthy_venv(const TempDir& t) {
  const std::string venv = t.path() + "/venv";
  test::make_venv(venv, {wheels().alpha1, wheels().beta, wheels().cublas});
  return venv;
}

// Every file's hash and the dist-info folders, but what an installer writes of its own (RECORD,
// INSTALLER, REQUESTED, direct_url.json) and the bytecode it compiles: what sync must restore.
std::string installed_state(const std::string& venv) {
  return run_shell("cd " + shell_quote(test::site_packages(venv)) +
                   " && find . -type f ! -path '*/__pycache__/*' ! -path '*.dist-info/RECORD' ! -path "
                   "'*.dist-info/INSTALLER' ! -path '*.dist-info/REQUESTED' ! -path '*.dist-info/direct_url.json' "
                   "-print0 | sort -z | xargs -0 sha256sum && ls -d *.dist-info")
      .out;
}

test::JsonRun sync(const TempDir& t, const std::string& lock, const std::string& venv, const std::string& more = "") {
  return test::cudafix_json(
      "sync " + shell_quote(lock) + " --venv " + shell_quote(venv) + test::k_no_cache + " " + more,
      "CUDAFIX_CACHE_DIR=" + shell_quote(t.path() + "/cache"));
}

std::string error_of(const test::JsonRun& r) { return r.doc.value("error", std::string()); }

// pip uninstalls one dist, installs another version of a second, and a third dist's wheel
// writes over cuBLAS's library; sync puts back the healthy venv file for file, pip check passes.
TEST(Sync, AVenvBrokenByPipIsBroughtBackToItsLockFileForFile) {
  TempDir t;
  const std::string venv = healthy_venv(t);
  const std::string healthy = installed_state(venv);
  const std::string lock = t.path() + "/pylock.toml";
  write_file(lock, healthy_lock(t.path(), venv));
  ASSERT_EQ(test::venv_pip(venv, "uninstall -y -q beta").exit_code, 0);
  ASSERT_EQ(test::venv_pip(venv, "install -q --no-index --no-deps " + shell_quote(wheels().alpha2)).exit_code, 0);
  ASSERT_EQ(test::venv_pip(venv, "install -q --no-index --no-deps " + shell_quote(wheels().gamma)).exit_code, 0);
  ASSERT_NE(installed_state(venv), healthy);
  // Beside the venv, what sync must leave as it is: the lock's own wheels folder, and a folder
  // shaped as a site-packages' (a library of the same name, a dist-info of a locked dist).
  const std::string outside = t.path() + "/outside";
  write_file(outside + "/nvidia/cu13/lib/libcublas.so.13", "canary");
  write_file(outside + "/beta-1.0.dist-info/RECORD", "canary");
  const std::string beside = test::tree_of(outside) + test::tree_of(t.path() + "/wheels");

  const auto r = sync(t, lock, venv, "-y --no-verify");
  ASSERT_EQ(r.exit_code, 0) << r.out.substr(0, 4000);
  EXPECT_EQ(test::tree_of(outside) + test::tree_of(t.path() + "/wheels"), beside);
  std::set<std::string> steps(r.doc["steps"].begin(), r.doc["steps"].end());
  EXPECT_EQ(steps, (std::set<std::string>{"install alpha 1.0", "install beta 1.0", "reinstall nvidia-cublas 13.1.0.3",
                                          "remove gamma 1.0"}))
      << r.doc["steps"].dump();
  // cuBLAS's wheel, given with an empty hashes table, is said unpinned; the others were checked.
  ASSERT_EQ(r.doc["unpinned"].size(), 1u) << r.doc["unpinned"].dump();
  EXPECT_THAT(r.doc["unpinned"][0].get<std::string>(), HasSubstr("nvidia-cublas 13.1.0.3"));
  const std::string now = installed_state(venv);
  EXPECT_EQ(now, healthy) << test::tree_diff(healthy, now);
  const auto check = test::venv_pip(venv, "check");
  EXPECT_EQ(check.exit_code, 0) << check.out;
  // A second sync finds nothing to do.
  const auto again = sync(t, lock, venv, "-y --no-verify");
  EXPECT_EQ(again.exit_code, 0) << again.out.substr(0, 2000);
  EXPECT_EQ(again.doc["changed"], false);
}

// A lock `cudafix lock` wrote of the healthy venv (each wheel by the file:// URL pip's
// direct_url.json names, with its sha256), the venv broken by pip: sync reads it and brings the
// venv back file for file.
TEST(Sync, ALockCudafixWroteIsSyncedBack) {
  TempDir t;
  const std::string venv = healthy_venv(t);
  const std::string healthy = installed_state(venv);
  const std::string lock = t.path() + "/pylock.toml";
  const auto locked =
      test::cudafix_json("lock -o " + shell_quote(lock) + " --venv " + shell_quote(venv) + test::k_no_cache);
  ASSERT_EQ(locked.exit_code, 0) << locked.out.substr(0, 2000);
  ASSERT_EQ(test::venv_pip(venv, "uninstall -y -q beta").exit_code, 0);
  ASSERT_EQ(test::venv_pip(venv, "install -q --no-index --no-deps " + shell_quote(wheels().alpha2)).exit_code, 0);
  const auto r = sync(t, lock, venv, "-y --no-verify");
  ASSERT_EQ(r.exit_code, 0) << r.out.substr(0, 4000);
  EXPECT_EQ(std::set<std::string>(r.doc["steps"].begin(), r.doc["steps"].end()),
            (std::set<std::string>{"install alpha 1.0", "install beta 1.0"}));
  EXPECT_EQ(r.doc["unpinned"].size(), 0u) << r.doc["unpinned"].dump();
  const std::string now = installed_state(venv);
  EXPECT_EQ(now, healthy) << test::tree_diff(healthy, now);
  EXPECT_EQ(test::venv_pip(venv, "check").exit_code, 0);
}

// The cu12 and cu13 builds of one library in one lock: refused before any write, naming both
// wheels and the path.
TEST(Sync, ALockWhoseTwoWheelsWriteOnePathIsRefusedUntouched) {
  TempDir t;
  const std::string venv = healthy_venv(t);
  const std::string lock = t.path() + "/pylock.toml";
  write_file(lock, healthy_lock(t.path(), venv) + package("nvidia-nvshmem-cu12", "3.3.9", by_url(wheels().nvshmem12)) +
                       package("nvidia-nvshmem-cu13", "3.3.9", by_url(wheels().nvshmem13)));
  const std::string before = test::tree_of(venv);
  const auto r = sync(t, lock, venv, "-y --no-verify");
  EXPECT_EQ(r.exit_code, 1) << r.out.substr(0, 3000);
  EXPECT_THAT(error_of(r), HasSubstr(fs::path(wheels().nvshmem12).filename().string()));
  EXPECT_THAT(error_of(r), HasSubstr(fs::path(wheels().nvshmem13).filename().string()));
  EXPECT_THAT(error_of(r), HasSubstr("nvidia/nvshmem/lib/libnvshmem_host.so.3"));
  const std::string now = test::tree_of(venv);
  EXPECT_EQ(now, before) << test::tree_diff(before, now);
}

// The same bytes at one path twice (the `nvidia/__init__.py` every cu12 wheel ships) are no
// conflict: both wheels are installed.
TEST(Sync, TwoWheelsWritingOnePathWithTheSameBytesAreInstalled) {
  TempDir t;
  const std::string venv = healthy_venv(t);
  const std::string init = python_file(t.path(), "init.py", "");
  const std::string one = test::make_wheel(t.path(), "nvidia-one 1.0 nvidia/__init__.py=" + init +
                                                         " nvidia/one/lib/libcusparseLt.so.0=" + k_multi +
                                                         "/nvidia/cusparselt/lib/libcusparseLt.so.0");
  const std::string two =
      test::make_wheel(t.path(), "nvidia-two 1.0 nvidia/__init__.py=" + init +
                                     " nvidia/two/lib/libnccl.so.2=" + k_multi + "/nvidia/nccl/lib/libnccl.so.2");
  const std::string lock = t.path() + "/pylock.toml";
  write_file(lock, healthy_lock(t.path(), venv) + package("nvidia-one", "1.0", by_url(one)) +
                       package("nvidia-two", "1.0", by_url(two)));
  const auto r = sync(t, lock, venv, "-y --no-verify");
  EXPECT_EQ(r.exit_code, 0) << r.out.substr(0, 3000);
  EXPECT_EQ(r.doc["steps"], json({"install nvidia-one 1.0", "install nvidia-two 1.0"}));
}

// A wheel whose library NEEDs one found nowhere, once installed: refused before any write,
// naming the consumer and the soname.
TEST(Sync, ALockLeavingALibraryResolvingNowhereIsRefusedUntouched) {
  TempDir t;
  const std::string venv = healthy_venv(t);
  const std::string graph = test::make_wheel(
      t.path(), "graph 1.0 graph/lib/libcudnn_graph.so.9=" + k_multi + "/graph_needs_nowhere/libcudnn_graph.so.9");
  const std::string lock = t.path() + "/pylock.toml";
  write_file(lock, healthy_lock(t.path(), venv) + package("graph", "1.0", by_url(graph)));
  const std::string before = test::tree_of(venv);
  const auto r = sync(t, lock, venv, "-y --no-verify");
  EXPECT_EQ(r.exit_code, 1) << r.out.substr(0, 3000);
  EXPECT_THAT(error_of(r), HasSubstr("graph/lib/libcudnn_graph.so.9 NEEDs libnowhere.so.1"));
  const std::string now = test::tree_of(venv);
  EXPECT_EQ(now, before) << test::tree_diff(before, now);
}

// A package whose marker is false here is not wanted (installed, it is removed); one with only
// an sdist is refused by name, since cudafix installs wheels only.
TEST(Sync, MarkersChooseThePackagesAndAnSdistIsRefusedByName) {
  TempDir t;
  const std::string venv = healthy_venv(t);
  std::string text = healthy_lock(t.path(), venv);
  const std::string beta = "name = \"beta\"\n";
  text.insert(text.find(beta) + beta.size(), "marker = \"sys_platform == 'win32'\"\n");
  const std::string lock = t.path() + "/pylock.toml";
  write_file(lock, text +
                       "\n[[packages]]\nname = \"delta\"\nversion = \"1.0\"\nsdist = { url = "
                       "\"https://example.invalid/delta-1.0.tar.gz\", hashes = { sha256 = \"" +
                       std::string(64, 'b') + "\" } }\n");
  const std::string before = test::tree_of(venv);
  const auto refused = sync(t, lock, venv, "-y --no-verify");
  EXPECT_EQ(refused.exit_code, 1) << refused.out.substr(0, 3000);
  EXPECT_THAT(error_of(refused), HasSubstr("delta 1.0 has only an sdist; cudafix installs wheels only"));
  EXPECT_EQ(test::tree_of(venv), before);
  write_file(lock, text);
  const auto r = sync(t, lock, venv, "-y --no-verify");
  EXPECT_EQ(r.exit_code, 0) << r.out.substr(0, 3000);
  EXPECT_EQ(r.doc["steps"], json({"remove beta 1.0"}));
}

// A lock whose hash was edited by hand: refused, naming the package, the wheel and both hashes.
TEST(Sync, ALockWithAWrongHashIsRefusedUntouched) {
  TempDir t;
  const std::string venv = healthy_venv(t);
  std::string text = healthy_lock(t.path(), venv);
  const std::string right = sha256_of(wheels().alpha1);
  const std::string wrong = std::string(64, 'a');
  text.replace(text.find(right), right.size(), wrong);
  const std::string lock = t.path() + "/pylock.toml";
  write_file(lock, text);
  ASSERT_EQ(test::venv_pip(venv, "uninstall -y -q alpha").exit_code, 0);
  const std::string before = test::tree_of(venv);
  const auto r = sync(t, lock, venv, "-y --no-verify");
  EXPECT_EQ(r.exit_code, 1) << r.out.substr(0, 3000);
  EXPECT_THAT(error_of(r), HasSubstr("alpha 1.0"));
  EXPECT_THAT(error_of(r), HasSubstr(fs::path(wheels().alpha1).filename().string()));
  EXPECT_THAT(error_of(r), HasSubstr(right));
  EXPECT_THAT(error_of(r), HasSubstr(wrong));
  const std::string now = test::tree_of(venv);
  EXPECT_EQ(now, before) << test::tree_diff(before, now);
}

// A wheel's `path` is opened beneath the lock's folder only: a `..` or a symlink leading out of
// it is not followed, even to the right wheel, and with no other source the sync cannot run;
// with --find-links holding it, it comes from there.
TEST(Sync, AWheelPathLeadingOutOfTheLocksFolderIsNotOpened) {
  TempDir t;
  const std::string venv = healthy_venv(t);
  ASSERT_EQ(test::venv_pip(venv, "uninstall -y -q alpha").exit_code, 0);
  const std::string name = fs::path(wheels().alpha1).filename().string();
  const std::string folder = t.path() + "/locks";
  fs::create_directories(folder);
  fs::create_directory_symlink(fs::path(wheels().alpha1).parent_path(), folder + "/link");
  const std::string before = test::tree_of(venv);
  for (const std::string& path : {"../wheels-elsewhere/" + name, "link/" + name}) {
    fs::create_directories(t.path() + "/wheels-elsewhere");
    fs::copy_file(wheels().alpha1, t.path() + "/wheels-elsewhere/" + name, fs::copy_options::overwrite_existing);
    const std::string lock = folder + "/pylock.toml";
    write_file(lock, "lock-version = \"1.0\"\ncreated-by = \"t\"\n" + seed_packages(venv) +
                         package("alpha", "1.0",
                                 fmt::format("{{ path = \"{}\", hashes = {{ sha256 = \"{}\" }} }}", path,
                                             sha256_of(wheels().alpha1))) +
                         package("beta", "1.0") + package("nvidia-cublas", "13.1.0.3"));
    const auto r = sync(t, lock, venv, "-y --no-verify");
    EXPECT_EQ(r.exit_code, 2) << path << ": " << r.out.substr(0, 3000);
    EXPECT_THAT(r.out, HasSubstr("alpha 1.0")) << path;
    const std::string now = test::tree_of(venv);
    EXPECT_EQ(now, before) << path << ": " << test::tree_diff(before, now);
  }
  // The same wheel in a --find-links folder is taken by name and version, its hash the lock's.
  const std::string links = t.path() + "/wheels-elsewhere";
  const auto r = sync(t, folder + "/pylock.toml", venv, "-y --no-verify --find-links " + shell_quote(links));
  EXPECT_EQ(r.exit_code, 0) << r.out.substr(0, 3000);
  EXPECT_EQ(r.doc["steps"], json({"install alpha 1.0"}));
  EXPECT_EQ(r.doc["fetched"], json({"alpha 1.0 from " + links}));
}

// A lock's https-style source: alpha by an http:// URL (a wrong hash refused naming both, the
// right one installed), beta with no wheel in the lock, found on the index by name and version
// and said unpinned. tests/e2e/index_server.py serves the wheels, /files/ and /simple/.
TEST(Sync, WheelsComeOverHttpAndFromTheIndexByNameAndVersion) {
  TempDir t;
  const std::string venv = healthy_venv(t);
  ASSERT_EQ(test::venv_pip(venv, "uninstall -y -q alpha beta").exit_code, 0);
  const std::string served = t.path() + "/served";
  fs::create_directories(served);
  for (const auto& w : {wheels().alpha1, wheels().beta})
    fs::copy_file(w, served + "/" + fs::path(w).filename().string());
  const auto started = run_shell(test::k_python + " " + shell_quote(test::k_source + "/tests/e2e/index_server.py") +
                                 " " + shell_quote(served) + " " + shell_quote(t.path() + "/log") + " > " +
                                 shell_quote(t.path() + "/port") + " 2>/dev/null & echo $!");
  struct Stopped {  // the server killed whichever way the test ends
    int pid;
    ~Stopped() { ::kill(pid, SIGKILL); }
  } server{std::stoi(started.out)};
  std::string port;
  for (int i = 0; i < 100 && port.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    port = run_shell("cat " + shell_quote(t.path() + "/port") + " | tr -d '\\n'").out;
  }
  ASSERT_FALSE(port.empty());
  const std::string url = "http://127.0.0.1:" + port;
  const std::string alpha = fs::path(wheels().alpha1).filename().string();
  const auto lock_with = [&](const std::string& sha) {
    const std::string lock = t.path() + "/pylock.toml";
    write_file(
        lock, "lock-version = \"1.0\"\ncreated-by = \"t\"\n" + seed_packages(venv) +
                  package("alpha", "1.0",
                          fmt::format("{{ url = \"{}/files/{}\", hashes = {{ sha256 = \"{}\" }} }}", url, alpha, sha)) +
                  package("beta", "1.0") + package("nvidia-cublas", "13.1.0.3"));
    return lock;
  };
  const std::string before = test::tree_of(venv);
  const std::string right = sha256_of(wheels().alpha1), wrong = std::string(64, 'c');
  // --offline fetches nothing over the network: the wheels are in no cache yet.
  const auto offline = sync(t, lock_with(right), venv, "-y --no-verify --offline");
  EXPECT_EQ(offline.exit_code, 2) << offline.out.substr(0, 3000);
  EXPECT_THAT(offline.out, HasSubstr("--offline forbids downloading it")) << offline.out.substr(0, 3000);
  EXPECT_EQ(test::tree_of(venv), before);
  const auto refused = sync(t, lock_with(wrong), venv, "-y --no-verify --index-url " + url + "/simple");
  EXPECT_EQ(refused.exit_code, 1) << refused.out.substr(0, 3000);
  EXPECT_THAT(error_of(refused), HasSubstr("alpha 1.0"));
  EXPECT_THAT(error_of(refused), HasSubstr(wrong));
  EXPECT_THAT(error_of(refused), HasSubstr(right));
  EXPECT_EQ(test::tree_of(venv), before);
  const auto r = sync(t, lock_with(right), venv, "-y --no-verify --index-url " + url + "/simple");
  ASSERT_EQ(r.exit_code, 0) << r.out.substr(0, 3000);
  EXPECT_EQ(std::set<std::string>(r.doc["steps"].begin(), r.doc["steps"].end()),
            (std::set<std::string>{"install alpha 1.0", "install beta 1.0"}));
  ASSERT_EQ(r.doc["unpinned"].size(), 1u) << r.doc["unpinned"].dump();
  EXPECT_THAT(r.doc["unpinned"][0].get<std::string>(), HasSubstr("beta 1.0"));
  EXPECT_EQ(test::venv_pip(venv, "check").exit_code, 0);
}

// uv 0.11.15's own lock (tests/e2e/uv_pylock_findlinks.toml: file:// URLs, empty hashes tables),
// pointed at wheels of the same names: synced, every wheel said unpinned; --require-hashes
// refuses it; and the requires-python it gives is checked.
TEST(Sync, ALockWrittenByUvIsSyncedAndItsUnpinnedWheelsSaid) {
  TempDir t;
  const std::string w = t.path() + "/w";
  fs::create_directories(w);
  const std::string empty = python_file(t.path(), "empty.py", "");
  test::make_wheel(w, "filelock 3.32.5 filelock/__init__.py=" + empty + " --tag py3-none-any");
  test::make_wheel(w, "mpmath 1.3.0 mpmath/__init__.py=" + empty + " --tag py3-none-any");
  test::make_wheel(w, "nvidia-nvtx 13.0.85 nvidia/cu13/lib/libnvToolsExt.so.1=" + k_multi +
                          "/nvidia/cu13/lib/libcudart.so.13 --tag py3-none-manylinux1_x86_64.manylinux_2_5_x86_64");
  test::make_wheel(w, "typing_extensions 4.16.0 typing_extensions.py=" + empty + " --tag py3-none-any");
  std::ifstream in(test::k_source + "/tests/e2e/uv_pylock_findlinks.toml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (std::size_t at; (at = text.find("file:///tmp/w/")) != std::string::npos;)
    text.replace(at, 14, "file://" + w + "/");
  const std::string lock = t.path() + "/pylock.toml";
  write_file(lock, text);
  const std::string venv = t.path() + "/venv";
  test::make_venv(venv, {});

  // This interpreter (3.11 on the build machine) is older than uv's venv's: said, untouched.
  const std::string before = test::tree_of(venv);
  const auto old_python = sync(t, lock, venv, "-y --no-verify");
  if (old_python.exit_code == 1) {
    EXPECT_THAT(error_of(old_python), HasSubstr("requires-python is '>=3.12.3'"));
    EXPECT_EQ(test::tree_of(venv), before);
  }
  text.replace(text.find(">=3.12.3"), 8, ">=3.8");
  write_file(lock, text);
  const auto hashes = sync(t, lock, venv, "-y --no-verify --require-hashes");
  EXPECT_EQ(hashes.exit_code, 1) << hashes.out.substr(0, 2000);
  EXPECT_THAT(error_of(hashes), HasSubstr("--require-hashes"));
  EXPECT_EQ(test::tree_of(venv), before);

  const auto r = sync(t, lock, venv, "-y --no-verify");
  ASSERT_EQ(r.exit_code, 0) << r.out.substr(0, 4000);
  EXPECT_EQ(r.doc["lock"], lock);
  EXPECT_EQ(r.doc["unpinned"].size(), 4u) << r.doc["unpinned"].dump();
  // Exactly the lock: pip and setuptools, which it does not hold, are gone, as uv pip sync does.
  const std::string infos = run_shell("cd " + shell_quote(test::site_packages(venv)) + " && ls -d *.dist-info").out;
  EXPECT_EQ(infos,
            "filelock-3.32.5.dist-info\nmpmath-1.3.0.dist-info\nnvidia_nvtx-13.0.85.dist-info\n"
            "typing_extensions-4.16.0.dist-info\n");
  EXPECT_EQ(
      run_shell(shell_quote(venv + "/bin/python3") + " -c 'import filelock, mpmath, typing_extensions'").exit_code, 0);
}

// --dry-run plans, fetches and checks every wheel, and writes nothing in the venv.
TEST(Sync, ADryRunWritesNothing) {
  TempDir t;
  const std::string venv = healthy_venv(t);
  const std::string lock = t.path() + "/pylock.toml";
  write_file(lock, healthy_lock(t.path(), venv));
  ASSERT_EQ(test::venv_pip(venv, "uninstall -y -q beta alpha").exit_code, 0);
  const std::string before = test::tree_of(venv);
  const auto r = sync(t, lock, venv, "--dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.out.substr(0, 3000);
  EXPECT_EQ(r.doc["dry_run"], true);
  EXPECT_EQ(r.doc["changed"], false);
  EXPECT_EQ(r.doc["plan"]["steps"].size(), 2u) << r.doc["plan"].dump(1).substr(0, 2000);
  const std::string now = test::tree_of(venv);
  EXPECT_EQ(now, before) << test::tree_diff(before, now);
}

// A lock that brings a cuDNN wheel holding another release (cuDNN 9.14's dispatcher, named
// 9.19.0.56) into a torch-like venv: the step is verified on the fake driver, fails, and every
// change is undone.
TEST(Sync, AStepWhoseVerificationFailsIsUndone) {
  TempDir t;
  const std::string w = t.path() + "/w";
  fs::create_directories(w);
  const auto at = [](const std::string& rel) { return " " + rel + "=" + k_multi + "/" + rel; };
  std::string cudnn_files = " nvidia/cudnn/lib/libcudnn.so.9=" + k_multi + "/cudnn91400/libcudnn.so.9";
  for (const auto& e : fs::directory_iterator(k_multi + "/nvidia/cudnn/lib"))
    cudnn_files += at("nvidia/cudnn/lib/" + e.path().filename().string());
  const std::string cudnn = test::make_wheel(w, "nvidia-cudnn-cu13 9.19.0.56" + cudnn_files);
  const std::vector<std::string> installed = {
      test::make_wheel(w, "nvidia-nccl-cu13 2.28.9" + at("nvidia/nccl/lib/libnccl.so.2")),
      test::make_wheel(w, "nvidia-cublas 13.1.0.3" + at("nvidia/cu13/lib/libcublas.so.13") +
                              at("nvidia/cu13/lib/libcublasLt.so.13")),
      test::make_wheel(w, "nvidia-cusparselt-cu13 0.8.0" + at("nvidia/cusparselt/lib/libcusparseLt.so.0")),
      test::make_wheel(w, "nvidia-cuda-runtime 13.0.96" + at("nvidia/cu13/lib/libcudart.so.13")),
      test::make_wheel(w, "torch 2.11.0+cu130" + at("torch/lib/libtorch_cuda.so"))};
  const std::string venv = t.path() + "/venv";
  test::make_venv(venv, installed);
  std::string text = "lock-version = \"1.0\"\ncreated-by = \"cudafix tests\"\n" + seed_packages(venv) +
                     package("nvidia-cudnn-cu13", "9.19.0.56", by_url(cudnn));
  for (const auto& [name, version] :
       std::vector<std::pair<std::string, std::string>>{{"nvidia-nccl-cu13", "2.28.9"},
                                                        {"nvidia-cublas", "13.1.0.3"},
                                                        {"nvidia-cusparselt-cu13", "0.8.0"},
                                                        {"nvidia-cuda-runtime", "13.0.96"},
                                                        {"torch", "2.11.0+cu130"}})
    text += package(name, version);
  const std::string lock = t.path() + "/pylock.toml";
  write_file(lock, text);
  const std::string before = test::tree_of(venv);
  const auto r = sync(t, lock, venv, "-y --ld-library-path " + shell_quote(k_fake_cuda));
  EXPECT_EQ(r.exit_code, 1) << r.out.substr(0, 4000);
  EXPECT_THAT(error_of(r), HasSubstr("(install nvidia-cudnn-cu13 9.19.0.56) failed"));
  const std::string now = test::tree_of(venv);
  EXPECT_EQ(now, before) << test::tree_diff(before, now);
}

}  // namespace
}  // namespace cudafix
