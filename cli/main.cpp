// cudafix: keeps Python GPU environments working. The command line; see ../shared/DESIGN.md.
#include <fmt/format.h>
#include <malloc.h>
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

#include "cli/commands.hpp"
#include "cli/json_output.hpp"
#include "resolver/diagnostic.hpp"
#include "resolver/text.hpp"

namespace {

// Usage errors exit 2, like every "could not run".
constexpr int k_exit_usage = 2;

}  // namespace

namespace {

// A run lasts milliseconds and allocates some 40 MB, much of it in blocks glibc would map and
// unmap one by one (each unmap a TLB shootdown across the scan's threads, each fresh page a
// fault). Kept in the heap instead, freed memory is reused: a scan on the 16-core machine took
// 27.7 ms instead of 29.4 (median of 15, interleaved). Untouched padding costs no memory.
void tune_malloc_for_a_short_run() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

// The heap starts where the kernel put the program break, anywhere in a 2 MB block, and a huge
// page must fill a whole aligned block of the heap: with glibc.malloc.hugetlb=1 (below), the
// heap's first 2 to 4 MB still came on 4 KB pages, 850 page faults of the 1,070 left in a scan
// on 2 cores (10 us each on a VM). Moving the break to the next 2 MB boundary before malloc
// first asks for memory costs only address space. Priority 101: before the C++ library's own
// static constructors, which allocate.
__attribute__((constructor(101))) void align_heap_to_huge_pages() {
  constexpr std::uintptr_t k_huge = 2u << 20;
  const auto brk = reinterpret_cast<std::uintptr_t>(::sbrk(0));
  if (brk == static_cast<std::uintptr_t>(-1)) return;
  const std::uintptr_t gap = (k_huge - brk % k_huge) % k_huge;
  if (gap != 0) ::sbrk(static_cast<intptr_t>(gap));
}

// The caller's GLIBC_TUNABLES across the rerun below: "=" and its value, or "-" when it had none.
constexpr const char* k_caller_tunables = "CUDAFIX_CALLER_GLIBC_TUNABLES";

// glibc's malloc asks the kernel for transparent huge pages only when GLIBC_TUNABLES says so
// (glibc.malloc.hugetlb=1), which it reads once, as the process starts. A scan of the corpus
// touches some 35 MB on 4 KB pages: 7,800 page faults, each 2-3 us on a VM, taken by two threads
// at once, and as many pages to free at exit. So where the kernel gives huge pages to those who
// ask (transparent_hugepage "madvise"), a run starts itself again once with the tunable added:
// on 2 cores a scan took 91.1 ms instead of 97.3 (median of 41 runs, interleaved) and 1,400 page
// faults instead of 7,800.
// The rerun puts the caller's GLIBC_TUNABLES back before anything else, so that nothing it
// starts (the probe, ld.so, pip) runs with a changed environment.
void rerun_with_huge_pages(char** argv) {
#if defined(__SANITIZE_ADDRESS__)
  return;  // ASan's allocator replaces glibc's: a rerun would only start ASan twice
#endif
  if (const char* caller = std::getenv(k_caller_tunables)) {
    const std::string was = caller;
    if (was.starts_with("="))
      ::setenv("GLIBC_TUNABLES", was.c_str() + 1, 1);
    else
      ::unsetenv("GLIBC_TUNABLES");
    ::unsetenv(k_caller_tunables);
    return;
  }
  // The rerun itself costs an exec, 1.5 to 2 ms, while the faults it saves are shared out over
  // the cores: on 16 cores (the GPU machine) a scan took 26.7 ms with it against 25.3 without
  // (median of 15, interleaved), where on 2 it saved 6 ms (above). So only below 8 cores.
  if (std::thread::hardware_concurrency() >= 8) return;
  const auto mode = cudafix::resolver::try_read_file("/sys/kernel/mm/transparent_hugepage/enabled");
  if (!mode || mode->find("[madvise]") == std::string::npos) return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const std::string was = tunables ? tunables : "";
  if (was.find("glibc.malloc.hugetlb") != std::string::npos) return;  // the caller chose
  ::setenv(k_caller_tunables, tunables ? ("=" + was).c_str() : "-", 1);
  ::setenv("GLIBC_TUNABLES", (was.empty() ? "" : was + ":").append("glibc.malloc.hugetlb=1").c_str(), 1);
  // The binary's own path rather than /proc/self/exe, which would rename the process "exe".
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) ::execv(self.c_str(), argv);
  rerun_with_huge_pages(argv);  // no rerun (no /proc, or the binary is gone): put the environment back
}

}  // namespace

