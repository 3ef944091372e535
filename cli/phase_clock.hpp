// Where a command's time goes, phase by phase: `seconds` and `phases` in its JSON and, with
// --timings, one line a phase on stderr. A phase lapped twice adds up.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "cli/json_writer.hpp"

namespace cudafix::cli {

class PhaseClock {
 public:
  using Clock = std::chrono::steady_clock;
  PhaseClock() : start_(Clock::now()), lap_(start_) {}
  // The time since the last lap (or the start) counted to `phase`.
  void lap(const char* phase) {
    const auto now = Clock::now();
    const double took = std::chrono::duration<double>(now - lap_).count();
    lap_ = now;
    for (auto& [name, seconds] : phases_)
      if (name == phase) {
        seconds += took;
        return;
      }
    phases_.emplace_back(phase, took);
  }
  [[nodiscard]] double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  // The phases as a JSON object, each its seconds, in the order first lapped.
  void write_phases(JsonWriter& w) const {
    w.begin_object();
    for (const auto& [name, seconds] : phases_) w.key(name).value(seconds);
    w.end_object();
  }
  [[nodiscard]] std::string timings_text() const {
    std::string out;
    for (const auto& [phase, seconds] : phases_) out += fmt::format("{:>22}: {:7.1f} ms\n", phase, seconds * 1000);
    return out;
  }

 private:
  Clock::time_point start_, lap_;
  std::vector<std::pair<std::string, double>> phases_;
};

}  // namespace cudafix::cli
