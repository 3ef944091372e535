// A venv shaped like the corpus's torch environment, at the scale the probe needs, over the fake
// libcuda.so.1 and libcudnn.so.9 built from C (tests/fixtures/fake_cuda.c, fake_cudnn.c): what
// `verify` and `lock --verified` run the real cudafix-probe against.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tests/e2e/cudafix_run.hpp"
#include "tests/support/process.hpp"

namespace cudafix::test {

inline const std::string k_verify = k_fixtures + "/verify";

// The folder holding the fake libcuda.so.1 of `behaviour` ("ok", "mig", "init100", ...).
inline std::string fake_cuda(const std::string& behaviour) { return k_verify + "/cuda/" + behaviour; }

// A venv shaped like the corpus's torch environment, at the scale the probe needs: torch's
// libtorch_cuda.so (RPATH into nvidia/), nvidia-cudnn-cu13's libcudnn.so.9 (a fake of the chosen
// behaviour) and nvidia-cuda-runtime's libcudart.so.13, each with its dist-info.
class FakeVenv {
 public:
  // `nccl`: also nvidia-nccl-cu13 2.28.9 with that fake libnccl.so.2 (tests/fixtures/fake_nccl.c).
  explicit FakeVenv(const std::string& cudnn = "v91900", bool with_cudnn_files = true, const std::string& nccl = "") {
    write_file(root() + "/pyvenv.cfg", "home = /usr/bin\nversion = 3.12.3\n");
    add_dist("torch", "2.11.0", {{"torch/lib/libtorch_cuda.so", k_verify + "/libtorch_cuda.so"}},
             "Requires-Dist: nvidia-cudnn-cu13==9.19.0.56; platform_system == \"Linux\"\n");
    add_dist("nvidia-cuda-runtime", "13.0.96",
             {{"nvidia/cu13/lib/libcudart.so.13", k_verify + "/cu13/libcudart.so.13"}});
    add_dist(
        "nvidia-cudnn-cu13", "9.19.0.56",
        {{"nvidia/cudnn/lib/libcudnn.so.9", with_cudnn_files ? k_verify + "/cudnn/" + cudnn + "/libcudnn.so.9" : ""}});
    if (!nccl.empty())
      add_dist("nvidia-nccl-cu13", "2.28.9",
               {{"nvidia/nccl/lib/libnccl.so.2", k_verify + "/nccl/" + nccl + "/libnccl.so.2"}});
  }
  [[nodiscard]] std::string root() const { return dir_.path() + "/venv"; }
  [[nodiscard]] std::string site() const { return root() + "/lib/python3.12/site-packages"; }

 private:
  void add_dist(const std::string& name, const std::string& version,
                const std::vector<std::pair<std::string, std::string>>& files, const std::string& extra_metadata = "") {
    std::string folder = name;
    std::replace(folder.begin(), folder.end(), '-', '_');
    folder = site() + "/" + folder + "-" + version + ".dist-info";
    write_file(folder + "/METADATA",
               "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n" + extra_metadata);
    std::string record;
    for (const auto& [rel, source] : files) {
      record += rel + ",,\n";
      if (source.empty()) continue;  // listed, but gone: a metadata-only dist
      std::filesystem::create_directories(std::filesystem::path(site() + "/" + rel).parent_path());
      std::filesystem::copy_file(source, site() + "/" + rel);
    }
    write_file(folder + "/RECORD", record);
  }
  TempDir dir_;
};

}  // namespace cudafix::test
