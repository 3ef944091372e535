#include "tests/support/seed.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

namespace cudafix::test {

std::uint32_t run_seed() {
  static const std::uint32_t seed = [] {
    const char* given = std::getenv("CUDAFIX_SEED");
    const std::uint32_t s =
        given && *given ? static_cast<std::uint32_t>(std::strtoul(given, nullptr, 10)) : std::random_device{}();
    std::printf("seed %u (CUDAFIX_SEED=%u samples the same again)\n", s, s);
    std::fflush(stdout);
    return s;
  }();
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

std::uint32_t seed_for(std::string_view part) {
  // FNV-1a over the part's name, mixed with the run's seed: stable across compilers, unlike std::hash.
  std::uint32_t h = 2166136261u ^ run_seed();
  for (const char c : part) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return h;
}

}  // namespace cudafix::test
