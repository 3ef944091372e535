// libFuzzer: the plan document's strict parser (resolver/plan/plan_file.hpp) must never crash
// and refuse anything malformed with an Error; a document it accepts holds only the actions and
// site roots the format has.
#include <cstdint>
#include <string_view>

#include "resolver/base/diagnostic.hpp"
#include "resolver/plan/plan_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace r = cudafix::resolver;
  try {
    const r::PlanFile plan =
        r::parse_plan_file(std::string_view(reinterpret_cast<const char*>(data), size), "plan.json");
    for (const auto& st : plan.steps) {
      if (st.action != r::StepAction::remove && st.action != r::StepAction::reinstall &&
          st.action != r::StepAction::install)
        __builtin_trap();
      for (const auto& p : st.deletes)
        if (p.root && *p.root != r::SiteRoot::purelib && *p.root != r::SiteRoot::platlib &&
            *p.root != r::SiteRoot::system)
          __builtin_trap();
    }
  } catch (const r::Error&) {
  }
  return 0;
}
