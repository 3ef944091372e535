#include "cli/commands.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "cli/json_output.hpp"
#include "cli/json_writer.hpp"
#include "cli/text_output.hpp"
#include "demo_env_json.hpp"
#include "installer/probe/verify.hpp"
#include "installer/txn/changes.hpp"
#include "installer/txn/transaction.hpp"
#include "installer/wheel_install.hpp"
#include "installer/wheel_source.hpp"
#include "resolver/base/atomic_file.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/example_env.hpp"
#include "resolver/plan/fix.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/doctor.hpp"
#include "rules/knowledge.hpp"
#include "rules/rule.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;

namespace {

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

// Built-in knowledge, then $XDG_CONFIG_HOME/cudafix/config.toml, <venv>/cudafix.toml and --rules
// files, each on top of the one before.
struct Configuration {
  r::Knowledge knowledge;
  std::map<std::string, rules::RuleSettings> rule_settings;
};

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
    const std::string text = r::read_file(f);
    rules::merge_knowledge(text, f, c.knowledge);
    rules::merge_rule_settings(text, f, c.rule_settings);
  }
  return c;
}

// Where scans keep what they read (resolver/cache_file.hpp): $CUDAFIX_CACHE_DIR, else
// $XDG_CACHE_HOME/cudafix, else ~/.cache/cudafix; "" (no cache) when none of them is set.
std::string cache_dir() {
  if (auto d = env_var("CUDAFIX_CACHE_DIR"); d && !d->empty()) return *d;
  if (auto d = env_var("XDG_CACHE_HOME"); d && !d->empty()) return *d + "/cudafix";
  if (auto d = env_var("HOME"); d && !d->empty()) return *d + "/.cache/cudafix";
  return {};
}

struct Scanned {
  r::Environment env;
  r::Knowledge knowledge;
  std::map<std::string, rules::RuleSettings> rule_settings;
};

// The environment found and the configuration read for it: what every scan starts from.
struct Located {
  r::EnvLayout layout;
  Configuration config;
};

std::chrono::milliseconds lock_wait(const GlobalOptions& g) {
  return std::chrono::milliseconds(static_cast<long>(g.lock_timeout_s * 1000));
}

void say_waiting(const std::string& what) { std::cerr << "cudafix: " << what << '\n'; }

// A transaction a killed run left is finished or undone before anything reads the environment.
void recover_interrupted(const r::EnvLayout& layout, const GlobalOptions& g) {
  if (layout.kind == r::EnvKind::site_dir) return;
  for (const auto& line : installer::txn::recover(layout.root_real, lock_wait(g), say_waiting))
    std::cerr << "cudafix: " << line << '\n';
}

Located locate(const GlobalOptions& g) {
  r::EnvLayout layout = r::locate_environment(locate_request(g));
  recover_interrupted(layout, g);
  Configuration config = load_configuration(g, layout.root);
  return {std::move(layout), std::move(config)};
}

Scanned scan(const GlobalOptions& g, Located located, r::ScanDepth depth, bool parse_requirements) {
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
  return {r::scan_environment(located.layout, opts), std::move(located.config.knowledge),
          std::move(located.config.rule_settings)};
}

// The model of a large venv is 100,000 small allocations; freeing them one by one at exit costs
// more than some phases of the scan, so commands that end the process keep it.
const Scanned& scan_kept(const GlobalOptions& g, Located located, r::ScanDepth depth = r::ScanDepth::full,
                         bool parse_requirements = false) {
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

}  // namespace

int run_scan(const GlobalOptions& g, std::ostream& out) {
  const auto start = std::chrono::steady_clock::now();
  const auto& [env, knowledge, settings] = scan_kept(g);
  const auto scanned = std::chrono::steady_clock::now();
  if (g.json)
    out << scan_json(env, knowledge, g.threads) << '\n';
  else if (!g.quiet)
    out << scan_text(env, knowledge, style_for(g));
  out.flush();
  if (g.timings) {
    print_timings(env);
    const auto done = std::chrono::steady_clock::now();
    std::cerr << fmt::format("{:>22}: {:7.1f} ms\n{:>22}: {:7.1f} ms\n", "render",
                             std::chrono::duration<double, std::milli>(done - scanned).count(), "total",
                             std::chrono::duration<double, std::milli>(done - start).count());
  }
  return 0;
}

int run_why(const GlobalOptions& g, const std::string& query, std::ostream& out) {
  const auto& [env, knowledge, settings] = scan_kept(g);
  const r::WhyReport report = r::explain(env, query);
  if (g.json)
    out << why_json(env, knowledge, report) << '\n';
  else if (!g.quiet)
    out << why_text(env, knowledge, report, style_for(g));
  return report.resolves ? 0 : 1;
}

