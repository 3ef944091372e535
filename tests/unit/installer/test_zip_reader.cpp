// The one zip reader (installer/wheel/zip_reader.hpp) on archives Python's zipfile writes: ZIP64 end
// records read, the end found from a tail of the file as the range-request planner fetches it,
// members read by windows as they are whole, and names normalised before they are compared.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "installer/wheel/zip_reader.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/process.hpp"

namespace cudafix::installer::zip {
namespace {

using test::run_shell;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;

// An archive zipfile writes from `members` (Python: a list of (name, bytes)), ZIP64 throughout
// where `zip64` (its limits lowered, as for an archive over 4 GiB or 65,535 members).
std::string zip_of(const TempDir& t, const std::string& members, bool zip64) {
  const std::string path = t.path() + "/a.zip";
  const std::string py = std::string("import sys, zipfile\n") +
                         (zip64 ? "zipfile.ZIP64_LIMIT = zipfile.ZIP_FILECOUNT_LIMIT = 0\n" : "") +
                         "with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:\n"
                         "    for n, d in " +
                         members + ":\n        z.writestr(n, d)\n";
  const auto r = run_shell("/usr/bin/python3 -c " + shell_quote(py) + " " + shell_quote(path));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return resolver::read_file(path);
}

const unsigned char* bytes(const std::string& s) { return reinterpret_cast<const unsigned char*>(s.data()); }

// Inputs the fuzzer once crashed on (tests/fuzz/regressions/zip-*): a clean Error naming the
// archive, from the end structures as the range planner reads them and from the whole file.
TEST(ZipReader, FuzzRegressionsAreRefusedByName) {
  std::size_t seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(test::source_dir() + "/tests/fuzz/regressions")) {
    if (e.path().filename().string().rfind("zip-", 0) != 0) continue;
    ++seen;
    const std::string data = resolver::read_file(e.path());
    const std::size_t tail = std::min<std::size_t>(data.size(), 64 * 1024);
    try {
      (void)parse_end(bytes(data) + (data.size() - tail), tail, data.size() - tail, "fuzz.whl");
      ADD_FAILURE() << e.path() << ": accepted";
    } catch (const resolver::Error& err) {
      EXPECT_THAT(err.what(), HasSubstr("fuzz.whl")) << e.path();
    }
  }
  EXPECT_GT(seen, 0u);
}

TEST(ZipReader, Zip64EndRecordsAreReadAndTheTailAloneFindsTheSameCentralDirectory) {
  TempDir t;
  const std::string data = zip_of(t, "[('a/x.txt', b'hello ' * 1000), ('b.bin', bytes(range(256)) * 64)]", true);
  ASSERT_NE(data.find("PK\x06\x06"), std::string::npos) << "zipfile wrote no ZIP64 end record";
  const Archive a(bytes(data), data.size(), "a.zip");
  ASSERT_EQ(a.files().size(), 2u);
  std::string hello;
  for (int i = 0; i < 1000; ++i) hello += "hello ";
  EXPECT_EQ(a.read(*a.find("a/x.txt"), 1 << 20), hello);
  EXPECT_EQ(a.read(*a.find("b.bin"), 1 << 20).size(), 256u * 64);
  // As remote_wheel reads it: only the last bytes of the file, at their offset.
  const std::size_t tail = 200;
  const End whole = parse_end(bytes(data), data.size(), 0, "a.zip");
  const End from_tail = parse_end(bytes(data) + data.size() - tail, tail, data.size() - tail, "a.zip");
  EXPECT_TRUE(from_tail.zip64);
  EXPECT_EQ(from_tail.cd_offset, whole.cd_offset);
  EXPECT_EQ(from_tail.cd_size, whole.cd_size);
  EXPECT_EQ(from_tail.entries, 2u);
  // Bytes after the archive are accepted, as zipfile and pypa/installer accept them.
  const std::string trailing = data + std::string(1000, 'T');
  EXPECT_EQ(Archive(bytes(trailing), trailing.size(), "t.zip").files().size(), 2u);
}

TEST(ZipReader, AWindowIsTheSameBytesAsTheWholeMemberAndStopsAtItsEnd) {
  TempDir t;
  const std::string data = zip_of(t, "[('m', __import__('os').urandom(3 << 20))]", false);
  const Archive a(bytes(data), data.size(), "a.zip");
  const Entry& e = *a.find("m");
  std::string whole(e.size, '\0');
  a.extract(e, reinterpret_cast<unsigned char*>(whole.data()));
  std::string streamed;
  a.stream(e, [&](const unsigned char* p, std::size_t n) { streamed.append(reinterpret_cast<const char*>(p), n); });
  EXPECT_EQ(streamed, whole);
  for (const std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{1} << 20, (std::uint64_t{3} << 20) - 100}) {
    std::string window(4096, '\0');
    const auto got = a.window(e, offset, reinterpret_cast<unsigned char*>(window.data()), window.size());
    EXPECT_EQ(got, std::min<std::uint64_t>(4096, e.size - offset));
    EXPECT_EQ(window.substr(0, got), whole.substr(offset, got)) << offset;
  }
  // A member read whole only up to the cap its caller gives, refused by name past it.
  try {
    (void)a.read(e, 1 << 20);
    ADD_FAILURE() << "read past its cap";
  } catch (const resolver::Error& err) {
    EXPECT_THAT(err.what(), HasSubstr("a.zip: m: 3145728 bytes, over the 1048576 bytes"));
  }
}

TEST(ZipReader, NamesAreNormalisedBeforeTheyAreComparedAndBadOnesAreRefused) {
  EXPECT_EQ(normal_name("a/./b//c"), "a/b/c");
  EXPECT_EQ(normal_name("./a/"), "a/");
  EXPECT_EQ(bad_name("a:b"), "");
  EXPECT_EQ(bad_name("C:/x"), "a drive letter");
  EXPECT_EQ(bad_name("a/../b"), "a '..' component");
  EXPECT_EQ(bad_name("/etc/x"), "an absolute path");
  EXPECT_EQ(bad_name("a\\b"), "a backslash in its name");
  EXPECT_EQ(bad_name(std::string("a\0b", 3)), "a NUL or control character in its name");
  EXPECT_EQ(bad_name("./"), "a name of nothing but '.' and empty segments");
  TempDir t;
  for (const char* second : {"a/./x", "a//x", "./a/x"}) {
    const std::string data = zip_of(t, std::string("[('a/x', b'1'), ('") + second + "', b'2')]", false);
    try {
      (void)Archive(bytes(data), data.size(), "a.zip");
      ADD_FAILURE() << second << " was taken beside a/x";
    } catch (const resolver::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string(second) + ": a second member of this name once normalised"));
    }
  }
}

}  // namespace
}  // namespace cudafix::installer::zip
