#include "resolver/elf/elf_store.hpp"

#include <fcntl.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdint>

#include "resolver/base/parallel.hpp"

namespace cudafix::resolver::inline elf {
namespace {

constexpr std::string_view k_magic = "cfxelf01";

bool get_string(CacheReader& r, std::string_view& s) {
  std::uint32_t n = 0;
  return r.get(n) && r.take(n, s);
}

bool get_optional(CacheReader& r, std::optional<std::string>& out) {
  std::uint8_t present = 0;
  if (!r.get(present) || present > 1) return false;
  if (present == 0) return true;
  std::string_view s;
  if (!get_string(r, s)) return false;
  out.emplace(s);
  return true;
}

// One answer's bytes, decoded; none when they do not decode whole.
std::optional<ElfRead> decode(std::string_view bytes, const std::string& path) {
  CacheReader r(bytes);
  ElfRead e;
  std::uint8_t status = 0;
  std::uint32_t needed = 0;
  if (!r.get(status) || status > static_cast<std::uint8_t>(ElfReadStatus::invalid)) return std::nullopt;
  e.status = static_cast<ElfReadStatus>(status);
  if (!r.get(e.info.elf_class) || !r.get(e.info.machine) || !r.get(e.info.type) || !r.get(e.info.flags_1) ||
      !get_optional(r, e.info.soname) || !get_optional(r, e.info.rpath) || !get_optional(r, e.info.runpath) ||
      !r.get(needed) || needed > r.rest().size() / 4)
    return std::nullopt;
  e.info.needed.reserve(needed);
  for (std::uint32_t i = 0; i < needed; ++i) {
    std::string_view s;
    if (!get_string(r, s)) return std::nullopt;
    e.info.needed.emplace_back(s);
  }
  std::uint8_t has_offset = 0;
  std::string_view message;
  if (!r.get(has_offset) || has_offset > 1) return std::nullopt;
  if (has_offset == 1) {
    std::uint64_t offset = 0;
    if (!r.get(offset)) return std::nullopt;
    e.diagnostic.offset = offset;
  }
  if (!get_string(r, message) || !r.rest().empty()) return std::nullopt;
  if (e.status == ElfReadStatus::invalid) {
    e.diagnostic.file = path;
    e.diagnostic.message = std::string(message);
  }
  return e;
}

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_string(std::string& out, std::string_view s) {
  put(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

void put_optional(std::string& out, const std::optional<std::string>& s) {
  put(out, static_cast<std::uint8_t>(s ? 1 : 0));
  if (s) put_string(out, *s);
}

// The inverse of decode.
void encode(const ElfRead& e, std::string& out) {
  put(out, static_cast<std::uint8_t>(e.status));
  put(out, e.info.elf_class);
  put(out, e.info.machine);
  put(out, e.info.type);
  put(out, e.info.flags_1);
  put_optional(out, e.info.soname);
  put_optional(out, e.info.rpath);
  put_optional(out, e.info.runpath);
  put(out, static_cast<std::uint32_t>(e.info.needed.size()));
  for (const auto& n : e.info.needed) put_string(out, n);
  put(out, static_cast<std::uint8_t>(e.diagnostic.offset ? 1 : 0));
  if (e.diagnostic.offset) put(out, *e.diagnostic.offset);
  put_string(out, e.status == ElfReadStatus::invalid ? e.diagnostic.message : std::string());
}

}  // namespace

std::string elf_store_file(std::string_view cache_dir, const std::vector<std::string>& roots) {
  return cache_file_name(cache_dir, "elf", roots);
}

ElfStore ElfStore::load(const std::string& file) {
  ElfStore store;
  auto mapped = map_cache_file(file, k_magic);
  if (!mapped.mapping) {
    store.problem_ = std::move(mapped.problem);
    return store;
  }
  auto reject = [&](const std::string& why) {
    ElfStore bad;
    bad.problem_ = fmt::format("{}: {}", file, why);
    return bad;
  };
  CacheReader r(mapped.payload);
  std::uint32_t count = 0, zero = 0;
  // The count is checked against the smallest record (a stamp and two empty strings) before
  // anything is reserved for it.
  constexpr std::size_t k_smallest = k_stamp_bytes + 2 * sizeof(std::uint32_t);
  if (!r.get(count) || !r.get(zero) || count > r.rest().size() / k_smallest)
    return reject("its size does not match its counts");
  store.kept_.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    Kept k;
    std::string_view path;
    std::string_view answer;
    if (!r.get(k.stamp) || !get_string(r, path) || !get_string(r, answer))
      return reject(fmt::format("object {} runs past the end", i));
    if (!path.starts_with('/') || !decode(answer, std::string(path)))
      return reject(fmt::format("object {} is not an answer", i));
    k.answer = answer;
    store.kept_.emplace(path, k);
  }
  if (!r.rest().empty()) return reject("bytes are left after the last object");
  store.mapping_ = std::move(mapped.mapping);
  return store;
}

std::optional<ElfRead> ElfStore::find(const std::string& path, const Stamp& stamp) const {
  const auto it = kept_.find(path);
  if (it == kept_.end() || !(it->second.stamp == stamp)) return std::nullopt;
  return decode(it->second.answer, path);
}

std::string store_elf_answers(const std::string& file, const std::vector<ElfAnswer>& answers) {
  return store_cache_file(file, k_magic, [&](CacheWriter& w) {
    w.put(static_cast<std::uint32_t>(answers.size())).put(std::uint32_t{0});
    std::string record;
    for (const auto& a : answers) {
      // Each string's length comes before it, so the record is made whole, then written.
      record.clear();
      put_string(record, *a.path);
      std::string answer;
      encode(*a.read, answer);
      put_string(record, answer);
      w.put(a.stamp).append(record);
    }
  });
}

std::vector<ElfRead> read_elf_files(const std::vector<std::string>& candidates, unsigned threads,
                                    const std::string& store_file, ElfStoreReport& report) {
  std::vector<ElfRead> reads(candidates.size());
  report = {store_file, candidates.size(), 0, false, {}};
  if (store_file.empty()) {
    parallel_for(candidates.size(), threads, [&](std::size_t i) { reads[i] = read_elf_file(candidates[i]); });
    return reads;
  }
  const auto start = std::chrono::system_clock::now();
  const ElfStore store = ElfStore::load(store_file);
  report.problem = store.problem();
  std::vector<std::optional<Stamp>> stamps(candidates.size());
  std::atomic<std::size_t> reused{0};
  std::atomic<std::size_t> fresh{0};  // read from the disk, stamped
  parallel_for(candidates.size(), threads, [&](std::size_t i) {
    if (store.knows(candidates[i])) {
      stamps[i] = stamp_at(AT_FDCWD, candidates[i].c_str(), AT_SYMLINK_NOFOLLOW);
      if (stamps[i]) {
        if (auto kept = store.find(candidates[i], *stamps[i])) {
          reads[i] = std::move(*kept);
          ++reused;
          return;
        }
      }
    }
    // Stamped before it is read, so that a change during the read shows next time.
    reads[i] = read_elf_file(candidates[i], stamps[i] ? nullptr : &stamps[i]);
    if (stamps[i]) ++fresh;
  });
  report.reused = reused;
  std::vector<ElfAnswer> answers;
  answers.reserve(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (stamps[i] && settled(*stamps[i], start)) answers.push_back({&candidates[i], &reads[i], *stamps[i]});
  // Written again when an object was read from the disk, or one the store kept is no longer a
  // candidate (a file that cannot be opened is neither read nor kept).
  if (fresh > 0 || answers.size() != store.size()) {
    const std::string problem = store_elf_answers(store_file, answers);
    report.written = problem.empty();
    if (!problem.empty()) report.problem = problem;
  }
  return reads;
}

}  // namespace cudafix::resolver::inline elf
