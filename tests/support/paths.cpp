#include "tests/support/paths.hpp"

namespace cudafix::test {

const std::string& source_dir() {
  static const std::string dir = CUDAFIX_SOURCE_DIR;
  return dir;
}

const std::string& fixtures_dir() {
  static const std::string dir = CUDAFIX_FIXTURES;
  return dir;
}

const std::string& cudafix_bin() {
  static const std::string bin = CUDAFIX_BIN;
  return bin;
}

}  // namespace cudafix::test
