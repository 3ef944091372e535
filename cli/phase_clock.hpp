// Where a command's time goes, phase by phase: `phases` in its JSON (seconds) and, with
// --timings, one line a phase on stderr. A phase lapped twice adds up.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace cudafix::cli {

class PhaseClock {
 public:
  using Clock = std::chrono::steady_clock;
  PhaseClock() : start_(Clock::now()), lap_(start_) {}
  // The time since the last lap (or the start) counted to `phase`.
  void lap(const char* phase) {
    const auto now = Clock::now();
    auto& slot = phases_[phase];
    slot = (slot.is_number() ? slot.get<double>() : 0.0) + std::chrono::duration<double>(now - lap_).count();
    lap_ = now;
  }
  [[nodiscard]] double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  [[nodiscard]] const nlohmann::ordered_json& phases() const { return phases_; }
  [[nodiscard]] std::string timings_text() const {
    std::string out;
    for (const auto& [phase, seconds] : phases_.items())
      out += fmt::format("{:>22}: {:7.1f} ms\n", phase, seconds.get<double>() * 1000);
    return out;
  }

 private:
  Clock::time_point start_, lap_;
  nlohmann::ordered_json phases_ = nlohmann::ordered_json::object();
};

}  // namespace cudafix::cli
