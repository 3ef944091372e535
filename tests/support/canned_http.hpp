// A file served from memory as an HTTP server serves it, for an HttpClient made with a transport
// (installer/source/http.hpp): no network. Range and suffix requests get 206 with the file's size
// (Content-Range), a range that starts past the end 416, a request with a file to write to has
// its body written there. A `Quirk` makes it answer as a faulty server would.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "installer/source/http.hpp"

namespace cudafix::test {

enum class Quirk : std::uint8_t {
  none,
  ignores_range,  // 200 and the whole file to every request
  wrong_size,     // Content-Range states a size other than the file's
  short_bodies,   // each body one byte short of what was asked
  fails_later,    // every request after the first answers 500
};

inline installer::source::HttpTransport serve_from_memory(std::string file, Quirk quirk = Quirk::none) {
  using installer::source::HttpRequest;
  using installer::source::HttpResponse;
  auto calls = std::make_shared<std::size_t>(0);
  return [file = std::move(file), quirk, calls](const std::vector<HttpRequest>& requests) {
    std::vector<HttpResponse> out;
    for (const auto& req : requests) {
      HttpResponse a;
      a.final_url = req.url;
      const std::uint64_t size = file.size();
      std::string body;
      if (quirk == Quirk::fails_later && (*calls)++ > 0) {
        a.status = 500;
        a.error = req.url + ": HTTP 500 Internal Server Error";
        out.push_back(std::move(a));
        continue;
      }
      if (quirk == Quirk::ignores_range || (!req.range && req.suffix == 0)) {
        a.status = 200;
        a.range_ignored = req.range || req.suffix != 0;
        body = file;
      } else if (req.range && req.range->first >= size) {
        a.status = 416;
        a.error = req.url + ": HTTP 416 Range Not Satisfiable";
        out.push_back(std::move(a));
        continue;
      } else {
        const std::uint64_t first = req.range ? req.range->first : size - std::min(size, req.suffix);
        const std::uint64_t last = req.range ? std::min(req.range->second, size - 1) : size - 1;
        a.status = 206;
        a.total_size = quirk == Quirk::wrong_size ? size * 2 + 1 : size;
        body = first <= last ? file.substr(first, last - first + 1) : std::string();
        if (quirk == Quirk::short_bodies && !body.empty()) body.pop_back();
      }
      a.bytes = body.size();
      if (req.into.empty()) {
        a.body = std::move(body);
      } else {
        std::ofstream(req.into, std::ios::binary | std::ios::trunc) << body;
      }
      out.push_back(std::move(a));
    }
    return out;
  };
}

}  // namespace cudafix::test
