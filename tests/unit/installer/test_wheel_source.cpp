// Reading wheels through the one zip reader: the real file list, the dynamic sections of the ELF objects in
// it, and a precise error for each kind of broken wheel (the others in the folder still count).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "installer/source/find_links.hpp"
#include "installer/wheel/read.hpp"
#include "resolver/base/atomic_file.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "tests/support/process.hpp"

namespace cudafix::installer {
namespace {

using test::run_shell;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;

const std::string k_fixtures = CUDAFIX_FIXTURES;
const std::string k_source = CUDAFIX_SOURCE_DIR;
const std::vector<std::string> k_tags = resolver::supported_tags("3.11", "2.36", "x86_64");

std::string make_wheel(const TempDir& dir, const std::string& args) {
  const auto r = run_shell("/usr/bin/python3 " + shell_quote(k_source + "/tests/e2e/make_wheel.py") + " " +
                           shell_quote(dir.path()) + " " + args);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return std::string(resolver::trim(r.out));
}

TEST(ReadWheel, NameVersionRecordAndTheDynamicSectionOfEachLibrary) {
  TempDir t;
  const auto path = make_wheel(t, "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + k_fixtures +
                                      "/verify/cudnn/v91900/libcudnn.so.9 --requires 'nvidia-cublas'");
  const auto w = read_wheel(path, k_tags);
  EXPECT_EQ(w.metadata.name, "nvidia-cudnn-cu13");
  EXPECT_EQ(w.metadata.version, "9.19.0.56");
  EXPECT_EQ(w.metadata.requires_dist, std::vector<std::string>({"nvidia-cublas"}));
  EXPECT_EQ(w.dist_info, "nvidia_cudnn_cu13-9.19.0.56.dist-info");
  EXPECT_TRUE(w.compatible);
  EXPECT_EQ(w.sha256.size(), 64u);
  ASSERT_EQ(w.record.rows.size(), 4u);
  EXPECT_EQ(w.record.rows[0].path, "nvidia/cudnn/lib/libcudnn.so.9");
  ASSERT_TRUE(w.elf.count("nvidia/cudnn/lib/libcudnn.so.9"));
  EXPECT_EQ(w.elf.at("nvidia/cudnn/lib/libcudnn.so.9").soname, "libcudnn.so.9");
}

TEST(ReadWheel, EachKindOfBrokenWheelSaysWhatIsWrong) {
  TempDir t;
  const auto good = make_wheel(t, "good 1.0");
  auto expect_error = [&](const std::string& file, const std::string& what) {
    try {
      (void)read_wheel(file, k_tags);
      ADD_FAILURE() << file << " was read";
    } catch (const resolver::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(what));
      EXPECT_THAT(e.what(), HasSubstr(file));
    }
  };
  test::write_file(t.path() + "/text-1.0-py3-none-any.whl", "not a zip at all\n");
  expect_error(t.path() + "/text-1.0-py3-none-any.whl", "too short to be a zip archive");
  ASSERT_EQ(run_shell("head -c 300 " + shell_quote(good) + " > " + shell_quote(t.path() + "/cut-1.0-py3-none-any.whl"))
                .exit_code,
            0);
  expect_error(t.path() + "/cut-1.0-py3-none-any.whl", "no end of central directory record (not a zip, or truncated)");
  ASSERT_EQ(run_shell("cd " + shell_quote(t.path()) + " && cp " + shell_quote(good) + " renamed-2.0-py3-none-any.whl")
                .exit_code,
            0);
  expect_error(t.path() + "/renamed-2.0-py3-none-any.whl", "its METADATA says good 1.0, its file name renamed 2.0");
  ASSERT_EQ(run_shell("cd " + shell_quote(t.path()) +
                      " && mkdir -p e && echo x > e/f.txt && cd e && "
                      "/usr/bin/python3 -m zipfile -c ../empty-1.0-py3-none-any.whl f.txt")
                .exit_code,
            0);
  expect_error(t.path() + "/empty-1.0-py3-none-any.whl", "no {name}-{version}.dist-info/METADATA inside");
  expect_error(t.path() + "/no-wheel-name.zip", "not a wheel file name");
}

// Inputs the fuzzer once crashed on (tests/fuzz/regressions/wheel-*): a clean Error each.
TEST(ReadWheel, FuzzRegressionsFailCleanly) {
  std::size_t seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(k_source + "/tests/fuzz/regressions")) {
    if (e.path().filename().string().rfind("wheel-", 0) != 0) continue;
    ++seen;
    const std::string bytes = resolver::read_file(e.path());
    EXPECT_THROW((void)read_wheel_memory(bytes.data(), bytes.size(), "fuzz-1.0-py3-none-any.whl", k_tags),
                 resolver::Error)
        << e.path();
  }
  EXPECT_GE(seen, 3u);
}

TEST(FindWheels, ABrokenWheelIsADiagnosticAndTheOthersAreStillRead) {
  TempDir t;
  make_wheel(t, "good 1.0");
  test::write_file(t.path() + "/bad-1.0-py3-none-any.whl", "garbage");
  const auto found = source::find_wheels({t.path()}, k_tags);
  ASSERT_EQ(found.wheels.size(), 1u);
  EXPECT_EQ(found.wheels[0].metadata.name, "good");
  EXPECT_EQ(found.wheels[0].source, t.path());
  ASSERT_EQ(found.diagnostics.size(), 1u);
  EXPECT_THAT(found.diagnostics[0].to_string(), HasSubstr("bad-1.0-py3-none-any.whl"));
  EXPECT_THROW((void)source::find_wheels({t.path() + "/missing"}, k_tags), resolver::Error);
}

TEST(AtomicFile, NothingAppearsUntilCommitAndNothingIsLeftWithout) {
  TempDir t;
  const std::string target = t.path() + "/plan.json";
  {
    resolver::AtomicFile f(target);
    f.write("half");
    EXPECT_FALSE(std::filesystem::exists(target));
  }  // no commit: as if the process had failed here
  EXPECT_FALSE(std::filesystem::exists(target));
  EXPECT_TRUE(std::filesystem::is_empty(t.path()));
  test::write_file(target, "old");
  resolver::AtomicFile f(target);
  f.write("new");
  EXPECT_EQ(resolver::read_file(target), "old");
  f.commit();
  EXPECT_EQ(resolver::read_file(target), "new");
}

}  // namespace
}  // namespace cudafix::installer
