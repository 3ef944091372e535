// The session every command runs in (cli/session.hpp): the configuration files, the environment
// located and fenced, a killed change recovered, the scan and its options, --timings.
#include "cli/session.hpp"

#include "cli/commands.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "cli/json_output.hpp"
#include "cli/json_writer.hpp"
#include "cli/printable.hpp"
#include "cli/text_output.hpp"
#include "installer/probe/verify.hpp"
#include "installer/source/find_links.hpp"
#include "installer/source/sources.hpp"
#include "installer/txn/changes.hpp"
#include "installer/txn/file_ops.hpp"
#include "installer/txn/landlock.hpp"
#include "installer/txn/transaction.hpp"
#include "installer/wheel/install.hpp"
#include "installer/wheel/read.hpp"
#include "resolver/base/atomic_file.hpp"
#include "resolver/base/closest.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/example_env.hpp"
#include "resolver/pep/pep508.hpp"
#include "resolver/plan/fix.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/doctor.hpp"
#include "rules/knowledge.hpp"
#include "rules/rule.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;

std::optional<std::string> env_var(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

r::LocateRequest locate_request(const GlobalOptions& g) {
  std::error_code ec;
  const auto cwd = std::filesystem::current_path(ec);
  return {g.venv, g.python, env_var("VIRTUAL_ENV"), {env_var("PATH").value_or(""), ec ? "/" : cwd.string(), env_var}};
}

Style style_for(const GlobalOptions& g) {
  Style st;
  st.verbose = g.verbose;
  st.quiet = g.quiet;
  switch (g.color) {
    case ColorMode::always:
      st.color = true;
      break;
    case ColorMode::never:
      st.color = false;
      break;
    case ColorMode::auto_:
      st.color = ::isatty(1) && !(env_var("NO_COLOR") && !env_var("NO_COLOR")->empty());
      break;
  }
  return st;
}

// Where a node of a configuration file is: "FILE:LINE".
static std::string where_in(const std::string& source, const toml::node& n) {
  return fmt::format("{}:{}", source, n.source().begin.line);
}

// The table `[name]` of `doc`: null where the file has none; an Error where it is not a table.
static const toml::table* section(const toml::table& doc, const char* name, const std::string& source) {
  const auto* node = doc.get(name);
  if (!node) return nullptr;
  const auto* table = node->as_table();
  if (!table) throw r::Error(fmt::format("{}: [{}] must be a table", where_in(source, *node), name));
  return table;
}

// [transactions] keep = N.
static void merge_transaction_settings(const toml::table& doc, const std::string& source, Configuration& c) {
  const auto* table = section(doc, "transactions", source);
  if (!table) return;
  const auto where = [&](const toml::node& n) { return where_in(source, n); };
  for (const auto& [key, value] : *table) {
    if (key.str() != "keep")
      throw r::Error(
          fmt::format("{}: unknown key '{}' in [transactions]; the one key is keep", where(value), key.str()));
    const auto n = value.value<std::int64_t>();
    if (!n || *n < 0)
      throw r::Error(
          fmt::format("{}: [transactions] keep must be a whole number, 0 or more (0 keeps every one)", where(value)));
    c.keep_transactions = static_cast<std::size_t>(*n);
  }
}

// [sources] index_url = URL, extra_index_urls = [URL...], find_links = [DIR...]: each file's on
// top of the one before; a folder is relative to the file that names it.
static void merge_source_settings(const toml::table& doc, const std::string& source, Configuration& c) {
  const auto* table = section(doc, "sources", source);
  if (!table) return;
  const auto where = [&](const toml::node& n) { return where_in(source, n); };
  const auto strings = [&](const toml::node& value, const std::string& key) {
    std::vector<std::string> out;
    const auto* array = value.as_array();
    if (!array) throw r::Error(fmt::format("{}: [sources] {} must be an array of strings", where(value), key));
    for (const auto& item : *array) {
      const auto str = item.value<std::string>();
      if (!str) throw r::Error(fmt::format("{}: [sources] {} must be an array of strings", where(item), key));
      out.push_back(*str);
    }
    return out;
  };
  const std::string folder = r::parent_dir(std::filesystem::absolute(source).string());
  for (const auto& [key, value] : *table) {
    const std::string k(key.str());
    if (k == "index_url") {
      const auto url = value.value<std::string>();
      if (!url) throw r::Error(fmt::format("{}: [sources] index_url must be a string", where(value)));
      c.index_url = *url;
    } else if (k == "extra_index_urls") {
      c.extra_index_urls = strings(value, k);
    } else if (k == "find_links") {
      c.find_links.clear();
      for (const auto& dir : strings(value, k))
        c.find_links.push_back(dir.starts_with("/") ? dir : r::join_normal(folder, dir));
    } else {
      throw r::Error(
          fmt::format("{}: unknown key '{}' in [sources]; the keys are index_url, extra_index_urls and "
                      "find_links",
                      where(value), k));
    }
  }
}

// Every file, --rules ones too, may carry each of these tables; any other is a typo that would
// otherwise be ignored in silence.
static void refuse_unknown_tables(const toml::table& doc, const std::string& source) {
  static constexpr std::array<std::string_view, 10> known = {"driver",         "optional",     "dlopen", "family",
                                                             "minimum_driver", "harmless",     "meta",  // knowledge
                                                             "rules",          "transactions", "sources"};
  for (const auto& [key, value] : doc)
    if (std::find(known.begin(), known.end(), key.str()) == known.end())
      throw r::Error(fmt::format("{}:{}: unknown table [{}]; the tables are {}", source, value.source().begin.line,
                                 key.str(), fmt::join(known, ", ")));
}

GlobalOptions with_configured_sources(const GlobalOptions& g, const Configuration& config) {
  GlobalOptions out = g;
  out.config_index_url = config.index_url;
  out.config_extra_index_urls = config.extra_index_urls;
  out.config_find_links = config.find_links;
  return out;
}

// A settings file holds a few kilobytes; one larger is refused, never read whole (a sparse 3 GiB
// cudafix.toml costs no disk, and made doctor take 3 GB of memory).
constexpr std::uint64_t k_max_settings_bytes = std::uint64_t{4} << 20;

std::string read_settings_file(const std::string& f) {
  int err = 0;
  auto text = r::try_read_file_at(AT_FDCWD, f.c_str(), k_max_settings_bytes, &err);
  if (text) return std::move(*text);
  if (err == EFBIG)
    throw r::Error(
        fmt::format("cannot read {}: over {} MiB, too large for a settings file", f, k_max_settings_bytes >> 20));
  if (err == EINVAL)
    throw r::Error(fmt::format("cannot read {}: not a regular file (a FIFO, a device or a folder)", f));
  throw r::Error(fmt::format("cannot read {}: {}", f, r::why_unread(err, f)));
}

// `venv_root`: the environment's root, whose cudafix.toml is read; none, none.
Configuration load_configuration(const GlobalOptions& g, const std::optional<std::string>& venv_root) {
  Configuration c{rules::builtin_knowledge(), {}};
  const std::string xdg = env_var("XDG_CONFIG_HOME").value_or(env_var("HOME").value_or("") + "/.config");
  std::vector<std::string> files;
  std::vector<std::string> candidates = {xdg + "/cudafix/config.toml"};
  if (venv_root) candidates.push_back(*venv_root + "/cudafix.toml");
  for (const auto& f : candidates) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(f, ec)) files.push_back(f);
  }
  files.insert(files.end(), g.rules.begin(), g.rules.end());
  for (const auto& f : files) {
    // Parsed once, each reader handed the one table.
    const toml::table doc = r::parse_toml(read_settings_file(f), f);
    refuse_unknown_tables(doc, f);
    rules::merge_knowledge(doc, f, c.knowledge);
    rules::merge_rule_settings(doc, f, c.rule_settings);
    merge_transaction_settings(doc, f, c);
    merge_source_settings(doc, f, c);
  }
  return c;
}

