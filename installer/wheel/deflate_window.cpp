#include "installer/wheel/deflate_window.hpp"

#include <algorithm>
#include <array>
#include <atomic>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/parallel.hpp"

namespace cudafix::installer {
namespace r = cudafix::resolver;

InflateBudget::InflateBudget(std::uint64_t bytes, Clock::duration time, InflateBudget* parent)
    : bytes_(bytes), start_(Clock::now()), deadline_(start_ + time), parent_(parent) {}

bool InflateBudget::spend(std::uint64_t n) {
  if (spent()) return false;
  const std::uint64_t now = used_.fetch_add(n, std::memory_order_relaxed) + n;
  // The clock read at every call: each follows at most a few hundred kilobytes inflated.
  const bool late = Clock::now() > deadline_;
  if (late) out_of_time_.store(true, std::memory_order_relaxed);
  if (now > bytes_ || late || (parent_ && !parent_->spend(n))) {
    spent_.store(true, std::memory_order_relaxed);
    return false;
  }
  return true;
}

Inflater::Inflater(int fill, InflateBudget* budget) : budget_(budget) {
  if (inflateInit2(&z_, -15) != Z_OK) throw r::Error("inflateInit2 failed");
  if (fill >= 0) {
    std::array<unsigned char, 32768> dict{};
    dict.fill(static_cast<unsigned char>(fill));
    inflateSetDictionary(&z_, dict.data(), dict.size());
  }
}

Inflater::~Inflater() { inflateEnd(&z_); }

bool Inflater::spend(std::uint64_t n) {
  produced += n;
  if (budget_ && !budget_->spend(n)) over_budget = true;
  return !over_budget;
}

void Inflater::prime(unsigned char byte, int skip) {
  if (skip) inflatePrime(&z_, 8 - skip, byte >> skip);
}

bool Inflater::feed(const unsigned char* in, std::size_t n, std::size_t limit) {
  z_.next_in = const_cast<unsigned char*>(in);
  z_.avail_in = static_cast<uInt>(n);
  // On while input is left, and after: zlib may hold output it had no room for (a long copy, codes
  // in its bit buffer) when the last feed stopped at `limit` with its input used up.
  while (!ended && out.size() < limit) {
    const std::size_t before = out.size();
    // While discarding, whole steps whatever `limit` (a span of 100 bytes 1 GB deep is not read
    // 100 bytes at a time); what they inflate past `limit` is dropped below.
    const std::size_t step = std::size_t{1} << 18;
    const std::size_t grown = discard > 0 ? before + step : std::min(limit, before + step);
    // Doubling: growing by the step alone copied what was inflated so far at every step (an
    // object inflated 50 MB from its start spent a second in memcpy).
    if (grown > out.capacity()) out.reserve(std::max(grown, std::min(limit, 2 * out.capacity())));
    out.resize(grown);
    z_.next_out = reinterpret_cast<unsigned char*>(out.data()) + before;
    z_.avail_out = static_cast<uInt>(out.size() - before);
    const int rc = inflate(&z_, Z_NO_FLUSH);
    out.resize(out.size() - z_.avail_out);
    if (!spend(out.size() - before)) return false;
    if (discard > 0) {  // `out` is empty while discarding: each erase moves at most one step's bytes
      const std::size_t drop = static_cast<std::size_t>(std::min<std::uint64_t>(discard, out.size() - before));
      out.erase(before, drop);
      discard -= drop;
      if (out.size() > limit) out.resize(limit);
    }
    if (rc == Z_STREAM_END) {
      ended = true;
      ended_at_input_end = z_.avail_in == 0;
    }
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_MEM_ERROR) return false;
    if (rc == Z_BUF_ERROR && out.size() == before) break;
  }
  return true;
}

