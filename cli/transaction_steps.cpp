// What the commands that change an environment share (cli/transaction_steps.hpp): the
// confirmation, the retention of backups, the progress bar, the one-file-system check, the
// commit's report, installer/apply's options from the command line's, and the verification's
// rendering.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/json_output.hpp"
#include "cli/json_writer.hpp"
#include "cli/printable.hpp"
#include "cli/session.hpp"
#include "cli/text_output.hpp"
#include "cli/transaction_steps.hpp"
#include "installer/probe/verify.hpp"
#include "installer/txn/transaction.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;
namespace tx = installer::txn;

bool confirmed(const GlobalOptions& g, const std::string& what) {
  if (g.yes) return true;
  if (!::isatty(0))
    throw r::Error(fmt::format("{}: this changes the environment; give -y (there is no terminal to ask on)", what));
  std::cerr << what << "? [y/N] " << std::flush;
  std::string answer;
  std::getline(std::cin, answer);
  return answer == "y" || answer == "Y" || answer == "yes";
}

int declined(const GlobalOptions& g, std::ostream& out, const std::string& command, const std::string& venv) {
  std::cerr << "not confirmed: nothing was changed\n";
  if (g.json) {
    JsonWriter w;
    w.begin_object().key("schema").value(1).key("command").value(command).key("venv").value(venv);
    w.key("confirmed").value(false).key("changed").value(false).end_object();
    out << w.str() << '\n';
  }
  return 1;
}

Retention retention(const Located& located) { return {located.layout.root_real, located.config.keep_transactions}; }

void show_progress(const GlobalOptions& g, tx::Transaction& t, const char* what) {
  t.on_progress(progress_bar(g, what, "changes"));
}

namespace {

// The mount a path is on: its device and, where name_to_handle_at answers, its mount id, which
// tells two bind mounts of one file system apart as rename does (-1 where it does not answer).
struct Mount {
  int id = -1;
  dev_t dev = 0;
};
std::optional<Mount> mount_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  // A file_handle ends in a flexible array: room for the largest handle, aligned as one.
  alignas(file_handle) unsigned char room[sizeof(file_handle) + MAX_HANDLE_SZ] = {};
  auto* handle = reinterpret_cast<file_handle*>(room);
  handle->handle_bytes = MAX_HANDLE_SZ;
  Mount m;
  m.dev = st.st_dev;
  if (::name_to_handle_at(AT_FDCWD, path.c_str(), handle, &m.id, 0) != 0) m.id = -1;
  return m;
}

}  // namespace

void check_one_file_system(const r::EnvLayout& layout) {
  // Where the transaction's backups and staging go (.cudafix/ is made in the root when absent).
  const std::string state = layout.root_real + "/.cudafix";
  const std::string held = ::access(state.c_str(), F_OK) == 0 ? state : layout.root_real;
  const auto home = mount_of(held);
  if (!home) return;
  for (const auto& site : layout.sites) {
    if (!r::is_within(site.real, layout.root_real)) continue;  // a system site: cudafix does not change it
    const auto there = mount_of(site.real);
    if (!there) continue;
    const bool apart = there->dev != home->dev || (there->id >= 0 && home->id >= 0 && there->id != home->id);
    if (apart)
      throw r::Error(
          fmt::format("refused: {} and {} are on different file systems (a bind mount?): cudafix moves files "
                      "by rename within one file system; nothing was changed",
                      site.path, held));
  }
}

nlohmann::ordered_json document_start(const std::string& command, const std::string& venv) {
  return {{"schema", 1}, {"command", command}, {"venv", venv}};
}

int report_done(const GlobalOptions& g, std::ostream& out, const std::string& command, const std::string& venv,
                const tx::Transaction& t, const std::string& text, const Retention& keep,
                const nlohmann::ordered_json& extra, const RawJson& raw) {
  const auto pruned = tx::prune_transactions(keep.root, keep.count);
  if (g.json) {
    auto doc = document_start(command, venv);
    doc["transaction"] = t.id();
    doc["ops"] = t.ops().size();
    for (const auto& [key, value] : extra.items())
      if (!doc.contains(key)) doc[key] = value;
    doc["pruned"] = pruned.ids;
    doc["pruned_bytes"] = pruned.bytes;
    out << dump_with(doc, raw) << '\n';
  } else if (!g.quiet) {
    out << printable_lines(text) << fmt::format(" (transaction {}; `cudafix rollback {}` undoes it)\n", t.id(), t.id());
    if (!pruned.ids.empty())
      out << fmt::format("removed the backups of {} older {} ({:.1f} MB): [transactions] keep = {}\n",
                         pruned.ids.size(), pruned.ids.size() == 1 ? "transaction" : "transactions",
                         static_cast<double>(pruned.bytes) / 1e6, keep.count);
  }
  return 0;
}

namespace {

template <class Json>
std::string spliced(const Json& doc, const RawJson& raw) {
  if (raw.empty() || !doc.is_object()) return doc.dump();
  std::string out = "{";
  for (const auto& [key, value] : doc.items()) {
    if (out.size() > 1) out += ',';
    out += Json(key).dump() + ':';
    const auto it = raw.find(key);
    out += it != raw.end() ? it->second : value.dump();
  }
  return out + "}";
}

}  // namespace