namespace {

// cudafix-probe is installed beside the cudafix binary.
std::string probe_path() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw r::Error(fmt::format("cannot find cudafix's own path: {}", ec.message()));
  const std::string probe = (self.parent_path() / "cudafix-probe").string();
  if (::access(probe.c_str(), X_OK) != 0)
    throw r::Error(
        fmt::format("the probe helper {} is missing or not executable; it is installed beside cudafix", probe));
  return probe;
}

}  // namespace

int run_verify(const GlobalOptions& g, const VerifyCliOptions& v, std::ostream& out) {
  if (g.ld_so_cache)
    throw r::Error(
        "--ld-so-cache cannot be used with verify: the probe runs the real loader, which reads the host's cache");
  if (!(v.timeout_s > 0)) throw r::Error(fmt::format("--timeout must be positive, not {}", v.timeout_s));
  const auto& [env, knowledge, settings] = scan_kept(g);
  installer::probe::VerifyOptions opts;
  opts.probe = probe_path();
  opts.timeout = std::chrono::milliseconds(static_cast<long long>(v.timeout_s * 1000));
  opts.consumer = v.consumer;
  const auto report = installer::probe::verify_environment(env, knowledge, opts);
  if (g.json)
    out << verify_json(env, knowledge, report) << '\n';
  else if (!g.quiet || report.exit_code() != 0)
    out << verify_text(env, report, style_for(g));
  return report.exit_code();
}

namespace {

// A progress bar on standard error (hashing, installing), only when both streams are a terminal.
std::function<void(std::uint64_t, std::uint64_t)> progress_bar(const char* what) {
  if (!::isatty(1) || !::isatty(2)) return {};
  auto last = std::make_shared<std::atomic<int>>(-1);
  return [last, what](std::uint64_t done, std::uint64_t total) {
    const int pct = total ? static_cast<int>(std::min<std::uint64_t>(100, done * 100 / total)) : 100;
    int prev = last->load();
    if (pct <= prev || !last->compare_exchange_strong(prev, pct)) return;
    const int filled = pct * 30 / 100;
    const bool gb = total >= 1000000000;
    const double unit = gb ? 1e9 : 1e6;
    std::cerr << fmt::format("\r{} [{}{}] {:3}%  {:.1f} of {:.1f} {}", what, std::string(filled, '#'),
                             std::string(30 - filled, ' '), pct, static_cast<double>(done) / unit,
                             static_cast<double>(total) / unit, gb ? "GB" : "MB")
              << (pct == 100 ? "\n" : "") << std::flush;
  };
}

}  // namespace

int run_doctor(const GlobalOptions& g, const DoctorCliOptions& d, std::ostream& out) {
  // The rules files decide which rules run, and so how much to scan: read them first.
  Located located = locate(g);
  rules::DoctorOptions opts;
  opts.verify_hashes = d.verify_hashes;
  opts.select = d.select;
  opts.ignore = d.ignore;
  opts.threads = g.threads;
  opts.settings = located.config.rule_settings;
  const auto depth = rules::scan_depth_for(opts);
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located), depth, rules::parses_requirements(opts));
  if (!g.json) opts.hash_progress = progress_bar("hashing");
  const auto rules_start = std::chrono::steady_clock::now();
  const auto report = rules::run_doctor(env, knowledge, opts);
  if (g.timings) {
    print_timings(env);
    std::cerr << fmt::format(
        "{:>22}: {:7.1f} ms\n", "rules",
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - rules_start).count());
  }
  if (g.json)
    out << doctor_json(env, knowledge, report) << '\n';
  else if (!g.quiet || report.errors > 0)
    out << doctor_text(env, report, style_for(g));
  return report.errors > 0 ? 1 : 0;
}

int run_plan_remove(const GlobalOptions& g, const std::vector<std::string>& names, std::ostream& out) {
  const auto& [env, knowledge, settings] = scan_kept(g);
  std::vector<int> dists;
  std::vector<std::string> unknown;
  for (const auto& n : names) {
    // A name as pip takes it, or a dist-info folder name as JSON gives it.
    const std::string wanted = n.ends_with(".dist-info") ? n : r::normalize_name(n);
    std::optional<int> found;
    for (std::size_t i = 0; i < env.dists.size() && !found; ++i)
      if (env.dists[i].dir_name == wanted) found = static_cast<int>(i);
    if (!found) found = env.dist_index(wanted);
    if (found)
      dists.push_back(*found);
    else
      unknown.push_back(n);
  }
  if (!unknown.empty())
    throw r::Error(fmt::format("not installed in {}: {}", env.layout.root, fmt::join(unknown, ", ")));
  const auto plan = r::plan_removal(env, knowledge, dists, g.threads);
  if (g.json)
    out << plan_remove_json(env, knowledge, plan) << '\n';
  else if (!g.quiet || !plan.safe())
    out << plan_remove_text(env, plan, style_for(g));
  return plan.safe() ? 0 : 1;
}

