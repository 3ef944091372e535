// What the end-to-end tests share: where the binary, the fixtures and the sources are, running
// the binary for its JSON, and real wheels and venvs made for a test.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/paths.hpp"
#include "tests/support/process.hpp"

namespace cudafix::test {

inline const std::string k_bin = test::cudafix_bin();
inline const std::string k_fixtures = test::fixtures_dir();
inline const std::string k_source = test::source_dir();
inline const std::string k_python = "/usr/bin/python3";
// No ld.so.cache (an empty file is none, as glibc reads it): the answers then do not depend on
// what this host has installed (this build machine has a CUDA toolkit in its cache).
inline const std::string k_no_cache = " --ld-so-cache /dev/null";

struct JsonRun {
  int exit_code = -1;
  nlohmann::json doc;
  std::string out;
};

// `cudafix ARGS --json`, with VIRTUAL_ENV and PIP_FIND_LINKS unset, `env_prefix` (such as "CUDA_VISIBLE_DEVICES=")
// in its environment and standard error dropped. Output that is not JSON fails the test.
inline JsonRun cudafix_json(const std::string& args, const std::string& env_prefix = "") {
  JsonRun r;
  const auto ran = run_shell("env -u VIRTUAL_ENV -u PIP_FIND_LINKS " + env_prefix + " " + shell_quote(k_bin) + " " +
                             args + " --json 2>/dev/null");
  r.exit_code = ran.exit_code;
  r.out = ran.out;
  r.doc = nlohmann::json::parse(ran.out, nullptr, false);
  EXPECT_FALSE(r.doc.is_discarded()) << "not JSON: " << ran.out.substr(0, 800);
  return r;
}

// A real wheel built by tests/e2e/make_wheel.py into `dir` ("NAME VERSION ARC=SRC... --requires
// ..."); returns its path.
inline std::string make_wheel(const std::string& dir, const std::string& args) {
  const auto r = run_shell(k_python + " " + shell_quote(k_source + "/tests/e2e/make_wheel.py") + " " +
                           shell_quote(dir) + " " + args);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  std::string path = r.out;
  while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
  return path;
}

// The venv's own pip ("install -q --no-index --no-deps WHEEL"), VIRTUAL_ENV unset.
inline RunResult venv_pip(const std::string& venv, const std::string& args) {
  return run_shell("env -u VIRTUAL_ENV " + shell_quote(venv + "/bin/python3") + " -m pip --disable-pip-version-check " +
                   args);
}

// The venv with pip alone that make_venv copies, made by `python3 -m venv` once for every test
// process of a build: ctest runs each suite in a process of its own, and a venv with pip takes
// 6 s to make on 2 cores (ensurepip), which 60 suites paid each under both builds. It is made in
// $CUDAFIX_TEST_SHARED (the build tree's test-shared/: tests/CMakeLists.txt) under a lock, named
// after the interpreter (its file's size and time) and the pip wheels ensurepip installs from, so
// that an upgraded python3 makes another. Without the variable (a test binary run by hand): made
// in `own`, for this process alone.
inline std::string base_venv(const std::string& own) {
  namespace fs = std::filesystem;
  const char* shared = std::getenv("CUDAFIX_TEST_SHARED");
  const auto make = [](const std::string& at) {
    const auto made = run_shell(k_python + " -m venv " + shell_quote(at));
    if (made.exit_code != 0) throw std::runtime_error("python3 -m venv " + at + ": " + made.out);
  };
  if (!shared || !*shared) {
    make(own);
    return own;
  }
  std::error_code ec;
  std::string key;
  const auto python = fs::canonical(k_python, ec);
  key += python.string() + std::to_string(fs::file_size(python, ec)) +
         std::to_string(fs::last_write_time(python, ec).time_since_epoch().count());
  for (const auto& e : fs::directory_iterator("/usr/share/python-wheels", ec)) key += e.path().filename().string();
  const std::string dir = std::string(shared) + "/venv-" + std::to_string(std::hash<std::string>{}(key));
  fs::create_directories(shared);
  const int lock = ::open((std::string(shared) + "/venv.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) throw std::runtime_error("cannot lock " + std::string(shared));
  if (!fs::exists(dir + "/.made")) {
    fs::remove_all(dir + ".tmp");
    make(dir + ".tmp");
    fs::remove_all(dir);
    fs::rename(dir + ".tmp", dir);
    std::ofstream(dir + "/.made") << key;
  }
  ::close(lock);
  return dir;
}

// A venv made by `python3 -m venv` at `dir`, with `wheels` installed by its own pip one at a time,
// in this order.
//
// Made once per process for each list of wheels and copied after that (`cp -a`): a venv with pip
// takes 6 s to make on 2 cores and a wheel 1 s to install, a copy 0.3 s. A copy is the venv pip
// made, file for file; only the absolute paths a venv keeps of itself (pyvenv.cfg's command, the
// activate scripts, the shebangs of bin/ scripts) name the first one (base_venv's), which stays
// until the process ends. The tests run pip as `bin/python3 -m pip`, so none of those paths is
// followed; a venv whose wheels add scripts to bin/ is made afresh each time, so that its
// shebangs are its own.
inline void make_venv(const std::string& dir, const std::vector<std::string>& wheels) {
  static TempDir made_before;
  static std::map<std::string, std::string> venv_for;  // the wheels, stamped -> a venv made from them
  namespace fs = std::filesystem;
  std::string key;
  for (const auto& w : wheels) {
    std::error_code ec;
    const auto size = fs::file_size(w, ec);
    const auto mtime = fs::last_write_time(w, ec).time_since_epoch().count();
    key += w + "\n" + std::to_string(size) + " " + std::to_string(mtime) + "\n";
  }
  auto copy = [&](const std::string& from) {
    const auto r =
        run_shell("mkdir -p " + shell_quote(dir) + " && cp -a " + shell_quote(from + "/.") + " " + shell_quote(dir));
    ASSERT_EQ(r.exit_code, 0) << r.out;
  };
  if (const auto it = venv_for.find(key); it != venv_for.end()) return copy(it->second);
  // The venv with pip alone, the base of every other.
  if (!venv_for.count("")) venv_for[""] = base_venv(made_before.path() + "/0");
  ASSERT_NO_FATAL_FAILURE(copy(venv_for[""]));
  const auto scripts = [](const std::string& venv) {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(venv + "/bin")) ++n;
    return n;
  };
  for (const auto& w : wheels) {
    const auto r = venv_pip(dir, "install -q --no-index --no-deps " + shell_quote(w));
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  if (scripts(dir) != scripts(venv_for[""])) return;
  const std::string kept = made_before.path() + "/" + std::to_string(venv_for.size());
  const auto r = run_shell("cp -a " + shell_quote(dir) + " " + shell_quote(kept));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  venv_for[key] = kept;
}

// A call the fault hooks can fail (installer/txn/file_ops.hpp): its kind, its count among the
// calls of that kind in its run (what CUDAFIX_TEST_FAULT=CALL:N:ERRNO names), and its path.
struct FaultPoint {
  std::string call;
  long nth = 0;
  std::string path;
};

// The fault-able calls a run made while it changed the environment, from the journal's intent
// (synced before the first change) to its commit record, as its CUDAFIX_TEST_FAULT_TRACE file
// lists them.
inline std::vector<FaultPoint> calls_during_the_change(const std::string& trace) {
  std::vector<FaultPoint> out;
  bool changing = false;
  std::istringstream in(trace);
  for (std::string line; std::getline(in, line);) {
    if (line == "mark intent") changing = true;
    if (line == "mark commit") break;
    if (!changing || line.starts_with("mark ")) continue;
    FaultPoint p;
    std::istringstream fields(line);
    fields >> p.call >> p.nth;
    std::getline(fields >> std::ws, p.path);
    out.push_back(p);
  }
  return out;
}

// Where a fault is aimed: of `points`, the first, the middle and the last call of each kind in
// `calls`.
inline std::vector<FaultPoint> first_middle_and_last(const std::vector<FaultPoint>& points,
                                                     const std::vector<std::string>& calls) {
  std::vector<FaultPoint> out;
  for (const auto& call : calls) {
    std::vector<FaultPoint> of_kind;
    for (const auto& p : points)
      if (p.call == call) of_kind.push_back(p);
    if (of_kind.empty()) continue;
    std::vector<std::size_t> at{0, of_kind.size() / 2, of_kind.size() - 1};
    std::sort(at.begin(), at.end());
    at.erase(std::unique(at.begin(), at.end()), at.end());
    for (const auto i : at) out.push_back(of_kind[i]);
  }
  return out;
}

// The disk errors the fault tests inject in turn, each with what the message says of it (strerror's
// words; EACCES in pip's, resolver::os_error_text).
inline const std::vector<std::pair<std::string, std::string>> k_disk_errors = {
    {"ENOSPC", "No space left on device"}, {"EIO", "Input/output error"}, {"EACCES", "permission denied"}};

// A fault aimed at one point: CUDAFIX_TEST_FAULT's value, and what the error's message says.
struct AimedFault {
  FaultPoint point;
  std::string spec;  // CALL:N:ERRNO
  std::string says;
};
// `points`, each given the next of k_disk_errors in turn.
inline std::vector<AimedFault> aim_disk_errors(const std::vector<FaultPoint>& points) {
  std::vector<AimedFault> out;
  for (const auto& p : points) {
    const auto& [name, says] = k_disk_errors[out.size() % k_disk_errors.size()];
    out.push_back({p, p.call + ":" + std::to_string(p.nth) + ":" + name, says});
  }
  return out;
}

// How many of `points` there are of each kind of call.
inline std::map<std::string, int> count_by_call(const std::vector<FaultPoint>& points) {
  std::map<std::string, int> out;
  for (const auto& p : points) ++out[p.call];
  return out;
}

// Every file's hash, every symlink's target and every folder under `dir`, cudafix's own folder
// and the lock aside: the state a test compares.
inline std::string tree_of(const std::string& dir) {
  const std::string q = shell_quote(dir);
  return run_shell("cd " + q +
                   " && find . -path ./.cudafix -prune -o -path ./.lock -prune -o -type f -print0 | sort -z | "
                   "xargs -0 -r sha256sum && find . -path ./.cudafix -prune -o -type l -printf '%p -> %l\\n' | sort "
                   "&& find . -path ./.cudafix -prune -o -type d -print | sort")
      .out;
}

// The lines in which two trees differ (the first few), for failure messages.
inline std::string tree_diff(const std::string& a, const std::string& b) {
  std::set<std::string> la, lb;
  std::string line;
  std::istringstream ia(a), ib(b);
  while (std::getline(ia, line)) la.insert(line);
  while (std::getline(ib, line)) lb.insert(line);
  std::string out;
  int shown = 0;
  for (const auto& l : la)
    if (!lb.count(l) && shown++ < 8) out += "- " + l + "\n";
  for (const auto& l : lb)
    if (!la.count(l) && shown++ < 16) out += "+ " + l + "\n";
  return out;
}

// Files and folders outside an environment that a hostile input aims at: a folder of canaries
// (a file, a folder holding one, a shared-library name) whose whole tree a test compares after
// each command. Nothing cudafix does may change it.
class Canaries {
 public:
  explicit Canaries(std::string dir) : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_ + "/folder");
    write(dir_ + "/canary.txt", "outside the environment\n");
    write(dir_ + "/folder/inner.txt", "inside a folder outside\n");
    write(dir_ + "/libcanary.so.1", "not a library\n");
    before_ = tree_of(dir_);
  }
  [[nodiscard]] const std::string& dir() const { return dir_; }
  // "" when nothing changed; otherwise the lines that differ.
  [[nodiscard]] std::string changes() const {
    const std::string now = tree_of(dir_);
    return now == before_ ? std::string() : tree_diff(before_, now);
  }

 private:
  std::string dir_, before_;
  static void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
};

// The findings of `rule` in a doctor document.
inline std::vector<nlohmann::json> of_rule(const nlohmann::json& doc, const std::string& rule) {
  std::vector<nlohmann::json> out;
  for (const auto& f : doc["findings"])
    if (f["rule"] == rule) out.push_back(f);
  return out;
}

// The findings of `rule`, which must have fired. tests/layout/check_rule_docs.py requires one
// fires() for every registered rule in the end-to-end tests: the test that shows it working.
inline std::vector<nlohmann::json> fires(const nlohmann::json& doc, const std::string& rule) {
  auto found = of_rule(doc, rule);
  EXPECT_FALSE(found.empty()) << rule << " did not fire: " << doc["findings"].dump(1).substr(0, 2000);
  return found;
}

// The site-packages folder of a venv made by make_venv (lib/python3.X/site-packages).
inline std::string site_packages(const std::string& venv) {
  for (const auto& e : std::filesystem::directory_iterator(venv + "/lib")) return e.path().string() + "/site-packages";
  return "";
}

}  // namespace cudafix::test
