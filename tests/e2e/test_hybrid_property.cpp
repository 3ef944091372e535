// A property of `plan fix` on hybrid CUDA 12/13 environments made the way users make them: real
// venvs, real wheels installed by pip in a random order (so either major's bytes may sit in the
// paths both write: nvidia/cudnn/lib, nvidia/nccl/lib), some providers then uninstalled by a real
// `pip uninstall` (which deletes those shared files for both). The consumers (torch, cupy, jax's
// plugin) all need one major, the target; a random set of the other major's providers is left
// over. With every wheel at hand (--find-links), the plan must be found, every step judged safe,
// and once it is carried out on the venv (in even rounds by pip for the reinstalls and installs
// and the plan's own deletions for the removals; in odd rounds by `cudafix apply`) three judges that are not the
// planner must agree: `cudafix doctor` reports no error, `pip check` passes, and glibc's `ld.so --list` of every
// consumer object finds each CUDA library in the venv, byte for byte the target major's build, and loses nothing it
// found before.
//
// The second property is `fix`'s own, with its verification on the fakes (tests/fixtures: a fake
// libcuda, and cuDNN dispatchers that answer cudnnGetVersion and cudnnCreate): torch and the other
// consumers installed as above, then 2 to 4 of the target major's providers removed by one real
// `pip uninstall` (the usual cleanup, issue 37). `fix` must end verified after every step, and the
// same three judges must agree.
//
// Each run takes a new seed and prints it; CUDAFIX_SEED=N runs that seed again (tests/support/seed.hpp).
// CUDAFIX_HYBRID_ROUNDS sets the number of rounds of the plan property (6 by default) and
// CUDAFIX_HYBRID_FIX_ROUNDS those of fix's (3 by default): a CI sample, each round a dozen pip
// runs; bench/hybrid_property.sh runs many more of both.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "resolver/elf/elf_writer.hpp"
#include "tests/e2e/cudafix_run.hpp"
#include "tests/support/seed.hpp"

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::run_shell;
using test::shell_quote;
using test::TempDir;