int run_plan_fix(const GlobalOptions& g, const PlanFixCliOptions& p, std::ostream& out) {
  const auto& [env, knowledge, settings] = scan_kept(g);
  r::FixOptions opts;
  opts.cuda_major = p.cuda_major;
  opts.threads = g.threads;
  const r::HostInfo host = env.loader ? env.loader->config().host : r::detect_host();
  opts.supported_tags =
      r::supported_tags(env.layout.python_version.value_or("3"), host.glibc_version, r::machine_name(host.machine));
  std::vector<std::string> folders = g.find_links;
  // split() returns views: the string they point into must outlive the loop.
  const std::string pip_find_links = env_var("PIP_FIND_LINKS").value_or("");
  if (folders.empty())
    for (auto f : r::split(pip_find_links, ' '))
      if (!f.empty()) folders.emplace_back(f);
  auto found = installer::find_wheels(folders, opts.supported_tags);
  for (const auto& diag : found.diagnostics) std::cerr << fmt::format("cudafix: warning: {}\n", diag.to_string());
  opts.wheels = std::move(found.wheels);
  const auto t0 = std::chrono::steady_clock::now();
  const r::FixPlan plan = r::plan_fix(env, knowledge, opts);
  const auto t1 = std::chrono::steady_clock::now();
  const r::Fingerprint fp = r::fingerprint_of(env, plan);
  if (g.timings) {
    print_timings(env);
    std::cerr << fmt::format("{:>22}: {:7.1f} ms\n{:>22}: {:7.1f} ms\n", "plan",
                             std::chrono::duration<double, std::milli>(t1 - t0).count(), "fingerprint",
                             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count());
  }
  // The tags a needed wheel may carry here: the most specific ones of each kind.
  std::vector<std::string> tags;
  for (const auto& t : opts.supported_tags)
    if (tags.size() < 3 || t.ends_with("-any")) tags.push_back(t);
  const std::string doc = plan_fix_json(env, knowledge, plan, fp, tags);
  if (p.output) {
    r::AtomicFile f(*p.output);
    f.write(doc + "\n");
    f.commit();
  }
  if (g.json)
    out << doc << '\n';
  else if (!g.quiet || !plan.ok())
    out << plan_fix_text(env, plan, style_for(g));
  return plan.ok() ? 0 : 1;
}

int run_rules(const GlobalOptions& g, std::ostream& out) {
  // The environment's own cudafix.toml counts where there is an environment; `rules` also answers
  // where there is none (a provisioning image before its venv exists).
  std::optional<std::string> root;
  try {
    root = r::locate_environment(locate_request(g)).root;
  } catch (const r::Error&) {
    if (g.venv) throw;
  }
  const Configuration config = load_configuration(g, root);
  if (g.json)
    out << rules_json(root, config.rule_settings) << '\n';
  else
    out << rules_text(config.rule_settings, style_for(g));
  return 0;
}

int run_explain(const GlobalOptions& g, const std::string& id, std::ostream& out) {
  const rules::Rule* rule = rules::find_rule(id);
  if (!rule) {
    const auto closest = rules::closest_rule_ids(id);
    throw r::Error(closest.empty() ? fmt::format("unknown rule '{}'; `cudafix rules` lists them", id)
                                   : fmt::format("unknown rule '{}'; did you mean {}? (`cudafix rules` lists them)", id,
                                                 fmt::join(closest, ", ")));
  }
  if (g.json)
    out << explain_json(*rule) << '\n';
  else
    out << rule->doc;
  return 0;
}

