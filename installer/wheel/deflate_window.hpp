// Inflating a window cut from the middle of a deflate stream, as the plans by range need
// (installer/wheel/ranged_read.hpp): an Inflater fed in pieces, and each plausible block
// boundary in a window tried in turn. A boundary counts where a dynamic-Huffman header with a
// complete code-length code, or a stored block's header whose LEN and NLEN agree, starts and zlib
// then reads three whole blocks (fewer, where the caller checks what it decodes by its own means).
// The 32 KiB before the window are unknown: each decode is made twice, against a dictionary of
// 0x00 and one of 0xff, and only the bytes both agree on are known.
#pragma once

#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cudafix::installer {

// Bytes inflated and time, for one read and for what it is part of (a window's decode, a
// member's, a wheel's): every Inflater spends from one, and stops once it, or any budget it is
// part of, is spent. A crafted stream (thousands of plausible block headers, each decoding 16 MiB
// from a few bits) then costs its budget, not hours.
class InflateBudget {
 public:
  using Clock = std::chrono::steady_clock;
  InflateBudget(std::uint64_t bytes, Clock::duration time, InflateBudget* parent = nullptr);
  // Counts `n` bytes inflated; false once this budget or a parent's is spent (bytes or time).
  bool spend(std::uint64_t n);
  [[nodiscard]] bool spent() const { return spent_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t bytes() const { return bytes_; }
  [[nodiscard]] std::uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  [[nodiscard]] bool out_of_time() const { return out_of_time_.load(std::memory_order_relaxed); }
  [[nodiscard]] double seconds() const { return std::chrono::duration<double>(deadline_ - start_).count(); }

 private:
  std::uint64_t bytes_;
  Clock::time_point start_, deadline_;
  InflateBudget* parent_;
  std::atomic<std::uint64_t> used_{0};
  std::atomic<bool> spent_{false}, out_of_time_{false};
};

// A raw inflate fed in pieces; `out` grows as far as wanted.
class Inflater {
 public:
  // `fill` >= 0: a 32 KiB dictionary of that byte stands in for the unknown history. `budget`:
  // what every byte inflated is spent from (none: unbounded but for the limits given).
  explicit Inflater(int fill = -1, InflateBudget* budget = nullptr);
  ~Inflater();
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  // The bits of `byte` above bit `skip` go in first (a start in the middle of a byte).
  void prime(unsigned char byte, int skip);
  // Feeds `in`, keeping at most `limit` bytes of output in all (after the first `discard`
  // dropped; the input of a feed that ended discarding may be inflated past `limit`). False on
  // damaged data. What it stopped short of is unread(); a feed of what is left after it (of no
  // bytes at all where none is left) goes on where it stopped.
  bool feed(const unsigned char* in, std::size_t n, std::size_t limit);
  // Bytes of the last feed's input not inflated yet (it stopped at `limit` or the stream's end).
  [[nodiscard]] std::size_t unread() const { return z_.avail_in; }
  // Inflates `in` block by block, discarding the output: how many whole blocks it reads before
  // damaged data or the end of `in` (-1: damaged at once).
  int blocks(const unsigned char* in, std::size_t n, int enough);
  // Inflates `in` block by block, discarding the output, until a block ends exactly `stop` bits
  // into `in` (true) or the stream ends there (true, `ended`); false where a block ends past it,
  // the data are damaged, `in` runs out first or more than `most` bytes inflate. `in` follows
  // the bits `prime` gave, if any.
  bool blocks_until(const unsigned char* in, std::size_t n, std::uint64_t stop, std::uint64_t most = UINT64_MAX);
  std::string out;
  // Output bytes still to drop before `out` keeps any: a span deep in a block is read without
  // holding what precedes it (one block of a crafted stream can inflate to gigabytes).
  std::uint64_t discard = 0;
  bool ended = false;
  bool ended_at_input_end = false;  // it ended where its input ended (no bytes left after the final block)
  bool over_budget = false;         // it stopped because its budget was spent
  std::uint64_t produced = 0;       // bytes inflated in all, those `blocks` discarded included

