#include "cli/commands.hpp"
#include "cli/session.hpp"

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
#include "installer/probe/runner.hpp"
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
#include "resolver/pep/pylock.hpp"
#include "resolver/plan/fix.hpp"
#include "resolver/plan/provenance.hpp"
#include "rules/doctor.hpp"
#include "rules/knowledge.hpp"
#include "rules/rule.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;

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
  const r::WhyReport report = r::explain(env, knowledge, query);
  if (g.json)
    out << why_json(env, knowledge, report) << '\n';
  else if (!g.quiet)
    out << why_text(env, knowledge, report, style_for(g));
  return report.resolves ? 0 : 1;
}

int run_verify(const GlobalOptions& g, const VerifyCliOptions& v, std::ostream& out) {
  if (g.ld_so_cache)
    throw r::Error(
        "--ld-so-cache cannot be used with verify: the probe runs the real loader, which reads the host's cache");
  if (!(v.timeout_s > 0)) throw r::Error(fmt::format("--timeout must be positive, not {}", v.timeout_s));
  const auto& [env, knowledge, settings] = scan_kept(g);
  installer::probe::VerifyOptions opts;
  opts.probe = installer::probe::installed_probe();
  opts.timeout = std::chrono::milliseconds(static_cast<long long>(v.timeout_s * 1000));
  opts.consumer = v.consumer;
  opts.nccl = v.nccl;
  const auto report = installer::probe::verify_environment(env, knowledge, opts);
  if (g.json)
    out << verify_json(env, knowledge, report) << '\n';
  else if (!g.quiet || report.exit_code() != 0)
    out << verify_text(env, report, style_for(g));
  return report.exit_code();
}

// A progress bar on standard error (hashing, installing), only when both streams are a terminal.
std::function<void(std::uint64_t, std::uint64_t)> progress_bar(const GlobalOptions& g, const char* what,
                                                               const char* unit) {
  if (g.json || g.quiet || !::isatty(1) || !::isatty(2)) return {};
  auto last = std::make_shared<std::atomic<int>>(-1);
  return [last, what, unit](std::uint64_t done, std::uint64_t total) {
    if (total == 0) return;  // nothing to count ("0.0 of 0.0 MB" says nothing): no bar
    const int pct = total ? static_cast<int>(std::min<std::uint64_t>(100, done * 100 / total)) : 100;
    int prev = last->load();
    if (pct <= prev || !last->compare_exchange_strong(prev, pct)) return;
    const int filled = pct * 30 / 100;
    std::string amount;
    if (unit) {
      amount = fmt::format("{} of {} {}", done, total, unit);
    } else if (total < 1000) {
      amount = fmt::format("{} of {} bytes", done, total);
    } else {
      // In the unit of the total, so that a small wheel does not read "0.0 of 0.0 MB".
      const bool gb = total >= 1000000000, mb = total >= 1000000;
      const double scale = gb ? 1e9 : mb ? 1e6 : 1e3;
      amount = fmt::format("{:.1f} of {:.1f} {}", static_cast<double>(done) / scale, static_cast<double>(total) / scale,
                           gb   ? "GB"
                           : mb ? "MB"
                                : "kB");
    }
    std::cerr << fmt::format("\r{} [{}{}] {:3}%  {}", what, std::string(filled, '#'), std::string(30 - filled, ' '),
                             pct, amount)
              << (pct == 100 ? "\n" : "") << std::flush;
  };
}

int run_doctor(const GlobalOptions& g, const DoctorCliOptions& d, std::ostream& out) {
  // The rules files decide which rules run, and so how much to scan: read them first.
  rules::DoctorOptions opts;
  Located located = locate(g, Access::read, &opts.refused_recovery);
  opts.verify_hashes = d.verify_hashes;
  if (d.lock) {
    std::vector<std::string> warnings;
    opts.lock = std::make_shared<const r::Lock>(r::read_lock(*d.lock, &warnings));
    opts.lock_file = *d.lock;
    for (const auto& w : warnings)
      if (!g.quiet) std::cerr << "cudafix: warning: " << printable(w, k_line_limit) << '\n';
  }
  opts.select = d.select;
  opts.ignore = d.ignore;
  opts.threads = g.threads;
  opts.settings = located.config.rule_settings;
  const auto depth = rules::scan_depth_for(opts);
  const std::vector<std::string> recovered = located.recovered;
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located), depth, rules::parses_requirements(opts));
  opts.hash_progress = progress_bar(g, "hashing");
  const auto rules_start = std::chrono::steady_clock::now();
  const auto report = rules::run_doctor(env, knowledge, opts);
  if (g.timings) {
    print_timings(env);
    std::cerr << fmt::format(
        "{:>22}: {:7.1f} ms\n", "rules",
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - rules_start).count());
  }
  if (g.json)
    out << doctor_json(env, knowledge, report, recovered) << '\n';
  else if (!g.quiet || report.errors > 0)
    out << doctor_text(env, report, style_for(g));
  return report.errors > 0 ? 1 : 0;
}

