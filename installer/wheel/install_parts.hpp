// What validating a wheel (install.cpp) and staging it (stage.cpp) share; nothing outside
// installer/wheel/ uses it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "installer/wheel/install.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/env/venv.hpp"

namespace cudafix::installer {

// Refuses `wheel`, naming `member` (none where empty) and why; "nothing was installed".
[[noreturn]] void refuse(const std::string& wheel, const std::string& member, const std::string& why);

// The zip reader's refusals, said as the installer's.
template <typename F>
auto as_install_refusal(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const resolver::Error& e) {
    throw resolver::Error(std::string(e.what()) + "; nothing was installed");
  }
}

// Where a wheel member goes: the scheme folder and the path below it.
[[nodiscard]] std::string target_of(const ValidatedWheel& w, const std::string& name,
                                    const resolver::EnvLayout& layout);

// One console or GUI script entry of entry_points.txt: `name = module:attr [extras]`.
struct ScriptEntry {
  std::string name, value, module, attr;
};
[[nodiscard]] std::vector<ScriptEntry> script_entries(const std::string& entry_points);
// Why pypa/installer refuses the entry (its module or callable is not `[\w.]+`, or it names
// no callable: `hello = hello`, `hello = hello:`), or empty.
[[nodiscard]] std::string entry_point_problem(const ScriptEntry& entry);

// Console and GUI scripts from entry_points.txt, as pypa/installer writes them: each name and its
// text, naming `python` in its shebang.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> scripts_of(const std::string& entry_points,
                                                                          const std::string& python);

}  // namespace cudafix::installer