int run_demo(const GlobalOptions& g, const std::optional<std::string>& dir_opt, std::ostream& out) {
  std::string dir;
  if (dir_opt) {
    dir = *dir_opt;
  } else {
    std::string tmpl = env_var("TMPDIR").value_or("/tmp") + "/cudafix-demo-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw r::Error(fmt::format("cannot create a folder for the demo under {}", tmpl));
    dir = tmpl;
  }
  const auto desc = nlohmann::json::parse(k_demo_env);
  const auto stats = r::materialize_environment(desc, dir);
  const Style st = style_for(g);
  auto say = [&](const std::string& s) {
    if (!g.json && !g.quiet) out << s;
  };
  say(fmt::format("{}\n", st.bold("cudafix demo")));
  say(
      fmt::format("Built an example CUDA 13 torch environment in {}:\n"
                  "{} dists, {} files, {} ELF shared objects carrying the SONAME, NEEDED and RPATH of the real\n"
                  "wheels (torch 2.11.0+cu130). It is broken the way users break theirs:\n"
                  "- nvidia-cudnn-cu12 shared nvidia/cudnn/lib/libcudnn*.so.9 with nvidia-cudnn-cu13 and was\n"
                  "  uninstalled; pip deleted the shared files, so nvidia-cudnn-cu13 still shows as installed\n"
                  "  with its libraries gone, and torch's libcudnn.so.9 resolves outside the venv or nowhere;\n"
                  "- nvidia-nccl-cu12 sits beside nvidia-nccl-cu13, both owning nvidia/nccl/lib/libnccl.so.2.\n\n",
                  dir, stats.dists, stats.files, stats.elf_objects));
  GlobalOptions sub = g;
  sub.venv = dir;
  sub.ld_library_path = "";
  std::ostringstream buf;
  say(fmt::format("$ cudafix scan --venv {}\n", dir));
  run_scan(sub, buf);
  say(buf.str());
  for (const char* q : {"libcudnn.so.9", "libcublas.so.13", "torch/lib/libtorch_cuda.so"}) {
    buf.str("");
    say(fmt::format("\n$ cudafix why {} --venv {}\n", q, dir));
    const int rc = run_why(sub, q, buf);
    say(buf.str());
    say(st.dim(fmt::format("(exit {})\n", rc)));
  }
  // The doctor on the same environment (its cut-down copy of the corpus leaves many of torch's
  // pure-Python requirements out, so that rule is left out here), then the live probe.
  buf.str("");
  say(fmt::format("\n$ cudafix doctor --venv {} --ignore unsatisfied-requirement\n", dir));
  DoctorCliOptions doctor_opts;
  doctor_opts.ignore = {"unsatisfied-requirement"};
  int rc = run_doctor(sub, doctor_opts, buf);
  say(buf.str());
  say(st.dim(fmt::format("(exit {})\n", rc)));
  // The dry run of the uninstall users would try next, then the repair plan.
  buf.str("");
  say(fmt::format("\n$ cudafix plan remove nvidia-nccl-cu12 --venv {}\n", dir));
  rc = run_plan_remove(sub, {"nvidia-nccl-cu12"}, buf);
  say(buf.str());
  say(st.dim(fmt::format("(exit {})\n", rc)));
  buf.str("");
  say(fmt::format("\n$ cudafix plan fix --venv {}\n", dir));
  PlanFixCliOptions demo_fix;
  demo_fix.pip_find_links_env = false;  // the demo plans with no wheels, wherever it runs
  rc = run_plan_fix(sub, demo_fix, buf);
  say(buf.str());
  say(st.dim(fmt::format("(exit {})\n", rc)));
  buf.str("");
  say(fmt::format("\n$ cudafix verify --venv {} --timeout 20\n", dir));
  VerifyCliOptions verify_opts;
  verify_opts.timeout_s = 20;
  try {
    rc = run_verify(sub, verify_opts, buf);
    say(buf.str());
    say(st.dim(fmt::format("(exit {})\n", rc)));
  } catch (const r::Error& e) {
    say(fmt::format("verify could not run here: {}\n", e.what()));
  }
  if (g.json) {
    JsonWriter w;
    w.begin_object().key("schema").value(1).key("command").value("demo").key("venv").value(dir);
    w.key("dists")
        .value(static_cast<std::uint64_t>(stats.dists))
        .key("files")
        .value(static_cast<std::uint64_t>(stats.files));
    w.key("elf_objects").value(static_cast<std::uint64_t>(stats.elf_objects)).end_object();
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

namespace {

namespace tx = installer::txn;

std::string when(std::int64_t t) {
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  ::localtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string state_name(const tx::JournalRead& t) {
  if (t.rolled_back_by) return "rolled back by " + *t.rolled_back_by;
  switch (t.state) {
    case tx::TxState::committed:
      return "committed";
    case tx::TxState::aborted:
      return "undone: " + t.aborted_why;
    default:
      return "in progress";
  }
}

// Writing needs a yes: -y, or one typed at a terminal.
void confirm(const GlobalOptions& g, const std::string& what) {
  if (g.yes) return;
  if (!::isatty(0))
    throw r::Error(fmt::format("{}: this changes the environment; give -y (there is no terminal to ask on)", what));
  std::cerr << what << "? [y/N] " << std::flush;
  std::string answer;
  std::getline(std::cin, answer);
  if (answer != "y" && answer != "Y" && answer != "yes") throw r::Error("not confirmed; nothing was changed");
}

const r::EnvLayout& writable(const r::Environment& env) {
  if (env.layout.kind == r::EnvKind::site_dir)
    throw r::Error(
        fmt::format("{} is a bare site folder; cudafix changes only a venv or an interpreter prefix "
                    "(give its root with --venv)",
                    env.layout.root));
  return env.layout;
}

std::vector<int> dists_named(const r::Environment& env, const std::vector<std::string>& names) {
  std::vector<int> out;
  std::vector<std::string> unknown;
  for (const auto& n : names) {
    std::optional<int> found;
    for (std::size_t i = 0; i < env.dists.size() && !found; ++i)
      if (env.dists[i].dir_name == n) found = static_cast<int>(i);
    if (!found) found = env.dist_index(r::normalize_name(n));
    if (found)
      out.push_back(*found);
    else
      unknown.push_back(n);
  }
  if (!unknown.empty())
    throw r::Error(fmt::format("not installed in {}: {}", env.layout.root, fmt::join(unknown, ", ")));
  return out;
}

int report_done(const GlobalOptions& g, std::ostream& out, const std::string& command, const tx::Transaction& t,
                const std::string& text, nlohmann::json extra = nlohmann::json::object()) {
  if (g.json) {
    extra["schema"] = 1;
    extra["command"] = command;
    extra["transaction"] = t.id();
    extra["ops"] = t.ops().size();
    out << extra.dump() << '\n';
  } else if (!g.quiet) {
    out << text << fmt::format(" (transaction {}; `cudafix rollback {}` undoes it)\n", t.id(), t.id());
  }
  return 0;
}

}  // namespace

int run_remove(const GlobalOptions& g, const RemoveCliOptions& o, std::ostream& out) {
  Located located = locate(g);
  tx::EnvLock lock(located.layout.root_real, lock_wait(g), say_waiting);
  // Scanned under the lock: pip takes none, so what was planned before it is not trusted.
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located));
  const auto& layout = writable(env);
  const auto dists = dists_named(env, o.dists);
  const auto plan = r::plan_removal(env, knowledge, dists, g.threads);
  if (!plan.safe_with_cudafix() && !o.force) {
    if (g.json)
      out << plan_remove_json(env, knowledge, plan) << '\n';
    else
      out << plan_remove_text(env, plan, style_for(g))
          << "refused: the owner-counted removal would break what is listed above; nothing was changed "
             "(--force removes anyway)\n";
    return 1;
  }
  std::vector<std::string> labels;
  for (int d : dists) labels.push_back(r::dist_label(env.dists[static_cast<std::size_t>(d)]));
  const auto& del = plan.cudafix.deletion;
  confirm(g, fmt::format("remove {} ({} files, keeping {} another dist lists)", fmt::join(labels, ", "),
                         del.files.size(), del.kept.size()));
  tx::Transaction t(layout.root_real, "remove " + fmt::format("{}", fmt::join(o.dists, " ")));
  tx::plan_removal_ops(env, del, t);
  t.carry_out();
  nlohmann::json j;
  j["removed"] = labels;
  j["deleted"] = del.files.size();
  j["kept"] = del.kept.size();
  return report_done(g, out, "remove", t,
                     fmt::format("removed {}: {} files moved aside, {} kept that another dist lists",
                                 fmt::join(labels, ", "), del.files.size(), del.kept.size()),
                     j);
}

int run_history(const GlobalOptions& g, std::ostream& out) {
  const Located located = locate(g);
  const auto all = tx::transactions(located.layout.root_real);
  nlohmann::json list = nlohmann::json::array();
  std::uint64_t total = 0;
  std::string text;
  for (const auto& t : all) {
    const auto held = tx::bytes_held(tx::tx_root(located.layout.root_real) + "/" + t.id);
    total += held;
    list.push_back({{"id", t.id},
                    {"time", t.time},
                    {"command", t.command},
                    {"steps", t.ops.size()},
                    {"result", state_name(t)},
                    {"bytes_held", held}});
    text += fmt::format("{}  {}  {:<40} {:>6} steps  {}  ({:.1f} MB kept)\n", t.id, when(t.time), t.command,
                        t.ops.size(), state_name(t), static_cast<double>(held) / 1e6);
  }
  if (g.json) {
    out << nlohmann::json{{"schema", 1},
                          {"command", "history"},
                          {"venv", located.layout.root},
                          {"transactions", list},
                          {"bytes_held", total}}
               .dump()
        << '\n';
  } else {
    out << (all.empty() ? "no transactions\n" : text);
    if (!all.empty()) out << fmt::format("backups hold {:.1f} MB\n", static_cast<double>(total) / 1e6);
  }
  return 0;
}

int run_rollback(const GlobalOptions& g, const RollbackCliOptions& o, std::ostream& out) {
  Located located = locate(g);
  const std::string root = located.layout.root_real;
  tx::EnvLock lock(root, lock_wait(g), say_waiting);
  if (o.snapshot) {
    const auto& [env, knowledge, settings] = scan_kept(g, std::move(located), r::ScanDepth::files);
    writable(env);
    tx::Transaction t(root, "rollback --snapshot " + *o.snapshot);
    const auto check = tx::plan_restore(env, *o.snapshot, t);
    if (!check.altered.empty()) {
      t.abandon();
      const std::string why = fmt::format(
          "refused: snapshot '{}' was altered since it was taken (a tool wrote these files in place, or they were "
          "deleted from it): {}; nothing was changed",
          *o.snapshot, fmt::join(check.altered, ", "));
      if (g.json)
        out << nlohmann::json{{"schema", 1}, {"command", "rollback"}, {"refused", why}, {"altered", check.altered}}
                   .dump()
            << '\n';
      else
        out << why << '\n';
      return 1;
    }
    confirm(g, fmt::format("restore snapshot '{}' ({} files back, {} moved aside)", *o.snapshot, check.restore,
                           check.remove));
    t.carry_out();
    return report_done(g, out, "rollback", t,
                       fmt::format("restored snapshot '{}': {} files put back, {} moved aside, {} unchanged",
                                   *o.snapshot, check.restore, check.remove, check.unchanged),
                       {{"snapshot", *o.snapshot},
                        {"restored", check.restore},
                        {"removed", check.remove},
                        {"unchanged", check.unchanged}});
  }
  const auto all = tx::transactions(root);
  const tx::JournalRead* target = nullptr;
  for (const auto& t : all) {
    // By default the newest change not yet undone, so that rollback after rollback walks back
    // through history; undoing a rollback (a redo) takes its id.
    const bool undo_of_one = t.command.starts_with("rollback ") && !t.command.starts_with("rollback --snapshot");
    if (o.id ? t.id == *o.id : (t.state == tx::TxState::committed && !t.rolled_back_by && !undo_of_one)) {
      target = &t;
      break;
    }
  }
  if (!target)
    throw r::Error(o.id ? fmt::format("no transaction {} in {}", *o.id, tx::tx_root(root))
                        : fmt::format("nothing to roll back in {}", root));
  if (target->state != tx::TxState::committed || target->rolled_back_by)
    throw r::Error(fmt::format("transaction {} is {}: only a committed one not rolled back can be", target->id,
                               state_name(*target)));
  confirm(g, fmt::format("roll back {} ({})", target->id, target->command));
  tx::Transaction t(root, "rollback " + target->id);
  tx::plan_rollback(*target, t);
  t.carry_out();
  tx::mark_rolled_back(root, target->id, t.id());
  return report_done(g, out, "rollback", t, fmt::format("rolled back {} ({})", target->id, target->command),
                     {{"rolled_back", target->id}});
}

int run_snapshot(const GlobalOptions& g, const SnapshotCliOptions& o, std::ostream& out) {
  Located located = locate(g);
  const std::string root = located.layout.root_real;
  if (o.list) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& s : tx::list_snapshots(root)) {
      list.push_back(
          {{"name", s.name}, {"time", s.time}, {"files", s.files}, {"bytes", s.bytes}, {"copied", s.copied}});
      if (!g.json)
        out << fmt::format("{:<24} {}  {} files, {:.1f} MB\n", s.name, when(s.time), s.files,
                           static_cast<double>(s.bytes) / 1e6);
    }
    if (g.json) out << nlohmann::json{{"schema", 1}, {"command", "snapshot"}, {"snapshots", list}}.dump() << '\n';
    return 0;
  }
  tx::EnvLock lock(root, lock_wait(g), say_waiting);
  if (o.remove) {
    tx::delete_snapshot(root, *o.remove);
    if (!g.quiet && !g.json) out << fmt::format("deleted snapshot '{}'\n", *o.remove);
    if (g.json) out << nlohmann::json{{"schema", 1}, {"command", "snapshot"}, {"deleted", *o.remove}}.dump() << '\n';
    return 0;
  }
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located), r::ScanDepth::files);
  writable(env);
  std::string name = o.name.value_or("");
  if (name.empty()) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    ::gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
    name = buf;
  }
  const auto info = tx::take_snapshot(env, name);
  if (g.json) {
    out << nlohmann::json{{"schema", 1},
                          {"command", "snapshot"},
                          {"name", info.name},
                          {"files", info.files},
                          {"linked", info.linked},
                          {"copied", info.copied},
                          {"symlinks", info.symlinks},
                          {"bytes", info.bytes}}
               .dump()
        << '\n';
  } else if (!g.quiet) {
    out << fmt::format(
        "snapshot '{}': {} files ({:.1f} MB) hardlinked{}, {} symlinks recorded; `cudafix rollback "
        "--snapshot {}` restores them\n",
        info.name, info.linked, static_cast<double>(info.bytes) / 1e6,
        info.copied ? fmt::format(", {} copied (the file system refused a hard link)", info.copied) : "", info.symlinks,
        info.name);
  }
  return 0;
}

