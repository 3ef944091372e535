#include <gtest/gtest.h>

#include "resolver/env/dist_info.hpp"
#include "resolver/env/egg_info.hpp"

namespace cudafix::resolver {

TEST(ParseRecord, ReadsQuotedCommasAndRowsWithoutHash) {
  const auto r = parse_record(
      "torch/__init__.py,sha256=abc-_DEF,123\r\n"
      "\"odd,name.py\",,\n"
      "\"say \"\"hi\"\".txt\",sha256=xyz,7\n"
      "../../../bin/torchrun,sha256=AAAA,99\n"
      "torch-2.11.0.dist-info/RECORD,,\n",
      "RECORD");
  ASSERT_TRUE(r.diagnostics.empty()) << r.diagnostics.front().to_string();
  ASSERT_EQ(r.rows.size(), 5u);
  EXPECT_EQ(r.rows[0].hash_algo(), "sha256");
  EXPECT_EQ(r.rows[0].hash, "abc-_DEF");
  EXPECT_EQ(r.rows[0].size(), 123u);
  EXPECT_EQ(r.rows[1].path, "odd,name.py");
  EXPECT_FALSE(r.rows[1].size());
  EXPECT_EQ(r.rows[2].path, "say \"hi\".txt");
  EXPECT_EQ(r.rows[3].path, "../../../bin/torchrun");
  EXPECT_EQ(r.rows[4].line, 5u);
}

// The algorithm is read back from just before the hash, in the text or in a field unescaped.
TEST(ParseRecord, TheHashAlgorithmIsWhatPrecedesTheHashQuotedOrNot) {
  const auto r = parse_record("a.py,sha256=AB==,3\n\"b.py\",\"sh\"\"a=CD\",4\nc.py,,\nd.py,sha256===,1\n", "RECORD");
  ASSERT_TRUE(r.diagnostics.empty()) << r.diagnostics.front().to_string();
  ASSERT_EQ(r.rows.size(), 4u);
  EXPECT_EQ(r.rows[0].hash_algo(), "sha256");
  EXPECT_EQ(r.rows[0].hash, "AB");
  EXPECT_EQ(r.rows[1].hash_algo(), "sh\"a");
  EXPECT_EQ(r.rows[1].hash, "CD");
  EXPECT_EQ(r.rows[1].size(), 4u);
  EXPECT_EQ(r.rows[2].hash_algo(), "");
  EXPECT_FALSE(r.rows[2].size());
  EXPECT_EQ(r.rows[3].hash_algo(), "sha256") << "a hash of padding alone keeps its algorithm";
  EXPECT_EQ(r.rows[3].hash, "");
}

TEST(ParseRecord, AHashOutsideTheUrlsafeAlphabetIsMalformed) {
  const auto r = parse_record(
      "ok.py,sha256=AZaz09-_==,1\nplus.py,sha256=ab+c,1\nslash.py,sha256=ab/c,1\nhigh.py,sha256=ab\xc3\xa9,1\n"
      "empty.py,sha256=,1\n",
      "RECORD");
  ASSERT_EQ(r.rows.size(), 5u);
  EXPECT_EQ(r.rows[0].hash, "AZaz09-_");
  std::vector<std::size_t> bad;
  for (const auto& d : r.diagnostics)
    if (d.message.find("malformed hash") != std::string::npos) bad.push_back(*d.line);
  EXPECT_EQ(bad, (std::vector<std::size_t>{2, 3, 4, 5}));
}

TEST(ParseRecord, ARecordThatIsNotUtf8HoldsANulOrHasNoRowCannotBeReadAtAll) {
  EXPECT_EQ(parse_record("a.py,,\n", "RECORD").problem, "");
  EXPECT_EQ(parse_record("", "RECORD").problem, "");
  EXPECT_EQ(parse_record("caf\xc3\xa9.py,,\n", "RECORD").problem, "");
  EXPECT_EQ(parse_record("a.py,,\nb\xff.py,,\n", "RECORD").problem,
            "cannot be read: it is not UTF-8 (byte 0xff at offset 8)");
  EXPECT_EQ(parse_record(std::string("a.py,,\n\0,,\n", 10), "RECORD").problem,
            "cannot be read: it holds a NUL byte (at offset 7)");
  EXPECT_EQ(parse_record("just words\nno commas\n", "RECORD").problem,
            "cannot be read: no row of it parses as path,hash,size");
}

TEST(ParseRecord, NamesLineOfEveryBadRowAndKeepsTheRest) {
  const auto r =
      parse_record("a.py,sha256=x,1\nb.py,md5,2\nc.py,sha256=y,notanumber\nd.py,only-two\ne.py,,\n", "RECORD");
  ASSERT_EQ(r.diagnostics.size(), 3u);
  EXPECT_EQ(r.diagnostics[0].line, 2u);
  EXPECT_NE(r.diagnostics[0].message.find("malformed hash"), std::string::npos);
  EXPECT_EQ(r.diagnostics[1].line, 3u);
  EXPECT_NE(r.diagnostics[1].message.find("malformed size"), std::string::npos);
  EXPECT_EQ(r.diagnostics[2].line, 4u);
  EXPECT_NE(r.diagnostics[2].message.find("expected 3 fields"), std::string::npos);
  EXPECT_EQ(r.rows.size(), 4u);  // a, b (hash dropped), c (size dropped), e
}

TEST(ParseRecord, ReportsUnterminatedQuote) {
  const auto r = parse_record("a.py,,\n\"b.py,,\n", "RECORD");
  ASSERT_EQ(r.diagnostics.size(), 1u);
  EXPECT_EQ(r.diagnostics[0].line, 2u);
  EXPECT_EQ(r.rows.size(), 1u);
}

// RECORD is split 64 bytes at a time and hashes are checked 16 characters at a time: every kind
// of row must read the same wherever its commas, quotes, CRs, NULs and bad characters fall.
TEST(ParseRecord, EveryKindOfRowReadsTheSameWhereverItFallsInTheText) {
  struct Expected {
    std::size_t line;
    std::string path, hash;  // path empty: no row; hash empty: none kept
    std::string diagnostic;  // part of the message, or empty
  };
  std::string text;
  std::vector<Expected> expected;
  std::size_t line = 0;
  const std::string b64 = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcde";  // 43 characters
  for (std::size_t pad = 0; pad < 70; ++pad) {
    const std::string name = "pkg/" + std::string(pad, 'x') + ".py";
    std::string bad = b64;
    bad[pad % bad.size()] = '+';
    text += name + ",sha256=" + b64 + "," + std::to_string(pad) + "\n";
    expected.push_back({++line, name, b64, ""});
    text += name + ",sha256=" + bad + ",1\n";
    expected.push_back({++line, name, "", "malformed hash"});
    text += name + ",sha256=" + b64 + "==,2\r\n";
    expected.push_back({++line, name, b64, ""});
    text += "\"" + name + ",q\",,\n";
    expected.push_back({++line, name + ",q", "", ""});
    text += "\"" + name + "\",,\n";
    expected.push_back({++line, name, "", ""});
    text += name + std::string(1, '\0') + ",,\n";
    expected.push_back({++line, "", "", "NUL byte"});
    text += name + ",only-two\n";
    expected.push_back({++line, "", "", "found 2"});
    text += name + ",,,\n";
    expected.push_back({++line, "", "", "found 4"});
    text += "\n";
    ++line;
  }
  // The last row, without a newline, ending exactly at a 64-byte boundary.
  const std::string last = std::string(64 - (text.size() + 2) % 64, 'z');
  text += last + ",,";
  expected.push_back({++line, last, "", ""});
  ASSERT_EQ(text.size() % 64, 0u);

  const auto r = parse_record(text, "RECORD");
  std::size_t row = 0, diag = 0;
  for (const auto& e : expected) {
    if (!e.diagnostic.empty()) {
      ASSERT_LT(diag, r.diagnostics.size());
      EXPECT_EQ(r.diagnostics[diag].line, e.line);
      EXPECT_NE(r.diagnostics[diag].message.find(e.diagnostic), std::string::npos)
          << "line " << e.line << ": " << r.diagnostics[diag].message;
      ++diag;
    }
    if (e.path.empty()) continue;
    ASSERT_LT(row, r.rows.size());
    EXPECT_EQ(r.rows[row].line, e.line);
    EXPECT_EQ(r.rows[row].path, e.path);
    EXPECT_EQ(r.rows[row].hash, e.hash) << "line " << e.line;
    ++row;
  }
  EXPECT_EQ(row, r.rows.size());
  EXPECT_EQ(diag, r.diagnostics.size());
}

TEST(ParseMetadata, UnfoldsContinuationLinesAndStopsAtBody) {
  const auto m = parse_metadata(
      "Metadata-Version: 2.4\nName: nvidia-cudnn-cu13\nVersion: 9.19.0.56\n"
      "Requires-Dist: nvidia-cublas\nSummary: first\n  second\n"
      "Requires-Dist: torch; extra == \"x\"\n\nRequires-Dist: not-a-header-in-body\n",
      "METADATA");
  EXPECT_TRUE(m.diagnostics.empty());
  EXPECT_EQ(m.metadata.name, "nvidia-cudnn-cu13");
  EXPECT_EQ(m.metadata.version, "9.19.0.56");
  ASSERT_EQ(m.metadata.requires_dist.size(), 2u);
  EXPECT_EQ(m.metadata.requires_dist[1], "torch; extra == \"x\"");
}

TEST(ParseMetadata, ReportsMissingNameAndGarbageLines) {
  const auto m = parse_metadata("Version: 1\nthis is not a header\n", "METADATA");
  ASSERT_EQ(m.diagnostics.size(), 2u);
  EXPECT_EQ(m.diagnostics[0].line, 2u);
  EXPECT_EQ(m.diagnostics[1].message, "no Name header");
}

TEST(RequirementRef, FollowsExtrasBothWays) {
  const auto a = requirement_ref("cuda-toolkit[cublas,cudart]==13.0.2; platform_system == \"Linux\"");
  EXPECT_EQ(a.name, "cuda-toolkit");
  EXPECT_EQ(a.extras, (std::vector<std::string>{"cublas", "cudart"}));
  EXPECT_TRUE(a.gated_by.empty());
  const auto b = requirement_ref("nvidia-cublas==13.1.0.3.*; (sys_platform == 'linux') and extra == 'cublas'");
  EXPECT_EQ(b.name, "nvidia-cublas");
  EXPECT_EQ(b.gated_by, (std::vector<std::string>{"cublas"}));
}

}  // namespace cudafix::resolver

namespace cudafix::resolver {
namespace {

// requires.txt's sections become the markers importlib.metadata gives them.
TEST(RequiresTxt, SectionsBecomeExtraAndMarkerClauses) {
  const auto lines = requires_txt_to_requires_dist(
      "six>=1.0\n\n[:python_version < \"3.8\"]\nimportlib-metadata\n[fast]\ntoml\n"
      "[tests:sys_platform == \"linux\"]\npytest>=7\n# a comment\n");
  EXPECT_EQ(lines, (std::vector<std::string>{"six>=1.0", "importlib-metadata; python_version < \"3.8\"",
                                             "toml; extra == \"fast\"",
                                             "pytest>=7; (sys_platform == \"linux\") and extra == \"tests\""}));
}

}  // namespace
}  // namespace cudafix::resolver
