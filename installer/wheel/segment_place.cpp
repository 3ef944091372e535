// installer/wheel/segment_place.hpp: where range planning looks for an object's segment.
#include "installer/wheel/segment_place.hpp"

#include <algorithm>
#include <functional>
#include <numeric>

#include "resolver/base/parallel.hpp"

namespace cudafix::installer::segment_place {

namespace {
constexpr std::uint64_t k_block_slack = 64 << 10;  // a deflate block before a segment, where its decode starts

// The measure the ratio between the places `lo` < `hi` is taken by: the bytes weighed by the
// sections (Deep::measure), or the raw bytes where the two weigh the same (both in one gap).
std::function<std::uint64_t(std::uint64_t)> measure_between(const Deep& d, std::uint64_t lo, std::uint64_t hi) {
  if (d.measure(hi) == d.measure(lo)) return [](std::uint64_t raw) { return raw; };
  return [&d](std::uint64_t raw) { return d.measure(raw); };
}

// `bytes` at `ratio`, at most `most`: a ratio made large by a table that weighs little between
// two places never overflows the cast.
std::uint64_t scaled(double ratio, std::uint64_t bytes, std::uint64_t most) {
  const double v = ratio * static_cast<double>(bytes);
  return v >= static_cast<double>(most) ? most : static_cast<std::uint64_t>(v);
}
}  // namespace

// What the bytes from the object's segment to its end should deflate to at most, from where its
// sections hold its bytes: the sections' own bytes as they are (code and data deflate to less), the
// gaps between them at 1/256 (the zeros that pad NVIDIA's objects to a page or a 2 MiB boundary
// deflate to 1/1000), and a block's worth before the segment, where a decode must start. cuDNN
// 9.19's precompiled engines keep 2.3 MB after their segment, 2 MB of it gaps, in 124 KB deflated:
// bounded by the raw bytes, the window at the end reached back 2.5 MB. Only a window's size rests
// on it: a table that lies costs a miss and the wider window after it. nullopt: no table known.
std::optional<std::uint64_t> bound_after_segment(const Deep& d) {
  if (!d.sections) return std::nullopt;
  const std::uint64_t from = d.layout.dynamic_offset, size = d.member->size, after = size - from;
  const std::uint64_t content = std::min(d.sections->content(from, size), after);
  return content + content / 1000 + (after - content) / 256 + k_block_slack;
}

// Where in the wheel the object's byte `raw` should lie deflated: between the two proved places
// around it (the end of the head, the first boundary of the window at its end; else the
// member's start and end), at the deflate ratio measured between them. The bytes before a
// segment deflate unlike those after it (code before, .data and tables after), so a window at
// the end that starts past the segment makes the estimate from the bytes before it alone.
std::uint64_t estimate(const Deep& d, std::uint64_t raw) {
  const zip::Entry& m = *d.member;
  Anchor lo{0, 0}, hi{m.compressed, m.size};
  if (d.head_end.raw <= raw && d.head_end.compressed <= m.compressed) lo = d.head_end;
  if (d.end_start && d.end_start->raw >= raw && d.end_start->raw > lo.raw && d.end_start->compressed >= lo.compressed)
    hi = *d.end_start;
  if (hi.raw <= lo.raw || hi.compressed < lo.compressed) return m.data_offset;
  const auto measure = measure_between(d, lo.raw, hi.raw);
  const double ratio =
      static_cast<double>(hi.compressed - lo.compressed) / static_cast<double>(measure(hi.raw) - measure(lo.raw));
  return m.data_offset + lo.compressed + scaled(ratio, measure(raw) - measure(lo.raw), m.compressed - lo.compressed);
}

bool strings_at_end(const Deep& d, const std::pair<std::uint64_t, std::uint64_t>& strings, std::uint64_t window) {
  const zip::Entry& m = *d.member;
  return m.method == 8 && m.size - strings.first <= 8 * window &&
         d.end() - estimate(d, strings.first) <= estimate(d, strings.second) - m.data_offset;
}

// Where the object's byte `raw` should lie were the bytes from it to the end deflated as those
// the window at the end inflated; nullopt where that window starts before it.
std::optional<std::uint64_t> estimate_from_end(const Deep& d, std::uint64_t raw) {
  const zip::Entry& m = *d.member;
  if (!d.end_start || d.end_start->raw <= raw || d.end_start->raw >= m.size || d.end_start->compressed > m.compressed)
    return std::nullopt;
  const auto measure = measure_between(d, d.end_start->raw, m.size);
  const double ratio = static_cast<double>(m.compressed - d.end_start->compressed) /
                       static_cast<double>(measure(m.size) - measure(d.end_start->raw));
  return m.data_offset + m.compressed - scaled(ratio, measure(m.size) - measure(raw), m.compressed);
}

namespace {

using T = Deep::Tried;

// A window that ends with the member, reaching back `reach` bytes: only what is not at hand.
std::optional<Ask> at_end(const Deep& d, std::uint64_t reach) {
  const zip::Entry& m = *d.member;
  const std::uint64_t end = d.end();
  const std::uint64_t first = end > reach ? std::max(m.data_offset, end - reach) : m.data_offset;
  if (first >= d.end_first) return std::nullopt;
  return Ask{0, true, first, d.end_first - 1};
}

// What the bytes from the segment to the object's end deflate to at most: about their size.
std::uint64_t beyond_segment(const Deep& d, std::uint64_t k_window) {
  const std::uint64_t after = d.member->size - d.layout.dynamic_offset;
  return after + after / 1000 + k_window / 4;
}

// The windows one object's segment may be looked for in at one pass, by HTTP (mid-stream places
// allowed): each a window of compressed bytes, or one that ends with the member and reaches back.
// Around an estimate: a block boundary (blocks deflate to 20-30 KB) must come before the
// segment and three whole blocks after it. Where reaching back from the end to there costs no
// more, the window at the end grows instead (its places are exact).
class Windows {
 public:
  Windows(const Deep& d, std::uint64_t k_window)
      : d_(d),
        m_(*d.member),
        end_(d.end()),
        k_window_(k_window),
        after_(m_.size - d.layout.dynamic_offset),
        beyond_(beyond_segment(d, k_window)),
        estimate_(estimate(d, d.layout.dynamic_offset)),
        other_(estimate_from_end(d, d.layout.dynamic_offset)) {
    const std::uint64_t apart = other_ ? std::max(*other_, estimate_) - std::min(*other_, estimate_) : 0;
    span_ = other_ && apart > lead_;
    close_ = span_ && apart <= 3 * window_;
  }