// Where scans keep what they read (resolver/base/cache_file.hpp): $CUDAFIX_CACHE_DIR, else
// $XDG_CACHE_HOME/cudafix, else ~/.cache/cudafix; "" (no cache) when none of them is set.
std::string cache_dir() {
  if (auto d = env_var("CUDAFIX_CACHE_DIR"); d && !d->empty()) return *d;
  if (auto d = env_var("XDG_CACHE_HOME"); d && !d->empty()) return *d + "/cudafix";
  if (auto d = env_var("HOME"); d && !d->empty()) return *d + "/.cache/cudafix";
  return {};
}

std::chrono::milliseconds lock_wait(const GlobalOptions& g) {
  return std::chrono::milliseconds(static_cast<long>(g.lock_timeout_s * 1000));
}

void say_waiting(const std::string& what) { std::cerr << "cudafix: " << printable_lines(what) << '\n'; }

// This process may write only beneath the environment's root and the cache folder from here on:
// the kernel refuses the rest (Landlock), and each path-changing call resolves its folder beneath
// one of them (openat2). Said under -v, and where the kernel lacks either.
void fence(const r::EnvLayout& layout, const GlobalOptions& g) {
  std::vector<std::string> folders{layout.root_real};
  installer::txn::confine_to(layout.root_real);
  if (const std::string cache = cache_dir(); !g.no_cache && !cache.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cache, ec);
    if (!ec) {
      installer::txn::confine_to(cache);
      folders.push_back(r::real_path_of(cache));
    }
  }
  installer::txn::open_test_hooks();
  const auto f = installer::txn::fence_writes_beneath(folders);
  if (g.verbose) {
    if (f.applied)
      std::cerr << fmt::format("cudafix: writes fenced by the kernel (Landlock ABI {}) to {}\n", f.abi,
                               fmt::join(folders, " and "));
    else
      std::cerr << fmt::format("cudafix: no Landlock fence: {}; cudafix's own checks only\n", f.why);
    if (!installer::txn::kernel_confines())
      std::cerr << "cudafix: this kernel has no openat2 (Linux 5.6+): each folder's real path is checked instead\n";
  }
  // The fence's own test: a write outside, tried past every check cudafix makes, that the kernel
  // must refuse.
  if (const auto outside = env_var("CUDAFIX_TEST_WRITE_OUTSIDE")) {
    const int fd = ::open(outside->c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      throw r::Error(fmt::format("{}: {}: the kernel refused a write outside the environment", *outside,
                                 r::os_error_text(errno, *outside)));
    ::close(fd);
  }
}