namespace {

// The dist `word` names: its dist-info folder's name, its name as pip takes it (PEP 503
// normalised), or a requirement specifier ("pkg==2.27.3", "pkg[extra]>=2; python_version<'3'"),
// of which only the name counts, as pip uninstall ignores the version, extras and marker.
std::optional<int> dist_named(const r::Environment& env, const std::string& word) {
  for (std::size_t i = 0; i < env.dists.size(); ++i)
    if (env.dists[i].dir_name == word) return static_cast<int>(i);
  if (const auto found = env.dist_index(r::normalize_name(word))) return found;
  try {
    return env.dist_index(r::Requirement::parse(word).normalized);
  } catch (const std::invalid_argument&) {
    return std::nullopt;  // not a specifier either
  }
}

// "torhc (did you mean torch?)": the installed names closest to what was typed.
std::string with_closest_dists(const r::Environment& env, const std::string& word) {
  std::vector<std::string> names;
  for (const auto& d : env.dists) names.push_back(r::normalize_name(d.name));
  std::string typed = word;
  try {
    typed = r::Requirement::parse(word).normalized;
  } catch (const std::invalid_argument&) {
    typed = r::normalize_name(word);
  }
  const auto closest = r::closest_names(typed, names);
  return closest.empty() ? word : fmt::format("{} (did you mean {}?)", word, fmt::join(closest, ", "));
}

}  // namespace

std::vector<int> dists_named(const r::Environment& env, const std::vector<std::string>& names) {
  std::vector<int> out;
  std::vector<std::string> unknown;
  for (const auto& n : names) {
    if (const auto found = dist_named(env, n)) {
      if (std::find(out.begin(), out.end(), *found) == out.end()) out.push_back(*found);  // named twice: once, as pip
    } else {
      unknown.push_back(with_closest_dists(env, n));
    }
  }
  if (!unknown.empty())
    throw r::Error(fmt::format("not installed in {}: {}", env.layout.root, fmt::join(unknown, ", ")));
  return out;
}

int run_plan_remove(const GlobalOptions& g, const std::vector<std::string>& names, std::ostream& out) {
  const auto& [env, knowledge, settings] = scan_kept(g);
  const auto dists = dists_named(env, names);
  const auto plan = r::plan_removal(env, knowledge, dists, g.threads);
  if (g.json)
    out << plan_remove_json(env, knowledge, plan) << '\n';
  else if (!g.quiet || !plan.safe())
    out << plan_remove_text(env, plan, style_for(g));
  return plan.safe() ? 0 : 1;
}

r::InterpreterTags environment_tags(const GlobalOptions& g, const r::Environment& env) {
  const r::HostInfo host = env.loader ? env.loader->config().host : r::detect_host();
  return r::overridden_tags(r::interpreter_tags(env.layout, {host.glibc_version, host.machine, host.elf_class}),
                            g.python_platform, g.python_version);
}

std::string requires_python_version(const GlobalOptions& g, const r::Environment& env) {
  if (g.python_version) return *g.python_version;
  return env.layout.python_full_version.value_or(env.layout.python_version.value_or(""));
}

installer::source::SourceSettings wheel_source_settings(const GlobalOptions& g, const r::Environment& env,
                                                        const std::vector<std::string>& supported_tags) {
  installer::source::SourceSettings s;
  installer::source::read_environment(s);
  const auto listed = [](const std::vector<std::string>& urls) {
    return urls.empty() ? std::nullopt : std::optional<std::vector<std::string>>(urls);
  };
  // The configuration files rank below the environment, as pip's do.
  s.index_urls = installer::source::index_urls({g.index_url, listed(g.extra_index_urls)},
                                               installer::source::indexes_from_environment(),
                                               {g.config_index_url, listed(g.config_extra_index_urls)});
  if (g.no_index) s.index_urls.clear();
  s.offline = g.offline;
  s.cache_dir = cache_dir();
  s.http = installer::source::HttpOptions::from_environment();
  s.http.timeout = std::chrono::milliseconds(static_cast<long>(g.http_timeout_s * 1000));
  s.http.retries = g.retries;
  s.python_version = requires_python_version(g, env);
  s.supported_tags = supported_tags;
  s.progress = progress_bar(g, "downloading");
  return s;
}

