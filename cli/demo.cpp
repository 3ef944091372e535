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

// Every RECORD of the site folder made to list the bytes written (the description's rows carry
// the real wheels' hashes and sizes, its files are models of them): so that what pip, a snapshot
// and `doctor --verify-hashes` compare with RECORD is what is on disk. Rows whose file is not
// there (the description's absent ones, RECORD itself) stay as they are.
void record_written_bytes(const std::string& site) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(site, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->path().filename().string().ends_with(".dist-info")) continue;
    const std::string record = it->path().string() + "/RECORD";
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

// Writes the example environment into `dir`, linking `python` where there is one, with the
// configuration a user of the cut-down copy would give it.
r::MaterializeStats write_example(nlohmann::json desc, const std::string& dir,
                                  const std::optional<HostPython>& python) {
  r::MaterializeOptions options;
  if (python) {
    const auto parts = r::split(python->version, '.');
    desc["python"] = python->version;
    desc["site_packages"] = fmt::format("lib/python{}.{}/site-packages", parts[0], parts[1]);
    options.python = python->executable;
  }
  const auto stats = r::materialize_environment(desc, dir, options);
  record_written_bytes(r::lexically_normal(std::filesystem::absolute(dir).string()) + "/" +
                       desc.value("site_packages", std::string("lib/python3.12/site-packages")));
  // The cut-down copy leaves torch's pure-Python requirements out: the environment's own
  // configuration says so, as a user's would. Readable by whoever may read the environment.
  r::AtomicFile toml(dir + "/cudafix.toml", r::FileMode::like_any_file);
  toml.write(
      "# cudafix demo: torch's pure-Python requirements (sympy, jinja2, ...) were left out of this example\n"
      "[rules.unsatisfied-requirement]\nenabled = false\n");
  toml.commit();
  return stats;
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
  const auto python = host_python();
  // The walk below breaks and repairs `dir`; a second copy beside it stays as it was before the
  // cleanup, for trying the commands (README's examples) on a broken environment.
  const std::string broken_copy = r::lexically_normal(std::filesystem::absolute(dir).string()) + "-broken";
  const auto stats = write_example(desc, dir, python);
  write_example(desc, broken_copy, python);
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
  say(
      fmt::format("A copy as it was before the cleanup, still broken, for README's examples: {}\n"
                  "(its bin/python3: {}, so pip can work on it; wheels for its repair: --find-links {})\n",
                  broken_copy, python ? python->executable + " " + python->version : "/usr/bin/python3, absent here",
                  r::lexically_normal(std::filesystem::absolute(wheels).string())));
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
    w.end_array().key("repaired").value(last == 0).key("broken_copy").value(broken_copy).end_object();
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
