#include "resolver/plan/provenance.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "resolver/base/shared_library.hpp"
#include "resolver/base/text.hpp"
#include "resolver/pep/pep440.hpp"

namespace cudafix::resolver::inline plan {

std::string base64url_nopad(const unsigned char* data, std::size_t n) {
  static constexpr char k_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  for (std::size_t i = 0; i < n; i += 3) {
    const std::uint32_t v = (std::uint32_t{data[i]} << 16) | (i + 1 < n ? std::uint32_t{data[i + 1]} << 8 : 0) |
                            (i + 2 < n ? std::uint32_t{data[i + 2]} : 0);
    out += k_alphabet[(v >> 18) & 63];
    out += k_alphabet[(v >> 12) & 63];
    if (i + 1 < n) out += k_alphabet[(v >> 6) & 63];
    if (i + 2 < n) out += k_alphabet[v & 63];
  }
  return out;
}

namespace {

std::string hex_of(const unsigned char* data, std::size_t n) {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    out += k_digits[data[i] >> 4];
    out += k_digits[data[i] & 15];
  }
  return out;
}

// libcrypto, loaded the first time something is hashed (resolver/base/shared_library.hpp says why):
// a scan never hashes; doctor does for --verify-hashes and for shared files whose owners' sizes
// tie (whose_bytes); plans and wheels do.
#define LIBCRYPTO_FUNCTIONS(X) \
  X(sha256, EVP_sha256)        \
  X(sha384, EVP_sha384)        \
  X(sha512, EVP_sha512)        \
  X(digest, EVP_Digest)        \
  X(ctx_new, EVP_MD_CTX_new)   \
  X(ctx_free, EVP_MD_CTX_free) \
  X(init, EVP_DigestInit_ex)   \
  X(update, EVP_DigestUpdate)  \
  X(final, EVP_DigestFinal_ex)
CUDAFIX_SHARED_LIBRARY_TABLE(LibCrypto, LIBCRYPTO_FUNCTIONS);
#undef LIBCRYPTO_FUNCTIONS

// Throws Error when libcrypto cannot be loaded (and tries again on the next call).
const LibCrypto& libcrypto() {
  // OpenSSL 3's SONAME; the headers the calls are checked against are 3's.
  static const LibCrypto lib = load_functions<LibCrypto>("libcrypto.so.3", "compute SHA-256");
  return lib;
}

}  // namespace

bool is_record_digest(std::string_view algorithm) {
  return algorithm == "sha256" || algorithm == "sha384" || algorithm == "sha512";
}

DigestStream::DigestStream(std::string_view algorithm) {
  const LibCrypto& c = libcrypto();
  if (!is_record_digest(algorithm)) throw Error(fmt::format("{}: not a digest a RECORD may name", algorithm));
  ctx_ = c.ctx_new();
  c.init(static_cast<EVP_MD_CTX*>(ctx_),
         algorithm == "sha512"   ? c.sha512()
         : algorithm == "sha384" ? c.sha384()
                                 : c.sha256(),
         nullptr);
}

DigestStream::~DigestStream() { libcrypto().ctx_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void DigestStream::update(const void* data, std::size_t n) {
  libcrypto().update(static_cast<EVP_MD_CTX*>(ctx_), data, n);
}

std::string DigestStream::record_digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  libcrypto().final(static_cast<EVP_MD_CTX*>(ctx_), md, &len);
  return base64url_nopad(md, len);
}

std::string sha256_hex(std::string_view data) {
  const LibCrypto& c = libcrypto();
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  c.digest(data.data(), data.size(), md, &len, c.sha256(), nullptr);
  return hex_of(md, len);
}