// A transaction a killed run left is finished or undone before anything reads the environment;
// what it did is said on standard error, whatever the output format, and returned.
std::vector<std::string> recover_in_process(const r::EnvLayout& layout, const GlobalOptions& g) {
  std::vector<std::string> said;
  installer::txn::recover(layout.root_real, lock_wait(g), [&](const std::string& line) {
    say_waiting(line);
    if (line.starts_with("recovering")) said.push_back(line);
  });
  return said;
}

// A reading command recovers in a child, fenced as a writing command is, so that the fence
// does not outlive the recovery in the command itself (its --output, its reports). The child
// sends back what it did, a line each after 'R', or why it failed after 'E'.
std::vector<std::string> recover_in_child(const r::EnvLayout& layout, const GlobalOptions& g) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw r::Error(fmt::format("pipe: {}", std::strerror(errno)));
  std::cout.flush();
  std::cerr.flush();
  const pid_t child = ::fork();
  if (child < 0) throw r::Error(fmt::format("fork: {}", std::strerror(errno)));
  if (child == 0) {
    ::close(pipe_fds[0]);
    int code = 0;
    std::string reply;
    try {
      fence(layout, g);
      reply = "R";
      for (const auto& line : recover_in_process(layout, g)) reply += printable(line) + "\n";
    } catch (const std::exception& e) {
      reply = std::string("E") + e.what();
      code = 3;
    }
    (void)!::write(pipe_fds[1], reply.data(), reply.size());
    std::cerr.flush();
    ::_exit(code);
  }
  ::close(pipe_fds[1]);
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (reply.starts_with("E")) throw r::Error(reply.substr(1));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !reply.starts_with("R"))
    throw r::Error(
        fmt::format("recovering {}: the recovery process ended abnormally (status {})", layout.root, status));
  std::vector<std::string> said;
  for (const auto line : r::split(std::string_view(reply).substr(1), '\n'))
    if (!line.empty()) said.emplace_back(line);
  return said;
}

std::vector<std::string> recover_interrupted(const r::EnvLayout& layout, const GlobalOptions& g, Access access) {
  if (layout.kind == r::EnvKind::site_dir) return {};
  if (access == Access::write) {
    fence(layout, g);
    return recover_in_process(layout, g);
  }
  struct stat st {};
  if (::lstat((layout.root_real + "/.cudafix/active").c_str(), &st) == 0) return recover_in_child(layout, g);
  return {};
}