// One dist of the pool: its wheel, the files it installs (archive name -> built ELF), what it is.
struct Dist {
  std::string key;  // "cudnn", "torch", ...
  int major = 0;    // the CUDA major it provides or needs
  bool provider = false;
  std::string name;  // the dist's project name
  std::string wheel;
  std::map<std::string, std::string> files;  // archive path -> source ELF
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class HybridProperty : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    links_ = tmp_->path() + "/wheels";
    elf_ = tmp_->path() + "/elf";
    fs::create_directories(links_);
    fs::create_directories(elf_);
    for (int m : {12, 13}) add_major(m);
    base_ = test::base_venv(tmp_->path() + "/base");
  }
  static void TearDownTestSuite() { delete tmp_; }

  static std::string object(const std::string& file, const std::string& soname, std::vector<std::string> needed,
                            const std::string& runpath) {
    resolver::ElfSpec spec;
    spec.soname = soname;
    spec.needed = std::move(needed);
    if (!runpath.empty()) spec.runpath = runpath;
    spec.padding = 64 + file.size() * 16;  // the two majors' builds differ in bytes, as real ones do
    resolver::write_shared_object(elf_ + "/" + file, spec);
    return elf_ + "/" + file;
  }

  static void add(Dist d, const std::string& version, const std::vector<std::string>& requires_dist) {
    std::string args = d.name + " " + version;
    for (const auto& [arc, src] : d.files) args += " " + arc + "=" + src;
    for (const auto& r : requires_dist) args += " --requires " + shell_quote(r);
    d.wheel = test::make_wheel(links_, args);
    pool_.push_back(std::move(d));
  }

  // The real layouts: CUDA 12's runtime and cuBLAS in folders of their own, CUDA 13's together in
  // nvidia/cu13/lib; cuDNN and NCCL in one folder for both majors, under the same sonames.
  static void add_major(int m) {
    const std::string s = std::to_string(m);
    const bool twelve = m == 12;
    const std::string rt_dir = twelve ? "nvidia/cuda_runtime/lib" : "nvidia/cu13/lib";
    const std::string blas_dir = twelve ? "nvidia/cublas/lib" : "nvidia/cu13/lib";
    const std::string up = "$ORIGIN/../../";
    const std::string cudart = "libcudart.so." + s, cublas = "libcublas.so." + s, lt = "libcublasLt.so." + s;
    Dist rt{"runtime", m, true, twelve ? "nvidia-cuda-runtime-cu12" : "nvidia-cuda-runtime", "", {}};
    rt.files[rt_dir + "/" + cudart] = object("cudart" + s + ".so", cudart, {}, "");
    add(rt, twelve ? "12.8.90" : "13.0.96", {});
    Dist blas{"cublas", m, true, twelve ? "nvidia-cublas-cu12" : "nvidia-cublas", "", {}};
    blas.files[blas_dir + "/" + lt] = object("lt" + s + ".so", lt, {}, "");
    blas.files[blas_dir + "/" + cublas] = object("cublas" + s + ".so", cublas, {lt}, "$ORIGIN");
    add(blas, twelve ? "12.8.4.1" : "13.1.0.3", {});
    const std::string rtc_dir = twelve ? "nvidia/cuda_nvrtc/lib" : "nvidia/cu13/lib";
    const std::string nvrtc = "libnvrtc.so." + s;
    Dist rtc{"nvrtc", m, true, twelve ? "nvidia-cuda-nvrtc-cu12" : "nvidia-cuda-nvrtc", "", {}};
    rtc.files[rtc_dir + "/" + nvrtc] = object("nvrtc" + s + ".so", nvrtc, {}, "");
    add(rtc, twelve ? "12.8.93" : "13.0.88", {});
    // The dispatcher and every sub-library it and libcudnn_graph.so.9 dlopen, their RUNPATH naming
    // the folders of cuBLASLt and NVRTC of their own major (rules/data/knowledge.toml). The
    // dispatcher is compiled (tests/fixtures/build.sh, verify/hybrid): fix's verification asks it
    // for its version, which must be its dist's.
    Dist dnn{"cudnn", m, true, "nvidia-cudnn-cu" + s, "", {}};
    dnn.files["nvidia/cudnn/lib/libcudnn.so.9"] = test::k_fixtures + "/verify/hybrid/cudnn" + s + "/libcudnn.so.9";
    const std::string dnn_path = "$ORIGIN:$ORIGIN/../../" + blas_dir.substr(7) + ":$ORIGIN/../../" + rtc_dir.substr(7);
    for (const char* lib :
         {"_graph", "_ops", "_cnn", "_adv", "_heuristic", "_engines_precompiled", "_engines_runtime_compiled"}) {
      const std::string soname = fmt::format("libcudnn{}.so.9", lib);
      dnn.files["nvidia/cudnn/lib/" + soname] = object(fmt::format("cudnn{}{}.so", lib, s), soname, {}, dnn_path);
    }
    add(dnn, twelve ? "9.10.2.21" : "9.19.0.56", {});
    Dist nccl{"nccl", m, true, "nvidia-nccl-cu" + s, "", {}};
    nccl.files["nvidia/nccl/lib/libnccl.so.2"] = object("nccl" + s + ".so", "libnccl.so.2", {}, "");
    add(nccl, twelve ? "2.27.3" : "2.28.7", {});

    Dist torch{"torch", m, false, "torch", "", {}};
    torch.files["torch/lib/libtorch_cuda.so"] =
        object("torch" + s + ".so", "libtorch_cuda.so", {cudart, cublas, "libcudnn.so.9", "libnccl.so.2"},
               up + rt_dir + ":" + up + blas_dir + ":" + up + "nvidia/cudnn/lib:" + up + "nvidia/nccl/lib");
    add(torch, twelve ? "2.7.1+cu128" : "2.9.0+cu130",
        {rt.name + "==" + (twelve ? "12.8.90" : "13.0.96"), rtc.name + "==" + (twelve ? "12.8.93" : "13.0.88"),
         blas.name + "==" + (twelve ? "12.8.4.1" : "13.1.0.3"), dnn.name + "==" + (twelve ? "9.10.2.21" : "9.19.0.56"),
         nccl.name + "==" + (twelve ? "2.27.3" : "2.28.7")});
    Dist cupy{"cupy", m, false, "cupy-cuda" + s + "x", "", {}};
    cupy.files["cupy_backends/cuda/libcupy.so"] =
        object("cupy" + s + ".so", "libcupy.so", {cudart, cublas}, up + rt_dir + ":" + up + blas_dir);
    add(cupy, "13.6.0", {});
    Dist jax{"jax", m, false, "jax-cuda" + s + "-plugin", "", {}};
    jax.files["jax_cuda" + s + "_plugin/xla_cuda_plugin.so"] =
        object("jax" + s + ".so", "xla_cuda_plugin.so", {cudart, "libcudnn.so.9"},
               "$ORIGIN/../" + rt_dir + ":$ORIGIN/../nvidia/cudnn/lib");
    add(jax, "0.7.0", {rt.name + ">=" + s, dnn.name + ">=9.8"});
  }

  static const Dist& dist(const std::string& key, int major) {
    for (const auto& d : pool_)
      if (d.key == key && d.major == major) return d;
    throw std::runtime_error("no " + key);
  }

  static test::JsonRun cudafix(const std::string& args, const std::string& venv, const std::string& library_path = "") {
    return test::cudafix_json(args + " --venv " + shell_quote(venv) + test::k_no_cache + " --ld-library-path " +
                              shell_quote(library_path));
  }

  // One round's venv: the consumers (of the target major) and what pip installs, in its order.
  struct Round {
    int target = 0, foreign = 0;
    std::vector<std::string> consumers;
    std::vector<const Dist*> installed;  // one pip call each, in this order
    std::vector<const Dist*> leftovers;  // the foreign major's providers among them
  };

  // At least one consumer; every target provider and a random non-empty set of the foreign
  // major's, shuffled, then the consumers.
  static Round random_round(std::mt19937& rng) {
    const auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
    Round r;
    r.target = coin(0.5) ? 12 : 13;
    r.foreign = 25 - r.target;
    for (const char* c : {"torch", "cupy", "jax"})
      if (coin(0.6)) r.consumers.push_back(c);
    if (r.consumers.empty()) r.consumers.push_back("torch");
    for (const char* p : k_providers) r.installed.push_back(&dist(p, r.target));
    for (const char* p : k_providers)
      if (coin(0.6)) r.leftovers.push_back(&dist(p, r.foreign));
    if (r.leftovers.empty()) r.leftovers.push_back(&dist("cudnn", r.foreign));
    r.installed.insert(r.installed.end(), r.leftovers.begin(), r.leftovers.end());
    std::shuffle(r.installed.begin(), r.installed.end(), rng);
    for (const auto& c : r.consumers) r.installed.push_back(&dist(c, r.target));
    return r;
  }

  static std::string describe(int n, const Round& r) {
    std::string what = fmt::format("round {}: target CUDA {}; installed in order:", n, r.target);
    for (const auto* d : r.installed) what += " " + d->name;
    return what;
  }

  // A copy of the base venv at `venv` with the round's wheels installed by pip, one at a time,
  // so the last writer of a shared path owns its bytes.
  static void make_round_venv(const std::string& venv, const Round& r) {
    ASSERT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(venv)).exit_code, 0);
    for (const auto* d : r.installed) {
      const auto ran = test::venv_pip(venv, "install -q --no-index --no-deps " + shell_quote(d->wheel));
      ASSERT_EQ(ran.exit_code, 0) << ran.out;
    }
  }

  // glibc's answer for every consumer object of the round, by object path.
  using Listings = std::map<std::string, std::map<std::string, std::optional<std::string>>>;
  static Listings consumer_listings(const std::string& venv, const Round& r);

  // The three judges that are not the planner: doctor finds no error, `pip check` passes, and
  // glibc's `ld.so --list` of every consumer object finds each CUDA library in the venv, byte for
  // byte the target major's build, and loses nothing it found `before`; and the foreign major's
  // dists are gone.
  static void judge(const std::string& venv, const Round& r, const Listings& before);

  static constexpr const char* k_providers[] = {"runtime", "nvrtc", "cublas", "cudnn", "nccl"};

  static inline TempDir* tmp_ = nullptr;
  static inline std::string links_, elf_, base_;
  static inline std::vector<Dist> pool_;
};

