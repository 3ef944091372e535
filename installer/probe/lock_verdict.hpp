// What a passing `verify` records in a lock (`cudafix lock --verified`): per device the probe
// brought up, the driver, cuDNN's version, the consumer verified and the libcudnn it mapped,
// as resolver/pep/pylock.hpp's [tool.cudafix] verified holds them.
#pragma once

#include <string>
#include <vector>

#include "installer/probe/verify.hpp"
#include "resolver/pep/pylock.hpp"

namespace cudafix::installer::probe {

// One verdict per device of `report`, none when the report does not pass (exit code 0); `at`
// is when (an RFC 3339 date-time, given by the caller: nothing below cli/ reads the clock for a
// lock's sake).
[[nodiscard]] std::vector<resolver::LockVerdict> lock_verdicts(const resolver::Environment& env,
                                                               const VerifyReport& report, const std::string& at);
// "9.10.2" for cuDNN's version number 91002 (cudnnGetVersion: major*10000 + minor*100 + patch).
[[nodiscard]] std::string cudnn_version_text(long long version);

}  // namespace cudafix::installer::probe