int Inflater::blocks(const unsigned char* in, std::size_t n, int enough) {
  z_.next_in = const_cast<unsigned char*>(in);
  z_.avail_in = static_cast<uInt>(n);
  std::array<unsigned char, 1 << 16> sink{};
  int done = 0;
  // Three true blocks inflate to a few hundred kilobytes; a false start decoding on and on
  // (crafted, or garbage read as fixed-Huffman codes) is not one.
  constexpr std::uint64_t k_most = 16 << 20;
  const std::uint64_t before = produced;
  while (z_.avail_in > 0 && done < enough && produced - before < k_most) {
    z_.next_out = sink.data();
    z_.avail_out = sink.size();
    const int rc = inflate(&z_, Z_BLOCK);
    if (!spend(sink.size() - z_.avail_out)) return -1;
    if (rc == Z_STREAM_END) {
      ended = true;
      ended_at_input_end = z_.avail_in == 0;
      return done + 1;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) return -1;
    if ((z_.data_type & 128) && z_.avail_out > 0) {  // stopped at a block's end
      ++done;
      // The final block's: zlib says the stream ended only on the next call, which may have no
      // input left to make.
      if (z_.data_type & 64) {
        ended = true;
        ended_at_input_end = z_.avail_in == 0;
        return done;
      }
    }
  }
  return done;
}

bool Inflater::blocks_until(const unsigned char* in, std::size_t n, std::uint64_t stop, std::uint64_t most) {
  z_.next_in = const_cast<unsigned char*>(in);
  z_.avail_in = static_cast<uInt>(n);
  std::array<unsigned char, 1 << 16> sink{};
  // Where inflate stopped, in bits into `in`: zlib keeps fewer than 8 bits of input unused when
  // it returns (data_type's low bits).
  const auto at = [&] { return std::uint64_t{n - z_.avail_in} * 8 - (z_.data_type & 7); };
  while (true) {
    z_.next_out = sink.data();
    z_.avail_out = sink.size();
    const int rc = inflate(&z_, Z_BLOCK);
    if (!spend(sink.size() - z_.avail_out)) return false;
    if (rc == Z_STREAM_END) {
      ended = true;
      return at() == stop;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) return false;
    if (produced > most) return false;
    if ((z_.data_type & 128) && z_.avail_out > 0) {
      // The final block ended (zlib says the stream ended only on the next call, when there may be no input left).
      if (z_.data_type & 64) {
        ended = true;
        return at() == stop;
      }
      if (at() == stop) return true;
      if (at() > stop) return false;
    }
    if (z_.avail_in == 0 && z_.avail_out > 0) return false;
  }
}

namespace {

// The bit at `bit` of `p`, LSB first as deflate reads them, `k` of them.
unsigned bits(const unsigned char* p, std::size_t bit, int k) {
  unsigned v = 0;
  for (int i = 0; i < k; ++i) v |= ((p[(bit + i) / 8] >> ((bit + i) % 8)) & 1U) << i;
  return v;
}

// Whether a dynamic-Huffman block could start at `bit`: its counts in range and its code length
// code complete (zlib refuses any other).
bool could_start_block(const unsigned char* p, std::size_t n, std::size_t bit) {
  if ((bit + 17 + 19 * 3) / 8 + 1 >= n) return false;
  if (bits(p, bit + 1, 2) != 2) return false;
  if (bits(p, bit + 3, 5) > 29 || bits(p, bit + 8, 5) > 29) return false;
  // Which lengths the HCLEN entries give does not matter here, only how many of each.
  const unsigned hclen = bits(p, bit + 13, 4) + 4;
  int count[8] = {0};
  for (unsigned i = 0; i < hclen; ++i) ++count[bits(p, bit + 17 + 3 * i, 3)];
  int left = 1;
  for (int len = 1; len <= 7; ++len) {
    left <<= 1;
    left -= count[len];
    if (left < 0) return false;
  }
  return left == 0;
}

// Whether a stored block, as zlib writes one after another (incompressible data), could start at
// `bit`: a byte's first bit, its header bits 000, and LEN and NLEN that agree.
bool could_start_stored(const unsigned char* p, std::size_t n, std::uint64_t bit) {
  if (bit % 8 != 0 || bit / 8 + 5 >= n || (p[bit / 8] & 7) != 0) return false;
  const unsigned len = p[bit / 8 + 1] | (p[bit / 8 + 2] << 8), nlen = p[bit / 8 + 3] | (p[bit / 8 + 4] << 8);
  return len > 0 && (len ^ nlen) == 0xffff;
}

// The first bit in [from, to) of `p` (n bytes) where a dynamic-Huffman or a stored block could
// start and zlib reads `enough` whole blocks from it (three, fewer where the caller proves what it
// decodes by other means), or (`at_end`: `p` ends where the stream must) reads on without an
// error to a final block that ends exactly at the end of `p`; nullopt: none, or `budget` spent
// trying.
std::optional<std::uint64_t> block_start(const unsigned char* p, std::size_t n, std::uint64_t from, std::uint64_t to,
                                         std::uint64_t& produced, InflateBudget* budget, bool at_end = false,
                                         int enough = 3) {
  for (std::uint64_t bit = from; bit < to && bit + 64 < n * 8; ++bit) {
    if (!could_start_block(p, n, bit) && !could_start_stored(p, n, bit)) continue;
    const std::size_t start = bit / 8 + (bit % 8 ? 1 : 0);
    Inflater probe(0, budget);
    probe.prime(p[bit / 8], static_cast<int>(bit % 8));
    const int whole_blocks = probe.blocks(p + start, n - start, enough);
    produced += probe.produced;
    if (probe.over_budget) return std::nullopt;
    if (whole_blocks >= enough || (at_end && probe.ended_at_input_end)) return bit;
  }
  return std::nullopt;
}

// An Inflater positioned at `bit` of `p`: primed with the bits of its byte, and the index of the
// first whole byte after. At the stream's start with no dictionary (a stream that reaches before
// its start is damaged); elsewhere against a dictionary of `fill`.
std::size_t position(Inflater& z, const unsigned char* p, std::uint64_t bit) {
  z.prime(p[bit / 8], static_cast<int>(bit % 8));
  return static_cast<std::size_t>(bit / 8 + (bit % 8 ? 1 : 0));
}

}  // namespace

