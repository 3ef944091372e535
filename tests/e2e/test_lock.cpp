// End-to-end: `cudafix lock` of a real pip venv (wheels built by make_wheel.py, installed by the
// venv's own pip): each package's wheel named with its sha256 (from direct_url.json, or matched by
// RECORD in a --find-links folder), a package no source knows written without one and said, the
// libraries' bytes hashed, the same bytes from the same venv; and `--verified` over the fake
// libcuda and libcudnn records each device's verdict.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "resolver/base/text.hpp"
#include "tests/e2e/cudafix_run.hpp"
#include "tests/e2e/fake_gpu_venv.hpp"
#include "tests/support/process.hpp"

namespace cudafix {
namespace {

using nlohmann::json;
using test::k_bin;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

// The TOML at `file` as JSON, read by Python's tomllib (a reader that is not cudafix's).
json toml_of(const std::string& file) {
  const auto r = run_shell(test::k_python + " -c " +
                           shell_quote("import json, sys, tomllib\n"
                                       "d = tomllib.load(open(sys.argv[1], 'rb'))\n"
                                       "print(json.dumps(d, default=str))") +
                           " " + shell_quote(file));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return json::parse(r.out, nullptr, false);
}

std::string sha256_of(const std::string& file) {
  return run_shell("sha256sum " + shell_quote(file) + " | cut -c1-64").out.substr(0, 64);
}

const json* package(const json& lock, const std::string& name) {
  for (const auto& p : lock["packages"])
    if (p["name"] == name) return &p;
  return nullptr;
}

// alpha (a library inside) installed from its file, beta from a --find-links folder by name, gamma
// from another folder the lock is not told of.
class LockedVenv : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string so = test::k_verify + "/cu13/libcudart.so.13";
    for (const char* folder : {"/files", "/links", "/other"}) std::filesystem::create_directories(dir_.path() + folder);
    alpha_ = test::make_wheel(dir_.path() + "/files",
                              "alpha 1.0 alpha/__init__.py=" + so + " alpha/lib/libalpha.so.1=" + so);
    beta_ = test::make_wheel(links(), "beta 2.0 beta/__init__.py=" + so);
    gamma_ = test::make_wheel(dir_.path() + "/other", "gamma 3.0 gamma/__init__.py=" + so);
    ASSERT_NO_FATAL_FAILURE(test::make_venv(venv(), {alpha_}));
    for (const auto& [name, folder] : {std::pair{"beta", links()}, std::pair{"gamma", dir_.path() + "/other"}}) {
      const auto r =
          test::venv_pip(venv(), "install -q --no-index --no-deps --find-links " + shell_quote(folder) + " " + name);
      ASSERT_EQ(r.exit_code, 0) << r.out;
    }
  }
  [[nodiscard]] std::string venv() const { return dir_.path() + "/venv"; }
  [[nodiscard]] std::string links() const { return dir_.path() + "/links"; }
  [[nodiscard]] std::string lock_args() const {
    return "lock --venv " + shell_quote(venv()) + " --find-links " + shell_quote(links()) + " --no-index" +
           test::k_no_cache;
  }
  test::RunResult lock(const std::string& more = "", const std::string& streams = "2>/dev/null") const {
    return run_shell("env -u VIRTUAL_ENV -u PIP_FIND_LINKS CUDAFIX_CACHE_DIR=" + shell_quote(dir_.path() + "/cache") +
                     " " + shell_quote(k_bin) + " " + lock_args() + " " + more + " " + streams);
  }
  TempDir dir_;
  std::string alpha_, beta_, gamma_;
};

TEST_F(LockedVenv, SameVenvTwiceGivesTheSameBytesAndOutputFileHoldsThem) {
  const auto once = lock(), twice = lock();
  ASSERT_EQ(once.exit_code, 0) << once.out;
  EXPECT_EQ(once.out, twice.out);
  const std::string file = dir_.path() + "/pylock.toml";
  ASSERT_EQ(lock("-o " + shell_quote(file)).exit_code, 0);
  EXPECT_EQ(resolver::read_file(file), once.out);
  EXPECT_THAT(once.out, ::testing::StartsWith("lock-version = \"1.0\"\n"));
  EXPECT_THAT(once.out, HasSubstr("created-by = \"cudafix "));
}