namespace {

// A path as the plan documents write it (docs/json.md: relative to the site folder, {root, path}
// where there are several, or absolute outside them), made absolute again.
std::string plan_path(const r::Environment& env, const nlohmann::json& p) {
  if (p.is_object()) {
    for (const auto& site : env.layout.sites)
      if (r::to_string(site.root) == p.value("root", "")) return r::join_normal(site.real, p.value("path", ""));
    throw r::Error(fmt::format("the plan names a site folder this environment lacks: {}", p.dump()));
  }
  const std::string s = p.get<std::string>();
  if (s.starts_with("/") || env.layout.sites.empty()) return s;
  const bool folder = s.ends_with("/");
  return r::join_normal(env.layout.sites.front().real, s) + (folder ? "/" : "");
}

// What differs between the plan's fingerprint and the environment now, one line each.
std::vector<std::string> fingerprint_changes(const r::Environment& env, const nlohmann::json& fp) {
  std::vector<std::string> out;
  std::map<std::string, std::string> now;
  for (const auto& d : env.dists)
    now[d.dir_name] = r::sha256_hex(d.record_storage ? std::string_view(d.record_storage->text) : "");
  std::set<std::string> seen;
  for (const auto& rec : fp["records"]) {
    const std::string dist = rec.value("dist", "");
    seen.insert(dist);
    const auto it = now.find(dist);
    if (it == now.end())
      out.push_back(dist + " is gone");
    else if (it->second != rec.value("sha256", ""))
      out.push_back(dist + "/RECORD changed");
  }
  for (const auto& [dist, sha] : now)
    if (!seen.count(dist)) out.push_back(dist + " was installed");
  for (const auto& f : fp["files"]) {
    const std::string path = plan_path(env, f["path"]);
    struct stat st {};
    const bool exists = ::lstat(path.c_str(), &st) == 0;
    if (exists != f.value("exists", false)) {
      out.push_back(fmt::format("{} {}", env.display(path), exists ? "appeared" : "is gone"));
      continue;
    }
    if (!exists) continue;
    const std::int64_t mtime = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (st.st_dev != f.value("dev", std::uint64_t{0}) || st.st_ino != f.value("ino", std::uint64_t{0}) ||
        static_cast<std::uint64_t>(st.st_size) != f.value("size", std::uint64_t{0}) ||
        mtime != f.value("mtime_ns", std::int64_t{0}))
      out.push_back(env.display(path) + " was modified");
  }
  return out;
}

// An installed dist's files that a reinstall or replacement does not write again and no other
// kept dist lists: the old version's leftovers, moved aside as its uninstall would.
void plan_leftovers(const r::Environment& env, int dist, const std::vector<std::string>& written,
                    const std::set<int>& gone, installer::txn::Transaction& t) {
  const auto& d = env.dists[static_cast<std::size_t>(dist)];
  const std::set<std::string> writes(written.begin(), written.end());
  std::set<std::string> listed_elsewhere;
  for (std::size_t i = 0; i < env.dists.size(); ++i) {
    if (static_cast<int>(i) == dist || gone.count(static_cast<int>(i))) continue;
    for (const auto& row : env.dists[i].record)
      listed_elsewhere.insert(r::join_normal(env.dists[i].site_dir, row.path));
  }
  for (const auto& row : d.record) {
    const std::string abs = r::join_normal(d.site_dir, row.path);
    if (writes.count(abs) || listed_elsewhere.count(abs) || !r::is_within(abs, env.layout.root_real)) continue;
    if (t.will_exist(abs)) t.move_aside(abs);
  }
}

// After each step of a transaction, the live check where a GPU driver is present: the
// environment scanned again and the probe run on it; no driver marks the run unverified (exit
// 4), a failure throws, which undoes the whole transaction.
std::function<void(std::size_t)> step_verifier(const GlobalOptions& g, const r::EnvLayout& layout,
                                               const r::Knowledge& knowledge, const std::vector<std::string>& steps,
                                               bool skip, bool& unverified) {
  return [&g, &layout, &knowledge, &steps, skip, &unverified](std::size_t step) {
    if (skip) return;
    r::ScanOptions opts;
    opts.threads = g.threads;
    const r::Environment now = r::scan_environment(layout, opts);
    installer::probe::VerifyOptions vo;
    vo.probe = probe_path();
    const auto report = installer::probe::verify_environment(now, knowledge, vo);
    const int rc = report.exit_code();
    if (rc == 3) {
      unverified = true;
      return;
    }
    if (rc != 0)
      throw r::Error(fmt::format("verification after step {} ({}) failed: {}", step + 1, steps[step],
                                 report.failed_check.value_or(report.verdict.message)));
    if (!g.quiet && !g.json) std::cerr << fmt::format("verified after step {} ({})\n", step + 1, steps[step]);
  };
}

}  // namespace