std::vector<Boundary> map_stream(std::string_view s, Boundary from, std::uint64_t want_out, std::uint64_t most_out,
                                 std::uint64_t piece, unsigned threads, std::uint64_t& inflated, bool& too_long,
                                 InflateBudget* budget) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  const std::uint64_t end = std::uint64_t{n} * 8;
  const std::size_t wave = std::max(1U, r::thread_count(threads));
  std::vector<Boundary> proved{from};
  std::atomic<std::uint64_t> produced{0};
  // Pieces twice as long after a wave that proved nothing (all its starts false, or pieces
  // shorter than the blocks).
  std::uint64_t spacing = piece;
  while (proved.back().out <= want_out && proved.back().bit < end && !(budget && budget->spent())) {
    const Boundary at = proved.back();
    // This wave's pieces: from `at`, then from a plausible boundary near every `piece` bytes; the
    // last one found starts the next wave, unless the wave reaches the end of `s`.
    std::vector<std::optional<std::uint64_t>> found(wave);
    r::parallel_for(wave, threads, [&](std::size_t k) {
      const std::uint64_t nominal = at.bit + (k + 1) * spacing * 8;
      if (nominal >= end) return;
      std::uint64_t here = 0;
      found[k] = block_start(p, n, nominal, nominal + std::min<std::uint64_t>(spacing, 1 << 18) * 8, here, budget);
      produced += here;
    });
    std::vector<std::uint64_t> starts{at.bit};
    for (const auto& f : found)
      if (f && *f > starts.back()) starts.push_back(*f);
    const bool to_end = at.bit + wave * spacing * 8 >= end;
    if (starts.size() == 1 && !to_end) {  // no boundary to cut at
      spacing *= 2;
      continue;
    }
    // Piece k runs from starts[k] to starts[k + 1], the last of them to the stream's end where
    // the wave reaches the end of `s`.
    // Each piece's bytes inflated where it ends as it should; UINT64_MAX where it inflates more
    // than the stream holds in all.
    const auto decode = [&](std::size_t k) -> std::optional<std::uint64_t> {
      Inflater z(starts[k] == 0 ? -1 : 0, budget);
      const std::size_t first = position(z, p, starts[k]);
      const bool last = k + 1 == starts.size();
      const bool ok =
          z.blocks_until(p + first, n - first, last ? end - first * 8 : starts[k + 1] - first * 8, most_out - at.out);
      produced += z.produced;
      if (z.over_budget) return std::nullopt;
      if (z.produced > most_out - at.out) return UINT64_MAX;
      // A piece before the last ends a block where the next starts; the last ends the stream.
      if (last ? z.ended : ok && !z.ended) return z.produced;
      return std::nullopt;
    };
    std::vector<std::optional<std::uint64_t>> out(to_end ? starts.size() : starts.size() - 1);
    r::parallel_for(out.size(), threads, [&](std::size_t k) { out[k] = decode(k); });
    bool damaged = false;
    for (std::size_t k = 0; k < out.size();) {
      // From a proved boundary, more than the stream holds: it lies about its size.
      if (out[k] && (*out[k] == UINT64_MAX || proved.back().out + *out[k] > most_out)) {
        too_long = true;
        break;
      }
      if (out[k]) {
        proved.push_back({k + 1 == starts.size() ? end : starts[k + 1], proved.back().out + *out[k]});
        ++k;
        continue;
      }
      // Piece k did not end where the next starts (a false start there) or did not end the
      // stream (damaged, or `s` ends mid-stream): it runs on to the start after the next.
      if (k + 1 == starts.size()) {
        damaged = true;
        break;
      }
      if (k + 2 == starts.size() && !to_end) break;  // none in this wave: the next goes on from starts[k]
      starts.erase(starts.begin() + static_cast<std::ptrdiff_t>(k) + 1);
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(k) + 1);
      out[k] = decode(k);
    }
    if (damaged || too_long || (budget && budget->spent())) break;
    spacing = proved.back().bit == at.bit ? 2 * spacing : piece;
  }
  inflated += produced;
  return proved;
}

