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

#include "cli/commands.hpp"
#include "cli/json_writer.hpp"
#include "cli/session.hpp"
#include "cli/text_output.hpp"
#include "demo_env_json.hpp"
#include "installer/wheel_pack.hpp"
#include "resolver/base/atomic_file.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/example_env.hpp"
#include "resolver/plan/plan.hpp"

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
// after another, checked against real pip by the tests), deleted here: the demo's environment
// has no interpreter.
std::size_t uninstall_as_pip_does(const GlobalOptions& g, const std::vector<std::string>& dists) {
  const auto& [env, knowledge, settings] = scan_kept(g);
  const auto plan = r::plan_removal(env, knowledge, dists_named(env, dists), g.threads);
  for (const auto& f : plan.pip.deletion.files) std::filesystem::remove(f);
  for (auto it = plan.pip.deletion.dirs.rbegin(); it != plan.pip.deletion.dirs.rend(); ++it)
    std::filesystem::remove_all(*it);
  return plan.pip.deletion.files.size();
}

}  // namespace

int run_demo(const GlobalOptions& g, const std::optional<std::string>& dir_opt, std::ostream& out) {
  std::string dir;
  if (dir_opt) {
    dir = *dir_opt;
  } else {
    std::string tmpl = env_var("TMPDIR").value_or("/tmp") + "/cudafix-demo-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw r::Error(fmt::format("cannot create a folder for the demo under {}", tmpl));
    dir = tmpl;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto desc = nlohmann::json::parse(k_demo_env);
  const auto stats = r::materialize_environment(desc, dir);
  // The cut-down copy leaves torch's pure-Python requirements out: the environment's own
  // configuration says so, as a user's would.
  {
    r::AtomicFile toml(dir + "/cudafix.toml");
    toml.write(
        "# cudafix demo: torch's pure-Python requirements (sympy, jinja2, ...) were left out of this example\n"
        "[rules.unsatisfied-requirement]\nenabled = false\n");
    toml.commit();
  }
  const Style st = style_for(g);
  const bool talk = !g.json && !g.quiet;
  auto say = [&](const std::string& s) {
    if (talk) out << s;
  };
  GlobalOptions sub = g;
  sub.venv = dir;
  sub.ld_library_path = "";  // the example's libraries only, whatever this shell's path
  sub.yes = true;
  sub.no_cache = true;
  sub.find_links.clear();
  sub.index_url.reset();
  sub.extra_index_urls.clear();
  sub.no_index = true;
  std::ostringstream buf;
  // A command as the demo shows it: the line a user would type, the lines worth reading of what it
  // printed (all of them when `marks` is empty), its exit code.
  auto show = [&](const std::string& shown_args, auto&& command, std::initializer_list<std::string_view> marks = {}) {
    buf.str("");
    int rc = 0;
    GlobalOptions quiet = sub;
    quiet.quiet = !talk;
    try {
      rc = command(quiet, buf);
    } catch (const r::Error& e) {  // said as the command would say it; the walk goes on
      buf << fmt::format("cudafix: error: {}\n", e.what());
      rc = 2;
    }
    say(fmt::format("\n$ cudafix {}\n", shown_args));
    say(marks.size() == 0 ? buf.str() : lines_with(buf.str(), marks));
    say(st.dim(fmt::format("(exit {})\n", rc)));
    return rc;
  };
  const std::string venv_arg = "--venv " + dir;
  // The CUDA 12 leftovers the user cleans up at once, and the CUDA 13 providers that cleanup
  // breaks, since each pair lists the same files.
  const std::vector<std::string> leftovers = {"nvidia-cudnn-cu12", "nvidia-nccl-cu12", "nvidia-cusparselt-cu12"};
  const std::vector<std::string> broken = {"nvidia-cudnn-cu13", "nvidia-nccl-cu13", "nvidia-cusparselt-cu13"};
  // The wheels the repair installs from, packed from the installed files while they are whole.
  const std::string wheels = dir + "/demo-wheels";
  std::filesystem::create_directories(wheels);
  std::vector<std::string> packed;
  {
    const auto& scanned = scan_kept(sub);
    for (const auto& name : broken) {
      const auto dist = scanned.env.dist_index(name);
      if (!dist) throw r::Error(fmt::format("the demo environment lacks {}", name));
      packed.push_back(installer::pack_installed_dist(scanned.env, *dist, wheels));
    }
  }
  const std::string leftover_args = fmt::format("{}", fmt::join(leftovers, " "));
  say(fmt::format("{}\n", st.bold("cudafix demo")));
  say(
      fmt::format("An example CUDA 13 torch environment in {}: {} dists, {} files, {} ELF objects carrying the\n"
                  "SONAME, NEEDED and RPATH of torch 2.11.0+cu130's real wheels, with the CUDA 12 leftovers of torch\n"
                  "2.8's cu128 wheels beside their CUDA 13 namesakes, writing the same files: {}.\n"
                  "A wheel folder for the repair, packed from the installed CUDA 13 providers: {}\n",
                  dir, stats.dists, stats.files, stats.elf_objects, and_list(leftovers), wheels));
  DoctorCliOptions doctor_opts;
  auto doctor = [&](const GlobalOptions& o, std::ostream& os) { return run_doctor(o, doctor_opts, os); };
  const std::string doctor_args = "doctor " + venv_arg;
  const std::initializer_list<std::string_view> findings = {"error[", "warning[", "next:"};

  say(st.bold("\n1. What is wrong: three pairs of dists list the same files, and CUDA 12 sits beside 13.\n"));
  show(doctor_args, doctor, findings);
  say(st.bold(
      "\n2. The cleanup a user tries next, as a dry run: pip would delete the files both of each pair list.\n"));
  show("plan remove " + leftover_args + " " + venv_arg,
       [&](const GlobalOptions& o, std::ostream& os) { return run_plan_remove(o, leftovers, os); },
       // torch's one library that NEEDs each of the three, not every object that does
       {"pip uninstall would", "would be left", "libtorch_cuda.so (torch) NEEDs", "unsafe", "safe with"});
  const std::size_t deleted = uninstall_as_pip_does(sub, leftovers);
  say(st.bold("\n3. Broken as pip breaks it: "));
  say(fmt::format("the demo deleted the {} files `pip uninstall -y {}` deletes.\n", deleted, leftover_args));
  say(fmt::format("   {} still show as installed, so `pip install` would skip them:\n", and_list(broken)));
  show(doctor_args, doctor, findings);
  say(st.bold("\n4. The repair of all three: planned, carried out as one transaction, doctor before and after.\n"));
  say("   (On a real venv fix also verifies on the GPU after each step; the example's libraries are\n"
      "   models without code, so the demo passes --no-verify.)\n");
  sub.find_links = {wheels};
  // The example's libraries are models without code: a live check of them says nothing about the
  // repair, so the demo's fix does without (on a real venv, fix verifies after each step).
  FixCliOptions fix_opts;
  fix_opts.no_verify = true;
  auto fix = [&](const GlobalOptions& o, std::ostream& os) { return run_fix(o, fix_opts, os); };
  const std::string fix_args = "fix -y --no-verify --find-links " + wheels + " " + venv_arg;
  show(fix_args, fix, {"target:", ". reinstall", ". remove", "why:", "fixed", "before:", "after:", "verified", "took"});
  say(
      st.bold("\n5. The live check, as it runs on this machine: without a GPU driver it says so; with one, it\n"
              "   finds that the example's libraries have no code.\n"));
  VerifyCliOptions verify_opts;
  verify_opts.timeout_s = 20;
  try {
    show("verify " + venv_arg, [&](const GlobalOptions& o, std::ostream& os) { return run_verify(o, verify_opts, os); },
         {"likely:", "ok  "});
  } catch (const r::Error& e) {
    say(fmt::format("verify could not run here: {}\n", e.what()));
  }
  say(st.bold("\n6. Undo the repair byte for byte, then repair again; a second fix finds nothing to do.\n"));
  show("rollback -y " + venv_arg,
       [&](const GlobalOptions& o, std::ostream& os) { return run_rollback(o, RollbackCliOptions{}, os); });
  show(doctor_args + " -q",
       [&](const GlobalOptions& o, std::ostream& os) {
         GlobalOptions q = o;
         q.quiet = true;
         return run_doctor(q, doctor_opts, os);
       },
       {"error["});
  show(fix_args, fix, {"fixed", "before:", "after:"});
  const int last = show(fix_args, fix, {"nothing to do"});
  say(
      fmt::format("\nThe whole walk took {:.1f} s. Look further with `cudafix scan`, `cudafix why libcudnn.so.9`,\n"
                  "`cudafix history` and `cudafix explain metadata-only` on {}; every command takes --json.\n",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), dir));
  if (g.json) {
    JsonWriter w;
    w.begin_object().key("schema").value(1).key("command").value("demo").key("venv").value(dir);
    w.key("dists")
        .value(static_cast<std::uint64_t>(stats.dists))
        .key("files")
        .value(static_cast<std::uint64_t>(stats.files));
    w.key("elf_objects").value(static_cast<std::uint64_t>(stats.elf_objects));
    w.key("wheels").begin_array();
    for (const auto& p : packed) w.value(p);
    w.end_array().key("repaired").value(last == 0).end_object();
    out << w.str() << '\n';
  }
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