int main(int argc, char** argv) {
  rerun_with_huge_pages(argv);
  tune_malloc_for_a_short_run();
  using namespace cudafix::cli;
  CLI::App app{"cudafix: finds and repairs broken CUDA libraries in Python environments"};
  app.require_subcommand(1);
  app.fallthrough();  // common options may follow the command: `cudafix scan --json`
  app.set_version_flag("--version", "cudafix 0.1.0");
  GlobalOptions g;
  std::string color = "auto";
  std::string ld_library_path;
  app.add_option("--venv", g.venv, "the environment: a venv root, an interpreter prefix or a site-packages folder")
      ->envname("")
      ->check(CLI::ExistingDirectory);
  app.add_flag("--json", g.json, "print JSON for machines (schema 1)");
  app.add_option("--color", color, "auto (a terminal and no NO_COLOR), always or never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  app.add_flag("-q,--quiet", g.quiet, "print nothing but errors");
  app.add_flag("-v,--verbose", g.verbose, "print every entry of long lists");
  auto* llp = app.add_option("--ld-library-path", ld_library_path,
                             "the LD_LIBRARY_PATH the loader model assumes (default: this process's)");
  app.add_option("--ld-so-cache", g.ld_so_cache, "read this ld.so.cache instead of the host's");
  app.add_option("--threads", g.threads, "worker threads (default: one per core)");
  app.add_flag("--timings", g.timings, "print how long each phase of the scan took (stderr)");
  app.add_flag("--no-cache", g.no_cache, "read every folder and library afresh, and keep nothing for the next run");
  app.add_option("--find-links", g.find_links, "a folder of wheels to plan with (repeatable; default $PIP_FIND_LINKS)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--rules", g.rules, "a knowledge/rules TOML file on top of the built-in one (repeatable)")
      ->check(CLI::ExistingFile);

  auto* scan = app.add_subcommand("scan", "the model: dists, ownership, ELF objects, resolutions");
  std::string query;
  auto* why = app.add_subcommand("why", "who needs a soname or file, what provides it, how it resolves and why");
  why->add_option("SONAME_OR_PATH", query, "a soname (libcudnn.so.9) or a path (torch/lib/libtorch_cuda.so)")
      ->required();
  DoctorCliOptions doctor_opts;
  auto* doctor = app.add_subcommand("doctor", "run the rules: every way the environment is broken, root causes first");
  doctor->add_flag("--verify-hashes", doctor_opts.verify_hashes, "check every file against its RECORD hash (SHA-256)");
  doctor->add_option("--select", doctor_opts.select, "run only these rules (comma-separated)")->delimiter(',');
  doctor->add_option("--ignore", doctor_opts.ignore, "skip these rules (comma-separated)")->delimiter(',');
  VerifyCliOptions verify_opts;
  auto* verify =
      app.add_subcommand("verify", "live probe of every visible GPU: cuInit, a cuDNN handle, and a diagnosis");
  verify->add_option("--timeout", verify_opts.timeout_s, "seconds before the probe is killed (default 60)");
  verify
      ->add_option("--consumer", verify_opts.consumer,
                   "the library to dlopen for cuDNN (default: the environment's, e.g. torch/lib/libtorch_cuda.so)")
      ->check(CLI::ExistingFile);
  auto* plan = app.add_subcommand("plan", "dry runs and repair plans; changes nothing");
  plan->require_subcommand(1);
  std::vector<std::string> remove_dists;
  auto* plan_remove = plan->add_subcommand(
      "remove", "what pip uninstall would delete, what cudafix would delete, and what either breaks");
  plan_remove->add_option("DIST", remove_dists, "the dists to remove (names as pip takes them)")->required();
  PlanFixCliOptions fix_opts;
  auto* plan_fix = plan->add_subcommand("fix", "the repair plan: ordered steps that keep every required library");
  plan_fix->add_option("--cuda-major", fix_opts.cuda_major, "the CUDA major to repair for (default: the consumers')")
      ->check(CLI::Range(9, 99));
  plan_fix->add_option("-o,--output", fix_opts.output, "write the plan document (JSON) here, for `cudafix apply`");
  std::optional<std::string> demo_dir;
  auto* demo = app.add_subcommand("demo", "build a broken example environment and walk the workflow on it");
  demo->add_option("DIR", demo_dir, "where to build it (default: a new folder under $TMPDIR)");
  std::string mat_in, mat_dir, mat_python = "/usr/bin/python3";
  int copies = 1;
  auto* mat = app.add_subcommand("materialize", "");  // developer command: hidden from --help
  mat->group("");
  mat->add_option("DESCRIPTION", mat_in, "corpus-format JSON, or - for standard input")->required();
  mat->add_option("DIR", mat_dir)->required();
  mat->add_option("--copies", copies);
  mat->add_option("--python", mat_python);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : k_exit_usage;
  }
  g.color = color == "always" ? ColorMode::always : color == "never" ? ColorMode::never : ColorMode::auto_;
  if (llp->count()) g.ld_library_path = ld_library_path;

  std::string command = app.get_subcommands().front()->get_name();
  if (plan->parsed()) command += " " + plan->get_subcommands().front()->get_name();
  try {
    if (scan->parsed()) return run_scan(g, std::cout);
    if (why->parsed()) return run_why(g, query, std::cout);
    if (doctor->parsed()) return run_doctor(g, doctor_opts, std::cout);
    if (verify->parsed()) return run_verify(g, verify_opts, std::cout);
    if (plan_remove->parsed()) return run_plan_remove(g, remove_dists, std::cout);
    if (plan_fix->parsed()) return run_plan_fix(g, fix_opts, std::cout);
    if (demo->parsed()) return run_demo(g, demo_dir, std::cout);
    if (mat->parsed()) return run_materialize(mat_in, mat_dir, copies, mat_python, std::cout);
  } catch (const cudafix::resolver::Error& e) {
    if (g.json) std::cout << error_json(command, e.what()) << '\n';
    std::cerr << fmt::format("cudafix: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    if (g.json) std::cout << error_json(command, e.what()) << '\n';
    std::cerr << fmt::format("cudafix: error: {}\n", e.what());
    return 2;
  }
  return k_exit_usage;
}
