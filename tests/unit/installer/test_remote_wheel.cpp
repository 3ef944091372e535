// Planning from an index's wheel by range requests (installer/source/remote_wheel), against a
// server canned from the wheel's bytes (tests/support/canned_http.hpp): with sizes small enough
// that every object is read by its headers and the ranges they name, the planner knows of each
// object what the whole wheel says; a wheel whose object lies about its layout is refused with
// the member named, whatever the server does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "installer/source/remote_wheel.hpp"
#include "installer/wheel/read.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "tests/support/canned_http.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/process.hpp"

namespace cudafix::installer::source {
namespace {

using test::run_shell;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;

const std::string k_fixtures = test::fixtures_dir();
const std::string k_source = test::source_dir();
const std::vector<std::string> k_tags = resolver::supported_tags({3, 11, "", "x86_64", false, 2, 36});

std::string make_wheel(const TempDir& dir, const std::string& args) {
  const auto r = run_shell("/usr/bin/python3 " + shell_quote(k_source + "/tests/e2e/make_wheel.py") + " " +
                           shell_quote(dir.path()) + " " + args);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return std::string(resolver::trim(r.out));
}

Picked picked_from(const std::string& path) {
  Picked p;
  p.file.filename = std::filesystem::path(path).filename().string();
  p.file.url = "https://idx.example/files/" + p.file.filename;
  p.file.sha256 = std::string(64, '0');
  p.wheel = *resolver::parse_wheel_name(p.file.filename);
  return p;
}

RangeLimits small_limits() {
  RangeLimits l;
  l.tail = 512;
  l.whole_wheel = 1024;
  l.whole_member = 1024;
  l.head = 512;
  l.window = 4096;
  l.chunk = 2048;
  l.whole_past_half = false;  // these wheels of a few KB are read by range to the end
  return l;
}

TEST(RemoteWheel, ReadByRangeItKnowsOfEachObjectWhatTheWholeWheelSays) {
  TempDir t;
  for (const std::string how : {"", " --deflate"}) {
    const auto path = make_wheel(t, "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + k_fixtures +
                                        "/verify/cudnn/v91900/libcudnn.so.9 torch/lib/libtorch_cuda.so=" + k_fixtures +
                                        "/verify/torch12/libtorch_cuda.so" + how);
    const auto whole = read_wheel(path, k_tags);
    ASSERT_EQ(whole.elf.size(), 2U);
    HttpClient http(test::serve_from_memory(resolver::try_read_file(path).value()));
    const auto read = read_remote_wheel(http, picked_from(path), k_tags, t.path() + "/tail", small_limits());
    ASSERT_TRUE(read.wheel) << how;
    EXPECT_EQ(read.objects_by_window + read.objects_from_start, 2U) << "each object read by its headers" << how;
    EXPECT_EQ(read.size, std::filesystem::file_size(path));
    ASSERT_EQ(read.wheel->elf.size(), 2U) << how;
    for (const auto& [member, info] : whole.elf) {
      ASSERT_TRUE(read.wheel->elf.contains(member)) << member;
      const auto& got = read.wheel->elf.at(member);
      EXPECT_EQ(got.soname, info.soname) << member << how;
      EXPECT_EQ(got.needed, info.needed) << member << how;
      EXPECT_EQ(got.runpath, info.runpath) << member << how;
      EXPECT_EQ(got.rpath, info.rpath) << member << how;
    }
  }
}

// tests/e2e/make_hostile_elf.py's wheels (the e2e test serves them from a real index): each is
// an Error that names the wheel's URL and the member, never a crash (but the one that is a valid
// object, which the e2e test plans from).
TEST(RemoteWheel, AnObjectThatLiesAboutItsLayoutIsAnErrorNamingTheMember) {
  TempDir t;
  const auto made = run_shell("/usr/bin/python3 " + shell_quote(k_source + "/tests/e2e/make_hostile_elf.py") + " " +
                              shell_quote(t.path()));
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const auto cases = nlohmann::json::parse(made.out);
  ASSERT_EQ(cases.size(), 6U);
  for (const auto& c : cases) {
    if (c["expect"].is_null()) continue;
    const std::string wheel = c["wheel"];
    HttpClient http(test::serve_from_memory(resolver::try_read_file(wheel).value()));
    const Picked picked = picked_from(wheel);
    try {
      (void)read_remote_wheel(http, picked, k_tags, t.path() + "/tail");
      ADD_FAILURE() << c["case"] << " was read";
    } catch (const resolver::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(picked.file.url + ": nvidia/cudnn/lib/libcudnn.so.9 is not a valid ELF object"));
      EXPECT_THAT(e.what(), HasSubstr(c["expect"].get<std::string>())) << c["case"];
    }
  }
}

// A server that ignores Range, states a wrong size, sends short bodies or fails after its first
// answer: the wheel is downloaded whole or refused with an Error, never misread.
TEST(RemoteWheel, AFaultyServerGivesAnErrorOrTheWholeFile) {
  TempDir t;
  const auto path = make_wheel(t, "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + k_fixtures +
                                      "/verify/cudnn/v91900/libcudnn.so.9 --deflate");
  const std::string bytes = resolver::try_read_file(path).value();
  for (const auto quirk :
       {test::Quirk::ignores_range, test::Quirk::wrong_size, test::Quirk::short_bodies, test::Quirk::fails_later}) {
    HttpClient http(test::serve_from_memory(bytes, quirk));
    try {
      const auto read = read_remote_wheel(http, picked_from(path), k_tags, t.path() + "/tail", small_limits());
      EXPECT_EQ(quirk, test::Quirk::ignores_range) << "read despite the fault " << static_cast<int>(quirk);
      EXPECT_FALSE(read.wheel);
      EXPECT_EQ(read.downloaded, t.path() + "/tail");
    } catch (const resolver::Error& e) {
      EXPECT_NE(quirk, test::Quirk::ignores_range) << e.what();
    }
  }
}

}  // namespace
}  // namespace cudafix::installer::source
