#include "installer/source/find_links.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "installer/wheel/read.hpp"
#include "resolver/base/diagnostic.hpp"

namespace cudafix::installer::source {
namespace r = cudafix::resolver;

FoundWheels find_wheels(const std::vector<std::string>& folders, const std::vector<std::string>& supported_tags) {
  FoundWheels out;
  for (const auto& folder : folders) {
    std::error_code ec;
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(folder, ec))
      if (e.path().extension() == ".whl")
        files.push_back(std::filesystem::absolute(e.path()).lexically_normal().string());
    if (ec) throw r::Error(fmt::format("--find-links {}: cannot be listed: {}", folder, ec.message()));
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      try {
        r::Wheel w = read_wheel(f, supported_tags);
        w.source = folder;
        out.wheels.push_back(std::move(w));
      } catch (const r::Error& e) {
        out.diagnostics.push_back({f, std::nullopt, std::nullopt, e.what()});
      }
    }
  }
  std::sort(out.wheels.begin(), out.wheels.end(), [](const r::Wheel& a, const r::Wheel& b) {
    return std::tie(a.wheel_name.normalized, a.file) < std::tie(b.wheel_name.normalized, b.file);
  });
  return out;
}

}  // namespace cudafix::installer::source