TEST_F(LockedVenv, EachWheelIsNamedWithItsSha256AndOneNoSourceKnowsIsSaid) {
  const std::string file = dir_.path() + "/pylock.toml";
  const auto r = lock("-o " + shell_quote(file), "2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("no wheel known for gamma 3.0: written without a source"));
  EXPECT_THAT(r.out, Not(HasSubstr("no wheel known for alpha"))) << r.out;
  const json doc = toml_of(file);
  ASSERT_TRUE(doc.is_object());
  const json* alpha = package(doc, "alpha");
  const json* beta = package(doc, "beta");
  const json* gamma = package(doc, "gamma");
  ASSERT_TRUE(alpha && beta && gamma);
  EXPECT_EQ((*alpha)["version"], "1.0");
  // alpha: pip's direct_url.json, a file:// URL and the archive's sha256.
  ASSERT_EQ((*alpha)["wheels"].size(), 1u);
  EXPECT_EQ((*alpha)["wheels"][0]["url"], "file://" + alpha_);
  EXPECT_EQ((*alpha)["wheels"][0]["hashes"]["sha256"], sha256_of(alpha_));
  // beta: no direct_url.json; the --find-links folder's wheel, matched by its RECORD.
  ASSERT_EQ((*beta)["wheels"].size(), 1u);
  EXPECT_EQ((*beta)["wheels"][0]["path"], beta_);
  EXPECT_EQ((*beta)["wheels"][0]["hashes"]["sha256"], sha256_of(beta_));
  EXPECT_FALSE(gamma->contains("wheels"));
  // The library alpha provides, its bytes on disk hashed.
  const std::string lib = "alpha/lib/libalpha.so.1";
  const json& libs = (*alpha)["tool"]["cudafix"]["libraries"];
  ASSERT_EQ(libs.size(), 1u);
  EXPECT_EQ(libs[0]["path"], lib);
  EXPECT_EQ(libs[0]["sha256"], sha256_of(test::site_packages(venv()) + "/" + lib));
  // --json names each package's source, none for gamma.
  const auto j = test::cudafix_json(lock_args() + " -o " + shell_quote(file));
  ASSERT_EQ(j.exit_code, 0);
  bool saw_gamma = false;
  for (const auto& p : j.doc["packages"])
    if (p["name"] == "gamma") {
      saw_gamma = true;
      EXPECT_TRUE(p["source"].is_null());
    } else if (p["name"] == "beta") {
      EXPECT_EQ(p["source"]["found_by"], "--find-links " + links());
    }
  EXPECT_TRUE(saw_gamma);
}

// doctor --lock LOCK for the JSON findings of the lock-*-drift rules.
test::JsonRun doctor_lock(const std::string& venv, const std::string& lock, const std::string& more = "") {
  return test::cudafix_json("doctor --venv " + shell_quote(venv) + " --lock " + shell_quote(lock) +
                            " --select lock-package-drift,lock-file-drift,lock-verdict-drift" + test::k_no_cache + " " +
                            more);
}

std::string messages(const std::vector<json>& findings) {
  std::string out;
  for (const auto& f : findings) out += f["message"].get<std::string>() + "\n";
  return out;
}

TEST_F(LockedVenv, DoctorLockNamesEachKindOfDrift) {
  const std::string file = dir_.path() + "/pylock.toml";
  ASSERT_EQ(lock("-o " + shell_quote(file)).exit_code, 0);
  const auto healthy = doctor_lock(venv(), file);
  EXPECT_EQ(healthy.exit_code, 0) << healthy.doc.dump(1);
  EXPECT_TRUE(healthy.doc["findings"].empty()) << healthy.doc["findings"].dump(1);
  // Break it with pip and by hand: one uninstalled, one upgraded, one added; a library's bytes
  // replaced, a file deleted.
  const std::string so = test::k_verify + "/cu13/libcudart.so.13";
  const std::string gamma31 = test::make_wheel(dir_.path() + "/other", "gamma 3.1 gamma/__init__.py=" + so);
  const std::string delta = test::make_wheel(dir_.path() + "/other", "delta 1.0 delta/__init__.py=" + so);
  ASSERT_EQ(test::venv_pip(venv(), "uninstall -q -y beta").exit_code, 0);
  ASSERT_EQ(test::venv_pip(venv(), "install -q --no-index --no-deps " + shell_quote(gamma31) + " " + shell_quote(delta))
                .exit_code,
            0);
  const std::string site = test::site_packages(venv());
  ASSERT_EQ(
      run_shell("cp " + shell_quote(test::k_verify + "/libtorch_cuda.so") + " " +
                shell_quote(site + "/alpha/lib/libalpha.so.1") + " && rm " + shell_quote(site + "/alpha/__init__.py"))
          .exit_code,
      0);
  const auto broken = doctor_lock(venv(), file);
  EXPECT_EQ(broken.exit_code, 1);
  const auto packages = test::fires(broken.doc, "lock-package-drift");
  EXPECT_THAT(messages(packages), HasSubstr("beta 2.0 is locked and not installed"));
  EXPECT_THAT(messages(packages), HasSubstr("gamma is 3.1 here, 3.0 in the lock"));
  EXPECT_THAT(messages(packages), HasSubstr("delta 1.0 is installed and not in the lock"));
  const auto files = test::fires(broken.doc, "lock-file-drift");
  EXPECT_THAT(messages(files),
              HasSubstr("alpha's alpha/lib/libalpha.so.1 (libcudart.so.13) holds other bytes than the locked ones"));
  EXPECT_THAT(messages(files), HasSubstr("alpha's files differ from the locked wheel's: 1 of its files are missing: "
                                         "alpha/__init__.py"));
  for (const auto& f : files)
    if (f["severity"] == "error") {
      EXPECT_EQ(f["paths"][0], "alpha/lib/libalpha.so.1");  // as doctor names paths: in the site folder
      EXPECT_EQ(f["remedy"]["command"], "cudafix sync " + file);
    }
}

TEST(LockVerified, APassingVerifyRecordsEachDevicesVerdict) {
  const test::FakeVenv venv;
  const std::string out = venv.root() + "/../pylock.toml";
  const auto r = run_shell("env -u VIRTUAL_ENV " + shell_quote(k_bin) + " lock --verified --no-index --venv " +
                           shell_quote(venv.root()) + " --ld-library-path " + shell_quote(test::fake_cuda("ok")) +
                           " -o " + shell_quote(out) + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json doc = toml_of(out);
  const json& verified = doc["tool"]["cudafix"]["verified"];
  ASSERT_EQ(verified.size(), 2u) << doc.dump();  // the fake driver's two devices
  for (const auto& v : verified) {
    EXPECT_EQ(v["consumer"], "torch/lib/libtorch_cuda.so");
    EXPECT_EQ(v["cudnn"], "9.19.0");
    EXPECT_EQ(v["cudnn-path"], "nvidia/cudnn/lib/libcudnn.so.9");
  }
  // A failing one records none, and says so.
  const auto failing = run_shell("env -u VIRTUAL_ENV " + shell_quote(k_bin) + " lock --verified --no-index --venv " +
                                 shell_quote(venv.root()) + " --ld-library-path " +
                                 shell_quote(test::fake_cuda("init100")) + " -o " + shell_quote(out) + " 2>&1");
  EXPECT_EQ(failing.exit_code, 1) << failing.out;
  EXPECT_THAT(failing.out, HasSubstr("the lock records no verdict"));
  EXPECT_FALSE(toml_of(out).contains("tool"));
}

TEST(LockVerified, AVerdictNoLongerHoldsOnceTheConsumerResolvesNoCudnn) {
  const test::FakeVenv venv;
  const std::string out = venv.root() + "/../pylock.toml";
  ASSERT_EQ(run_shell("env -u VIRTUAL_ENV " + shell_quote(k_bin) + " lock --verified --no-index --venv " +
                      shell_quote(venv.root()) + " --ld-library-path " + shell_quote(test::fake_cuda("ok")) + " -o " +
                      shell_quote(out) + " 2>&1")
                .exit_code,
            0);
  EXPECT_TRUE(doctor_lock(venv.root(), out).doc["findings"].empty());
  ASSERT_EQ(run_shell("rm " + shell_quote(venv.site() + "/nvidia/cudnn/lib/libcudnn.so.9")).exit_code, 0);
  const auto broken = doctor_lock(venv.root(), out);
  EXPECT_EQ(broken.exit_code, 1);
  const auto verdicts = test::fires(broken.doc, "lock-verdict-drift");
  ASSERT_EQ(verdicts.size(), 2u);  // one a device
  EXPECT_THAT(messages(verdicts),
              HasSubstr("torch/lib/libtorch_cuda.so was verified with "
                        "nvidia/cudnn/lib/libcudnn.so.9 for libcudnn.so.9, it now resolves nowhere"));
  EXPECT_EQ(verdicts[0]["sonames"][0], "libcudnn.so.9");
  EXPECT_THAT(messages(test::fires(broken.doc, "lock-file-drift")), HasSubstr("libcudnn.so.9) is gone"));
}

}  // namespace
}  // namespace cudafix
