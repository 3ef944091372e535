#include "installer/source/find_links.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <optional>
#include <tuple>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/parallel.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::installer::source {
namespace r = cudafix::resolver;

namespace {

struct Listed {
  std::string file, folder;
  std::string unusable;  // why its file name's tags rule it out here, when they do
};

// The *.whl files of each folder, sorted within it; those `names` leaves out are not listed.
// One whose tags this environment does not accept is listed with why, and not read: pip skips it
// by its name alone.
std::vector<Listed> listed_wheels(const std::vector<std::string>& folders, const std::set<std::string>* names,
                                  const std::vector<std::string>& supported_tags) {
  std::vector<Listed> out;
  for (const auto& folder : folders) {
    std::error_code ec;
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(folder, ec))
      if (e.path().extension() == ".whl")
        files.push_back(std::filesystem::absolute(e.path()).lexically_normal().string());
    if (ec) throw r::Error(fmt::format("--find-links {}: cannot be listed: {}", folder, ec.message()));
    std::sort(files.begin(), files.end());
    for (auto& f : files) {
      // A name that does not parse is read all the same, so that it is said what is wrong with it.
      const auto name = r::parse_wheel_name(r::base_name(f));
      if (names && name && !names->count(name->normalized)) continue;
      std::string unusable;
      if (name && !r::tag_rank(*name, supported_tags)) unusable = r::unsupported_tags_text(*name, supported_tags);
      out.push_back({std::move(f), folder, std::move(unusable)});
    }
  }
  return out;
}

}  // namespace

FoundWheels find_wheels(const std::vector<std::string>& folders, const std::vector<std::string>& supported_tags,
                        const std::set<std::string>* names, WheelReadCost* cost) {
  const auto listed = listed_wheels(folders, names, supported_tags);
  std::vector<std::optional<r::Wheel>> read(listed.size());
  std::vector<std::string> problems(listed.size());
  std::mutex cost_lock;
  r::parallel_for(listed.size(), 0, [&](std::size_t i) {
    WheelReadCost mine;
    if (!listed[i].unusable.empty()) {
      problems[i] = "not usable here: " + listed[i].unusable;
      return;
    }
    try {
      read[i] = read_wheel(listed[i].file, supported_tags, &mine);
      read[i]->source = listed[i].folder;
    } catch (const r::Error& e) {
      // read_wheel's errors name the file, which the diagnostic names already.
      std::string_view what = e.what();
      if (const std::string named = listed[i].file + ": "; what.starts_with(named)) what.remove_prefix(named.size());
      problems[i] = std::string(what);
    }
    if (!cost) return;
    const std::lock_guard lock(cost_lock);
    cost->read += mine.read;
    cost->inflated += mine.inflated;
    cost->hashed += mine.hashed;
    cost->objects_from_start += mine.objects_from_start;
    cost->objects_by_map += mine.objects_by_map;
  });
  FoundWheels out;
  for (std::size_t i = 0; i < listed.size(); ++i) {
    if (read[i])
      out.wheels.push_back(std::move(*read[i]));
    else
      out.diagnostics.push_back({listed[i].file, std::nullopt, std::nullopt, problems[i]});
  }
  std::sort(out.wheels.begin(), out.wheels.end(), [](const r::Wheel& a, const r::Wheel& b) {
    return std::tie(a.wheel_name.normalized, a.file) < std::tie(b.wheel_name.normalized, b.file);
  });
  return out;
}

}  // namespace cudafix::installer::source
