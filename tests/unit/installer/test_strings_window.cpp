// The names of a dynamic segment found in a decoded window of .dynstr by their fingerprint
// (installer/wheel/strings_window.hpp): taken at the one place where all of them fit, never at
// two, never where a byte of them is unknown or a library's name lacks ".so".
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "installer/wheel/strings_window.hpp"

namespace cudafix::installer {
namespace {

using namespace std::string_literals;

// A dynamic segment giving `refs` (tag, offset), then DT_NULL.
std::string segment(const std::vector<NameRef>& refs) {
  std::string out;
  const auto put = [&](std::uint64_t v) {
    for (int k = 0; k < 8; ++k) out += static_cast<char>((v >> (8 * k)) & 0xff);
  };
  for (const auto& r : refs) {
    put(r.tag);
    put(r.offset);
  }
  put(0);
  put(0);
  return out;
}

// Symbol names, then libstdc++'s names block at offset 1000 of the table (as its .dynstr ends).
const std::string k_block = "\0libm.so.6\0libc.so.6\0libstdc++.so.6\0"s;
const std::vector<NameRef> k_refs{{1, 1000}, {1, 1010}, {14, 1020}};  // NEEDED, NEEDED, SONAME

std::string table_with(const std::string& block) {
  std::string t;
  while (t.size() < 999) t += "_ZNSt6vectorIiE9push_back" + std::string(1, '\0');
  t.resize(999);
  return t + block + "GLIBCXX_3.4"s + '\0';
}

TEST(StringsWindow, TheNamesAreReadAtTheOnePlaceWhereAllFitTheirOffsets) {
  const auto refs = referenced_names(segment({{14, 1020}, {1, 1000}, {1, 1010}}));
  ASSERT_EQ(refs.size(), 3U);
  EXPECT_EQ(refs.front().offset, 1000U) << "by offset";
  const std::string t = table_with(k_block);
  const auto at = fit_names(t, t, refs);
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(*at, 1000U);
}

TEST(StringsWindow, TwoPlacesThatFitGiveNone) {
  // A copy of the block's shape with other names planted before it: neither is taken.
  std::string t = table_with(k_block);
  t.replace(400, k_block.size(), "\0LIBM.so.6\0LIBC.so.6\0LIBSTDC++.so.6\0"s);
  EXPECT_FALSE(fit_names(t, t, k_refs).has_value());
}

TEST(StringsWindow, ANameWithAByteCopiedFromBeforeTheWindowIsNotRead) {
  const std::string zeros = table_with(k_block);
  std::string ones = zeros;
  ones[1012] = static_cast<char>(0xff);  // in "libc.so.6": the two decodes disagree
  EXPECT_FALSE(fit_names(zeros, ones, k_refs).has_value());
}

TEST(StringsWindow, ALibrarysNameWithoutSoOrUnprintableIsNoFit) {
  std::string t = table_with(k_block);
  t.replace(1010, 9, "libc_xx_6");  // NEEDED without ".so"
  EXPECT_FALSE(fit_names(t, t, k_refs).has_value());
  t = table_with(k_block);
  t[1002] = '\x01';
  EXPECT_FALSE(fit_names(t, t, k_refs).has_value());
}

// libz3.so.4 (Debian 12) deflated at zipfile's level: its 9,217-byte head inflates to 19,313 bytes,
// past .dynsym's start (6,992), and the end of its .dynstr (64,433) lies 21,302 bytes into the
// member. Placed by the tables' ratios, what is fetched for the strings ends a little past that;
// placed at the unknown band's (as when the head had to end before .dynsym), at 64 KB.
TEST(StringsWindow, AHeadEndingInsideDynsymStillPlacesTheStringsByTheTables) {
  NamesLayout l;
  l.head_compressed = 9217;
  l.head_raw = 19313;
  l.symtab = 6992;
  l.strtab = 31424;
  l.strsz = 33009;
  l.compressed = 10219723;
  const std::uint64_t high = deflated_place(l, l.strtab + l.strsz, true);
  EXPECT_GE(high, 21302U);
  EXPECT_LE(high, 21302U + 2048);
  EXPECT_LE(deflated_place(l, l.strtab + l.strsz, false), 21302U);
}

}  // namespace
}  // namespace cudafix::installer
