// A front end and the libraries it dlopens, judged as one unit: cuDNN's dispatcher and
// libcudnn_graph.so.9 open their sub-libraries and engines by bare soname at their first use, and
// cuDNN then checks that each one is of its own build. A member the front end's own dist does not
// hold here (the file is not on disk, or its wheel never shipped it) is searched on: the loader
// takes the next copy it finds (another dist's at a shared path, a folder on LD_LIBRARY_PATH, the
// host's ld.so.cache), and the first convolution fails. Shared by doctor's rules, the planner
// (what a repair must bring back, and what it cannot) and `why`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::resolver::inline plan {

// Where a member resolves, from its front end's point of view.
enum class MemberPlace {
  own_dist,    // a file whose bytes are the front end's dist's
  nowhere,     // the loader finds no file
  other_dist,  // a file of the environment whose bytes are another dist's
  unowned,     // a file of the environment no dist's RECORD describes
  outside,     // a file outside the environment (LD_LIBRARY_PATH, ld.so.cache, the default folders)
};
[[nodiscard]] std::string_view to_string(MemberPlace p);

struct FamilyMember {
  const SharedObject* front = nullptr;  // the library whose dlopen loads it (libcudnn_graph.so.9)
  int front_dist = -1;                  // whose bytes the front end holds
  DlopenResolution dlopen;              // its group, and how the loader resolves it
  MemberPlace place = MemberPlace::nowhere;
  int other_dist = -1;  // other_dist: whose bytes the file holds
  std::string real;     // the file, every symlink resolved
  std::string release;  // outside: the release the real file's name carries ("9.14.0"), if any
  std::string package;  // outside, below /usr: the Debian package whose file list names it
  [[nodiscard]] bool split() const { return place != MemberPlace::own_dist; }
};

// The members of every `same_dist` group of every front end the environment holds (owned by a
// dist, its SONAME the group's loader), each placed. A front end no dist owns is the host's or
// a copy: nothing says which build its family should be, and it is left out.
[[nodiscard]] std::vector<FamilyMember> family_members(const Environment& env, const Knowledge& k);

// The same for one front end; with `every_group`, the members of its other dlopen groups too
// (cuDNN's cuBLASLt and NVRTC, another dist's by design), placed the same way.
[[nodiscard]] std::vector<FamilyMember> members_of(const Environment& env, const Knowledge& k,
                                                   const SharedObject& front, bool every_group = false);

// "nvidia/cudnn/lib/libcudnn_graph.so.9 (nvidia-cudnn-cu13 9.19.0.56)"
[[nodiscard]] std::string describe_front(const Environment& env, const FamilyMember& m);
// Where the member resolves, in words: "/opt/cudnn/libcudnn_engines_precompiled.so.9
// (libcudnn_engines_precompiled.so.9.14.0, Debian package libcudnn9-cuda-12), by ld.so.cache",
// "nvidia/cudnn/lib/libcudnn_ops.so.9 (nvidia-cudnn-cu12 9.10.2.21's bytes)", "nowhere".
[[nodiscard]] std::string describe_place(const Environment& env, const FamilyMember& m);
// The error the front end's first use gives: "cuDNN's first use fails with
// CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH", or empty when the knowledge names none.
[[nodiscard]] std::string runtime_error_of(const FamilyMember& m);

// The release a library's real file name carries after its soname, as toolkits and Debian install
// them (SONAME -> SONAME.MINOR.PATCH): ("libcudnn_ops.so.9.14.0", "libcudnn_ops.so.9") -> "9.14.0";
// empty when the name says no more than the soname.
[[nodiscard]] std::string release_in_file_name(std::string_view real_name, const std::string& soname);

// The path the front end's dist would install the member at: beside the front end.
[[nodiscard]] std::string expected_path(const FamilyMember& m);
// Whether the front end's own build of the member is there (at expected_path, its dist's bytes),
// though the search finds another copy first or none (LD_LIBRARY_PATH comes before RUNPATH; a
// front end without RUNPATH searches the folders of whoever loaded it): no reinstall changes that.
[[nodiscard]] bool own_build_present(const Environment& env, const FamilyMember& m);

}  // namespace cudafix::resolver::inline plan