std::optional<std::pair<std::string, std::string>> decode_both(std::string_view s, std::uint64_t bit,
                                                               std::uint64_t first, std::uint64_t len,
                                                               std::uint64_t& inflated, InflateBudget* budget) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto decode = [&](int fill) -> std::optional<std::string> {
    Inflater z(fill, budget);
    z.discard = first;  // never held: a block before `first` may inflate to gigabytes
    const std::size_t start = position(z, p, bit);
    const bool fed = start <= s.size() && z.feed(p + start, s.size() - start, len);
    inflated += z.produced;
    if (!fed || z.discard > 0 || z.out.size() < len) return std::nullopt;
    return std::move(z.out);
  };
  auto zeros = decode(0x00);
  if (!zeros) return std::nullopt;
  auto ones = decode(0xff);
  if (!ones) return std::nullopt;
  return std::pair{std::move(*zeros), std::move(*ones)};
}

std::optional<std::string> decode_span(std::string_view s, Boundary at, std::uint64_t first, std::uint64_t len,
                                       std::uint64_t& inflated, InflateBudget* budget) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  if (first < at.out) return std::nullopt;
  if (at.bit == 0) {  // the stream's start: nothing before it to stand in for
    Inflater z(-1, budget);
    z.discard = first - at.out;
    const bool fed = z.feed(p, s.size(), len);
    inflated += z.produced;
    if (!fed || z.discard > 0 || z.out.size() < len) return std::nullopt;
    return std::move(z.out);
  }
  auto both = decode_both(s, at.bit, first - at.out, len, inflated, budget);
  if (!both || both->first != both->second) return std::nullopt;
  return std::move(both->first);
}

std::uint64_t window_budget(std::uint64_t window) { return (std::uint64_t{64} << 20) + 32 * window; }

