// `cudafix demo` and the developer command `materialize`: an example environment written from
// the corpus format (cli/demo_env.json, resolver/env/example_env.hpp), and the demo's walk through
// the workflow on it.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "cli/commands.hpp"
#include "cli/json_writer.hpp"
#include "cli/session.hpp"
#include "cli/text_output.hpp"
#include "demo_env_json.hpp"
#include "installer/wheel/pack.hpp"
#include "resolver/base/atomic_file.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/example_env.hpp"
#include "resolver/env/interpreter.hpp"
#include "resolver/plan/plan.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;

namespace {

// The lines of a command's output that the demo shows: those with one of `marks` in them (the
// first line, a command's heading, always).
std::string lines_with(const std::string& text, std::initializer_list<std::string_view> marks) {
  std::string out;
  bool first = true;
  for (auto line : r::split(text, '\n')) {
    const bool keep = first || std::any_of(marks.begin(), marks.end(),
                                           [&](std::string_view m) { return line.find(m) != std::string_view::npos; });
    if (keep && !line.empty()) out += std::string(line) + "\n";
    first = false;
  }
  return out;
}

// What `pip uninstall -y DIST...` deletes, as plan remove models it (pip's own rules, one dist
// after another, checked against real pip by the tests), deleted here rather than by pip: in a
// fraction of pip's time, and where the interpreter gave the venv no pip.
std::size_t uninstall_as_pip_does(const GlobalOptions& g, const std::vector<std::string>& dists) {
  const auto& [env, knowledge, settings] = scan_kept(g);
  const auto plan = r::plan_removal(env, knowledge, dists_named(env, dists), g.threads);
  for (const auto& f : plan.pip.deletion.files) std::filesystem::remove(f);
  for (auto it = plan.pip.deletion.dirs.rbegin(); it != plan.pip.deletion.dirs.rend(); ++it)
    std::filesystem::remove_all(*it);
  return plan.pip.deletion.files.size();
}

// The interpreter the example environments link, and its version, so that bin/python3 and
// lib/pythonX.Y agree and real pip can work on them (`pip --python DIR/bin/python3 ...`): the
// python3 on PATH, else /usr/bin/python3, each asked once. Its base interpreter, where it is a
// venv's own or a version manager's shim, since a venv links its base.
struct HostPython {
  std::string executable;
  std::string version;  // "3.11.2"
};

std::optional<HostPython> host_python() {
  std::vector<std::string> candidates;
  for (const auto& dir : r::split_search_path(env_var("PATH").value_or("")))
    if (!dir.empty() && dir.front() == '/') candidates.push_back(dir + "/python3");
  candidates.emplace_back("/usr/bin/python3");
  for (const auto& exe : candidates) {
    if (::access(exe.c_str(), X_OK) != 0) continue;
    const auto said = r::ask_python(exe,
                                    "import sys; print(getattr(sys, '_base_executable', '') or sys.executable); "
                                    "print('%d.%d.%d' % sys.version_info[:3])",
                                    std::chrono::seconds(10));
    if (!said) continue;
    const auto lines = r::split(*said, '\n');
    if (lines.size() < 2 || !lines[0].starts_with("/") || r::split(lines[1], '.').size() != 3) continue;
    return HostPython{std::string(lines[0]), std::string(lines[1])};
  }
  return std::nullopt;
}

// Every RECORD of the example's dists made to list the bytes written (the description's rows
// carry the real wheels' hashes and sizes, its files are models of them): so that what pip, a
// snapshot and `doctor --verify-hashes` compare with RECORD is what is on disk. Rows whose file is
// not there (the description's absent ones, RECORD itself) stay as they are; the venv's own dists
// (pip's) are left alone.
void record_written_bytes(const std::string& site, const nlohmann::json& desc) {
  for (const auto& d : desc.at("dists")) {
    const std::string record = site + "/" + d.at("dist_info").get<std::string>() + "/RECORD";
    const std::string text = r::read_file(record);
    std::string out;
    for (auto line : r::split(text, '\n')) {
      if (line.empty()) continue;
      // path,hash,size: hash and size hold no comma, the path may (quoted).
      const auto size_at = line.rfind(',');
      const auto hash_at = size_at == std::string_view::npos ? size_at : line.rfind(',', size_at - 1);
      std::string_view field = hash_at == std::string_view::npos ? line : line.substr(0, hash_at);
      std::string path(field);
      if (field.size() >= 2 && field.front() == '"') {
        path.clear();
        for (std::size_t i = 1; i + 1 < field.size(); ++i) {
          path.push_back(field[i]);
          if (field[i] == '"') ++i;  // "" is one quote
        }
      }
      std::uint64_t bytes = 0;
      const std::string digest =
          hash_at == std::string_view::npos || path.ends_with(".dist-info/RECORD")
              ? std::string()
              : resolver::sha256_of_file(r::lexically_normal(site + "/" + path), resolver::DigestForm::record, &bytes);
      out += digest.empty() ? std::string(line) : fmt::format("{},sha256={},{}", field, digest, bytes);
      out += '\n';
    }
    r::AtomicFile f(record, r::FileMode::like_any_file);
    f.write(out);
    f.commit();
  }
}

// The two example environments: `dir`, which the walk breaks and repairs, and `broken_copy`
// beside it, left as it was before the cleanup for trying the commands on (README's examples).
struct DemoEnvs {
  std::string dir;
  std::string broken_copy;
  r::MaterializeStats stats;
  std::optional<HostPython> python;
  bool venvs = false;  // made by `python3 -m venv` (else written as the corpus format gives them)
  std::string pip;     // the version of pip in both; empty: none (the interpreter has no ensurepip)
};

// A folder the demo may write: absent or empty. A demo's earlier run is not removed for the
// user (it may hold what they tried); the message says how.
void refuse_unless_empty(const std::string& dir, const std::string& broken_copy) {
  for (const auto& d : {dir, broken_copy}) {
    std::error_code ec;
    if (std::filesystem::exists(d, ec) && !std::filesystem::is_empty(d, ec))
      throw r::Error(
          fmt::format("{} is not empty; refusing to write an example environment into it (to run the demo there again: "
                      "rm -rf {} {})",
                      d, dir, broken_copy));
  }
}

// Writes the example environment into `dir` (a venv make_venv made, where `venv`), linking
// `python` where there is one, with the configuration a user of the cut-down copy would give it.
r::MaterializeStats write_example(nlohmann::json desc, const std::string& dir, const std::optional<HostPython>& python,
                                  bool venv) {
  r::MaterializeOptions options;
  if (python) {
    const auto parts = r::split(python->version, '.');
    desc["python"] = python->version;
    desc["site_packages"] = fmt::format("lib/python{}.{}/site-packages", parts[0], parts[1]);
    options.python = python->executable;
  }
  options.into_venv = venv;
  const auto stats = r::materialize_environment(desc, dir, options);
  record_written_bytes(dir + "/" + desc.value("site_packages", std::string("lib/python3.12/site-packages")), desc);
  // The cut-down copy leaves torch's pure-Python requirements out: the environment's own
  // configuration says so, as a user's would. Readable by whoever may read the environment.
  r::AtomicFile toml(dir + "/cudafix.toml", r::FileMode::like_any_file);
  toml.write(
      "# cudafix demo: torch's pure-Python requirements (sympy, jinja2, ...) were left out of this example\n"
      "[rules.unsatisfied-requirement]\nenabled = false\n");
  toml.commit();
  return stats;
}

// Both environments, each a real venv of the host's python3 where there is one (made side by
// side: ensurepip's few seconds are most of the demo's time), the example's dists added to it.
DemoEnvs make_demo_envs(const std::string& dir_in) {
  DemoEnvs e;
  e.dir = r::lexically_normal(std::filesystem::absolute(dir_in).string());
  e.broken_copy = e.dir + "-broken";
  refuse_unless_empty(e.dir, e.broken_copy);
  const auto desc = nlohmann::json::parse(k_demo_env);
  e.python = host_python();
  e.venvs = e.python.has_value();
  if (e.venvs) {
    const auto deadline = std::chrono::seconds(120);
    std::string other_pip;
    std::exception_ptr failed;
    std::thread other([&] {
      try {
        other_pip = r::make_venv(e.python->executable, e.broken_copy, deadline);
      } catch (...) {
        failed = std::current_exception();
      }
    });
    try {
      e.pip = r::make_venv(e.python->executable, e.dir, deadline);
    } catch (...) {
      other.join();
      throw;
    }
    other.join();
    if (failed) std::rethrow_exception(failed);
    if (other_pip != e.pip) e.pip.clear();  // said as "no pip" unless both have the same one
  }
  e.stats = write_example(desc, e.dir, e.python, e.venvs);
  write_example(desc, e.broken_copy, e.python, e.venvs);
  return e;
}

// The demo's walk: each command run as the user would type it, its essential lines shown.
class DemoWalk {
 public:
  DemoWalk(const GlobalOptions& g, const DemoEnvs& envs, std::ostream& out)
      : envs_(envs), out_(out), st_(style_for(g)), talk_(!g.json && !g.quiet), sub_(g) {
    sub_.venv = envs.dir;
    sub_.ld_library_path = "";  // the example's libraries only, whatever this shell's path
    sub_.yes = true;
    sub_.no_cache = true;
    sub_.find_links.clear();
    sub_.index_url.reset();
    sub_.extra_index_urls.clear();
    sub_.no_index = true;
  }

