#include "installer/source/remote_wheel.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>

#include "installer/wheel/ranged_read.hpp"
#include "installer/wheel/read.hpp"
#include "installer/wheel/zip_reader.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::installer::source {
namespace r = cudafix::resolver;

namespace {

constexpr std::uint64_t k_max_central = 256 << 20;  // a central directory read by range (torch's: 1.5 MB)

const unsigned char* bytes_of(const std::string& s) { return reinterpret_cast<const unsigned char*>(s.data()); }

// The bytes of the wheel already at hand: the end of the file, from the first request.
struct Known {
  std::uint64_t at = 0;
  std::string bytes;
};

using Ranges = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

// Ranges merged where they overlap or lie at most `gap` bytes apart: the requests made for them.
Ranges coalesced(Ranges ranges, std::uint64_t gap) {
  std::sort(ranges.begin(), ranges.end());
  Ranges out;
  for (const auto& [first, last] : ranges) {
    if (!out.empty() && (first <= out.back().second || first - out.back().second - 1 <= gap))
      out.back().second = std::max(out.back().second, last);
    else
      out.emplace_back(first, last);
  }
  return out;
}

// What a read by range may still fetch ran out: the wheel is downloaded whole instead.
struct OverHalf {};

// Bytes [first, last] of the wheel for each range (or from `known`), all at once: ranges near
// each other (`gap`) one request, each checked to be as long as asked. `left`: the bytes the
// requests may take in all, less what they take (OverHalf, before any is made, past it).
std::vector<std::string> fetch(HttpClient& http, const std::string& url, const Ranges& ranges, std::uint64_t gap,
                               const Known& known = {}, std::uint64_t* left = nullptr) {
  std::vector<std::string> out(ranges.size());
  Ranges wanted;
  std::vector<std::size_t> asked;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const auto [first, last] = ranges[i];
    // A range computed from the wheel's own offsets that ends before it starts: they lie.
    if (first > last)
      throw r::Error(fmt::format("{}: its zip structures name bytes {}-{}, past its end", redact(url), first, last));
    if (!known.bytes.empty() && first >= known.at && last < known.at + known.bytes.size()) {
      out[i] = known.bytes.substr(first - known.at, last - first + 1);
      continue;
    }
    wanted.push_back(ranges[i]);
    asked.push_back(i);
  }
  const Ranges merged = coalesced(wanted, gap);
  if (left) {
    std::uint64_t bytes = 0;
    for (const auto& [first, last] : merged) bytes += last - first + 1;
    if (bytes > *left) throw OverHalf{};
    *left -= bytes;
  }
  std::vector<HttpRequest> requests;
  for (const auto& range : merged) {
    HttpRequest req;
    req.url = url;
    req.range = range;
    requests.push_back(std::move(req));
  }
  auto answers = http.perform(requests);
  for (std::size_t k = 0; k < answers.size(); ++k) {
    if (!answers[k].ok()) throw r::Error(answers[k].error);
    if (answers[k].range_ignored || answers[k].body.size() != merged[k].second - merged[k].first + 1)
      throw r::Error(fmt::format("{}: the server sent {} bytes for the range {}-{}", redact(url),
                                 answers[k].body.size(), merged[k].first, merged[k].second));
  }
  // Of each asked range, the request that holds it; one that is a request alone takes its body,
  // not a copy of it (a 4 MB window was held three times over).
  std::vector<std::size_t> of(asked.size());
  std::vector<std::size_t> uses(merged.size(), 0);
  for (std::size_t j = 0; j < asked.size(); ++j) {
    const std::uint64_t first = ranges[asked[j]].first;
    of[j] = static_cast<std::size_t>(std::upper_bound(merged.begin(), merged.end(), first,
                                                      [](std::uint64_t v, const auto& m) { return v < m.first; }) -
                                     merged.begin() - 1);
    ++uses[of[j]];
  }
  for (std::size_t j = 0; j < asked.size(); ++j) {
    const auto [first, last] = ranges[asked[j]];
    const std::size_t k = of[j];
    if (uses[k] == 1 && first == merged[k].first && last == merged[k].second)
      out[asked[j]] = std::move(answers[k].body);
    else
      out[asked[j]] = answers[k].body.substr(first - merged[k].first, last - first + 1);
  }
  return out;
}

// The central directory, from the end of the file (fetching more when it is larger than the
// tail), parsed and checked by the one zip reader (installer/wheel/zip_reader.hpp).
std::vector<zip::Entry> central_directory(HttpClient& http, const std::string& url, const std::string& tail,
                                          std::uint64_t size) {
  const std::uint64_t tail_start = size - tail.size();
  const zip::End end = zip::parse_end(bytes_of(tail), tail.size(), tail_start, redact(url));
  if (end.cd_size > k_max_central)
    throw r::Error(fmt::format("{}: a central directory of {} bytes, over the {} read by range", redact(url),
                               end.cd_size, k_max_central));
  std::string cd;
  if (end.cd_offset >= tail_start) {
    cd = tail.substr(end.cd_offset - tail_start, end.cd_size);
  } else {
    cd = fetch(http, url, {{end.cd_offset, tail_start - 1}}, 0).front() + tail.substr(0, end.end_at - tail_start);
    cd.resize(end.cd_size);
  }
  std::vector<zip::Entry> out;
  for (auto& e : zip::parse_central_directory(bytes_of(cd), cd.size(), end, redact(url)))
    if (!e.folder) out.push_back(std::move(e));
  return out;
}