// glibc's answer for one object: every soname its load maps and the file, or nullopt ("not found").
std::map<std::string, std::optional<std::string>> glibc_list(const std::string& object) {
  const auto r =
      run_shell("env -i /lib64/ld-linux-x86-64.so.2 --inhibit-cache --list " + shell_quote(object) + " 2>&1");
  std::map<std::string, std::optional<std::string>> out;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    const auto arrow = line.find(" => ");
    if (arrow == std::string::npos) continue;
    std::string name = line.substr(0, arrow);
    name.erase(0, name.find_first_not_of(" \t"));
    const std::string target = line.substr(arrow + 4);
    out[name] = target.starts_with("not found") ? std::nullopt : std::optional(target.substr(0, target.find(" (")));
  }
  return out;
}

// The plan carried out on the venv: pip for what a wheel writes, the plan's own deletions (every
// file, then the folders it empties) for an owner-counted removal.
void carry_out(const json& plan, const std::string& venv, const std::string& links) {
  const std::string site = test::site_packages(venv);
  for (const auto& st : plan["steps"]) {
    const std::string action = st["action"];
    if (action == "remove") {
      for (const auto& p : st["deletes"])
        if (!p.get<std::string>().ends_with("/")) fs::remove(site + "/" + p.get<std::string>());
      for (const auto& p : st["deletes"])
        if (p.get<std::string>().ends_with("/")) fs::remove_all(site + "/" + p.get<std::string>());
      continue;
    }
    ASSERT_FALSE(st["wheel"].is_null()) << "every wheel is at hand: " << st.dump(1);
    const std::string wheel = st["wheel"]["file"];
    EXPECT_TRUE(wheel.starts_with(links + "/")) << wheel;
    const auto r = test::venv_pip(venv, "install -q --no-index --no-deps --force-reinstall " + shell_quote(wheel));
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
}

HybridProperty::Listings HybridProperty::consumer_listings(const std::string& venv, const Round& r) {
  const std::string site = test::site_packages(venv);
  Listings out;
  for (const auto& c : r.consumers)
    for (const auto& [arc, src] : dist(c, r.target).files) out[site + "/" + arc] = glibc_list(site + "/" + arc);
  return out;
}

void HybridProperty::judge(const std::string& venv, const Round& r, const Listings& before) {
  // Judge 1: doctor, the same binary but not the planner, finds no error.
  const auto doctor = cudafix("doctor", venv);
  EXPECT_EQ(doctor.doc["summary"]["errors"], 0) << doctor.doc["findings"].dump(1).substr(0, 3000);
  // Judge 2: pip's own resolver metadata check.
  const auto check = test::venv_pip(venv, "check");
  EXPECT_EQ(check.exit_code, 0) << check.out;
  // Judge 3: glibc. Every CUDA library a consumer maps is in the venv and is the target build.
  std::map<std::string, std::string> expected;  // soname -> the target build's bytes
  for (const char* p : k_providers)
    for (const auto& [arc, src] : dist(p, r.target).files) expected[fs::path(arc).filename().string()] = read_all(src);
  for (const auto& [o, was] : before) {
    const auto now = glibc_list(o);
    for (const auto& [soname, path] : was)
      if (path) {
        EXPECT_TRUE(now.count(soname) && now.at(soname)) << o << " lost " << soname;
      }
    for (const auto& [soname, path] : now) {
      if (!expected.count(soname)) continue;
      ASSERT_TRUE(path) << o << ": " << soname << " not found";
      const std::string real = fs::weakly_canonical(*path).string();
      EXPECT_TRUE(real.starts_with(fs::weakly_canonical(venv).string() + "/")) << real;
      EXPECT_TRUE(read_all(real) == expected[soname])
          << o << ": " << soname << " => " << real << " is not CUDA " << r.target << "'s build";
    }
  }
  // The foreign major's dists are gone.
  const auto list = test::venv_pip(venv, "list --format json");
  const auto dists = json::parse(list.out, nullptr, false);
  ASSERT_FALSE(dists.is_discarded()) << list.out;
  for (const auto& d : dists)
    for (const auto* l : r.leftovers) EXPECT_NE(d["name"], l->name) << "still installed";
}

int rounds_from(const char* variable, int fallback) {
  const char* set = std::getenv(variable);
  return set ? std::atoi(set) : fallback;
}

TEST_F(HybridProperty, PlanFixFindsASafePlanAndCarryingItOutSatisfiesDoctorPipAndGlibc) {
  const int rounds = rounds_from("CUDAFIX_HYBRID_ROUNDS", 6);
  const unsigned seed = test::seed_for(::testing::UnitTest::GetInstance()->current_test_info()->name());
  SCOPED_TRACE(fmt::format("sample seed {} (CUDAFIX_SEED={} runs it again)", seed, test::run_seed()));
  std::mt19937 rng(seed);
  const auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  int reinstalls = 0, removals = 0, installs = 0, pip_uninstalls = 0, foreign_last = 0, applied_by_cudafix = 0;
  for (int round = 0; round < rounds; ++round) {
    const Round r = random_round(rng);
    // Optionally one real `pip uninstall`: a leftover, or a target provider a consumer requires.
    std::optional<std::string> uninstall;
    if (coin(0.45)) {
      std::vector<std::string> choices;
      for (const auto* d : r.leftovers) choices.push_back(d->name);
      if (std::count(r.consumers.begin(), r.consumers.end(), "torch"))
        for (const char* p : {"cudnn", "nccl", "cublas", "nvrtc"}) choices.push_back(dist(p, r.target).name);
      uninstall = choices[rng() % choices.size()];
    }
    SCOPED_TRACE(describe(round, r) + (uninstall ? "; then pip uninstall " + *uninstall : ""));

    TempDir t;
    const std::string venv = t.path() + "/venv";
    ASSERT_NO_FATAL_FAILURE(make_round_venv(venv, r));
    for (const char* shared : {"cudnn", "nccl"}) {
      const auto last =
          std::find_if(r.installed.rbegin(), r.installed.rend(), [&](const Dist* d) { return d->key == shared; });
      foreign_last += last != r.installed.rend() && (*last)->major == r.foreign;
    }
    if (uninstall) {
      ASSERT_EQ(test::venv_pip(venv, "uninstall -y -q " + *uninstall).exit_code, 0);
      ++pip_uninstalls;
    }
    const Listings before = consumer_listings(venv, r);

    const std::string plan_file = t.path() + "/plan.json";
    const auto plan = cudafix("plan fix --find-links " + shell_quote(links_) + " -o " + shell_quote(plan_file), venv);
    ASSERT_EQ(plan.exit_code, 0) << plan.doc.dump(1).substr(0, 3000);
    ASSERT_TRUE(plan.doc["problem"].is_null()) << plan.doc["problem"];
    EXPECT_EQ(plan.doc["target"]["cuda_major"], r.target);
    for (const auto& st : plan.doc["steps"]) {
      EXPECT_TRUE(st["after_step"]["ok"]) << st.dump(1);
      const std::string action = st["action"];
      reinstalls += action == "reinstall";
      removals += action == "remove";
      installs += action == "install";
    }
    // Odd rounds: cudafix carries the plan out itself, as one transaction.
    if (round % 2) {
      const auto applied = cudafix("apply " + shell_quote(plan_file) + " -y --no-verify", venv);
      ASSERT_EQ(applied.exit_code, 0) << applied.out;
      ++applied_by_cudafix;
    } else {
      ASSERT_NO_FATAL_FAILURE(carry_out(plan.doc, venv, links_));
    }
    judge(venv, r, before);
  }
  // The rounds exercised every kind of step and both orders of the shared paths.
  if (rounds >= 12) {
    EXPECT_GT(reinstalls, 0);
    EXPECT_GT(removals, rounds);
    EXPECT_GT(pip_uninstalls, 0);
    EXPECT_GT(foreign_last, 0);
  }
  RecordProperty("reinstalls", reinstalls);
  RecordProperty("removals", removals);
  RecordProperty("installs", installs);
  RecordProperty("pip_uninstalls", pip_uninstalls);
  RecordProperty("applied_by_cudafix", applied_by_cudafix);
}

// Several of the target's providers removed by one real `pip uninstall`, then `fix` with its
// verification on the fakes: it must end verified after every step of its plan (which also
// removes the foreign leftovers), and the judges must agree.
TEST_F(HybridProperty, SeveralProvidersRemovedByOnePipUninstallAreRepairedByAFixVerifiedAfterEveryStep) {
  const int rounds = rounds_from("CUDAFIX_HYBRID_FIX_ROUNDS", 3);
  const unsigned seed = test::seed_for(::testing::UnitTest::GetInstance()->current_test_info()->name());
  SCOPED_TRACE(fmt::format("sample seed {} (CUDAFIX_SEED={} runs it again)", seed, test::run_seed()));
  std::mt19937 rng(seed);
  const std::string fake_driver = test::k_fixtures + "/verify/cuda/ok";
  int steps_verified = 0;
  for (int round = 0; round < rounds; ++round) {
    Round r = random_round(rng);
    // torch requires every provider, so the removed ones are what pip check asks for again.
    if (!std::count(r.consumers.begin(), r.consumers.end(), "torch")) {
      r.consumers.push_back("torch");
      r.installed.push_back(&dist("torch", r.target));
    }
    std::vector<std::string> names;
    for (const char* p : k_providers) names.push_back(dist(p, r.target).name);
    std::shuffle(names.begin(), names.end(), rng);
    names.resize(2 + rng() % 3);
    std::string uninstall;
    for (const auto& n : names) uninstall += " " + n;
    SCOPED_TRACE(describe(round, r) + "; then pip uninstall" + uninstall);

    TempDir t;
    const std::string venv = t.path() + "/venv";
    ASSERT_NO_FATAL_FAILURE(make_round_venv(venv, r));
    const auto removed = test::venv_pip(venv, "uninstall -y -q" + uninstall);
    ASSERT_EQ(removed.exit_code, 0) << removed.out;
    const Listings before = consumer_listings(venv, r);

    auto fixed = cudafix("fix -y --find-links " + shell_quote(links_), venv, fake_driver);
    ASSERT_EQ(fixed.exit_code, 0) << fixed.out.substr(0, 4000);
    EXPECT_EQ(fixed.doc["verified"], true);
    EXPECT_EQ(fixed.doc["plan"]["target"]["cuda_major"], r.target);
    // One verification per step of the plan, each passing.
    auto& steps = fixed.doc["verification"]["steps"];
    EXPECT_TRUE(steps.is_array()) << "no verification in fix's JSON: " << fixed.out.substr(0, 2000);
    EXPECT_EQ(steps.size(), fixed.doc["plan"]["steps"].size()) << steps.dump(1).substr(0, 3000);
    for (const auto& st : steps) {
      EXPECT_EQ(st["ok"], true) << st.dump(1).substr(0, 2000);
      steps_verified += st["ok"] == true;
    }
    judge(venv, r, before);
  }
  RecordProperty("steps_verified", steps_verified);
}

}  // namespace
}  // namespace cudafix
