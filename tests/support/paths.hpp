// Where the tests find the source tree, the compiled ELF fixtures and the cudafix binary. Only
// tests/support/paths.cpp is compiled with these absolute paths: every other test file is the
// same compile in any clone, so ccache (CMakeLists.txt) finds it compiled in another.
#pragma once

#include <string>

namespace cudafix::test {

[[nodiscard]] const std::string& source_dir();
[[nodiscard]] const std::string& fixtures_dir();
[[nodiscard]] const std::string& cudafix_bin();

}  // namespace cudafix::test