 private:
  // Spends what the last inflate call produced; false (and over_budget) once spent.
  bool spend(std::uint64_t n);
  z_stream z_{};
  InflateBudget* budget_ = nullptr;
};

struct WindowDecode {
  // The bytes kept of the decode (WindowKeep), against either dictionary, the first of them
  // `first` bytes into it.
  std::string zeros, ones;
  std::uint64_t first = 0;
  std::uint64_t size = 0;  // the bytes it inflated in all
  bool ended = false;      // it reached the stream's end exactly at the window's end
  // Its final block ended before the window did: not a decode of the member's stream, which
  // ends at the member's end (a stream planted in a stored block's bytes does this).
  bool ended_early = false;
  std::uint64_t bit = 0;  // where in the window the decode started
};

// What each decode of a window keeps. A window of a few MB compressed inflates to several times
// that, twice (one decode per dictionary): the decodes run in step, a piece at a time, and only
// what a caller asks for stays (the real cuDNN wheel's plan held 128 MB of whole decodes).
struct WindowKeep {
  // Nonzero: the last `suffix` bytes of each decode (a window at the member's end, whose bytes
  // are placed counting back from it); else the first `prefix`.
  std::uint64_t suffix = 0;
  std::uint64_t prefix = UINT64_MAX;
  // Sees each piece as it is inflated, after the `overlap` bytes that came before it (a pattern
  // that straddles two pieces is seen whole once), `at` bytes into the decode; a call with no
  // bytes: a new decode starts.
  std::function<void(std::uint64_t at, std::string_view zeros, std::string_view ones)> scan;
  std::size_t overlap = 0;
};

// A block boundary of a deflate stream, proved: the stream's start, or where the decode from the
// proved boundary before it ended a block exactly. `bit`: from the stream's first bit; `out`: the
// bytes inflated before it.
struct Boundary {
  std::uint64_t bit = 0, out = 0;
};

// The stream `s` (all of it or its first bytes) mapped from `from` (proved) on: cut into pieces
// of about `piece` compressed bytes at plausible block boundaries, the pieces decoded side by side
// (`threads` of them at a time, 0: one per core), each boundary proved by the piece before it
// ending a block exactly there. How much a piece inflates does not depend on the 32 KiB before
// it, which a dictionary stands in for, so each boundary's `out` is exact. Goes on until a
// boundary past `want_out` inflated bytes, the stream's end (its last boundary) or the end of
// `s`. A piece that does not end where the next one starts (a false start there) runs on to the
// one after; the map stops at damaged data or a spent `budget`, and sets `too_long` where a piece
// from a proved boundary inflates past `most_out` bytes in all (what the stream says it holds).
// Returns the boundaries proved, `from` first; `inflated` counts what it inflated.
std::vector<Boundary> map_stream(std::string_view s, Boundary from, std::uint64_t want_out, std::uint64_t most_out,
                                 std::uint64_t piece, unsigned threads, std::uint64_t& inflated, bool& too_long,
                                 InflateBudget* budget = nullptr);

// The `len` bytes `first` bytes into the decode of `s` from its bit `bit` (a block boundary),
// against a dictionary of 0x00 and one of 0xff; nullopt where the data are damaged or end first.
std::optional<std::pair<std::string, std::string>> decode_both(std::string_view s, std::uint64_t bit,
                                                               std::uint64_t first, std::uint64_t len,
                                                               std::uint64_t& inflated,
                                                               InflateBudget* budget = nullptr);

// The `len` inflated bytes from `first` on, decoded from the proved boundary `at`: from the
// stream's start exactly, elsewhere against both dictionaries and known only where they agree.
// nullopt where any of them depends on the bytes before `at`, or the data are damaged.
std::optional<std::string> decode_span(std::string_view s, Boundary at, std::uint64_t first, std::uint64_t len,
                                       std::uint64_t& inflated, InflateBudget* budget = nullptr);

// What one window's decodes may inflate in all, of a window of `window` compressed bytes: true
// blocks from a true boundary inflate it a few times over; a run of crafted block headers, each
// decoding 16 MiB, is cut after a few.
[[nodiscard]] std::uint64_t window_budget(std::uint64_t window);

// Calls `take` with the window inflated from each plausible block boundary in turn, at most
// `limit` of them, until `take` returns true, all under a budget of window_budget() bytes that
// `parent` (if any) pays for too. `ends_stream`: the window ends where the member's stream must
// end, and a start from which zlib reads on to a final block ending exactly there counts as a
// boundary though fewer than three blocks follow it (a short window at a member's end holds one
// or two of its 20-30 KB blocks). `enough`: the whole blocks that prove a start (fewer where
// `take` proves what it finds by its own means: installer/wheel/strings_window). `keep`: what
// `take` is given of each decode (each is at most k_most_decoded long). Returns how many bytes
// it inflated in all.
std::uint64_t decode_from_boundaries(const std::string& window, int limit,
                                     const std::function<bool(WindowDecode&)>& take, InflateBudget* parent = nullptr,
                                     bool ends_stream = false, int enough = 3, const WindowKeep& keep = {});

// A decode of a window inflating past this is cut there (true blocks inflate a window of a few
// MB to some tens of MB).
inline constexpr std::uint64_t k_most_decoded = std::uint64_t{64} << 20;

}  // namespace cudafix::installer