std::string sha256_of_file(const std::string& path, DigestForm form, std::uint64_t* bytes) {
  const LibCrypto& c = libcrypto();
  // A regular file only (O_NONBLOCK for the open): a FIFO or a device in a listed file's place
  // would hang the hash or never end it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  if (struct stat st{}; ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return "";
  }
  // One buffer per thread: zeroing a fresh megabyte per file cost more than hashing small files.
  thread_local std::vector<unsigned char> buf(1 << 20);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  std::uint64_t total = 0;
  auto read_some = [&]() -> ssize_t {
    for (;;) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      return n;
    }
  };
  ssize_t n = read_some();
  if (n >= 0 && static_cast<std::size_t>(n) < buf.size()) {
    // Most files fit in one read: hash them in one call, without a digest context.
    total = static_cast<std::uint64_t>(n);
    c.digest(buf.data(), static_cast<std::size_t>(n), md, &len, c.sha256(), nullptr);
  } else {
    EVP_MD_CTX* ctx = c.ctx_new();
    c.init(ctx, c.sha256(), nullptr);
    while (n > 0) {
      c.update(ctx, buf.data(), static_cast<std::size_t>(n));
      total += static_cast<std::uint64_t>(n);
      n = read_some();
    }
    c.final(ctx, md, &len);
    c.ctx_free(ctx);
  }
  ::close(fd);
  if (n < 0) return "";
  if (bytes) *bytes = total;
  return form == DigestForm::hex ? hex_of(md, len) : base64url_nopad(md, len);
}

// A dist that ships CUDA libraries: a known family provider, an nvidia-* wheel, or one whose
// RECORD lists files under nvidia/.
bool is_provider_name(const Knowledge& k, const std::string& normalized) {
  return k.family_of_dist(normalized).has_value() || normalized.rfind("nvidia-", 0) == 0;
}

bool is_cuda_provider(const Knowledge& k, const DistInfo& d) {
  if (is_provider_name(k, d.normalized)) return true;
  return std::any_of(d.record.begin(), d.record.end(),
                     [](const RecordRow& row) { return row.path.substr(0, 7) == "nvidia/"; });
}

// The CUDA major a dist's name says (-cu12 -> 12), if it says one.
std::optional<int> cuda_major_of_name(std::string_view normalized) {
  const auto at = normalized.rfind("-cu");
  if (at == std::string_view::npos) return std::nullopt;
  int major = 0;
  const auto digits = normalized.substr(at + 3);
  if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  for (char c : digits) major = major * 10 + (c - '0');
  return major;
}

const RecordRow* row_for(const DistInfo& d, const std::string& abs) {
  std::string joined;
  for (const auto& row : d.record) {
    join_normal(d.site_dir, row.path, joined);
    if (joined == abs) return &row;
  }
  return nullptr;
}

// The owners whose RECORD describes the bytes now on disk at `path`: by size first, and by
// SHA-256 only when several owners' sizes match.
std::vector<int> whose_bytes(const Environment& env, const std::string& path, const std::vector<int>& owners) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  std::vector<int> whose;
  for (int o : owners) {
    const auto* row = row_for(env.dists[static_cast<std::size_t>(o)], path);
    if (row && row->has_size && row->size_value == static_cast<std::uint64_t>(st.st_size)) whose.push_back(o);
  }
  if (whose.size() <= 1) return whose;
  const std::string hash = sha256_of_file(path, DigestForm::record);
  std::vector<int> by_hash;
  for (int o : whose) {
    const auto* row = row_for(env.dists[static_cast<std::size_t>(o)], path);
    if (row && row->hash == hash) by_hash.push_back(o);
  }
  return by_hash;
}

// The CUDA major a dist provides: from the families table, else its -cuNN suffix.
std::optional<int> major_of_provider_name(const Knowledge& k, const std::string& normalized) {
  if (auto f = k.family_of_dist(normalized)) return f->second;
  return cuda_major_of_name(normalized);
}

std::optional<int> major_of_dist(const Knowledge& k, const DistInfo& d) {
  return major_of_provider_name(k, d.normalized);
}

// The CUDA major of one library file: its owner's; for a path two majors share, the owner
// whose bytes are on disk; for an unowned file, its folder's, where one major installs there.
namespace {
std::optional<int> major_from_owners(const Environment& env, const Knowledge& k, const std::string& path,
                                     std::vector<int> owners, int* owner) {
  if (owners.size() > 1) owners = whose_bytes(env, path, owners);
  if (owners.size() == 1) {
    if (owner) *owner = owners.front();
    return major_of_dist(k, env.dists[static_cast<std::size_t>(owners.front())]);
  }
  const SiteDir* site = env.site_of(path);
  if (!site) return std::nullopt;
  return k.major_of_folder(relative_to(parent_dir(path), site->real));
}
}  // namespace