int run_apply(const GlobalOptions& g, const ApplyCliOptions& o, std::ostream& out) {
  const auto text = r::try_read_file(o.plan);
  if (!text) throw r::Error(fmt::format("{}: cannot read the plan", o.plan));
  const auto plan = nlohmann::json::parse(*text, nullptr, false);
  if (!plan.is_object() || plan.value("command", "") != "plan fix" || !plan.contains("steps"))
    throw r::Error(fmt::format("{} is not a plan document (write one with `cudafix plan fix -o PLAN.json`)", o.plan));
  if (!plan.value("ok", false))
    throw r::Error(fmt::format("{} is a plan that found no safe order: {}", o.plan, plan.value("problem", "")));
  Located located = locate(g);
  tx::EnvLock lock(located.layout.root_real, lock_wait(g), say_waiting);
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located));
  const auto& layout = writable(env);
  if (const auto changes = fingerprint_changes(env, plan["fingerprint"]); !changes.empty())
    throw r::Error(
        fmt::format("the environment changed since the plan was made: {}; make a new plan", fmt::join(changes, "; ")));
  std::vector<std::string> said;
  for (const auto& st : plan["steps"])
    said.push_back(st.value("action", "") + " " + st.value("name", "") + " " + st.value("version", ""));
  confirm(g, fmt::format("apply {} steps: {}", said.size(), fmt::join(said, ", ")));

  tx::Transaction t(layout.root_real, "apply " + o.plan);
  std::set<int> gone;
  std::size_t files = 0;
  for (const auto& st : plan["steps"]) {
    const std::string action = st.value("action", "");
    std::optional<int> dist;
    if (st["dist"].is_string())
      for (std::size_t i = 0; i < env.dists.size(); ++i)
        if (env.dists[i].dir_name == st["dist"].get<std::string>()) dist = static_cast<int>(i);
    if (action == "remove") {
      r::Deletion del;
      for (const auto& p : st["deletes"]) {
        const std::string abs = plan_path(env, p);
        if (abs.ends_with("/"))
          del.dirs.push_back(abs.substr(0, abs.size() - 1));
        else
          del.files.push_back(abs);
      }
      tx::plan_removal_ops(env, del, t);
      files += del.files.size();
      if (dist) gone.insert(*dist);
    } else {
      if (st["wheel"].is_null())
        throw r::Error(fmt::format("step {} {} has no wheel (plan again with --find-links naming it)", action,
                                   st.value("name", "")));
      const auto wheel = installer::validate_wheel(st["wheel"]["file"].get<std::string>());
      if (r::sha256_of_file(wheel.path, r::DigestForm::hex) != st["wheel"].value("sha256", ""))
        throw r::Error(fmt::format("{} changed since the plan was made (its SHA-256 differs)", wheel.path));
      const auto staged = installer::stage_wheel(
          wheel, layout, t, g.threads, false,
          g.json ? std::function<void(std::uint64_t, std::uint64_t)>{} : progress_bar("installing"));
      if (dist) plan_leftovers(env, *dist, staged.targets, gone, t);
      files += staged.targets.size();
    }
    t.mark_step();
  }
  bool unverified = false;
  const auto check = step_verifier(g, layout, knowledge, said, o.no_verify, unverified);
  t.carry_out(check);
  const std::string text_out = fmt::format("applied {} steps ({} files){}", said.size(), files,
                                           o.no_verify  ? ", not verified (--no-verify)"
                                           : unverified ? "; not verified: no GPU driver (libcuda.so.1) here"
                                                        : ", each verified on the GPU");
  report_done(g, out, "apply", t, text_out, {{"steps", said}, {"verified", !o.no_verify && !unverified}});
  return unverified ? 4 : 0;
}