  // Pass 1: around the estimate; where the window at the end placed a segment no section table
  // confirms, a quarter window at the end, which does or does not.
  [[nodiscard]] std::optional<Ask> first() const {
    if (d_.end_unconfirmed) return at_end(k_window_ / 4);
    // Estimates close together, where the window at the end holds an eighth of the bytes after
    // the segment or more: first around the middle of the two (Python's segment, at between()).
    // Where it holds less, its ratio says little of the rest: a 12 MB .data whose last 42 KB with
    // the symbols after them put the estimate from the end 277 KB early, and the one from the
    // head was exact.
    const bool end_holds = d_.end_start && 8 * (m_.size - d_.end_start->raw) >= after_;
    const std::uint64_t centre = close_ && end_holds ? std::midpoint(estimate_, *other_) : estimate_;
    return around(centre, centre, first_width());
  }

  // After pass 1 near the end, the first window not asked yet, cheapest first; last, as far back
  // as the segment can lie, an exact place.
  [[nodiscard]] std::optional<Ask> near_end() const {
    if (close_)
      if (auto a = kind(between(), T::span)) return a;
    if (auto a = refined()) return a;
    if (auto a = sized(8 * (end_ - d_.end_first))) return a;
    if (auto a = kind(grown(), T::end_grown)) return a;
    if (span_ && !close_)
      if (auto a = kind(around_end_estimate(), T::around_end_estimate)) return a;
    if (auto a = sized(beyond_)) return a;
    return at_end(beyond_);
  }

