// unreadable-record: A dist whose RECORD cannot be read at all: its files are unknown and no removal may trust it.
// The rule's document below is what `cudafix explain unreadable-record` prints.
#include <fmt/format.h>

#include "resolver/base/text.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

void check(Context& c) {
  for (const auto& d : c.env.dists) {
    if (d.record_problem.empty()) continue;
    const std::string record = d.site_dir + "/" + d.dir_name + "/" + d.record_name();
    Finding f;
    f.rule = "unreadable-record";
    f.severity = Severity::error;
    f.message = fmt::format("{}: its {} {}; its files are unknown, and `cudafix remove` refuses it", r::dist_label(d),
                            d.record_name(), d.record_problem);
    f.evidence.push_back(fmt::format("{}: {}", c.env.display(record), d.record_problem));
    f.dists = {d.dir_name};
    f.paths = {record};
    f.remedy = reinstall(d);
    c.add(std::move(f));
  }
}

}  // namespace

extern const Rule unreadable_record;
const Rule unreadable_record{
    "unreadable-record",
    Severity::error,
    r::ScanDepth::files,
    false,
    false,
    "A dist whose RECORD cannot be read at all: its files are unknown and no removal may trust it.",
    R"md(# unreadable-record

A dist whose RECORD cannot be read at all: its files are unknown and no removal may trust it.

## What it finds
A dist-info whose RECORD is not UTF-8, holds a NUL byte, has text of which no row parses as
`path,hash,size`, or is there but cannot be read (a folder, a FIFO, an I/O error). A RECORD
that is only missing is `invalid-metadata`'s warning; a RECORD with some bad rows among good
ones is too.

## Why it matters
RECORD is the only list of what a dist installed. pip's csv reader fails on such a file, so
`pip uninstall` cannot remove the dist; a tool that read it anyway would remove nothing, or
whatever its garbage happens to name, and report success. `cudafix remove` refuses the dist,
naming its RECORD, and `cudafix plan remove` judges the removal unsafe.

## Severity
- error: always: nothing can safely remove or verify the dist until it is reinstalled.

## How to fix it
Reinstall the dist so that pip writes its RECORD again
(`pip install --force-reinstall --no-deps NAME==VERSION`); if pip cannot uninstall it first,
remove its `.dist-info` folder by hand and install it again.

## Example
```console
$ cudafix doctor --select unreadable-record
error[unreadable-record] #1 broken 0.1: its RECORD cannot be read: it is not UTF-8 (byte 0xff at offset 7); its files are unknown, and `cudafix remove` refuses it
      broken-0.1.dist-info/RECORD: cannot be read: it is not UTF-8 (byte 0xff at offset 7)
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
