// Dists that setuptools left rather than a wheel installer: `.egg-info` folders and files, and
// `.egg-link` development installs. Debian's python3-* packages and `setup.py install` (pip's
// legacy path, `--no-use-pep517` without the wheel package) leave them; pip and importlib list
// them beside dist-info dists.
//
// On-disk formats read here (setuptools' egg-info writer, pip's pip/_internal/metadata):
//   NAME-VERSION[-pyX.Y].egg-info/       a folder:
//     PKG-INFO             METADATA's format (RFC 822 headers); the name and version.
//     installed-files.txt  one path per line, relative to the egg-info folder (`../pkg/mod.py`,
//                          `PKG-INFO`, `../../../../bin/tool`), written by `setup.py install
//                          --record`; Debian's packages have none (dpkg owns their files).
//     requires.txt         requirements, one per line; `[extra]`, `[:marker]` and
//                          `[extra:marker]` sections gate the lines below them, as importlib
//                          turns them into Requires-Dist.
//   NAME-VERSION[-pyX.Y].egg-info        a file: PKG-INFO itself (distutils), no file list.
//   NAME.egg-link                        a file: the project folder (first line) of a
//                                        `setup.py develop` install; its files are the
//                                        project's, not the environment's.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "resolver/env/dist_info.hpp"

namespace cudafix::resolver::inline env {

// requires.txt's lines as the Requires-Dist lines importlib.metadata makes of them.
[[nodiscard]] std::vector<std::string> requires_txt_to_requires_dist(std::string_view text);

// Reads one `.egg-info` folder or file, or `.egg-link` file, in `site_dir`. Like read_dist_info,
// broken files become diagnostics and the dist is still returned. An egg-info folder's rows are
// installed-files.txt's paths made relative to the site folder, then the folder's own files that
// it does not list (pip's uninstall removes the folder whole).
[[nodiscard]] ReadDistInfo read_egg_info(const std::string& site_dir, const std::string& name, SiteRoot root,
                                         ReadRecord with_record = ReadRecord::yes);

// Whether a site folder's entry is one of the dist kinds read_dist_info or read_egg_info reads.
[[nodiscard]] bool is_dist_entry(std::string_view name);

}  // namespace cudafix::resolver::inline env