namespace {

// What `keep` holds of a decode, `piece` (either dictionary's) the bytes inflated after `w`'s.
void keep_piece(WindowDecode& w, std::string_view zeros, std::string_view ones, const WindowKeep& keep) {
  if (keep.suffix == 0) {
    const std::size_t room = w.size < keep.prefix
                                 ? static_cast<std::size_t>(std::min<std::uint64_t>(keep.prefix - w.size, zeros.size()))
                                 : 0;
    w.zeros.append(zeros.substr(0, room));
    w.ones.append(ones.substr(0, room));
    return;
  }
  // Never more than `suffix` held, what the piece pushes past it dropped from the front first;
  // reserved once (grown by doubling, the two held 3 MB for a 256 KiB suffix).
  const auto room = static_cast<std::size_t>(std::min<std::uint64_t>(keep.suffix, k_most_decoded));
  if (w.zeros.capacity() < std::min<std::size_t>(room, std::size_t{1} << 20)) {
    w.zeros.reserve(std::min<std::size_t>(room, std::size_t{1} << 20));
    w.ones.reserve(std::min<std::size_t>(room, std::size_t{1} << 20));
  }
  const std::size_t take = std::min(zeros.size(), room);
  const std::size_t over = w.zeros.size() + take > room ? w.zeros.size() + take - room : 0;
  w.zeros.erase(0, over);
  w.ones.erase(0, over);
  w.zeros.append(zeros.substr(zeros.size() - take));
  w.ones.append(ones.substr(ones.size() - take));
}

// The window `p` (n bytes) inflated from `bit` against both dictionaries in step, a piece at a
// time, kept as `keep` says; nullopt where the data are damaged (a false start, mostly) or the
// budget is spent. The two decodes inflate the same lengths: what a code inflates to does not
// depend on the history it copies from.
std::optional<WindowDecode> decode_at(const unsigned char* p, std::size_t n, std::uint64_t bit, const WindowKeep& keep,
                                      InflateBudget& budget, std::uint64_t& produced) {
  constexpr std::size_t k_piece = std::size_t{64} << 10;
  Inflater zeros(0, &budget), ones(0xff, &budget);
  std::size_t in_zeros = position(zeros, p, bit), in_ones = position(ones, p, bit);
  WindowDecode w;
  w.bit = bit;
  std::string carry_zeros, carry_ones;  // the `overlap` bytes before the next piece
  if (keep.scan) keep.scan(0, {}, {});
  bool damaged = false;
  while (w.size < k_most_decoded && !zeros.ended) {
    zeros.out.clear();
    ones.out.clear();
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(k_piece, k_most_decoded - w.size));
    const bool fed = zeros.feed(p + in_zeros, n - in_zeros, want) && ones.feed(p + in_ones, n - in_ones, want);
    in_zeros = n - zeros.unread();
    in_ones = n - ones.unread();
    damaged = !fed || zeros.out.size() != ones.out.size() || zeros.ended != ones.ended;
    if (damaged || zeros.out.empty()) break;
    if (keep.scan && keep.overlap == 0) keep.scan(w.size, zeros.out, ones.out);
    if (keep.scan && keep.overlap > 0) {
      carry_zeros += zeros.out;
      carry_ones += ones.out;
      keep.scan(w.size + zeros.out.size() - carry_zeros.size(), carry_zeros, carry_ones);
      const std::size_t kept = std::min(keep.overlap, carry_zeros.size());
      carry_zeros.erase(0, carry_zeros.size() - kept);
      carry_ones.erase(0, carry_ones.size() - kept);
    }
    keep_piece(w, zeros.out, ones.out, keep);
    w.size += zeros.out.size();
  }
  produced += zeros.produced + ones.produced;
  if (damaged) return std::nullopt;
  w.first = keep.suffix > 0 ? w.size - w.zeros.size() : 0;
  const bool exact = zeros.ended_at_input_end;
  w.ended = zeros.ended && exact;
  w.ended_early = zeros.ended && !exact;
  return w;
}

}  // namespace

std::uint64_t decode_from_boundaries(const std::string& window, int limit,
                                     const std::function<bool(WindowDecode&)>& take, InflateBudget* parent,
                                     bool ends_stream, int enough, const WindowKeep& keep) {
  const auto* p = reinterpret_cast<const unsigned char*>(window.data());
  const std::size_t n = window.size();
  // The time is the parent's (a member's): a window alone has no deadline of its own.
  InflateBudget budget(window_budget(n), std::chrono::hours(24), parent);
  std::uint64_t produced = 0;
  std::uint64_t from = 0;
  for (int tried = 0; tried < limit && !budget.spent(); ++tried) {
    const auto bit = block_start(p, n, from, std::uint64_t{n} * 8, produced, &budget, ends_stream, enough);
    if (!bit) break;
    from = *bit + 1;
    auto w = decode_at(p, n, *bit, keep, budget, produced);
    if (w && take(*w)) return produced;
  }
  return produced;
}

}  // namespace cudafix::installer
