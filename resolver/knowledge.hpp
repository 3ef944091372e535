// What cudafix knows about the field, as a plain value. rules/ loads it from TOML (built-in
// rules/data/knowledge.toml, then the user's files); resolver/ only reads it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cudafix::resolver {

struct SonameGroup {
  std::string why;  // shown to the user: "NVIDIA driver", "InfiniBand verbs", ...
  std::vector<std::string> sonames;
  std::string loaded_by;  // dlopen groups: the soname of the library whose dlopen loads them
};

struct Knowledge {
  // Sonames the NVIDIA driver installs (never a pip wheel): libcuda.so.1, libnvidia-ml.so.1, ...
  std::map<std::string, SonameGroup> driver;
  // System libraries an optional feature or transport needs only when it is used.
  std::map<std::string, SonameGroup> optional;
  // Libraries loaded with dlopen by bare soname (no DT_NEEDED walk sees them), with their loader.
  std::map<std::string, SonameGroup> dlopen;

  [[nodiscard]] const SonameGroup* driver_group(const std::string& soname) const;
  [[nodiscard]] const SonameGroup* optional_group(const std::string& soname) const;
  [[nodiscard]] const SonameGroup* dlopen_group(const std::string& soname) const;
};

}  // namespace cudafix::resolver
