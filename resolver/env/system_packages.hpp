// Which of the system's packages own an externally managed environment's files (PEP 668): pip
// refuses to change such an environment, so a repair of a file the system's package manager
// installed is that package manager's reinstall, not pip's.
//
// dpkg's database, read as untrusted input: <system root>/var/lib/dpkg/info/<package>.list (or
// <package>:<arch>.list), one absolute path a line, relative to the system root that the prefix
// `/usr` is in: `/` on the system itself, the folder above usr/ for a chroot or an unpacked image.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cudafix::resolver::inline env {

// At most 8 times this many entries of the folder are looked at (a package has several files
// there), and .list files of at most this many bytes read; past them the rest stay unowned (a
// hostile database costs bounded time).
inline constexpr std::size_t k_max_dpkg_lists = 20000;
inline constexpr std::uint64_t k_max_dpkg_list_bytes = 64ULL << 20;

// The package owning each of `paths` (absolute, below `prefix`), for a prefix whose last
// component is `usr`; paths no package lists are left out, and so is everything when the
// prefix is no `usr` or its system has no dpkg database.
[[nodiscard]] std::map<std::string, std::string> debian_owners(const std::string& prefix,
                                                              const std::vector<std::string>& paths);

}  // namespace cudafix::resolver::inline env