  void say(const std::string& s) {
    if (talk_) out_ << s;
  }
  void heading(const std::string& s) { say(st_.bold(s)); }

  // A command as the demo shows it: the line a user would type, the lines worth reading of what
  // it printed (all of them when `marks` is empty), its exit code.
  template <class Command>
  int show(const std::string& shown_args, Command&& command, std::initializer_list<std::string_view> marks = {}) {
    std::ostringstream buf;
    int rc = 0;
    GlobalOptions quiet = sub_;
    quiet.quiet = !talk_;
    try {
      rc = command(quiet, buf);
    } catch (const r::Error& e) {  // said as the command would say it; the walk goes on
      buf << fmt::format("cudafix: error: {}\n", e.what());
      rc = 2;
    }
    say(fmt::format("\n$ cudafix {}\n", shown_args));
    say(marks.size() == 0 ? buf.str() : lines_with(buf.str(), marks));
    say(st_.dim(fmt::format("(exit {})\n", rc)));
    return rc;
  }

  GlobalOptions& sub() { return sub_; }
  const DemoEnvs& envs() const { return envs_; }
  std::string venv_arg() const { return "--venv " + envs_.dir; }
  std::string wheels() const { return envs_.dir + "/demo-wheels"; }

 private:
  const DemoEnvs& envs_;
  std::ostream& out_;
  Style st_;
  bool talk_;
  GlobalOptions sub_;
};

// The CUDA 12 leftovers the user cleans up at once, and the CUDA 13 providers that cleanup
// breaks, since each pair lists the same files.
const std::vector<std::string> k_leftovers = {"nvidia-cudnn-cu12", "nvidia-nccl-cu12", "nvidia-cusparselt-cu12"};
const std::vector<std::string> k_broken = {"nvidia-cudnn-cu13", "nvidia-nccl-cu13", "nvidia-cusparselt-cu13"};
const std::initializer_list<std::string_view> k_findings = {"error[", "warning[", "next:"};

// The wheels the repair installs from, packed from the installed files while they are whole.
std::vector<std::string> pack_wheels(DemoWalk& w) {
  std::filesystem::create_directories(w.wheels());
  std::vector<std::string> packed;
  const auto& scanned = scan_kept(w.sub());
  for (const auto& name : k_broken) {
    const auto dist = scanned.env.dist_index(name);
    if (!dist) throw r::Error(fmt::format("the demo environment lacks {}", name));
    packed.push_back(installer::pack_installed_dist(scanned.env, *dist, w.wheels()));
  }
  return packed;
}

std::string venv_words(const DemoEnvs& e) {
  if (!e.venvs) return "No python3 was found, so it is no venv and has no pip.";
  if (e.pip.empty())
    return fmt::format(
        "It is a venv made by `python3 -m venv --without-pip`: {} has no ensurepip, so there is no pip in it.",
        e.python->executable);
  return fmt::format("It is a venv made by `python3 -m venv`, with pip {} (bin/python, bin/pip, bin/activate).", e.pip);
}

void intro(DemoWalk& w) {
  const auto& e = w.envs();
  w.heading("cudafix demo\n");
  w.say(fmt::format(
      "An example CUDA 13 torch environment in {}: {} dists, {} files, {} ELF objects carrying the\n"
      "SONAME, NEEDED and RPATH of torch 2.11.0+cu130's real wheels, with the CUDA 12 leftovers of torch\n"
      "2.8's cu128 wheels beside their CUDA 13 namesakes, writing the same files: {}.\n{}\n"
      "A wheel folder for the repair, packed from the installed CUDA 13 providers: {}\n",
      e.dir, e.stats.dists, e.stats.files, e.stats.elf_objects, and_list(k_leftovers), venv_words(e), w.wheels()));
}

int doctor_of(const GlobalOptions& o, std::ostream& os) { return run_doctor(o, DoctorCliOptions{}, os); }

// Steps 1-3: what is wrong, the cleanup's dry run, the cleanup as pip does it.
void diagnose_and_break(DemoWalk& w) {
  const std::string leftover_args = fmt::format("{}", fmt::join(k_leftovers, " "));
  w.heading("\n1. What is wrong: three pairs of dists list the same files, and CUDA 12 sits beside 13.\n");
  w.show("doctor " + w.venv_arg(), doctor_of, k_findings);
  w.heading("\n2. The cleanup a user tries next, as a dry run: pip would delete the files both of each pair list.\n");
  w.show("plan remove " + leftover_args + " " + w.venv_arg(),
         [&](const GlobalOptions& o, std::ostream& os) { return run_plan_remove(o, k_leftovers, os); },
         // torch's one library that NEEDs each of the three, not every object that does
         {"pip uninstall would", "would be left", "libtorch_cuda.so (torch) NEEDs", "unsafe", "safe with"});
  const std::size_t deleted = uninstall_as_pip_does(w.sub(), k_leftovers);
  w.heading("\n3. Broken as pip breaks it: ");
  w.say(fmt::format("the demo deleted the {} files `pip uninstall -y {}` deletes.\n", deleted, leftover_args));
  w.say(fmt::format("   {} still show as installed, so `pip install` would skip them:\n", and_list(k_broken)));
  w.show("doctor " + w.venv_arg(), doctor_of, k_findings);
}

// Steps 4-6: the repair, the live check, the undo and the repair again. Returns the last fix's
// exit code (0: nothing left to do).
int repair(DemoWalk& w) {
  w.heading("\n4. The repair of all three: planned, carried out as one transaction, doctor before and after.\n");
  w.say(
      "   (On a real venv fix also verifies on the GPU after each step; the example's libraries are\n"
      "   models without code, so the demo passes --no-verify.)\n");
  w.sub().find_links = {w.wheels()};
  // The example's libraries are models without code: a live check of them says nothing about the
  // repair, so the demo's fix does without (on a real venv, fix verifies after each step).
  FixCliOptions fix_opts;
  fix_opts.no_verify = true;
  auto fix = [&](const GlobalOptions& o, std::ostream& os) { return run_fix(o, fix_opts, os); };
  const std::string fix_args = "fix -y --no-verify --find-links " + w.wheels() + " " + w.venv_arg();
  w.show(fix_args, fix,
         {"target:", ". reinstall", ". remove", "why:", "fixed", "before:", "after:", "verified", "took"});
  w.heading(
      "\n5. The live check, as it runs on this machine: without a GPU driver it says so; with one, it\n"
      "   finds that the example's libraries have no code.\n");
  VerifyCliOptions verify_opts;
  verify_opts.timeout_s = 20;
  try {
    w.show("verify " + w.venv_arg(),
           [&](const GlobalOptions& o, std::ostream& os) { return run_verify(o, verify_opts, os); },
           {"likely:", "ok  "});
  } catch (const r::Error& e) {
    w.say(fmt::format("verify could not run here: {}\n", e.what()));
  }
  w.heading("\n6. Undo the repair byte for byte, then repair again; a second fix finds nothing to do.\n");
  w.show("rollback -y " + w.venv_arg(),
         [&](const GlobalOptions& o, std::ostream& os) { return run_rollback(o, RollbackCliOptions{}, os); });
  w.show("doctor " + w.venv_arg() + " -q",
         [&](const GlobalOptions& o, std::ostream& os) {
           GlobalOptions q = o;
           q.quiet = true;
           return doctor_of(q, os);
         },
         {"error["});
  w.show(fix_args, fix, {"fixed", "before:", "after:"});
  return w.show(fix_args, fix, {"nothing to do"});
}

void closing(DemoWalk& w, double seconds) {
  const auto& e = w.envs();
  w.say(
      fmt::format("\nThe whole walk took {:.1f} s. Look further with `cudafix scan`, `cudafix why libcudnn.so.9`,\n"
                  "`cudafix history` and `cudafix explain metadata-only` on {}; every command takes --json.\n",
                  seconds, e.dir));
  const std::string python = e.python ? e.python->executable + " " + e.python->version : "none here";
  w.say(fmt::format("A copy as it was before the cleanup, still broken, for README's examples: {}\n", e.broken_copy));
  w.say(e.venvs && !e.pip.empty()
            ? fmt::format("(a venv of {}: `{}/bin/python -m pip` works on it;\n"
                          "wheels for its repair: --find-links {})\n",
                          python, e.broken_copy, w.wheels())
            : fmt::format("(the python3 it links: {}; wheels for its repair: --find-links {})\n", python, w.wheels()));
}

void json_summary(const DemoEnvs& e, const std::vector<std::string>& packed, bool repaired, std::ostream& out) {
  JsonWriter w;
  w.begin_object().key("schema").value(1).key("command").value("demo").key("venv").value(e.dir);
  w.key("dists")
      .value(static_cast<std::uint64_t>(e.stats.dists))
      .key("files")
      .value(static_cast<std::uint64_t>(e.stats.files));
  w.key("elf_objects").value(static_cast<std::uint64_t>(e.stats.elf_objects));
  w.key("pip").value(e.pip);
  w.key("wheels").begin_array();
  for (const auto& p : packed) w.value(p);
  w.end_array().key("repaired").value(repaired).key("broken_copy").value(e.broken_copy).end_object();
  out << w.str() << '\n';
}

std::string demo_folder(const std::optional<std::string>& dir_opt) {
  if (dir_opt) return *dir_opt;
  std::string tmpl = env_var("TMPDIR").value_or("/tmp") + "/cudafix-demo-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw r::Error(fmt::format("cannot create a folder for the demo under {}", tmpl));
  return tmpl;
}

}  // namespace

int run_demo(const GlobalOptions& g, const std::optional<std::string>& dir_opt, std::ostream& out) {
  const auto t0 = std::chrono::steady_clock::now();
  const DemoEnvs envs = make_demo_envs(demo_folder(dir_opt));
  DemoWalk walk(g, envs, out);
  const auto packed = pack_wheels(walk);
  intro(walk);
  diagnose_and_break(walk);
  const int last = repair(walk);
  closing(walk, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (g.json) json_summary(envs, packed, last == 0, out);
  return 0;
}

int run_materialize(const std::string& description, const std::string& dir, int copies, const std::string& python,
                    std::ostream& out) {
  std::string text;
  if (description == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    text = ss.str();
  } else {
    text = r::read_file(description);
  }
  auto desc = nlohmann::json::parse(text, nullptr, false);
  if (desc.is_discarded()) throw r::Error(fmt::format("{}: not valid JSON", description));
  r::MaterializeOptions opts;
  opts.copies = copies;
  opts.python = python;
  const auto stats = r::materialize_environment(desc, dir, opts);
  out << fmt::format("{}: {} dists, {} files, {} ELF objects\n", dir, stats.dists, stats.files, stats.elf_objects);
  return 0;
}

}  // namespace cudafix::cli