  // After pass 1 elsewhere: the first window not asked yet, cheapest first, then a wide one.
  [[nodiscard]] std::optional<Ask> elsewhere() const {
    if (span_)
      if (auto a = close_ ? kind(between(), T::span) : kind(beside(), T::beside)) return a;
    if (auto a = refined()) return a;
    if (!other_)
      if (auto a = kind(grown(), T::end_grown)) return a;
    if (span_ && !close_)
      if (auto a = kind(around_end_estimate(), T::around_end_estimate)) return a;
    if (auto a = kind(probed(), T::probed)) return a;
    // Wider with the member (cuDNN 9.19's runtime_compiled library, 16 MB deflated: 2.3 MB
    // early, where .lrodata after the segment deflates to 0.88 and the code before it to 0.42).
    const std::uint64_t wide = std::clamp<std::uint64_t>(m_.compressed / 4, 2 * k_window_, 8 * k_window_);
    if (auto a = sized(wide)) return a;
    return kind(wide_before(wide), T::wide);
  }

  [[nodiscard]] bool near() const { return after_ <= 4 * k_window_; }
  // The width of the windows around an estimate alone (pass 1's, refined()): a block boundary
  // before the segment (the lead) and the segment's bytes after it, with a quarter window for
  // where the estimate errs. Two whole blocks prove a start there (segment_find's
  // dynamic_in_window): three needed 80 KB past Python 3.11's estimate, a third of its wheel's read.
  [[nodiscard]] std::uint64_t first_width() const { return lead_ + window_ / 4; }

