// Reading wheels through the one zip reader: the real file list, the dynamic sections of the ELF objects in
// it, and a precise error for each kind of broken wheel (the others in the folder still count).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "installer/source/find_links.hpp"
#include "installer/wheel/mapped_file.hpp"
#include "installer/wheel/read.hpp"
#include "installer/wheel/zip_reader.hpp"
#include "resolver/base/atomic_file.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/elf/elf_reader.hpp"
#include "resolver/plan/provenance.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/process.hpp"

namespace cudafix::installer {
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

// Objects of CUDA's shape, built by the compiler: 16 MiB of code-like bytes (deflating 3:1, in
// dynamic-Huffman blocks as real code does) in each of `sections`: .rodata lies before the
// dynamic section (near the object's end, as in NVIDIA's libraries), .data after it (with both,
// the segment lies mid-object).
std::string build_large_object(const TempDir& t, const std::string& name, const std::vector<std::string>& sections) {
  const std::string c = t.path() + "/" + name + ".c", blob = t.path() + "/code.bin";
  const auto made = run_shell(
      "test -e " + shell_quote(blob) + " || " +
      "/usr/bin/python3 -c 'import random,sys; r=random.Random(7); w=[bytes(r.choice(b\"abcdefghijklmnop\") "
      "for _ in range(r.randint(2,9))) for _ in range(4096)]; sys.stdout.buffer.write(b\" \".join(r.choice(w) "
      "for _ in range(3000000))[:16<<20])' > " +
      shell_quote(blob));
  EXPECT_EQ(made.exit_code, 0) << made.out;
  std::string source;
  for (const auto& section : sections)
    source += "__asm__(\".section " + section + "\\n.incbin \\\"" + blob + "\\\"\\n.previous\");\n";
  test::write_file(c, source + "int f(void) { return 1; }\n");
  const std::string so = t.path() + "/" + name;
  const auto cc = run_shell("cc -shared -fPIC -o " + shell_quote(so) + " " + shell_quote(c) + " -Wl,-soname," + name +
                            " -Wl,--enable-new-dtags,-rpath,'$ORIGIN/../../cublas/lib' -Wl,--no-as-needed -lm 2>&1");
  EXPECT_EQ(cc.exit_code, 0) << cc.out;
  return so;
}

// The facts resolver/elf reads from the member inflated whole.
resolver::ElfInfo whole_object(const std::string& wheel, const std::string& member) {
  const MappedFile file(wheel);
  const zip::Archive archive(file.data(), file.size(), wheel);
  const zip::Entry* e = archive.find(member);
  EXPECT_TRUE(e) << member;
  if (!e) return {};
  std::string bytes(e->size, '\0');
  archive.extract(*e, reinterpret_cast<unsigned char*>(bytes.data()));
  const auto whole = resolver::read_elf_memory(bytes.data(), bytes.size(), member);
  EXPECT_EQ(whole.status, resolver::ElfReadStatus::ok) << member;
  return whole.info;
}

void expect_same_facts(const resolver::ElfInfo& got, const resolver::ElfInfo& want, const std::string& what) {
  EXPECT_EQ(got.soname, want.soname) << what;
  EXPECT_EQ(got.needed, want.needed) << what;
  EXPECT_EQ(got.runpath, want.runpath) << what;
  EXPECT_EQ(got.rpath, want.rpath) << what;
}

// An object whose dynamic section lies near its end (NVIDIA's layout) is read by a window that
// ends with it, inflating a fraction of it; one whose section lies mid-object is read where its
// place is known exactly (a wheel file's bytes are all at hand), by a map of its deflate stream
// made on every core, not inflated from its start on one. Each gives what the whole says.
TEST(ReadWheel, ALargeObjectsDynamicSectionIsReadByWindowsAsTheWholeObjectGivesIt) {
  TempDir t;
  const auto near_end = build_large_object(t, "libnearend.so.9", {".rodata"});
  const auto mid = build_large_object(t, "libmid.so.9", {".rodata", ".data"});
  for (const auto& [name, object] : {std::pair{std::string("nearend"), near_end}, std::pair{std::string("mid"), mid}}) {
    TempDir dir;
    const std::string member = "nvidia/cudnn/lib/lib" + name + ".so.9";
    const auto path = make_wheel(dir, "nvidia-cudnn-cu13 9.19.0.56 " + member + "=" + object + " --deflate");
    WheelReadCost cost;
    const auto w = read_wheel(path, k_tags, &cost);
    const auto size = std::filesystem::file_size(object);
    ASSERT_GT(std::filesystem::file_size(path), std::uint64_t{2} << 20) << member << " is read by windows, not whole";
    ASSERT_TRUE(w.elf.contains(member)) << member;
    expect_same_facts(w.elf.at(member), whole_object(path, member), member);
    EXPECT_THAT(w.elf.at(member).needed, ::testing::Contains("libm.so.6")) << member;
    EXPECT_EQ(cost.objects_from_start, 0U) << member;
    if (name == "nearend")
      EXPECT_LT(cost.inflated, size / 8) << "inflated " << cost.inflated << " of the object's " << size << " bytes";
    else
      EXPECT_EQ(cost.objects_by_map, 1U) << member << ": placed by a map of its stream, not inflated from its start";
    EXPECT_EQ(cost.hashed, std::filesystem::file_size(path));
    EXPECT_EQ(w.sha256, resolver::sha256_of_file(path, resolver::DigestForm::hex));
  }
}

// tests/e2e/make_hostile_objects.py's attacks on the reading by ranges (each found by a helper
// attacking it): a false dynamic segment planted before the real one deep in the object (the
// plan read NEEDED libevil.so.1 and a RUNPATH the object does not have), a local header whose
// extra field outruns the reader's slack (the object was left out of the plan in silence), and
// a deflate stream without its final block (a 40 MiB object took 31 s and 9.7 GB inflated), and
// a stream that inflates far past its declared size (the plan read zeros as the segment).
TEST(ReadWheel, CraftedObjectsAreReadAsTheLoaderReadsThem) {
  TempDir t;
  const auto made = run_shell("/usr/bin/python3 " + shell_quote(k_source + "/tests/e2e/make_hostile_objects.py") + " " +
                              shell_quote(t.path()));
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const auto cases = nlohmann::json::parse(made.out);
  ASSERT_EQ(cases.size(), 4U);
  resolver::ElfInfo want;
  want.soname = "libfake.so.1";
  want.needed = {"libcublasLt.so.13", "libc.so.6"};
  for (const auto& c : cases) {
    const std::string what = c["case"], wheel = c["wheel"], member = c["member"];
    WheelReadCost cost;
    if (what == "bomb") {
      // What its stream holds where the segment should be is not what its entry says it is.
      try {
        (void)read_wheel(wheel, k_tags, &cost);
        ADD_FAILURE() << what << ": read, though its member inflates past its declared size";
      } catch (const resolver::Error& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("lib/libfake.so.1 inflates to more than the")) << e.what();
      }
      continue;
    }
    const auto w = read_wheel(wheel, k_tags, &cost);
    ASSERT_TRUE(w.elf.contains(member)) << what;
    expect_same_facts(w.elf.at(member), want, what);
    if (what != "unterminated") expect_same_facts(w.elf.at(member), whole_object(wheel, member), what + " (whole)");
    EXPECT_LT(cost.inflated, 8 * (std::uint64_t{16} << 20)) << what;
  }
}

