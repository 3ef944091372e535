#include "resolver/loader/host.hpp"

#include <elf.h>
#include <fmt/format.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <spawn.h>
#include <sys/auxv.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <cerrno>
#include <cstring>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"

extern char** environ;

namespace cudafix::resolver::inline loader {
namespace {

// The PT_INTERP of the main program, read from memory: the loader this process runs under.
std::string own_interpreter() {
  std::string out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) -> int {
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          if (info->dlpi_phdr[i].p_type == PT_INTERP) {
            *static_cast<std::string*>(data) =
                reinterpret_cast<const char*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
            return 1;
          }
        }
        return 1;  // only the main program has PT_INTERP; stop after it
      },
      &out);
  return out;
}

// Starts `exe args...` with its standard output on a pipe; returns the read end. Throws Error.
int spawn_with_output(const std::string& exe, const std::vector<std::string>& args, pid_t& pid) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(fmt::format("pipe: {}", std::strerror(errno)));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw Error(fmt::format("cannot run {}: {}", exe, std::strerror(rc)));
  }
  return fds[0];
}

}  // namespace

void parse_ld_so_help(const std::string& text, HostInfo& host) {
  enum class Section { other, search, hwcaps } section = Section::other;
  for (auto raw : split(text, '\n')) {
    const auto line = trim(raw);
    if (line.starts_with("Shared library search path")) {
      section = Section::search;
      continue;
    }
    if (line.starts_with("Subdirectories of glibc-hwcaps")) {
      section = Section::hwcaps;
      continue;
    }
    if (line.empty() || raw.empty() || (raw[0] != ' ' && raw[0] != '\t')) {
      if (!line.empty()) section = Section::other;
      continue;
    }
    if (section == Section::search && line.ends_with("(system search path)")) {
      host.default_dirs.emplace_back(
          trim(line.substr(0, line.size() - std::string_view("(system search path)").size())));
    } else if (section == Section::hwcaps && line.find("searched") != std::string_view::npos) {
      host.hwcaps_subdirs.emplace_back(line.substr(0, line.find(' ')));
    }
  }
}

HostDetection::HostDetection() : ld_so_(own_interpreter()) {
  if (ld_so_.empty()) {
    problem_ = "cannot find this process's dynamic loader (no PT_INTERP)";
    return;
  }
  try {
    pid_t pid = 0;
    output_ = spawn_with_output(ld_so_, {"--help"}, pid);
    pid_ = pid;
  } catch (const Error& e) {
    problem_ = e.what();
  }
}

HostDetection::~HostDetection() { reap(); }

// Closes the pipe and waits for the child: a reader that stops early makes a writer still
// writing end at once (EPIPE or SIGPIPE) rather than block.
void HostDetection::reap() {
  if (output_ >= 0) ::close(output_);
  output_ = -1;
  int status = 0;
  if (pid_ > 0)
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  pid_ = -1;
}

HostInfo HostDetection::get() {
  if (!problem_.empty()) throw Error(problem_);
  if (output_ < 0) throw Error("the host's loader was asked once already; its answer is not kept");
  std::string out;
  char buf[4096];
  ssize_t r;
  while ((r = ::read(output_, buf, sizeof buf)) > 0 || (r < 0 && errno == EINTR))
    if (r > 0) out.append(buf, static_cast<std::size_t>(r));
  reap();
  HostInfo host;
  host.ld_so = ld_so_;
  parse_ld_so_help(out, host);
  if (host.default_dirs.empty())
    throw Error(fmt::format("{} --help listed no system search path; cannot model the loader", host.ld_so));
  if (const auto* p = reinterpret_cast<const char*>(getauxval(AT_PLATFORM))) host.platform = p;
  // glibc expands $LIB to its slibdir below the root: the first system folder ("/lib64",
  // "/lib/x86_64-linux-gnu").
  host.lib = host.default_dirs.front().substr(1);
  host.glibc_version = gnu_get_libc_version();
#if defined(__x86_64__)
  host.machine = EM_X86_64;
#elif defined(__aarch64__)
  host.machine = EM_AARCH64;
#elif defined(__powerpc64__)
  host.machine = EM_PPC64;
#else
  host.machine = 0;
#endif
  host.elf_class = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;
  return host;
}

HostInfo detect_host() { return HostDetection().get(); }

}  // namespace cudafix::resolver::inline loader
