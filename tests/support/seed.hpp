// The seed of a test that samples (the kill sweep's steps, the property tests' rounds): the
// same in every test of one process, printed once, so that a failure found on a sample is run
// again by its number. CUDAFIX_SEED=N gives it; else each run draws a new one (.ci/test draws
// one per CI run, prints it and passes it to both test runs).
#pragma once

#include <cstdint>
#include <string_view>

namespace cudafix::test {

// CUDAFIX_SEED, else a new seed; printed the first time ("seed N (CUDAFIX_SEED=N samples the
// same again)") and recorded in the calling test's XML report.
[[nodiscard]] std::uint32_t run_seed();

// A seed of its own for one named part (a command's sweep), the same for the same run seed
// whatever ran before it.
[[nodiscard]] std::uint32_t seed_for(std::string_view part);

}  // namespace cudafix::test
