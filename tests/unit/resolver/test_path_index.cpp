#include <gtest/gtest.h>

#include "resolver/base/path_index.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace cudafix::resolver {

// The walk hashes folder then name, the ownership pass site dir then row: both must land on the
// slot a whole path's hash names, wherever the path is cut, or a present file reads as missing.
TEST(PathHash, IsTheSameWhereverThePathIsCut) {
  const std::string path = "/tmp/cv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9";
  const std::uint64_t whole = path_hash(path);
  for (std::size_t a = 0; a <= path.size(); ++a) {
    EXPECT_EQ(PathHash().add(path.substr(0, a)).add(path.substr(a)).value(), whole) << a;
    for (std::size_t b = a; b <= path.size(); b += 5)
      EXPECT_EQ(PathHash().add(path.substr(0, a)).add(path.substr(a, b - a)).add(path.substr(b)).value(), whole)
          << a << "," << b;
  }
  // Copies go on independently: one prefix, many rows.
  PathHash prefix;
  prefix.add("/v/site/");
  EXPECT_EQ(PathHash(prefix).add("torch/a.py").value(), path_hash("/v/site/torch/a.py"));
  EXPECT_EQ(PathHash(prefix).add("torch/b.py").value(), path_hash("/v/site/torch/b.py"));
}

TEST(PathHash, TellsApartPathsThatDifferByOneByteOrByTrailingZeroes) {
  std::set<std::uint64_t> seen;
  std::vector<std::string> paths = {
      "", std::string(1, '\0'), std::string(2, '\0'), std::string(8, '\0'), std::string(9, '\0'), "a", "b", "ab", "ba"};
  for (int i = 0; i < 20000; ++i)
    paths.push_back("/v/site/pkg" + std::to_string(i % 100) + "/m" + std::to_string(i) + ".py");
  for (const auto& p : paths) EXPECT_TRUE(seen.insert(path_hash(p)).second) << p;
}

TEST(PathIndex, FindsEveryKeyWholeOrInTwoPiecesAndNothingElse) {
  std::vector<std::string> storage;
  storage.reserve(5000);
  for (int i = 0; i < 5000; ++i)
    storage.push_back("/v/site/pkg" + std::to_string(i % 37) + "/sub/m" + std::to_string(i) + ".py");
  std::vector<std::string_view> keys(storage.begin(), storage.end());
  std::vector<std::uint64_t> hashes(keys.size());
  std::transform(keys.begin(), keys.end(), hashes.begin(), [](std::string_view k) { return path_hash(k); });
  PathIndex index;
  index.assign_distinct(keys, hashes, 2);
  ASSERT_EQ(index.size(), storage.size());
  for (std::size_t i = 0; i < storage.size(); ++i) {
    const std::string_view k = storage[i];
    EXPECT_EQ(index.find(k), i);
    const std::string_view head = k.substr(0, 8), tail = k.substr(8);  // "/v/site/" and the row
    EXPECT_EQ(index.find(head, tail, PathHash().add(head).add(tail).value()), i);
    EXPECT_FALSE(index.find(std::string(k) + "c").has_value());
    EXPECT_FALSE(index.find(k.substr(0, k.size() - 1)).has_value());
  }
  // Same bytes, cut elsewhere, is the same path; a head and tail that only look alike are not.
  EXPECT_EQ(index.find("/v/site/pkg1/", "sub/m1.py", path_hash("/v/site/pkg1/sub/m1.py")), 1U);
  EXPECT_FALSE(index.find("/v/site/pkg1", "sub/m1.py", path_hash("/v/site/pkg1sub/m1.py")).has_value());
  EXPECT_FALSE(PathIndex().find("/v/site/x").has_value());
}

}  // namespace cudafix::resolver
