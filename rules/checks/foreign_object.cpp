// foreign-object: ELF objects built for another machine or ELF class than the environment's
// interpreter, which no process of the environment can load.
// The rule's document below is what `cudafix explain foreign-object` prints.
#include <fmt/format.h>

#include <map>

#include "rules/checks/context.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules::checks {
namespace r = cudafix::resolver;
namespace {

struct Machine {
  std::uint16_t machine = 0;
  std::uint8_t elf_class = 0;
};

std::string describe(Machine m) {
  return fmt::format("{} ({}-bit)", r::machine_name(m.machine), m.elf_class == 1 ? 32 : 64);
}

// The environment's: its interpreter's, as the process model ran it; the host's where the
// model had no interpreter to read (a bare site folder).
Machine environment_machine(const r::Environment& env) {
  if (env.base_process && env.base_process->main >= 0) {
    const auto* elf = env.base_process->objects[static_cast<std::size_t>(env.base_process->main)].elf;
    if (elf) return {elf->machine, elf->elf_class};
  }
  if (env.loader) return {env.loader->config().host.machine, env.loader->config().host.elf_class};
  return {};
}

void check(Context& c) {
  const Machine here = environment_machine(c.env);
  if (here.machine == 0 || here.elf_class == 0) return;
  auto runs_here = [&](const r::SharedObject& o) {
    return o.elf.info.machine == here.machine && o.elf.info.elf_class == here.elf_class;
  };
  // Per owning dist (-1: none): its foreign objects, and whether it ships any object that runs here.
  std::map<int, std::vector<const r::SharedObject*>> foreign;
  std::map<int, bool> has_native;
  for (const auto& o : c.env.objects) {
    if (o.elf.status != r::ElfReadStatus::ok) continue;  // invalid-metadata's
    const int owner = o.owners.empty() ? -1 : o.owners.front();
    if (runs_here(o))
      has_native[owner] = true;
    else
      foreign[owner].push_back(&o);
  }
  for (const auto& [owner, objects] : foreign) {
    const r::DistInfo* dist = owner >= 0 ? &c.env.dists[static_cast<std::size_t>(owner)] : nullptr;
    for (const auto* o : objects) {
      Finding f;
      f.rule = "foreign-object";
      // A dist that also ships objects of this machine bundles helpers for other processes
      // (debugpy's 32-bit attach library); one with none was built for another machine.
      f.severity = !dist ? Severity::warning : has_native[owner] ? Severity::info : Severity::error;
      const Machine its{o->elf.info.machine, o->elf.info.elf_class};
      f.message =
          fmt::format("{} is built for {}, but this environment's interpreter is {}{}: no process here can load it",
                      c.env.display(o->path), describe(its), describe(here),
                      dist ? fmt::format(" ({} {})", dist->name, dist->version) : std::string());
      f.evidence.push_back(fmt::format("object: {}, {}", o->path, describe(its)));
      f.evidence.push_back(fmt::format("environment: {}", describe(here)));
      if (dist) {
        f.evidence.push_back(fmt::format("installed by {} {} ({})", dist->name, dist->version, dist->dir_name));
        if (has_native[owner])
          f.evidence.push_back(fmt::format("{} also ships objects for {}", dist->name, describe(here)));
        f.dists = {dist->dir_name};
        if (!has_native[owner]) f.remedy = reinstall(*dist);
      }
      f.paths = {o->path};
      c.add(std::move(f));
    }
  }
}

}  // namespace

extern const Rule foreign_object;
const Rule foreign_object{
    "foreign-object",
    Severity::error,
    r::ScanDepth::full,
    false,
    false,
    "ELF objects built for another machine or ELF class than the environment's interpreter.",
    R"md(# foreign-object

ELF objects built for another machine or ELF class than the environment's interpreter.

## What it finds
Every shared object in the environment whose ELF header names another machine (`e_machine`:
an aarch64 object in an x86-64 environment) or another class (a 32-bit object beside a 64-bit
interpreter) than the interpreter's, with its path, the dist that installed it, its machine
and the environment's. The loader model treats such an object as glibc does: a dlopen of it
fails before anything is mapped, so its NEEDED are never searched for among this host's
libraries and `unresolved-library` says nothing about them.

## Why it matters
An import of it fails (`ImportError: ... cannot open shared object file: wrong ELF class` or
`... ELF file's machine`): most often a wheel for another platform installed by a copied
folder, `pip install --platform` into the wrong target, or `--python-platform` pointed at
another machine.

## Severity
- error: an object of a dist none of whose objects runs here: the dist was built for another
  machine;
- warning: an object no dist lists;
- info: a dist that also ships objects for this machine, which bundles helpers for other
  processes by design (debugpy's 32-bit attach library).

## How to fix it
Reinstall the dist for this machine (`pip install --force-reinstall --no-deps NAME==VERSION`,
or `cudafix install` with no `--python-platform`), which picks the wheel of this platform; a
file no dist lists is best deleted.

## Example
```console
$ cudafix doctor --select foreign-object
error[foreign-object] #1 armonly/_native.so is built for aarch64 (64-bit), but this environment's interpreter is x86_64 (64-bit) (armonly 1.0): no process here can load it
      object: /venv/lib/python3.11/site-packages/armonly/_native.so, aarch64 (64-bit)
      environment: x86_64 (64-bit)
      installed by armonly 1.0 (armonly-1.0.dist-info)
    next: pip install --force-reinstall --no-deps armonly==1.0
```
)md",
    check,
};

}  // namespace cudafix::rules::checks
