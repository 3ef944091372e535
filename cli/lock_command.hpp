// `cudafix lock [-o FILE] [--verified]`: the environment as a PEP 751 lock (resolver/plan/
// lock_env.hpp makes it, installer/source/wheel_origin.hpp finds each dist's wheel): its command
// line and what it shows. docs/cli.md is its contract.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

#include "cli/commands.hpp"

namespace CLI {
class App;
}

namespace cudafix::cli {

struct LockCliOptions {
  std::optional<std::string> output;  // -o: written atomically; none: standard output
  bool verified = false;              // --verified: verify first, record each device's passing verdict
  double timeout_s = 60;              // --timeout: the probe's, as verify's
};

// The `lock` subcommand and its options, on `app`.
CLI::App* add_lock_command(CLI::App& app, LockCliOptions& o);
// Exit 0 written (every package with a source or not: those without are said), 1 --verified and
// the verification failed (the lock is written without a verdict), 3 --verified and no GPU driver
// to verify with (the same), 2 could not run.
int run_lock(const GlobalOptions& g, const LockCliOptions& o, const std::string& version, std::ostream& out);

}  // namespace cudafix::cli
