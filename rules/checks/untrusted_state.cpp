// untrusted-state: cudafix's own state in the environment (.cudafix/) is not what cudafix wrote, so it obeys none of
// it. The rule's document below is what `cudafix explain untrusted-state` prints.
#include <dirent.h>
#include <fmt/format.h>

#include "resolver/base/text.hpp"
#include "resolver/env/state_folder.hpp"
#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

// Entries of .cudafix/tx that are not transactions' folders, and an `active` naming no id.
std::vector<std::string> foreign_entries(const std::string& root) {
  std::vector<std::string> out;
  const std::string tx = root + "/.cudafix/tx";
  if (DIR* d = ::opendir(tx.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (name == "." || name == ".." || r::is_transaction_id(name)) continue;
      if (out.size() < 16) out.push_back(fmt::format("{}/{}: not a transaction id", tx, name.substr(0, 128)));
    }
    ::closedir(d);
  }
  if (const auto active = r::try_read_file(root + "/.cudafix/active");
      active && !r::is_transaction_id(r::trim(*active)))
    out.push_back(fmt::format("{}/.cudafix/active names '{}', not a transaction id", root,
                              std::string(r::trim(*active)).substr(0, 128)));
  return out;
}

void check(Context& c) {
  const auto& layout = c.env.layout;
  if (layout.kind == r::EnvKind::site_dir) return;
  const std::string& root = layout.root_real;
  std::vector<std::string> evidence;
  if (auto why = r::state_folder_problem(root); !why.empty()) evidence.push_back(why);
  for (auto& row : r::records_listing_protected(layout)) evidence.push_back("a RECORD lists it: " + row);
  for (auto& e : foreign_entries(root)) evidence.push_back(std::move(e));
  for (const auto& why : c.options.refused_recovery) evidence.push_back("recovery refused: " + why);
  if (evidence.empty()) return;
  Finding f;
  f.rule = "untrusted-state";
  f.severity = Severity::error;
  f.message = fmt::format(
      "cudafix's state in {} is not what cudafix wrote ({} {}), so cudafix obeys none of it: no recovery, "
      "rollback or pruning reads it",
      c.env.display(root + "/.cudafix"), evidence.size(), evidence.size() == 1 ? "problem" : "problems");
  f.evidence = std::move(evidence);
  f.paths.push_back(root + "/.cudafix");
  c.add(std::move(f));
}

}  // namespace

extern const Rule untrusted_state;
const Rule untrusted_state{
    "untrusted-state",
    Severity::error,
    r::ScanDepth::files,
    false,
    false,
    "cudafix's own state in the environment (.cudafix/) is not what cudafix wrote, so it obeys none of it.",
    R"md(# untrusted-state

cudafix's own state in the environment (.cudafix/) is not what cudafix wrote, so it obeys none of it.

## What it finds
- `.cudafix/` or `.cudafix/tx/` that is not a real folder (a symlink, a file), belongs to another
  user (neither the one running cudafix nor root), or may be written by others (cudafix makes
  both 0700);
- a dist whose RECORD lists a file under `.cudafix/`, or `cudafix.toml`, `pyvenv.cfg` or `.lock`:
  a wheel's `.data/data/` scheme installs into the venv's root, so pip installs such a wheel as
  readily as any other, and its files could pose as cudafix's journals or snapshots;
- entries of `.cudafix/tx/` not named by a transaction id, and an `active` that names none;
- a killed change whose journal recovery refused to carry out: a path outside the environment,
  not normal, or naming the venv's own files.

## Why it matters
cudafix's journals tell a later run what to move back; snapshots tell `rollback --snapshot`
what to link. Obeyed unchecked, a planted one would move, link or delete files wherever it
says. cudafix checks them and refuses; this rule tells you why nothing was recovered.

## Severity
- error: always.

## How to fix it
Look at what the evidence names. A wheel that writes into `.cudafix/` is hostile: uninstall it.
State cudafix did write but that another user can change: `chmod 700 .cudafix`. Once you know
where a planted file came from, remove it (`rm -r <venv>/.cudafix/tx/<folder>`).

## Example
```console
$ cudafix doctor --select untrusted-state
error[untrusted-state] #1 cudafix's state in .cudafix is not what cudafix wrote (1 problem), so cudafix obeys none of it: no recovery, rollback or pruning reads it
    a RECORD lists it: lib/python3.12/site-packages/evil-1.0.dist-info/RECORD: ../../../.cudafix/tx/20260101T000000.000-1-0/journal
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
