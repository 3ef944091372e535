// What the commands that change an environment share (cli/transaction_steps.hpp): the
// confirmation, the retention of backups, the progress bar, the commit's report, installer/apply's options from the
// command line's, and the verification's rendering.
#include <fmt/format.h>
#include <unistd.h>

#include <iostream>

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

void write_document(std::ostream& out, const std::string& command, const std::string& venv,
                    const std::function<void(JsonWriter&)>& write_keys) {
  JsonWriter w;
  w.begin_object().key("schema").value(1).key("command").value(command).key("venv").value(venv);
  write_keys(w);
  w.end_object();
  out << w.str() << '\n';
}

void write_document(std::ostream& out, const std::string& command, const std::string& venv, const JsonFields& keys) {
  write_document(out, command, venv, [&keys](JsonWriter& w) { keys.write(w); });
}

int report_done(const GlobalOptions& g, std::ostream& out, const std::string& command, const std::string& venv,
                const tx::Transaction& t, const std::string& text, const Retention& keep, const JsonFields& keys) {
  const auto pruned = tx::prune_transactions(keep.root, keep.count);
  if (g.json) {
    JsonWriter w;
    w.begin_object().key("schema").value(1).key("command").value(command).key("venv").value(venv);
    w.key("transaction").value(t.id()).key("ops").value(t.ops().size());
    keys.write(w);
    w.key("pruned").strings(pruned.ids).key("pruned_bytes").value(pruned.bytes).end_object();
    out << w.str() << '\n';
  } else if (!g.quiet) {
    out << printable_lines(text) << fmt::format(" (transaction {}; `cudafix rollback {}` undoes it)\n", t.id(), t.id());
    if (!pruned.ids.empty())
      out << fmt::format("removed the backups of {} older {} ({:.1f} MB): [transactions] keep = {}\n",
                         pruned.ids.size(), pruned.ids.size() == 1 ? "transaction" : "transactions",
                         static_cast<double>(pruned.bytes) / 1e6, keep.count);
  }
  return 0;
}

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

std::function<void(const std::string&)> notes(const GlobalOptions& g) {
  if (g.quiet || g.json) return {};
  return [](const std::string& line) { std::cerr << line << '\n'; };
}

namespace pr = installer::probe;

namespace {

void problems_json(JsonWriter& w, const std::vector<pr::Problem>& problems) {
  w.begin_array();
  for (const auto& p : problems)
    w.begin_object()
        .key("check")
        .value(p.check)
        .key("expected")
        .value(p.expected)
        .key("found")
        .value(p.found)
        .end_object();
  w.end_array();
}

void optional_json(JsonWriter& w, const std::optional<std::string>& s) {
  if (s)
    w.value(*s);
  else
    w.null();
}

// Each library the probe opened beyond the consumer's tree: what the model predicted, what happened.
void libraries_json(JsonWriter& w, const r::Environment& env, const pr::ProbePoint& pt) {
  w.begin_array();
  for (const auto& l : pt.libraries) {
    w.begin_object().key("path").value(env.display(l.path)).key("soname").value(l.soname);
    w.key("predicted").value(l.missing ? "fails" : "opens").key("missing");
    optional_json(w, l.missing);
    w.key("optional").value(l.optional).key("opened").value(l.opened).key("error");
    if (l.opened)
      w.null();
    else
      w.value(l.error);
    w.end_object();
  }
  w.end_array();
}

void point_json(JsonWriter& w, const r::Environment& env, const pr::ProbePoint& pt) {
  const auto display_or_null = [&](const std::optional<std::string>& path) {
    if (path)
      w.value(env.display(*path));
    else
      w.null();
  };
  w.begin_object().key("outcome").value(pr::to_string(pt.verdict.outcome)).key("message").value(pt.verdict.message);
  w.key("consumer");
  display_or_null(pt.consumer);
  w.key("consumer_missing");
  optional_json(w, pt.consumer_missing);
  w.key("libraries");
  libraries_json(w, env, pt);
  w.key("opened").value(pt.opened()).key("left_out").value(pt.left_out).key("resolved").begin_object();
  for (const auto& [soname, path] : pt.resolved) w.key(soname).value(env.display(path));
  w.end_object().key("cudnn");
  display_or_null(pt.cudnn);
  w.key("cudnn_version");
  if (pt.cudnn_version)
    w.value(static_cast<std::int64_t>(*pt.cudnn_version));
  else
    w.null();
  w.key("cudnn_skipped");
  optional_json(w, pt.cudnn_skipped);
  w.key("problems");
  problems_json(w, pt.problems);
  w.key("seconds").value(pt.seconds).end_object();
}

}  // namespace

void write_verification(JsonWriter& w, const r::Environment& env, const StepChecks& checks) {
  if (checks.skip) {
    w.null();
    return;
  }
  w.begin_object().key("unverified").value(checks.unverified).key("unverified_why");
  if (checks.unverified)
    w.value(checks.unverified_why);
  else
    w.null();
  w.key("baseline");
  if (checks.baseline)
    point_json(w, env, *checks.baseline);
  else
    w.null();
  w.key("steps").begin_array();
  for (const auto& s : checks.steps) {
    w.begin_object().key("step").value(static_cast<std::uint64_t>(s.step + 1)).key("label").value(s.label);
    w.key("ok").value(s.judgement.ok()).key("failures");
    problems_json(w, s.judgement.failures);
    w.key("excused");
    problems_json(w, s.judgement.excused);
    w.key("probe");
    point_json(w, env, s.point);
    w.end_object();
  }
  w.end_array().end_object();
}

int verification_failed(const GlobalOptions& g, std::ostream& out, const std::string& command,
                        const r::Environment& env, const tx::Transaction& t, const std::string& failed,
                        const StepChecks& checks) {
  if (g.json)
    write_document(out, command, env.layout.root, [&](JsonWriter& w) {
      w.key("transaction").value(t.id()).key("undone").value(true).key("error").value(failed).key("exit").value(1);
      w.key("verification");
      write_verification(w, env, checks);
    });
  std::cerr << fmt::format("cudafix: {}\n", printable_lines(failed));
  return 1;
}

}  // namespace cudafix::cli
