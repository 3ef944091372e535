// A property of the repair planner, on random environments built from the demo environment (a
// cut of the corpus with the real wheels' SONAME, NEEDED and RPATH) with dists removed, left
// metadata-only, or given a second CUDA major: every plan either keeps every required
// resolution no worse after every step or reports that no safe order exists, and no step deletes
// a path a kept dist still lists. "No worse" is checked on the disk, not by the planner's own
// simulation: the steps are carried out on a copy (removals delete, reinstalls restore the bytes
// from the untouched original) and the copy is scanned again after each one; glibc's ld.so then
// lists every consumer object of the carried-out plan, an oracle that is not ours.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "demo_env_json.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/example_env.hpp"
#include "resolver/plan/fix.hpp"
#include "resolver/plan/plan.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/knowledge.hpp"
#include "tests/support/process.hpp"

namespace cudafix::resolver {
namespace {

namespace fs = std::filesystem;
using test::run_shell;
using test::shell_quote;
using test::TempDir;

Environment scan(const std::string& dir) {
  ScanOptions o;
  o.ld_so_cache = "/nonexistent/ld.so.cache";
  o.threads = 2;
  return scan_environment(read_layout(dir, "--venv"), o);
}

// The paths a dist's RECORD lists, absolute.
std::set<std::string> listed(const DistInfo& d) {
  std::set<std::string> out;
  for (const auto& row : d.record) out.insert(join_normal(d.site_dir, row.path));
  return out;
}

// Breaks one copy of the demo environment at random: returns what was done, for the failure message.
std::string mutate(const std::string& dir, std::mt19937& rng) {
  const Environment env = scan(dir);
  const Knowledge k = rules::builtin_knowledge();
  std::vector<int> providers;
  for (std::size_t d = 0; d < env.dists.size(); ++d)
    if (is_cuda_provider(k, env.dists[d]) && major_of_dist(k, env.dists[d])) providers.push_back(static_cast<int>(d));
  std::string done;
  const int changes = 1 + static_cast<int>(rng() % 3);
  for (int c = 0; c < changes && !providers.empty(); ++c) {
    const DistInfo& d = env.dists[static_cast<std::size_t>(providers[rng() % providers.size()])];
    switch (rng() % 3) {
      case 0:  // uninstalled the pip way: every listed file and the dist-info go
        for (const auto& p : listed(d)) fs::remove(p);
        fs::remove_all(d.site_dir + "/" + d.dir_name);
        done += " removed " + d.name + ";";
        break;
      case 1:  // metadata-only: its libraries deleted by another dist's uninstall
        for (const auto& p : listed(d))
          if (looks_like_shared_object(base_name(p))) fs::remove(p);
        done += " emptied " + d.name + ";";
        break;
      default: {  // a second CUDA major writing the same paths
        const auto major = major_of_dist(k, d);
        if (!major) break;
        const int other = *major == 13 ? 12 : 13;
        std::string base = d.normalized;
        if (const auto at = base.rfind("-cu"); at != std::string::npos && cuda_major_of_name(base)) base.resize(at);
        const std::string name = fmt::format("{}-cu{}", base, other);
        std::string folder = name;
        std::replace(folder.begin(), folder.end(), '-', '_');
        const std::string info = d.site_dir + "/" + folder + "-" + d.version + ".dist-info";
        if (fs::exists(info)) break;
        fs::create_directories(info);
        test::write_file(info + "/METADATA",
                         fmt::format("Metadata-Version: 2.1\nName: {}\nVersion: {}\n", name, d.version));
        std::string record;
        for (const auto& row : d.record)
          if (!row.path.starts_with(std::string(d.dir_name) + "/")) record += fmt::format("{},,\n", row.path);
        test::write_file(info + "/RECORD", record);
        done += " added " + name + " over " + d.name + "'s files;";
        break;
      }
    }
  }
  return done;
}

// Carries out one step on the copy: a removal deletes what the plan says; a reinstall restores
// the dist's files from the original tree. Returns false for a step that cannot be carried out
// here (an install: no wheel).
bool carry_out(const Step& step, const Environment& env, const std::string& copy, const std::string& original) {
  if (step.action == StepAction::install) return false;
  if (step.action == StepAction::remove) {
    for (const auto& p : step.deletes)
      if (!p.ends_with("/")) fs::remove(p);
    for (const auto& p : step.deletes)
      if (p.ends_with("/")) fs::remove_all(p.substr(0, p.size() - 1));
    return true;
  }
  for (const auto& p : listed(env.dists[static_cast<std::size_t>(step.dist)])) {
    const std::string from = original + p.substr(copy.size());
    if (!fs::exists(from)) continue;
    fs::create_directories(parent_dir(p));
    fs::copy_file(from, p, fs::copy_options::overwrite_existing);
  }
  return true;
}

// glibc's own answer, an oracle that is not ours: `ld.so --list OBJECT` with no ld.so.cache (as
// the planner's scan assumes) and no LD_LIBRARY_PATH, every soname the object's load maps (its
// NEEDED and theirs) and the file it maps, or nullopt for "not found".
std::map<std::string, std::optional<std::string>> glibc_list(const std::string& object) {
  const auto r =
      run_shell("env -i /lib64/ld-linux-x86-64.so.2 --inhibit-cache --list " + shell_quote(object) + " 2>&1");
  std::map<std::string, std::optional<std::string>> out;
  std::size_t start = 0;
  while (start < r.out.size()) {
    const auto end = std::min(r.out.find('\n', start), r.out.size());
    const std::string line = r.out.substr(start, end - start);
    start = end + 1;
    const auto arrow = line.find(" => ");
    if (arrow == std::string::npos) continue;
    std::string name = line.substr(0, arrow);
    name.erase(0, name.find_first_not_of(" \t"));
    std::string target = line.substr(arrow + 4);
    if (target.rfind("not found", 0) == 0) {
      out[name] = std::nullopt;
      continue;
    }
    out[name] = target.substr(0, target.find(" ("));
  }
  return out;
}

// The consumers: objects of dists that ship no CUDA library but NEED one (torch's, not cuDNN's).
std::vector<std::string> consumer_objects(const Environment& env, const Knowledge& k) {
  std::set<std::string> cuda;
  for (const auto& [name, family] : k.families)
    for (const auto& [major, m] : family.majors) cuda.insert(m.sonames.begin(), m.sonames.end());
  std::vector<std::string> out;
  for (const auto& o : env.objects) {
    if (o.owners.empty() || o.elf.status != ElfReadStatus::ok) continue;
    bool provider = false;
    for (int d : o.owners) provider = provider || is_cuda_provider(k, env.dists[static_cast<std::size_t>(d)]);
    const bool needs_cuda = std::any_of(o.elf.info.needed.begin(), o.elf.info.needed.end(),
                                        [&](const std::string& n) { return cuda.count(n) > 0; });
    if (!provider && needs_cuda) out.push_back(o.path);
  }
  return out;
}

// glibc's verdict on the carried-out plan: every CUDA library a consumer maps comes from inside the
// environment, from a provider of the target major, and nothing a consumer found before is lost.
void expect_glibc_agrees(const std::map<std::string, std::map<std::string, std::optional<std::string>>>& before,
                         const std::string& root, const Knowledge& k, int target) {
  const Environment after = scan(root);
  std::set<std::string> cuda;
  for (const auto& [name, family] : k.families)
    for (const auto& [major, m] : family.majors) cuda.insert(m.sonames.begin(), m.sonames.end());
  for (const auto& [object, was] : before) {
    if (!fs::exists(object)) continue;
    const auto now = glibc_list(object);
    for (const auto& [soname, path] : was)
      if (path) {
        EXPECT_TRUE(now.count(soname) && now.at(soname)) << object << " lost " << soname;
      }
    for (const auto& [soname, path] : now) {
      if (!path || !cuda.count(soname)) continue;
      const std::string real = fs::weakly_canonical(*path).string();
      EXPECT_TRUE(is_within(real, root)) << object << ": " << soname << " => " << real << ", outside the environment";
      const auto major = major_of_file(after, k, real);
      EXPECT_TRUE(!major || *major == target) << object << ": " << soname << " => " << real << ", CUDA " << *major;
    }
  }
}

TEST(PlanFixProperty, EveryStepKeepsWhatIsRequiredAndNoRemovalDeletesWhatAKeptDistLists) {
  TempDir t;
  const std::string original = t.path() + "/original";
  materialize_environment(nlohmann::json::parse(k_demo_env), original);
  const Knowledge k = rules::builtin_knowledge();
  std::mt19937 rng(20261130);
  int plans = 0, refused = 0, steps_checked = 0, checked_by_glibc = 0;
  for (int round = 0; round < 25; ++round) {
    const std::string broken = t.path() + fmt::format("/broken{}", round);
    ASSERT_EQ(run_shell("cp -a " + shell_quote(original) + " " + shell_quote(broken)).exit_code, 0);
    const std::string what = mutate(broken, rng);
    SCOPED_TRACE(what);
    const Environment before = scan(broken);
    std::map<std::string, std::map<std::string, std::optional<std::string>>> glibc_before;
    for (const auto& o : consumer_objects(before, k)) glibc_before[o] = glibc_list(o);
    FixOptions opts;
    opts.threads = 2;
    const FixPlan plan = plan_fix(before, k, opts);
    if (!plan.target) continue;
    ++plans;
    // The planner's own verdicts: all steps ok, or the last one is the refused one.
    for (std::size_t i = 0; i < plan.steps.size(); ++i)
      EXPECT_TRUE(plan.steps[i].ok || (i + 1 == plan.steps.size() && !plan.ok())) << i;
    if (!plan.ok()) {
      ++refused;
      ASSERT_FALSE(plan.steps.empty());
      EXPECT_FALSE(plan.steps.back().ok);
      EXPECT_FALSE(plan.steps.back().worse.empty());
    }
    // No removal deletes a path a dist that is kept at that point lists.
    std::set<int> removed;
    for (const auto& st : plan.steps) {
      if (st.action != StepAction::remove || !st.ok) continue;
      removed.insert(st.dist);
      for (const auto& p : st.deletes) {
        if (p.ends_with("/")) continue;
        for (std::size_t d = 0; d < before.dists.size(); ++d)
          if (!removed.count(static_cast<int>(d))) {
            EXPECT_FALSE(listed(before.dists[d]).count(p)) << p << " " << st.name;
          }
      }
    }
    // On the disk: carry out each accepted step and scan again; nothing required got worse.
    bool carried_out = plan.ok();
    for (const auto& st : plan.steps) {
      if (!st.ok || !carry_out(st, before, broken, original)) {
        carried_out = false;
        break;
      }
      const Environment after = scan(broken);
      const auto worse = worse_resolutions(before, after, k, plan.target);
      EXPECT_TRUE(worse.empty()) << to_string(st.action) << " " << st.name << ": "
                                 << (worse.empty() ? "" : worse.front().consumer + " " + worse.front().why);
      ++steps_checked;
    }
    // And glibc's loader agrees, on every consumer, once the whole plan is carried out.
    if (carried_out) {
      expect_glibc_agrees(glibc_before, broken, k, *plan.target);
      ++checked_by_glibc;
    }
  }
  // The rounds must have exercised something.
  EXPECT_GT(plans, 10);
  EXPECT_GT(steps_checked, 10);
  EXPECT_GT(checked_by_glibc, 5);
  RecordProperty("plans", plans);
  RecordProperty("refused", refused);
  RecordProperty("steps_checked_on_disk", steps_checked);
  RecordProperty("plans_checked_by_glibc", checked_by_glibc);
}

}  // namespace
}  // namespace cudafix::resolver
