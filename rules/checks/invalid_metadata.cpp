// invalid-metadata: Dist-info files and ELF objects that cannot be read; the scan goes on without them.
// The rule's document below is what `cudafix explain invalid-metadata` prints.
#include <fmt/format.h>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

void check(Context& c) {
  std::map<std::string, std::vector<const r::Diagnostic*>> by_file;
  for (const auto& d : c.env.diagnostics) by_file[d.file].push_back(&d);
  for (const auto& [file, diags] : by_file) {
    Finding f;
    f.rule = "invalid-metadata";
    f.severity = Severity::warning;
    f.message = fmt::format("{}: {} problem{} (the scan went on)", c.env.display(file), diags.size(),
                            diags.size() == 1 ? "" : "s");
    for (const auto* d : diags) f.evidence.push_back(d->to_string());
    f.paths = {file};
    c.add(std::move(f));
  }
}

}  // namespace

extern const Rule invalid_metadata;
const Rule invalid_metadata{
    "invalid-metadata",
    Severity::warning,
    r::ScanDepth::full,
    false,
    false,
    "Dist-info files and ELF objects that cannot be read; the scan goes on without them.",
    R"md(# invalid-metadata

Dist-info files and ELF objects that cannot be read; the scan goes on without them.

## What it finds
A METADATA, RECORD or WHEEL file that is malformed (a RECORD row with a bad field, a
Requires-Dist that is not PEP 508), and a file that starts like an ELF object but cannot be read
safely; each with its file, offset or line, and what is wrong.

## Why it matters
cudafix keeps going where pip would stop or guess, but what it could not read it cannot judge:
a RECORD it cannot parse is a dist whose files it cannot own, and a truncated library is one the
loader will refuse too.

## Severity
- warning: always: the rest of the scan stands, this part of it is unknown.

## How to fix it
Reinstall the dist the file belongs to (`pip install --force-reinstall --no-deps NAME==VERSION`);
a truncated library is a failed download or a full disk.

## Example
```console
$ cudafix doctor --select invalid-metadata
warning[invalid-metadata] #1 broken-0.1.dist-info/RECORD: 1 problem (the scan went on)
      broken-0.1.dist-info/RECORD:3: ...
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
