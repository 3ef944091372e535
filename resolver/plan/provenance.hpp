// Where a library comes from: which owner's RECORD describes the bytes on disk at a path, and
// the CUDA major of a dist or of one library file. Shared by doctor's rules and the planner.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "resolver/env/environment.hpp"
#include "resolver/env/knowledge.hpp"

namespace cudafix::resolver::inline plan {

// SHA-256 of a file, in RECORD's form (urlsafe base64 without padding) or as hex (pip's
// --hash, a wheel's digest). Empty when the file cannot be read; `bytes` gets the bytes hashed.
enum class DigestForm { record, hex };
[[nodiscard]] std::string sha256_of_file(const std::string& path, DigestForm form = DigestForm::record,
                                         std::uint64_t* bytes = nullptr);
// RECORD's digest form: urlsafe base64 without padding.
[[nodiscard]] std::string base64url_nopad(const unsigned char* data, std::size_t n);
// The digests a wheel's RECORD may name (PEP 376 leaves the choice open; pypa/installer takes
// whatever hashlib has): sha256, sha384 and sha512. md5, sha1 and the rest are refused, as too
// weak to stand for the bytes or unknown.
[[nodiscard]] bool is_record_digest(std::string_view algorithm);
// A digest of bytes that come in pieces (a member being inflated), in RECORD's form; the
// algorithm one is_record_digest() accepts.
class DigestStream {
 public:
  explicit DigestStream(std::string_view algorithm);
  ~DigestStream();
  DigestStream(const DigestStream&) = delete;
  DigestStream& operator=(const DigestStream&) = delete;
  void update(const void* data, std::size_t n);
  [[nodiscard]] std::string record_digest();  // once, at the end

 private:
  void* ctx_;  // EVP_MD_CTX, from the libcrypto loaded at first use
};
// SHA-256, the digest cudafix writes into the RECORDs it makes.
class Sha256Stream : public DigestStream {
 public:
  Sha256Stream() : DigestStream("sha256") {}
};
// SHA-256 of bytes in memory, as hex.
[[nodiscard]] std::string sha256_hex(std::string_view data);

// The row of `d`'s RECORD that names `abs` (absolute, normalised), or null.
[[nodiscard]] const RecordRow* row_for(const DistInfo& d, const std::string& abs);

// The owners whose RECORD describes the bytes now on disk at `path`: by size first, and by
// SHA-256 only when several owners' sizes match.
[[nodiscard]] std::vector<int> whose_bytes(const Environment& env, const std::string& path,
                                           const std::vector<int>& owners);

// A name (normalised) that names a CUDA provider dist, installed or not: a known family
// provider or an nvidia-* wheel.
[[nodiscard]] bool is_provider_name(const Knowledge& k, const std::string& normalized);
// A dist that ships CUDA libraries: a provider name, or one whose RECORD lists files under nvidia/.
[[nodiscard]] bool is_cuda_provider(const Knowledge& k, const DistInfo& d);
// The CUDA major a dist's name says (-cu12 -> 12), if it says one.
[[nodiscard]] std::optional<int> cuda_major_of_name(std::string_view normalized);
// The CUDA major a provider name (normalised) stands for: the families table, else its -cuNN suffix.
[[nodiscard]] std::optional<int> major_of_provider_name(const Knowledge& k, const std::string& normalized);
// The same for an installed dist.
[[nodiscard]] std::optional<int> major_of_dist(const Knowledge& k, const DistInfo& d);
// The CUDA major of one library file: its owner's; for a path two majors share, the owner
// whose bytes are on disk (`owner` gets it); for an unowned file, its folder's, where one major
// installs there.
[[nodiscard]] std::optional<int> major_of_file(const Environment& env, const Knowledge& k, const std::string& path,
                                               int* owner = nullptr);
// The same for an object of the model, from the owners it carries: a simulated Environment (a
// plan's what-if) has its objects and their owners, but no index of a walk for owners_of().
[[nodiscard]] std::optional<int> major_of_object(const Environment& env, const Knowledge& k, const SharedObject& o);

// Whose build a library file holds: the CUDA major and the version of the dist whose bytes are
// on disk (the owner whose RECORD matches; a simulated write's dist). The dlopen tables follow it,
// not whichever dist-info happens to list the path.
struct BytesIdentity {
  std::optional<int> major;
  std::string version;  // empty: unknown
};
[[nodiscard]] BytesIdentity bytes_identity(const Environment& env, const Knowledge& k, const SharedObject& o);

// The libraries `loader` opens with dlopen (the knowledge's [dlopen.*] groups whose loader's
// soname it carries, from the group's `since` version of its bytes on, by their major), each
// resolved as the loader's dlopen would: in the process that really loads it (the import that
// mapped it first, else its dist's requirements), then loaded. `bytes`: whose build the file
// holds, when the caller knows better than `env` (a simulated environment's unwritten file holds
// the bytes it held before); default: bytes_identity.
struct DlopenResolution {
  std::string group;  // the [dlopen.NAME] table
  const SonameGroup* knowledge = nullptr;
  Resolution resolution;
};
[[nodiscard]] std::vector<DlopenResolution> resolve_dlopens(const Environment& env, const Knowledge& k,
                                                            const SharedObject& loader,
                                                            const std::optional<BytesIdentity>& bytes = std::nullopt);

}  // namespace cudafix::resolver::inline plan