namespace {

// As pip reads a boolean of its environment variables (PIP_BREAK_SYSTEM_PACKAGES=1).
bool env_flag(const char* name) {
  const auto v = env_var(name);
  if (!v) return false;
  std::string s = *v;
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "1" || s == "true" || s == "yes" || s == "on" || s == "y" || s == "t";
}

}  // namespace

void refuse_externally_managed(const r::EnvLayout& layout, const GlobalOptions& g) {
  if (!layout.externally_managed || g.break_system_packages || env_flag("PIP_BREAK_SYSTEM_PACKAGES")) return;
  throw r::Error(fmt::format(
      "{} is externally managed ({}, PEP 668): its packages belong to the system's package manager, and pip and uv "
      "refuse to change it. Make a venv for the project (python3 -m venv), or pass --break-system-packages to "
      "change it all the same",
      layout.root, *layout.externally_managed));
}

Located locate(const GlobalOptions& g, Access access, std::vector<std::string>* refused) {
  r::EnvLayout layout = r::locate_environment(locate_request(g));
  std::vector<std::string> recovered;
  try {
    recovered = recover_interrupted(layout, g, access);
  } catch (const r::Error& e) {
    if (!refused) throw;
    refused->push_back(e.what());
  }
  if (layout.kind != r::EnvKind::site_dir)
    for (const auto& notice : killed_guard_notices(layout.root_real)) say_waiting(notice);
  Configuration config = load_configuration(g, layout.root);
  return {std::move(layout), std::move(config), std::move(recovered)};
}

r::ScanOptions scan_options(const GlobalOptions& g, r::ScanDepth depth, bool parse_requirements) {
  r::ScanOptions opts;
  opts.threads = g.threads;
  opts.depth = depth;
  opts.parse_requirements = parse_requirements;
  opts.ld_library_path =
      r::split_search_path(g.ld_library_path ? *g.ld_library_path : env_var("LD_LIBRARY_PATH").value_or(""));
  const std::string ld_preload = env_var("LD_PRELOAD").value_or("");  // split() returns views into it
  for (auto p : r::split(ld_preload, ' '))
    for (auto q : r::split(p, ':'))
      if (!q.empty()) opts.preload.emplace_back(q);
  opts.ld_so_cache = g.ld_so_cache;
  if (!g.no_cache) opts.cache_dir = cache_dir();
  return opts;
}

Scanned scan(const GlobalOptions& g, Located located, r::ScanDepth depth, bool parse_requirements) {
  return {r::scan_environment(located.layout, scan_options(g, depth, parse_requirements)),
          std::move(located.config.knowledge), std::move(located.config.rule_settings)};
}

// The model of a large venv is 100,000 small allocations; freeing them one by one at exit costs
// more than some phases of the scan, so commands that end the process keep it.
const Scanned& scan_kept(const GlobalOptions& g, Located located, r::ScanDepth depth, bool parse_requirements) {
  static auto* kept = new std::vector<std::unique_ptr<Scanned>>();
  kept->push_back(std::make_unique<Scanned>(scan(g, std::move(located), depth, parse_requirements)));
  return *kept->back();
}

const Scanned& scan_kept(const GlobalOptions& g) { return scan_kept(g, locate(g)); }

// --timings: each phase of the scan, on standard error.
void print_timings(const r::Environment& env) {
  for (const auto& [name, ms] : env.timings) std::cerr << fmt::format("{:>22}: {:7.1f} ms\n", name, ms);
  const auto& c = env.walk_cache;
  if (c.file.empty()) return;
  if (!c.trusted) {
    std::cerr << fmt::format("{:>22}: {}\n", "walk cache", c.problem);
    return;
  }
  std::cerr << fmt::format("{:>22}: {} of {} folders unchanged{} ({})\n", "walk cache", c.reused, c.folders,
                           c.written ? ", written again" : "", c.file);
  if (!c.problem.empty()) std::cerr << fmt::format("{:>22}: {}\n", "walk cache problem", c.problem);
  const auto& e = env.elf_store;
  if (e.file.empty()) return;
  std::cerr << fmt::format("{:>22}: {} of {} objects unchanged{} ({})\n", "ELF store", e.reused, e.objects,
                           e.written ? ", written again" : "", e.file);
  if (!e.problem.empty()) std::cerr << fmt::format("{:>22}: {}\n", "ELF store problem", e.problem);
}

}  // namespace cudafix::cli