// The folders of wheels a plan reads: --find-links, else (where `pip_find_links_env`) those
// $PIP_FIND_LINKS names, else the configuration's.
std::vector<std::string> find_links_folders(const GlobalOptions& g, bool pip_find_links_env) {
  std::vector<std::string> folders = g.find_links;
  // split() returns views: the string they point into must outlive the loop.
  const std::string pip_find_links = env_var("PIP_FIND_LINKS").value_or("");
  if (folders.empty() && pip_find_links_env)
    for (auto f : r::split(pip_find_links, ' ')) {
      if (f.empty()) continue;
      // As pip does: a location that is no folder is said and passed over, not the end of the run.
      std::error_code ec;
      if (std::filesystem::is_directory(std::string(f), ec)) {
        folders.emplace_back(f);
      } else if (!g.quiet) {
        std::cerr << fmt::format("cudafix: warning: $PIP_FIND_LINKS names {}, which is not a folder; ignored\n",
                                 printable(std::string(f), k_line_limit));
      }
    }
  if (folders.empty() && pip_find_links_env) folders = g.config_find_links;
  return folders;
}

PlannedFix make_fix_plan(const GlobalOptions& g, const r::Environment& env, const r::Knowledge& knowledge,
                         std::optional<int> cuda_major, bool pip_find_links_env) {
  installer::apply::FixPlanRequest request;
  request.cuda_major = cuda_major;
  request.threads = g.threads;
  request.supported_tags = environment_tags(g, env).tags;
  request.python_version = requires_python_version(g, env);
  request.find_links = find_links_folders(g, pip_find_links_env);
  request.source_settings = [&] { return wheel_source_settings(g, env, request.supported_tags); };
  PlannedFix out = installer::apply::make_fix_plan(env, knowledge, request);
  for (const auto& problem : out.source_problems)
    if (!g.quiet) std::cerr << fmt::format("cudafix: warning: {}\n", printable(problem, k_line_limit));
  if (g.timings) {
    const auto& c = out.cost;
    print_timings(env);
    std::cerr << fmt::format(
        "{:>22}: {:7.1f} ms ({} wheels read for {} dists the plan wants: {} bytes of their "
        "members read, {} inflated, {} hashed; {} objects placed by a map of their stream decoded on every "
        "core, {} inflated from their start)\n",
        "find-links wheels", c.find_links_ms, c.wheels_read, c.dists_wanted, c.read.read, c.read.inflated,
        c.read.hashed, c.read.objects_by_map, c.read.objects_from_start);
    std::cerr << fmt::format("{:>22}: {:7.1f} ms\n{:>22}: {:7.1f} ms\n", "plan", c.plan_ms, "fingerprint",
                             c.fingerprint_ms);
  }
  return out;
}

int run_plan_fix(const GlobalOptions& options, const PlanFixCliOptions& p, std::ostream& out) {
  Located located = locate(options);
  const GlobalOptions g = with_configured_sources(options, located.config);
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located));
  const PlannedFix planned = make_fix_plan(g, env, knowledge, p.cuda_major, p.pip_find_links_env);
  // The plan document, as `apply` reads it back (-o) and --json shows it.
  const std::string document = p.output || g.json ? plan_fix_json(env, knowledge, planned.plan, planned.fingerprint,
                                                                  planned.tags, planned.source_problems)
                                                  : std::string();
  if (p.output) {
    r::AtomicFile f(*p.output, r::FileMode::like_any_file);
    f.write(document + "\n");
    f.commit();
  }
  if (g.json)
    out << document << '\n';
  else if (!g.quiet || !planned.plan.ok())
    out << plan_fix_text(env, planned.plan, style_for(g));
  if (!planned.plan.ok()) return 1;
  // A plan whose wheels the sources asked could not give cannot be applied: said, and not 0.
  if (!planned.plan.needs.empty() && !planned.source_problems.empty()) {
    std::vector<std::string> names;
    for (const auto& n : planned.plan.needs) names.push_back(n.name + " " + n.version);
    std::cerr << fmt::format(
        "cudafix: error: no wheel for {} from the sources asked (each one's reason above); "
        "this plan cannot be applied\n",
        printable(fmt::format("{}", fmt::join(names, ", ")), k_line_limit));
    return 2;
  }
  return 0;
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
  else if (!g.quiet)
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
  else if (!g.quiet)
    out << rule->doc;
  return 0;
}

int run_complete(const GlobalOptions& g, const std::string& kind, std::ostream& out) {
  if (kind == "rules") {
    for (const auto* rule : rules::registry()) out << rule->id << '\n';
    return 0;
  }
  const auto& [env, knowledge, settings] = scan_kept(g, locate(g), r::ScanDepth::dists);
  std::set<std::string> names;
  for (const auto& d : env.dists) {
    const std::string name = r::normalize_name(d.name);
    const bool word = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
    });
    if (word) names.insert(name);  // a shell word whatever the METADATA says
  }
  for (const auto& n : names) out << n << '\n';
  return 0;
}

}  // namespace cudafix::cli
