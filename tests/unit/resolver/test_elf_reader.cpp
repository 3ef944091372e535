#include <gtest/gtest.h>

#include <elf.h>
#include <sys/stat.h>

#include <cstddef>
#include <cstring>

#include "resolver/base/text.hpp"
#include "resolver/elf/elf_reader.hpp"
#include "resolver/elf/elf_writer.hpp"
#include "resolver/loader/host.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/process.hpp"

namespace cudafix::resolver {
namespace {

const std::string k_fixtures = test::fixtures_dir();

TEST(ElfReader, ReadsACompiledObjectsDynamicSection) {
  const auto r = read_elf_file(k_fixtures + "/reader/libflags.so");
  ASSERT_EQ(r.status, ElfReadStatus::ok) << r.diagnostic.to_string();
  EXPECT_EQ(r.info.soname, "libflags.so");
  EXPECT_EQ(r.info.runpath, "/opt/x:$ORIGIN/y");
  EXPECT_FALSE(r.info.rpath);
  EXPECT_TRUE(r.info.nodeflib());
  EXPECT_EQ(flags_1_names(r.info.flags_1), (std::vector<std::string>{"NOW", "NODEFLIB"}));
  EXPECT_EQ(r.info.elf_class, ELFCLASS64);
  EXPECT_EQ(machine_name(r.info.machine), "x86_64");
  EXPECT_EQ(r.info.needed, (std::vector<std::string>{"libc.so.6"}));
}

TEST(ElfReader, AgreesWithReadelfOnAWrongClassObject) {
  const auto r = read_elf_file(k_fixtures + "/wrong_class/dir32/libwc.so");
  ASSERT_EQ(r.status, ElfReadStatus::ok);
  EXPECT_EQ(r.info.elf_class, ELFCLASS32);
  EXPECT_EQ(machine_name(r.info.machine), "i386");
  EXPECT_EQ(r.info.soname, "libwc.so");
}

TEST(ElfReader, RpathIsIgnoredWhenRunpathIsSet) {
  ElfSpec spec;
  spec.rpath = "/a";
  spec.runpath = "/b";
  const std::string bytes = make_shared_object(spec);
  const auto r = read_elf_memory(bytes.data(), bytes.size(), "x");
  ASSERT_EQ(r.status, ElfReadStatus::ok);
  EXPECT_EQ(r.info.rpath, "/a");
  EXPECT_FALSE(r.info.effective_rpath());
}

// A string table as large as a real libtorch's, its strings far apart and one longer than what is
// read past each: every name comes out whole, from the file and from memory.
TEST(ElfReader, ReadsNamesFarApartInALargeStringTable) {
  test::TempDir tmp;
  ElfSpec spec;
  spec.soname = "libtorch_cuda.so";
  spec.needed = {"libcudnn.so.9", "libcublasLt.so.13", "libc.so.6"};
  spec.runpath = "$ORIGIN/../../nvidia/cu13/lib:" + std::string(9000, 'r') + ":$ORIGIN";
  spec.string_gap = 200 * 1024;
  const std::string path = tmp.path() + "/libbig.so";
  write_shared_object(path, spec);
  const std::string bytes = make_shared_object(spec);
  ASSERT_GT(bytes.size(), 5u * spec.string_gap);
  for (const auto& r : {read_elf_file(path), read_elf_memory(bytes.data(), bytes.size(), "x")}) {
    ASSERT_EQ(r.status, ElfReadStatus::ok) << r.diagnostic.to_string();
    EXPECT_EQ(r.info.soname, spec.soname);
    EXPECT_EQ(r.info.needed, spec.needed);
    EXPECT_EQ(r.info.runpath, spec.runpath);
  }
}

TEST(ElfWriter, RoundTripsEveryFieldInBothClasses) {
  for (std::uint8_t klass : {std::uint8_t{1}, std::uint8_t{2}}) {
    ElfSpec spec;
    spec.elf_class = klass;
    spec.machine = klass == 1 ? EM_386 : EM_AARCH64;
    spec.soname = "libcudnn.so.9";
    spec.needed = {"libcublas.so.13", "libc.so.6"};
    spec.rpath = "$ORIGIN/../../nvidia/cu13/lib";
    spec.flags_1 = DF_1_NODEFLIB;
    const std::string bytes = make_shared_object(spec);
    const auto r = read_elf_memory(bytes.data(), bytes.size(), "x");
    ASSERT_EQ(r.status, ElfReadStatus::ok) << r.diagnostic.to_string();
    EXPECT_EQ(r.info.elf_class, klass);
    EXPECT_EQ(r.info.machine, spec.machine);
    EXPECT_EQ(r.info.soname, spec.soname);
    EXPECT_EQ(r.info.needed, spec.needed);
    EXPECT_EQ(r.info.rpath, spec.rpath);
    EXPECT_TRUE(r.info.nodeflib());
  }
}

TEST(ElfWriter, GlibcLoadsWhatItWrites) {
  test::TempDir t;
  ElfSpec dep;
  dep.soname = "libdep.so.1";
  write_shared_object(t.path() + "/libdep.so.1", dep);
  ElfSpec top;
  top.soname = "libtop.so";
  top.needed = {"libdep.so.1"};
  top.rpath = "$ORIGIN";
  write_shared_object(t.path() + "/libtop.so", top);
  const auto r = test::run_shell("LD_TRACE_LOADED_OBJECTS=1 " + detect_host().ld_so + " " + t.path() + "/libtop.so");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("libdep.so.1 => " + t.path() + "/libdep.so.1"), std::string::npos) << r.out;
}

struct Broken {
  const char* name;
  std::size_t offset;   // where to write
  std::uint64_t value;  // what
  const char* expect;   // in the diagnostic
};

// An object read from a file takes the path a scan takes: its first 16 KB in one read, the rest
// by range. `large` pushes the dynamic segment and the strings past that head.
ElfSpec hostile_spec(bool large) {
  ElfSpec spec;
  spec.soname = "libx.so";
  spec.needed = {"liby.so"};
  if (large) spec.string_gap = 12 * 1024;
  return spec;
}

ElfRead read_as_file(const std::string& bytes, const std::string& name) {
  test::TempDir t;
  test::write_file(t.path() + "/" + name, bytes);
  ElfRead r = read_elf_file(t.path() + "/" + name);
  if (r.diagnostic.file == t.path() + "/" + name) r.diagnostic.file = name;
  return r;
}

class ElfReaderRejects : public ::testing::TestWithParam<Broken> {};

TEST_P(ElfReaderRejects, HostileObjectsWithAPreciseMessage) {
  for (bool large : {false, true}) {
    std::string bytes = make_shared_object(hostile_spec(large));
    ASSERT_EQ(bytes.size() > 16 * 1024, large);
    const auto& b = GetParam();
    std::memcpy(bytes.data() + b.offset, &b.value, sizeof b.value);
    const ElfPieces whole{bytes.size(), {{0, bytes}}};
    for (const auto& r : {read_elf_memory(bytes.data(), bytes.size(), "hostile.so"), read_as_file(bytes, "hostile.so"),
                          read_elf_pieces(whole, "hostile.so")}) {
      ASSERT_EQ(r.status, ElfReadStatus::invalid) << (large ? "large" : "small");
      EXPECT_NE(r.diagnostic.message.find(b.expect), std::string::npos) << r.diagnostic.message;
      EXPECT_EQ(r.diagnostic.file, "hostile.so");
    }
  }
}

// Offsets into the writer's ELF64 layout: program headers at 64 (56 bytes each; PT_DYNAMIC is
// the second: p_offset at +8, p_filesz at +32; PT_LOAD is the first); e_phoff at 32; e_phentsize
// at 54.
INSTANTIATE_TEST_SUITE_P(Cases, ElfReaderRejects,
                         ::testing::Values(Broken{"DynamicPastEnd", 64 + 56 + 8, 1u << 30, "outside the file"},
                                           Broken{"HugeDynamicSize", 64 + 56 + 32, ~0ull >> 1, "outside the file"},
                                           Broken{"ProgramHeadersPastEnd", 32, 1u << 20, "past the end"},
                                           Broken{"ProgramHeaderSize", 54, 0x0003'0040ull, "not 56"},
                                           Broken{"LoadOffsetWrapsAround", 64 + 8, ~0ull - 100, "no loaded segment"}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// What a reader that fetches ranges has of an object (the remote planner): its first bytes, then
// the dynamic segment and the strings where the layout says. From those pieces alone it reads as
// the whole object does; without the strings it is invalid, as a range outside the file is.
TEST(ElfReader, ReadsAnObjectFromThePiecesTheLayoutNames) {
  for (bool large : {false, true}) {
    const std::string bytes = make_shared_object(hostile_spec(large));
    const std::string_view all(bytes);
    std::uint16_t phnum = 0;
    std::memcpy(&phnum, bytes.data() + offsetof(Elf64_Ehdr, e_phnum), sizeof phnum);
    const std::size_t headers = sizeof(Elf64_Ehdr) + phnum * sizeof(Elf64_Phdr);  // as the writer lays them out
    const auto layout = read_elf_layout({bytes.size(), {{0, all.substr(0, headers)}}}, "x.so");
    ASSERT_EQ(layout.status, ElfReadStatus::ok) << layout.diagnostic.to_string();
    const ElfLayout& l = layout.layout;
    EXPECT_EQ(l.elf_class, ELFCLASS64);
    EXPECT_EQ(l.encoding, ELFDATA2LSB);
    ASSERT_GT(l.dynamic_size, 0U);
    ASSERT_GE(l.dynamic_offset, headers);
    ASSERT_LE(l.dynamic_offset + l.dynamic_size, bytes.size());
    ElfPieces pieces{bytes.size(),
                     {{0, all.substr(0, headers)}, {l.dynamic_offset, all.substr(l.dynamic_offset, l.dynamic_size)}}};
    const auto headers_only = read_elf_pieces(pieces, "x.so");
    EXPECT_EQ(headers_only.status, ElfReadStatus::invalid) << "the strings are in no piece";
    // The rest, as two pieces around the ones already there.
    const std::uint64_t after = l.dynamic_offset + l.dynamic_size;
    pieces.pieces.emplace_back(headers, all.substr(headers, l.dynamic_offset - headers));
    pieces.pieces.emplace_back(after, all.substr(after));
    const auto r = read_elf_pieces(pieces, "x.so");
    ASSERT_EQ(r.status, ElfReadStatus::ok) << r.diagnostic.to_string();
    EXPECT_EQ(r.info.soname, "libx.so");
    EXPECT_EQ(r.info.needed, (std::vector<std::string>{"liby.so"}));
  }
}

// The layout from a head that stops inside the headers is `incomplete` (more of the object may
// read); one whose headers lie (PT_DYNAMIC or the program headers outside the file, sums that
// wrap) is invalid and not incomplete, from any head.
TEST(ElfReader, TheLayoutTellsHeadersCutShortFromHeadersThatLie) {
  const std::string bytes = make_shared_object(hostile_spec(false));
  const std::string_view all(bytes);
  for (std::size_t n : {4, 40, 64, 100}) {
    const auto cut = read_elf_layout({bytes.size(), {{0, all.substr(0, n)}}}, "x.so");
    EXPECT_EQ(cut.status, ElfReadStatus::invalid) << n;
    EXPECT_TRUE(cut.incomplete) << n;
  }
  EXPECT_EQ(read_elf_layout({bytes.size(), {{0, all.substr(1)}}}, "x.so").status, ElfReadStatus::not_elf);
  const std::pair<std::size_t, std::uint64_t> lies[] = {
      {64 + 56 + 8, ~0ull - 16},  // PT_DYNAMIC's offset: offset + size wraps
      {64 + 56 + 8, 1u << 30},    // past the end
      {64 + 56 + 32, ~0ull},      // its size
      {32, ~0ull - 55},           // e_phoff: phoff + phnum * 56 wraps
  };
  for (const auto& [at, value] : lies) {
    std::string hostile = bytes;
    std::memcpy(hostile.data() + at, &value, sizeof value);
    const auto r = read_elf_layout({hostile.size(), {{0, hostile}}}, "x.so");
    EXPECT_EQ(r.status, ElfReadStatus::invalid) << at;
    EXPECT_FALSE(r.incomplete) << at;
    EXPECT_EQ(r.diagnostic.file, "x.so");
  }
}

// A range is read from one piece that holds it whole, and none that wraps or runs past the file.
TEST(ElfReader, PiecesGiveOnlyRangesOnePieceHolds) {
  const std::string a = "abcdef", b = "ghij";
  const ElfPieces p{100, {{0, a}, {10, b}}};
  EXPECT_EQ(std::string(p.bytes(2, 3), 3), "cde");
  EXPECT_EQ(std::string(p.bytes(10, 4), 4), "ghij");
  EXPECT_EQ(p.bytes(4, 4), nullptr) << "runs past the first piece";
  EXPECT_EQ(p.bytes(6, 4), nullptr) << "between the pieces";
  EXPECT_EQ(p.bytes(~0ull - 1, 4), nullptr);
  EXPECT_EQ(p.bytes(11, ~0ull), nullptr);
  EXPECT_EQ(ElfPieces({3, {{0, a}}}).bytes(2, 2), nullptr) << "past the file's size";
}

// Whatever the length a file is cut to, from memory or from a file, small or past the head that
// is read first: never a crash, never an object read as whole.
TEST(ElfReader, TruncatedAtEveryLengthNeverCrashes) {
  for (bool large : {false, true}) {
    ElfSpec spec = hostile_spec(large);
    spec.runpath = "$ORIGIN";
    const std::string bytes = make_shared_object(spec);
    const std::size_t step = large ? 97 : 1;
    for (std::size_t n = 0; n < bytes.size(); n += step) {
      std::string cut = bytes.substr(0, n);
      for (const auto& r : {read_elf_memory(cut.data(), cut.size(), "cut.so"), read_as_file(cut, "cut.so")}) {
        if (n < 4)
          EXPECT_EQ(r.status, ElfReadStatus::not_elf);
        else
          EXPECT_EQ(r.status, ElfReadStatus::invalid) << "at " << n;
      }
    }
  }
}

// ld.so never reads section headers, so a broken section header table does not stop it loading
// the object, and does not make the object unreadable here.
TEST(ElfReader, SectionHeadersAreIgnoredAsTheLoaderIgnoresThem) {
  for (bool large : {false, true}) {
    std::string bytes = make_shared_object(hostile_spec(large));
    const std::uint64_t shoff = 0xdeadbeef;
    const std::uint16_t shnum = 7;
    std::memcpy(bytes.data() + offsetof(Elf64_Ehdr, e_shoff), &shoff, sizeof shoff);
    std::memcpy(bytes.data() + offsetof(Elf64_Ehdr, e_shnum), &shnum, sizeof shnum);
    for (const auto& r : {read_elf_memory(bytes.data(), bytes.size(), "x.so"), read_as_file(bytes, "x.so")}) {
      ASSERT_EQ(r.status, ElfReadStatus::ok) << r.diagnostic.to_string();
      EXPECT_EQ(r.info.soname, "libx.so");
      EXPECT_EQ(r.info.needed, (std::vector<std::string>{"liby.so"}));
    }
  }
}

// A FIFO named like a library (no writer on the other end) is passed over, not waited on.
TEST(ElfReader, AFifoNamedLikeALibraryDoesNotHang) {
  test::TempDir t;
  ASSERT_EQ(::mkfifo((t.path() + "/libfifo.so").c_str(), 0600), 0);
  EXPECT_EQ(read_elf_file(t.path() + "/libfifo.so").status, ElfReadStatus::not_elf);
}

}  // namespace
}  // namespace cudafix::resolver