// The whole wheel of `size` bytes into `file`, as `apply` keeps it.
void download_whole(HttpClient& http, const std::string& url, std::uint64_t size, const std::string& file) {
  HttpRequest whole;
  whole.url = url;
  whole.range = std::pair<std::uint64_t, std::uint64_t>{0, size - 1};
  whole.into = file;
  const auto answer = http.get(whole);
  if (!answer.ok()) throw r::Error(answer.error);
  if (answer.bytes != size)
    throw r::Error(fmt::format("{}: the server sent {} bytes of a wheel of {}", redact(url), answer.bytes, size));
}

}  // namespace

RemoteRead read_remote_wheel(HttpClient& http, const Picked& picked, const std::vector<std::string>& supported_tags,
                             const std::string& temporary_file, const RangeLimits& limits) {
  const std::uint64_t k_tail = limits.tail;
  RemoteRead out;
  const std::string& url = picked.file.url;
  const std::uint64_t before = http.bytes_received();
  HttpRequest tail_request;
  tail_request.url = url;
  tail_request.suffix = k_tail;
  tail_request.into = temporary_file;
  const auto tail_answer = http.get(tail_request);
  if (!tail_answer.ok()) throw r::Error(tail_answer.error);
  if (tail_answer.range_ignored || tail_answer.total_size == 0) {
    out.downloaded = temporary_file;  // the whole file came: it is read from disk
    out.fetched = http.bytes_received() - before;
    out.size = tail_answer.bytes;
    return out;
  }
  out.size = tail_answer.total_size;
  const std::string tail = r::try_read_file(temporary_file).value_or("");
  // A small wheel: fetched whole, as apply will need it, rather than read by range.
  if (tail.size() < out.size && out.size <= limits.whole_wheel) download_whole(http, url, out.size, temporary_file);
  if (tail.size() >= out.size || out.size <= limits.whole_wheel) {  // a small wheel: all of it is here
    out.downloaded = temporary_file;
    out.whole_because_small = true;
    out.fetched = http.bytes_received() - before;
    return out;
  }
  auto members = central_directory(http, url, tail, out.size);

  std::string dist_info;
  for (const auto& m : members) {
    const auto top = m.name.substr(0, m.name.find('/'));
    if (top.ends_with(".dist-info") && m.name == top + "/METADATA") dist_info = top;
  }
  if (dist_info.empty()) throw r::Error(fmt::format("{}: no .dist-info/METADATA inside", redact(url)));
  std::vector<zip::Entry> wanted;
  for (auto& e : members)
    if (e.name == dist_info + "/METADATA" || e.name == dist_info + "/RECORD" || looks_like_elf_member(e.name))
      wanted.push_back(std::move(e));
  const Known end_of_file{out.size - tail.size(), tail};
  // At most half the wheel by range: past that the whole file costs less than what is left to
  // read, and `apply` needs it anyway (an object of bytes that do not deflate, its segment deep,
  // had the plan read 1.3 times the wheel by range).
  const std::uint64_t tail_read = http.bytes_received() - before;
  std::uint64_t left = out.size / 2 > tail_read ? out.size / 2 - tail_read : 0;
  const auto read = [&](const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges) {
    return fetch(http, url, ranges, limits.gap, end_of_file, limits.whole_past_half ? &left : nullptr);
  };
  RangedMembers got;
  try {
    got = read_members_by_ranges(read, out.size, std::move(wanted), dist_info, redact(url), limits, InvalidElf::refuse);
  } catch (const OverHalf&) {
    download_whole(http, url, out.size, temporary_file);
    out.downloaded = temporary_file;
    out.whole_because_ranges = true;
    out.fetched = http.bytes_received() - before;
    return out;
  }
  out.objects_by_window = got.objects_by_window;
  out.objects_from_start = got.objects_from_start;
  out.members_whole = got.members_whole;
  r::Wheel w;
  w.wheel_name = picked.wheel;
  w.tag_rank = r::tag_rank(picked.wheel, supported_tags);
  w.compatible = w.tag_rank.has_value();
  w.dist_info = dist_info;
  w.elf = std::move(got.elf);
  w.sha256 = picked.file.sha256;
  w.url = redact(url);  // shown and saved in plans: never with credentials
  out.fetched = http.bytes_received() - before;
  w.bytes_read = out.fetched;
  w.size = out.size;
  out.wheel = complete_wheel(std::move(w), std::move(got.metadata), std::move(got.record), redact(url));
  return out;
}

}  // namespace cudafix::installer::source
