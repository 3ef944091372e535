#include "cli/lock_command.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <ctime>
#include <iostream>

#include "cli/json_writer.hpp"
#include "cli/printable.hpp"
#include "cli/session.hpp"
#include "installer/probe/lock_verdict.hpp"
#include "installer/probe/runner.hpp"
#include "installer/probe/verify.hpp"
#include "installer/source/wheel_origin.hpp"
#include "resolver/base/atomic_file.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/plan/lock_env.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;

CLI::App* add_lock_command(CLI::App& app, LockCliOptions& o) {
  auto* lock = app.add_subcommand("lock", "the environment as a PEP 751 lock (pylock.toml), its libraries hashed");
  lock->add_option("-o,--output", o.output, "write the lock here (atomically); default: standard output");
  lock->add_flag("--verified", o.verified,
                 "verify first (as `cudafix verify`) and record each device's verdict in the lock when it passes");
  lock->add_option("--timeout", o.timeout_s, "--verified: seconds before the probe is killed (default 60)");
  return lock;
}

namespace {

// Now, as a TOML date-time in UTC, to the second: when a verdict was recorded.
std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec);
}

installer::source::OriginSettings origin_settings(const GlobalOptions& g, const r::Environment& env) {
  const auto tags = environment_tags(g, env).tags;
  const auto sources = wheel_source_settings(g, env, tags);
  installer::source::OriginSettings s;
  s.find_links = find_links_folders(g);
  s.index_urls = sources.index_urls;
  s.offline = sources.offline;
  s.cache_dir = g.no_cache ? std::string() : sources.cache_dir;
  s.supported_tags = tags;
  s.http = sources.http;
  return s;
}

std::string lock_json(const r::Environment& env, const r::LockOfEnvironment& made,
                      const std::vector<std::optional<r::WheelOrigin>>& origins, const LockCliOptions& o,
                      const std::string& text, std::optional<int> verify_exit) {
  JsonWriter w;
  w.begin_object();
  w.key("schema").value(1).key("command").value("lock").key("venv").value(env.layout.root);
  if (o.output)
    w.key("output").value(*o.output);
  else
    w.key("output").null();
  w.key("packages").begin_array();
  for (std::size_t i = 0; i < env.dists.size(); ++i) {
    const r::DistInfo& d = env.dists[i];
    if (d.format != r::DistFormat::dist_info || d.root == r::SiteRoot::system) continue;
    w.begin_object().key("name").value(d.normalized).key("version").value(d.version).key("source");
    if (i < origins.size() && origins[i]) {
      const r::WheelOrigin& s = *origins[i];
      w.begin_object().key("wheel").value(s.file_name).key("sha256").value(s.sha256).key("found_by").value(s.how);
      w.key(s.url ? "url" : "path").value(s.url ? *s.url : *s.path).end_object();
    } else {
      w.null();
    }
    w.end_object();
  }
  w.end_array().key("left_out").begin_array();
  for (const auto& l : made.left_out) w.value(l);
  w.end_array().key("verified").begin_array();
  for (const auto& v : made.lock.verified) w.begin_object().key("device").value(v.device).end_object();
  w.end_array().key("verify_exit_code");
  if (verify_exit)
    w.value(*verify_exit);
  else
    w.null();
  if (!o.output) w.key("lock").value(text);
  w.end_object();
  return w.take();
}

// --verified: the probe as verify runs it; each device's verdict when it passes. Returns
// verify's exit code.
int verify_into(const GlobalOptions& g, const LockCliOptions& o, const Scanned& scanned, r::Lock& lock) {
  if (!(o.timeout_s > 0)) throw r::Error(fmt::format("--timeout must be positive, not {}", o.timeout_s));
  installer::probe::VerifyOptions opts;
  opts.probe = installer::probe::installed_probe();
  opts.timeout = std::chrono::milliseconds(static_cast<long long>(o.timeout_s * 1000));
  const auto report = installer::probe::verify_environment(scanned.env, scanned.knowledge, opts);
  lock.verified = installer::probe::lock_verdicts(scanned.env, report, utc_now());
  if (report.exit_code() != 0 && !g.quiet)
    std::cerr << fmt::format("cudafix: lock: verify did not pass ({}); the lock records no verdict\n",
                             printable(report.verdict.message, k_line_limit));
  return report.exit_code();
}

}  // namespace

int run_lock(const GlobalOptions& options, const LockCliOptions& o, const std::string& version, std::ostream& out) {
  if (options.ld_so_cache && o.verified)
    throw r::Error("--ld-so-cache cannot be used with lock --verified: the probe runs the real loader");
  Located located = locate(options);
  const GlobalOptions g = with_configured_sources(options, located.config);
  const Scanned& scanned = scan_kept(g, std::move(located));
  const r::Environment& env = scanned.env;
  const auto origins = installer::source::find_origins(env, origin_settings(g, env));
  r::LockRequest request{"cudafix " + version, origins.by_dist, g.threads};
  r::LockOfEnvironment made = r::lock_of(env, request);
  std::optional<int> verify_exit;
  if (o.verified) verify_exit = verify_into(g, o, scanned, made.lock);
  const std::string text = r::write_lock(made.lock);
  if (o.output) {
    r::AtomicFile f(*o.output, r::FileMode::like_any_file);
    f.write(text);
    f.commit();
  }
  if (!g.quiet) {
    for (const auto& p : origins.problems) std::cerr << "cudafix: warning: " << printable(p, k_line_limit) << '\n';
    for (std::size_t i = 0; i < env.dists.size(); ++i)
      if (!origins.by_dist[i] && env.dists[i].format == r::DistFormat::dist_info &&
          env.dists[i].root != r::SiteRoot::system)
        std::cerr << fmt::format("cudafix: lock: no wheel known for {}: written without a source\n",
                                 printable(r::dist_label(env.dists[i]), k_line_limit));
    for (const auto& l : made.left_out) std::cerr << "cudafix: lock: left out " << printable(l, k_line_limit) << '\n';
  }
  if (g.json)
    out << lock_json(env, made, origins.by_dist, o, text, verify_exit) << '\n';
  else if (!o.output)
    out << text;
  return verify_exit.value_or(0);
}

}  // namespace cudafix::cli