int run_install(const GlobalOptions& g, const InstallCliOptions& o, std::ostream& out) {
  // Every wheel validated before the environment is even locked.
  std::vector<installer::ValidatedWheel> wheels;
  for (const auto& w : o.wheels) wheels.push_back(installer::validate_wheel(w));
  Located located = locate(g);
  tx::EnvLock lock(located.layout.root_real, lock_wait(g), say_waiting);
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located), r::ScanDepth::full);
  const auto& layout = writable(env);
  std::vector<std::string> labels;
  for (const auto& w : wheels) labels.push_back(w.name + " " + w.version);
  confirm(g, fmt::format("install {}", fmt::join(labels, ", ")));
  tx::Transaction t(layout.root_real, "install " + fmt::format("{}", fmt::join(o.wheels, " ")));
  std::size_t files = 0;
  for (const auto& w : wheels) {
    const auto staged = installer::stage_wheel(
        w, layout, t, g.threads, true,
        g.json ? std::function<void(std::uint64_t, std::uint64_t)>{} : progress_bar("installing"));
    // An installed dist of that name is replaced: what it lists and the wheel does not write goes.
    if (const auto installed = env.dist_index(r::normalize_name(w.name)))
      plan_leftovers(env, *installed, staged.targets, {}, t);
    files += staged.targets.size();
    t.mark_step();
  }
  bool unverified = false;
  t.carry_out(step_verifier(g, layout, knowledge, labels, o.no_verify, unverified));
  report_done(g, out, "install", t,
              fmt::format("installed {} ({} files){}", fmt::join(labels, ", "), files,
                          o.no_verify  ? ", not verified (--no-verify)"
                          : unverified ? "; not verified: no GPU driver (libcuda.so.1) here"
                                       : ", verified on the GPU"),
              {{"installed", labels}, {"files", files}, {"verified", !o.no_verify && !unverified}});
  return unverified ? 4 : 0;
}

}  // namespace cudafix::cli
