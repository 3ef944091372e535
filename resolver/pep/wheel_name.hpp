// Wheel file names (PEP 427) and the tags an interpreter accepts (PEP 425, as packaging.tags
// orders them for CPython on glibc Linux).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cudafix::resolver::inline pep {

// {distribution}-{version}(-{build tag})?-{python tag}-{abi tag}-{platform tag}.whl
struct WheelName {
  std::string name;        // as in the file name (underscores)
  std::string normalized;  // PEP 503
  std::string version;
  std::string build;
  std::vector<std::string> tags;  // every python-abi-platform triple the compressed tag set expands to
};
// nullopt when the file name is no wheel name.
[[nodiscard]] std::optional<WheelName> parse_wheel_name(std::string_view file_name);

// The tags an interpreter of `python_version` ("3.12") on this host accepts, most specific
// first: cp312-cp312-manylinux_2_X_<arch> down to py3-none-any (as packaging.tags does for
// CPython on glibc Linux).
[[nodiscard]] std::vector<std::string> supported_tags(const std::string& python_version,
                                                      const std::string& glibc_version, const std::string& arch);

}  // namespace cudafix::resolver::inline pep