std::optional<int> major_of_file(const Environment& env, const Knowledge& k, const std::string& path, int* owner) {
  return major_from_owners(env, k, path, env.owners_of(path), owner);
}

std::optional<int> major_of_object(const Environment& env, const Knowledge& k, const SharedObject& o) {
  return major_from_owners(env, k, o.path, o.owners, nullptr);
}

BytesIdentity bytes_identity(const Environment& env, const Knowledge& k, const SharedObject& o) {
  BytesIdentity id;
  std::vector<int> whose;
  if (o.bytes_owner >= 0)
    whose = {o.bytes_owner};
  else if (o.owners.size() > 1)
    whose = whose_bytes(env, o.path, o.owners);
  else
    whose = o.owners;
  if (whose.size() == 1) {
    const auto& d = env.dists[static_cast<std::size_t>(whose.front())];
    id.major = major_of_dist(k, d);
    id.version = d.version;
    return id;
  }
  id.major = major_of_object(env, k, o);
  return id;
}

namespace {
// What cuDNN appends to a sub-library's soname, in the order its dlopen tries them (glibc's
// LD_DEBUG=files on an H100, cuDNN 9.19.0.56): its own release, MAJOR.MINOR, then nothing.
std::vector<std::string> release_names(const std::string& version) {
  std::vector<std::string> out;
  if (const auto v = Version::parse(version); v && v->release().size() >= 3) {
    const auto& r = v->release();
    out.push_back(fmt::format(".{}.{}", r[1], r[2]));
    out.push_back(fmt::format(".{}", r[1]));
  }
  out.emplace_back("");
  return out;
}
}  // namespace

std::vector<DlopenResolution> resolve_dlopens(const Environment& env, const Knowledge& k, const SharedObject& loader,
                                              const std::optional<BytesIdentity>& bytes) {
  std::vector<DlopenResolution> out;
  if (loader.elf.status != ElfReadStatus::ok || !loader.elf.info.soname || !env.loader) return out;
  const int owner = loader.owners.empty() ? -1 : loader.owners.front();
  std::optional<BytesIdentity> identity = bytes;  // asked only when a group needs it
  auto identity_of = [&]() -> const BytesIdentity& {
    if (!identity) identity = bytes_identity(env, k, loader);
    return *identity;
  };
  std::optional<Process> p;
  int index = -1;
  for (const auto& [name, g] : k.dlopen) {
    if (g.loaded_by != *loader.elf.info.soname) continue;
    if (!g.since.empty()) {
      const auto have = Version::parse(identity_of().version);
      const auto since = Version::parse(g.since);
      // A version not known (bytes no owner's RECORD describes) gates the group out: a library
      // reported missing must be one the loader is known to load.
      if (!have || !since || *have < *since) continue;
    }
    const auto sonames = g.sonames_for(g.sonames_by_major.empty() ? std::nullopt : identity_of().major);
    if (sonames.empty()) continue;
    if (!p) {
      p = env.process_for(loader.loaded_in >= 0 ? loader.loaded_in : owner);
      index = env.loader->load(*p, loader.path);
    }
    if (index < 0) return out;
    const auto names = g.release_names ? release_names(identity_of().version) : std::vector<std::string>{};
    for (const auto& soname : sonames) {
      Resolution r;
      for (const auto& suffix : names) {
        r = env.loader->resolve(*p, index, soname + suffix);
        if (r.found()) break;
      }
      // The last try is the soname's stem, the development link (libcudnn_ops.so).
      if (!names.empty() && !r.found()) r = env.loader->resolve(*p, index, soname.substr(0, soname.rfind(".so.") + 3));
      if (names.empty()) r = env.loader->resolve(*p, index, soname);
      r.name = soname;
      out.push_back({name, &g, std::move(r)});
    }
  }
  return out;
}

}  // namespace cudafix::resolver::inline plan