// fix reads a wheel to plan and again to bind its plan: the second read is the first's value only
// while the file is unchanged. Rewritten in place, or replaced, it is read afresh.
TEST(ReadWheel, AWheelChangedSinceItWasReadIsReadAgain) {
  TempDir t, other;
  const auto path = make_wheel(t, "good 1.0");
  const std::string original = t.path() + "/original";
  ASSERT_EQ(run_shell("cp " + shell_quote(path) + " " + shell_quote(original)).exit_code, 0);
  const auto first = read_wheel(path, k_tags);
  EXPECT_EQ(read_wheel(path, k_tags).sha256, first.sha256);
  const auto changed = make_wheel(other, "good 1.0 lib/extra.txt=" + original);
  for (const std::string& write : {"cat " + shell_quote(changed) + " > " + shell_quote(path),
                                   "cp --remove-destination " + shell_quote(changed) + " " + shell_quote(path)}) {
    ASSERT_EQ(run_shell(write).exit_code, 0);
    const auto again = read_wheel(path, k_tags);
    EXPECT_NE(again.sha256, first.sha256) << write;
    EXPECT_EQ(again.sha256, resolver::sha256_of_file(path, resolver::DigestForm::hex)) << write;
    EXPECT_EQ(again.record.rows.size(), first.record.rows.size() + 1) << write;
    ASSERT_EQ(run_shell("cp --remove-destination " + shell_quote(original) + " " + shell_quote(path)).exit_code, 0);
    EXPECT_EQ(read_wheel(path, k_tags).sha256, first.sha256) << write;
  }
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
