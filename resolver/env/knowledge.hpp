// What cudafix knows about the field, as a plain value. rules/ loads it from TOML (built-in
// rules/data/knowledge.toml, then the user's files); resolver/ only reads it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cudafix::resolver::inline env {

struct SonameGroup {
  std::string why;  // shown to the user: "NVIDIA driver", "InfiniBand verbs", ...
  std::vector<std::string> sonames;
  std::string loaded_by;  // dlopen groups: the soname of the library whose dlopen loads them
  std::string since;      // dlopen groups: the loader's version from which it loads them ("9.21")
  // dlopen groups: names that depend on the CUDA major the loader was built for (cuDNN for CUDA
  // 13 dlopens libcublasLt.so.13, for CUDA 12 libcublasLt.so.12), by that major.
  std::map<int, std::vector<std::string>> sonames_by_major;
  // dlopen groups: the loader's own dist ships these (cuDNN's sub-libraries), so a copy from
  // anywhere else (another dist, another folder, the host) is another build of the family.
  bool same_dist = false;
  // dlopen groups: the loader tries SONAME.MINOR.PATCH and SONAME.MINOR of its own release first,
  // then SONAME, then the soname's stem (cuDNN: libcudnn_ops.so.9.19.0, .so.9.19, .so.9, .so).
  bool release_names = false;
  // dlopen groups: what the loader's first use reports when a member resolves nowhere
  // (`missing_error`) or to another build (`mismatch_error`); empty: nothing known.
  std::string missing_error, mismatch_error;

  // The sonames a loader of `major` opens: `sonames`, plus that major's; none of the per-major
  // ones when the loader's major is unknown.
  [[nodiscard]] std::vector<std::string> sonames_for(std::optional<int> major) const;
  [[nodiscard]] bool names(const std::string& soname) const;
};

// One CUDA library family (cublas, cudnn, ...) in one CUDA major: what its wheels install.
struct FamilyMajor {
  std::vector<std::string> sonames;
  std::vector<std::string> folders;  // relative to site-packages: "nvidia/cu13/lib"
  std::vector<std::string> dists;    // normalised names: "nvidia-cublas"
};

struct CudaFamily {
  std::string name;
  std::map<int, FamilyMajor> majors;  // by CUDA major
};

struct Knowledge {
  std::map<std::string, CudaFamily> families;
  // Minimum Linux driver per CUDA major ("580.65.06" for 13).
  std::map<int, std::string> minimum_driver;
  // Paths several wheels write on purpose (nvidia/__init__.py): shared, but harmless.
  std::vector<std::string> harmless_shared_paths;
  // Dists without files by design: their extras pull the real wheels (cuda-toolkit).
  std::vector<std::string> meta_packages;

  // Sonames the NVIDIA driver installs (never a pip wheel): libcuda.so.1, libnvidia-ml.so.1, ...
  std::map<std::string, SonameGroup> driver;
  // System libraries an optional feature or transport needs only when it is used.
  std::map<std::string, SonameGroup> optional;
  // Libraries loaded with dlopen by bare soname (no DT_NEEDED walk sees them), with their loader.
  std::map<std::string, SonameGroup> dlopen;

  [[nodiscard]] const SonameGroup* driver_group(const std::string& soname) const;
  [[nodiscard]] const SonameGroup* optional_group(const std::string& soname) const;
  [[nodiscard]] const SonameGroup* dlopen_group(const std::string& soname) const;

  // The family and major a dist (normalised name) provides, if it is a known provider.
  [[nodiscard]] std::optional<std::pair<const CudaFamily*, int>> family_of_dist(const std::string& normalized) const;
  // The major a site-relative folder belongs to when only one major installs there.
  [[nodiscard]] std::optional<int> major_of_folder(const std::string& folder) const;
};

}  // namespace cudafix::resolver::inline env