std::string dump_with(const nlohmann::ordered_json& doc, const RawJson& raw) { return spliced(doc, raw); }
std::string dump_with(const nlohmann::json& doc, const RawJson& raw) { return spliced(doc, raw); }

installer::apply::ApplyOptions apply_options(const GlobalOptions& g, const r::Environment& env) {
  installer::apply::ApplyOptions o;
  o.threads = g.threads;
  o.target = [&g, &env] {
    return installer::apply::WheelTarget{environment_tags(g, env).tags, requires_python_version(g, env)};
  };
  // The tags rank an index's wheels, as fix's and install's sources rank them.
  o.source_settings = [&g, &env] { return wheel_source_settings(g, env, environment_tags(g, env).tags); };
  o.wheel_progress = [&g] { return progress_bar(g, "installing"); };
  return o;
}

installer::apply::VerifyStepsOptions verify_steps_options(const GlobalOptions& g, bool verify) {
  installer::apply::VerifyStepsOptions o;
  o.scan = scan_options(g);
  // --no-verify runs no probe: a cudafix copied without its helper still installs.
  if (verify) o.probe.probe = probe_path();
  if (!g.quiet && !g.json) o.note = [](const std::string& line) { std::cerr << line << '\n'; };
  return o;
}

namespace pr = installer::probe;

namespace {

nlohmann::ordered_json problem_json(const pr::Problem& p) {
  return {{"check", p.check}, {"expected", p.expected}, {"found", p.found}};
}

nlohmann::ordered_json problems_json(const std::vector<pr::Problem>& problems) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const auto& p : problems) a.push_back(problem_json(p));
  return a;
}

nlohmann::ordered_json optional_json(const std::optional<std::string>& s) {
  return s ? nlohmann::ordered_json(*s) : nullptr;
}

nlohmann::ordered_json point_json(const r::Environment& env, const pr::ProbePoint& pt) {
  nlohmann::ordered_json libs = nlohmann::ordered_json::array();
  for (const auto& l : pt.libraries)
    libs.push_back({{"path", env.display(l.path)},
                    {"soname", l.soname},
                    {"predicted", l.missing ? "fails" : "opens"},
                    {"missing", optional_json(l.missing)},
                    {"optional", l.optional},
                    {"opened", l.opened},
                    {"error", l.opened ? nullptr : nlohmann::ordered_json(l.error)}});
  nlohmann::ordered_json resolved = nlohmann::ordered_json::object();
  for (const auto& [soname, path] : pt.resolved) resolved[soname] = env.display(path);
  return {{"outcome", pr::to_string(pt.verdict.outcome)},
          {"message", pt.verdict.message},
          {"consumer", pt.consumer ? nlohmann::ordered_json(env.display(*pt.consumer)) : nullptr},
          {"consumer_missing", optional_json(pt.consumer_missing)},
          {"libraries", libs},
          {"opened", pt.opened()},
          {"left_out", pt.left_out},
          {"resolved", resolved},
          {"cudnn", pt.cudnn ? nlohmann::ordered_json(env.display(*pt.cudnn)) : nullptr},
          {"cudnn_version", pt.cudnn_version ? nlohmann::ordered_json(*pt.cudnn_version) : nullptr},
          {"cudnn_skipped", optional_json(pt.cudnn_skipped)},
          {"problems", problems_json(pt.problems)},
          {"seconds", pt.seconds}};
}

}  // namespace

nlohmann::ordered_json verification_json(const r::Environment& env, const StepChecks& checks) {
  if (checks.skip) return nullptr;
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (const auto& s : checks.steps)
    steps.push_back({{"step", s.step + 1},
                     {"label", s.label},
                     {"ok", s.judgement.ok()},
                     {"failures", problems_json(s.judgement.failures)},
                     {"excused", problems_json(s.judgement.excused)},
                     {"probe", point_json(env, s.point)}});
  return {{"unverified", checks.unverified},
          {"unverified_why", checks.unverified ? nlohmann::ordered_json(checks.unverified_why) : nullptr},
          {"baseline", checks.baseline ? point_json(env, *checks.baseline) : nullptr},
          {"steps", steps}};
}

std::optional<int> carry_out_verified(const GlobalOptions& g, std::ostream& out, const std::string& command,
                                      const r::Environment& env, tx::Transaction& t,
                                      const std::function<void(std::size_t)>& check, const StepChecks& checks) {
  const auto failed = installer::apply::carry_out_verified(t, check, checks);
  if (!failed) return std::nullopt;
  if (g.json) {
    auto doc = document_start(command, env.layout.root);
    doc["transaction"] = t.id();
    doc["undone"] = true;
    doc["error"] = *failed;
    doc["exit"] = 1;
    doc["verification"] = verification_json(env, checks);
    out << doc.dump() << '\n';
  }
  std::cerr << fmt::format("cudafix: {}\n", printable_lines(*failed));
  return 1;
}

}  // namespace cudafix::cli