 private:
  [[nodiscard]] std::optional<Ask> at_end(std::uint64_t reach) const { return segment_place::at_end(d_, reach); }
  // A window around [low, high], `width` past `high` less the lead; none where the window at the
  // end holds it already.
  [[nodiscard]] std::optional<Ask> around(std::uint64_t low, std::uint64_t high, std::uint64_t width) const {
    const std::uint64_t first = std::max(m_.data_offset, low > lead_ ? low - lead_ : 0);
    const std::uint64_t last = std::min(end_ - 1, std::max(first, high > lead_ ? high - lead_ : 0) + width - 1);
    if (first >= d_.end_first || last < first) return std::nullopt;
    if (d_.end_first - first <= last - first + 1) return at_end(end_ - first);
    return Ask{0, false, first, last};
  }
  // A window not asked for yet, marked as the kind it is.
  [[nodiscard]] std::optional<Ask> kind(std::optional<Ask> a, unsigned k) const {
    if (a) a->kind = k;
    return (d_.tried & k) || !a ? std::nullopt : a;
  }
  // The bytes after the segment (.data) may deflate as those at the end do rather than as those
  // before it: Python 3.11's segment lies 137 KB past the first estimate, 163 KB before the
  // second. The window from one to the other, at most four windows wide.
  [[nodiscard]] std::optional<Ask> between() const {
    const std::uint64_t low = std::min(*other_, estimate_);
    return around(low, std::min(std::max(*other_, estimate_), low + 3 * window_), window_);
  }
  // Estimates far apart: pass 1's window grown by one towards the other estimate, not the three
  // of between() (NCCL 2.28 read 512 KB there, cuDNN 9.19's runtime_compiled engines 384 KB,
  // before the windows that held their segments). Its heuristic library's segment lies where pass
  // 1's window ends, with too few blocks after it there to be proved.
  [[nodiscard]] std::optional<Ask> beside() const {
    const std::uint64_t toward = *other_ > estimate_ ? estimate_ + window_ : estimate_ - std::min(estimate_, window_);
    return around(std::min(estimate_, toward), std::max(estimate_, toward), window_);
  }
  // A window at the end with no proved block boundary gives no estimate from the end (NCCL's
  // last blocks, of .strtab, deflate to more than its first window): grown back to eight times
  // what is at hand, it does; where the segment lies near the end, it may hold it.
  [[nodiscard]] std::optional<Ask> grown() const { return at_end(std::min(beyond_, 8 * (end_ - d_.end_first))); }
  // Estimates far apart: what lies between the head and the end deflates unlike either. NCCL
  // 2.28's 190 MB before its segment are fatbins that do not deflate (0.999) and its 28 MB after
  // it debug sections (0.1-0.5): from the head's ratio the segment should lie 17 MB early, from
  // the end's 0.5 MB late. A window around the one counted back from the end, a quarter of the
  // distance to the end wide (mostly before it: a block boundary must come first).
  [[nodiscard]] std::optional<Ask> around_end_estimate() const {
    const std::uint64_t wide = std::clamp<std::uint64_t>((end_ - *other_) / 4, window_, 8 * k_window_);
    const std::uint64_t first = std::max(m_.data_offset, *other_ > 3 * wide / 4 ? *other_ - 3 * wide / 4 : 0);
    const std::uint64_t last = std::min(end_ - 1, first + wide - 1);
    if (first < d_.end_first && last + 1 >= d_.end_first) return at_end(end_ - first);
    return Ask{0, false, first, last};
  }
  // Estimates that agree, moved since the window of pass 1 by a place the window at the end grown
  // back proved (and the section header table it held): around them, where not at hand already.
  [[nodiscard]] std::optional<Ask> refined() const {
    if (span_) return std::nullopt;
    auto a = around(estimate_, estimate_, first_width());
    const auto inside = [&a](std::uint64_t first, std::uint64_t bytes) {
      return a->first >= first && a->last < first + bytes;
    };
    if (!a || (!a->at_end && (inside(d_.mid_first, d_.mid_bytes.size()) ||
                              inside(d_.first_window.first, d_.first_window.second - d_.first_window.first))))
      return std::nullopt;
    return kind(a, T::refined);
  }
  // The window at the end reaching back as far as the sections after the segment deflate to at
  // most (bound_after_segment), where that is less than `below`. The raw bytes after the segment
  // bound its distance too, but the zeros that pad NVIDIA's objects between sections deflate to
  // almost nothing: cuDNN 9.19's precompiled engines keep 2.3 MB after the segment in 124 KB
  // deflated, where reaching back 2.5 MB at once read twenty times what was needed.
  [[nodiscard]] std::optional<Ask> sized(std::uint64_t below) const {
    const auto bound = bound_after_segment(d_);
    if (!bound || *bound >= below) return std::nullopt;
    return kind(at_end(*bound), T::end_sized);
  }
  // Where the segment lies were the bytes on one side of it deflated as a window that missed it
  // measured: the estimates lie late where the bytes after the segment deflate to more than
  // those before it (cuDNN 9.19's runtime-compiled engines: 9.3 MB of .lrodata at 0.88 after it,
  // code at 0.42 before; both estimates 2.9 MB late, and the wide window read 3.97 MB). Each
  // window's decode gives two places: the segment before it (the bytes after the segment
  // deflating as it measured, those before taking what the proved places around leave) or after
  // it. A place every window agrees with is asked for (each window before it measured about the
  // ratio the place gives the bytes before the segment, each one after it that of the bytes
  // after; within a third), a twentieth of the bytes counted at the measured ratio either side, half
  // a window at most.
  [[nodiscard]] std::optional<Ask> probed() const {
    Anchor lo{0, 0}, hi{m_.compressed, m_.size};
    const std::uint64_t s = d_.layout.dynamic_offset;
    if (d_.head_end.raw <= s && d_.head_end.compressed <= m_.compressed) lo = d_.head_end;
    if (d_.end_start && d_.end_start->raw > s && d_.end_start->compressed > lo.compressed &&
        d_.end_start->compressed <= m_.compressed)
      hi = *d_.end_start;
    if (hi.raw <= s || lo.raw >= s || hi.compressed <= lo.compressed || d_.probes.empty()) return std::nullopt;
    const auto measure = measure_between(d_, lo.raw, hi.raw);
    const auto before = static_cast<double>(measure(s) - measure(lo.raw));
    const auto after = static_cast<double>(measure(hi.raw) - measure(s));
    if (before <= 0 || after <= 0) return std::nullopt;
    const auto c_lo = static_cast<double>(lo.compressed), c_hi = static_cast<double>(hi.compressed);
    struct Place {
      double at, before_ratio, after_ratio, err;
    };
    const auto ratio_of = [](const Deep::Probe& p) {
      return static_cast<double>(p.compressed) / static_cast<double>(p.raw);
    };
    const auto near = [](double x, double y) { return 3 * x <= 4 * y && 3 * y <= 4 * x; };
    const auto agreed = [&](const Place& at) {
      for (const auto& p : d_.probes) {
        const auto first = static_cast<double>(p.first), last = static_cast<double>(p.first + p.compressed);
        if (last <= at.at ? !near(ratio_of(p), at.before_ratio) : first < at.at || !near(ratio_of(p), at.after_ratio))
          return false;  // a window across the place decoded its bytes and found no segment there
      }
      return true;
    };
    for (const auto& p : d_.probes) {
      const double ratio = ratio_of(p), first = static_cast<double>(p.first);
      const Place before_it{c_hi - ratio * after, 0, ratio, ratio * after / 20};
      const Place after_it{c_lo + ratio * before, ratio, 0, ratio * before / 20};
      for (Place at : {before_it, after_it}) {
        if (at.at <= c_lo || at.at >= c_hi || (at.before_ratio == 0 && at.at >= first)) continue;
        if (at.before_ratio == 0) at.before_ratio = (at.at - c_lo) / before;
        if (at.after_ratio == 0) at.after_ratio = (c_hi - at.at) / after;
        if (!agreed(at)) continue;
        const auto place = m_.data_offset + static_cast<std::uint64_t>(at.at);
        // Half a window at most: a tenth of a member of 2 GB is a window of 140 MB, whose decode
        // stops at k_most_decoded (the wide window after it is eight windows at most).
        const auto err = std::min(static_cast<std::uint64_t>(at.err), k_window_ / 2);
        return around(place > err ? place - err : 0, place + err, window_);
      }
    }
    return std::nullopt;
  }
  // `wide` bytes mostly before the estimate (a block boundary must come first).
  [[nodiscard]] Ask wide_before(std::uint64_t wide) const {
    const std::uint64_t first = std::max(m_.data_offset, estimate_ > 3 * wide / 4 ? estimate_ - 3 * wide / 4 : 0);
    return Ask{0, false, first, std::min(end_ - 1, first + wide - 1)};
  }

