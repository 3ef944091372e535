// What a plan's step staged, against what the planner's replay computed for it
// (installer/apply/plan_apply.hpp): the transaction changes what the replay judged, or nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "installer/apply/plan_apply.hpp"
#include "resolver/base/diagnostic.hpp"

namespace cudafix::installer::apply {
namespace {

namespace r = cudafix::resolver;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string k_site = "/v/lib/python3.12/site-packages";

r::Step an_upgrade() {
  r::Step st;
  st.action = r::StepAction::install;
  st.dist = 3;
  st.name = "nvidia-cudnn-cu13";
  st.version = "9.19.0.56";
  st.writes = {k_site + "/nvidia/cudnn/lib/libcudnn.so.9", k_site + "/nvidia_cudnn_cu13-9.19.0.56.dist-info/RECORD"};
  st.deletes = {k_site + "/nvidia/cudnn/lib/old_only.txt", k_site + "/nvidia_cudnn_cu13-9.1.0.70.dist-info/"};
  return st;
}

StagedStep as_replayed(const r::Step& st) {
  StagedStep s;
  s.writes = st.writes;
  s.deletes = st.deletes;
  // The installer's own files, which no replay lists.
  s.generated = {k_site + "/nvidia_cudnn_cu13-9.19.0.56.dist-info/INSTALLER", "/v/bin/cudnn-tool"};
  s.writes.insert(s.writes.end(), s.generated.begin(), s.generated.end());
  return s;
}

std::string refusal(const r::Step& st, const StagedStep& staged) {
  try {
    check_staged_step(1, "install nvidia-cudnn-cu13 9.19.0.56", st, staged);
  } catch (const r::Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(PlanApply, AStepStagedAsItsReplayIsAccepted) {
  const auto st = an_upgrade();
  EXPECT_EQ(refusal(st, as_replayed(st)), "(accepted)");
  auto reordered = as_replayed(st);
  std::reverse(reordered.writes.begin(), reordered.writes.end());
  EXPECT_EQ(refusal(st, reordered), "(accepted)");
}

TEST(PlanApply, AWriteTheReplayDidNotComputeIsRefusedNamingTheStepAndThePath) {
  const auto st = an_upgrade();
  auto staged = as_replayed(st);
  staged.writes.push_back(k_site + "/nvidia/cudnn/lib/libcudnn_extra.so.9");
  EXPECT_THAT(refusal(st, staged),
              AllOf(HasSubstr("step 2 (install nvidia-cudnn-cu13 9.19.0.56)"),
                    HasSubstr("would write " + k_site + "/nvidia/cudnn/lib/libcudnn_extra.so.9"),
                    HasSubstr("which the plan's replay does not write"), HasSubstr("nothing was changed")));
}

TEST(PlanApply, AWriteTheReplayComputedButNotStagedIsRefused) {
  const auto st = an_upgrade();
  auto staged = as_replayed(st);
  std::erase(staged.writes, k_site + "/nvidia/cudnn/lib/libcudnn.so.9");
  EXPECT_THAT(refusal(st, staged), HasSubstr("would not write " + k_site + "/nvidia/cudnn/lib/libcudnn.so.9"));
}

TEST(PlanApply, ADeletionEitherSideLacksIsRefusedFirstInSortedOrder) {
  const auto st = an_upgrade();
  auto staged = as_replayed(st);
  staged.deletes.push_back(k_site + "/nvidia/cudnn/lib/libcudnn_graph.so.9");
  staged.deletes.push_back(k_site + "/nvidia/cudnn/lib/libcudnn_adv.so.9");
  EXPECT_THAT(refusal(st, staged), HasSubstr("would delete " + k_site + "/nvidia/cudnn/lib/libcudnn_adv.so.9,"));
  staged = as_replayed(st);
  staged.deletes.pop_back();  // the old dist-info folder left in place
  EXPECT_THAT(refusal(st, staged),
              AllOf(HasSubstr("would not delete " + k_site + "/nvidia_cudnn_cu13-9.1.0.70.dist-info/"),
                    HasSubstr("which the plan's replay deletes")));
}

TEST(PlanApply, AReinstallMayWriteNoLibraryItsReplayDoesNotRewrite) {
  auto st = an_upgrade();
  st.action = r::StepAction::reinstall;
  st.deletes.clear();
  st.writes.push_back(k_site + "/nvidia/__pycache__/__init__.cpython-312.pyc");  // in RECORD, not in the wheel
  StagedStep staged;
  staged.writes = {k_site + "/nvidia/cudnn/lib/libcudnn.so.9",
                   k_site + "/nvidia_cudnn_cu13-9.19.0.56.dist-info/RECORD"};
  staged.deletes = {k_site + "/nvidia/__pycache__/__init__.cpython-312.pyc"};
  EXPECT_EQ(refusal(st, staged), "(accepted)");
  staged.writes.push_back(k_site + "/nvidia_cudnn_cu13-9.19.0.56.dist-info/METADATA");  // its RECORD lacked it
  EXPECT_EQ(refusal(st, staged), "(accepted)");
  staged.writes.push_back(k_site + "/nvidia/cudnn/lib/libunplanned.so");
  EXPECT_THAT(refusal(st, staged), HasSubstr("would write " + k_site + "/nvidia/cudnn/lib/libunplanned.so"));
}

}  // namespace
}  // namespace cudafix::installer::apply
