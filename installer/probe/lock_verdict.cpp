#include "installer/probe/lock_verdict.hpp"

#include <fmt/format.h>

#include "resolver/base/text.hpp"

namespace cudafix::installer::probe {
namespace r = cudafix::resolver;

std::string cudnn_version_text(long long version) {
  // cuDNN 9 numbers its versions major*10000 + minor*100 + patch; 8 and older major*1000 + ...
  if (version >= 10000) return fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
  return fmt::format("{}.{}.{}", version / 1000, version / 100 % 10, version % 100);
}

namespace {

// The driver's release from the libcuda file the loader mapped ("libcuda.so.550.54.15" ->
// "550.54.15"), else the CUDA version it reports.
std::string driver_text(const VerifyReport& report) {
  if (report.libcuda_real) {
    const std::string name(r::base_name(*report.libcuda_real));
    if (name.starts_with("libcuda.so.") && name.size() > 11) return name.substr(11);
  }
  return report.driver_version ? std::to_string(*report.driver_version) : "unknown";
}

}  // namespace

std::vector<r::LockVerdict> lock_verdicts(const r::Environment& env, const VerifyReport& report,
                                          const std::string& at) {
  std::vector<r::LockVerdict> out;
  if (report.exit_code() != 0 || !report.consumer) return out;
  std::optional<std::string> cudnn_path;
  for (const auto& f : report.loaded)
    // The model's path where it matched (a resolution's, as drift compares them), else the loader's.
    if (f.soname.starts_with("libcudnn.so") && f.path && !cudnn_path)
      cudnn_path = env.display(f.match && f.predicted ? *f.predicted : r::real_path_of(*f.path));
  for (const auto& d : report.records.devices) {
    r::LockVerdict v;
    v.device = d.uuid.empty() ? std::to_string(d.ordinal) : d.uuid;
    v.driver = driver_text(report);
    v.cuda = report.driver_version;
    if (report.cudnn_version) v.cudnn = cudnn_version_text(*report.cudnn_version);
    v.consumer = env.display(*report.consumer);
    v.cudnn_path = cudnn_path;
    if (!at.empty()) v.at = at;
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace cudafix::installer::probe