  const Deep& d_;
  const zip::Entry& m_;
  const std::uint64_t end_, k_window_;
  const std::uint64_t after_;   // bytes from the segment to the object's end
  const std::uint64_t beyond_;  // what they deflate to at most: they deflate to about their size
  const std::uint64_t window_ = k_window_ / 8, lead_ = 3 * window_ / 8;
  const std::uint64_t estimate_;
  const std::optional<std::uint64_t> other_;  // the estimate from the end
  bool span_ = false, close_ = false;         // the estimates apart; by at most three windows
};

// Where the whole file is at hand (or mid-stream places are not allowed): only exact places, a
// window that ends with the member, near the end, or where the segment lies in its second half
// and inflating from there to the end, twice, costs less than from the start (by a map of the
// stream, on every core, where the whole file is at hand).
std::optional<Ask> exact_window(const Deep& d, int pass, std::uint64_t k_window, bool whole_at_hand) {
  if (pass >= 3) return std::nullopt;
  const std::uint64_t after = d.member->size - d.layout.dynamic_offset;
  if (after <= 4 * k_window) return at_end(d, pass == 1 ? k_window / 4 : beyond_segment(d, k_window));
  const std::uint64_t from_start =
      whole_at_hand ? d.layout.dynamic_offset / r::thread_count(0) : d.layout.dynamic_offset;
  if (pass == 1 || 2 * after >= from_start) return std::nullopt;
  return at_end(d, beyond_segment(d, k_window));
}

}  // namespace

// Pass 1: around the estimate (around the middle of the two where they are close and the window
// at the end holds an eighth of the bytes after the segment). Then, near the end: the window
// between the estimates where they are close, around the estimates where they moved, the window
// at the end grown back (first as far as the section header table says, where that is less),
// around the estimate from the end where the two are far apart, then the window at the end as
// far back as the segment can lie. Elsewhere: the window between the estimates where they are
// close, pass 1's grown by one towards the other where they are far apart, around the estimates
// where they moved, the window at the end grown back where it gave no estimate, around the
// estimate from the end where the two are far apart, where the deflate ratio the windows that
// missed measured places it (probed), the window at the end as far as the section header table
// says where that is less than a wide one, then the wide one.
std::optional<Ask> window_for(const Deep& d, int pass, const RangeLimits& limits, bool whole_at_hand) {
  const zip::Entry& m = *d.member;
  if (m.method != 8 || d.layout.dynamic_size == 0 || d.dyn || d.segment_in_head()) return std::nullopt;
  if (!limits.mid_stream) return exact_window(d, pass, limits.window, whole_at_hand);
  const Windows w(d, limits.window);
  if (pass == 1) return w.first();
  return w.near() ? w.near_end() : w.elsewhere();
}

}  // namespace cudafix::installer::segment_place
