// The commands that change an environment (docs/cli.md): remove, history, rollback, snapshot,
// apply and install, each one transaction of installer/txn/; and the pieces `fix` shares with
// them (cli/transaction_steps.hpp).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <iostream>
#include <map>
#include <set>

#include "cli/commands.hpp"
#include "cli/json_output.hpp"
#include "cli/json_writer.hpp"
#include "cli/printable.hpp"
#include "cli/session.hpp"
#include "cli/text_output.hpp"
#include "cli/transaction_steps.hpp"
#include "installer/probe/verify.hpp"
#include "installer/source/sources.hpp"
#include "installer/txn/changes.hpp"
#include "installer/txn/rollback_owners.hpp"
#include "installer/txn/transaction.hpp"
#include "installer/wheel/install.hpp"
#include "installer/wheel/read.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/state_folder.hpp"
#include "resolver/pep/pep440.hpp"
#include "resolver/plan/plan.hpp"
#include "resolver/plan/plan_file.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;

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

// Who wrote a path now, as its dist's INSTALLER says ("pip"): of the dists whose RECORD lists
// it, the one whose hash is the file's bytes now, else any.
std::string writer_of(const r::Environment& env, const std::string& path) {
  const std::string now = r::sha256_of_file(path);
  const r::DistInfo* writer = nullptr;
  for (const auto& d : env.dists)
    for (const auto& row : d.record)
      if (r::join_normal(d.site_dir, row.path) == path && (!writer || (!now.empty() && row.hash == now))) writer = &d;
  if (!writer) return "";
  return fmt::format(" (by {}, INSTALLER says)",
                     writer->installer.empty() ? "a tool that wrote no INSTALLER" : writer->installer);
}

// Why a rollback is refused: each path changed since the transaction, by path and by whom.
std::string changed_since_text(const GlobalOptions& g, Located located, const tx::JournalRead& target,
                               const std::vector<tx::ChangedPath>& changed) {
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located), r::ScanDepth::files);
  std::vector<std::string> lines;
  for (const auto& c : changed)
    lines.push_back(fmt::format("{} {} after transaction {}{}{}", env.display(c.path), c.what, target.id,
                                writer_of(env, c.path),
                                c.kept ? "; another installed dist lists it, so --force leaves it where it is" : ""));
  return fmt::format(
      "refused: rolling back {} ({}) would overwrite later work:\n  {}\nnothing was changed (--force takes "
      "these aside as the rollback's own backups, which `cudafix rollback` of the rollback puts back, but never "
      "another installed dist's files)",
      target.id, target.command, fmt::join(lines, "\n  "));
}

}  // namespace

namespace {

// A --dry-run's answer, in pip's words ("Would remove ..."): what the command would change, and
// that nothing was; the exit code the command would give where it goes ahead.
int report_dry_run(const GlobalOptions& g, std::ostream& out, const std::string& command, const r::EnvLayout& layout,
                   const std::string& text, const JsonFields& facts) {
  if (g.json) {
    write_document(out, command, layout.root, [&facts](JsonWriter& w) {
      w.key("dry_run").value(true);
      facts.write(w);
    });
  } else if (!g.quiet) {
    out << printable_lines(text) << "\ndry run: nothing was changed (run without --dry-run to carry it out)\n";
  }
  return 0;
}

}  // namespace

int run_remove(const GlobalOptions& g, const RemoveCliOptions& o, std::ostream& out) {
  Located located = locate(g, Access::write);
  if (!o.dry_run) refuse_externally_managed(located.layout, g);
  const Retention keep = retention(located);
  // A dry run only reads, as plan remove does.
  std::optional<tx::EnvLock> lock;
  if (!o.dry_run) lock.emplace(located.layout.root_real, lock_wait(g), say_waiting);
  // Scanned under the lock: pip takes none, so what was planned before it is not trusted.
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located));
  const auto& layout = writable(env);
  check_one_file_system(layout);
  const auto dists = dists_named(env, o.dists);
  const auto plan = r::plan_removal(env, knowledge, dists, g.threads);
  // Rows that name what no removal may delete: refused whatever --force says.
  if (const auto& refused = plan.cudafix.deletion.refused; !refused.empty()) {
    std::vector<std::string> lines;
    for (const auto& rf : refused) lines.push_back(rf.to_string(env));
    throw r::Error(fmt::format("refusing to remove {}:\n  {}\nnothing was changed (--force does not override this)",
                               fmt::join(o.dists, " "), fmt::join(lines, "\n  ")));
  }
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
  if (o.dry_run) {
    // pip uninstall's own list before it asks: "Would remove:" and the paths.
    std::string text = fmt::format("Would remove {}: {} files moved aside, {} kept that another dist lists",
                                   fmt::join(labels, ", "), del.files.size(), del.kept.size());
    if (g.verbose)
      for (const auto& f : del.files) text += "\n  " + env.display(f);
    else if (!del.files.empty())
      text += " (-v lists them)";
    return report_dry_run(
        g, out, "remove", layout, text,
        JsonFields().set("removed", labels).set("deleted", del.files.size()).set("kept", del.kept.size()));
  }
  if (!confirmed(g, fmt::format("remove {} ({} files, keeping {} another dist lists)", fmt::join(labels, ", "),
                                del.files.size(), del.kept.size())))
    return declined(g, out, "remove", env.layout.root);
  std::vector<std::string> names;  // as pip list shows them, whatever spelling was typed
  for (int d : dists) names.push_back(env.dists[static_cast<std::size_t>(d)].name);
  tx::Transaction t(layout.root_real, "remove " + fmt::format("{}", fmt::join(names, " ")));
  tx::plan_removal_ops(env, del, t);
  show_progress(g, t, "removing");
  t.carry_out();
  JsonFields j;
  j.set("removed", labels).set("deleted", del.files.size()).set("kept", del.kept.size());
  return report_done(g, out, "remove", env.layout.root, t,
                     fmt::format("removed {}: {} files moved aside, {} kept that another dist lists",
                                 fmt::join(labels, ", "), del.files.size(), del.kept.size()),
                     keep, j);
}

namespace {

void or_null(JsonWriter& w, const std::optional<std::size_t>& n) {
  if (n)
    w.value(*n);
  else
    w.null();
}

// `history --json`'s transactions, each with the bytes its backups hold (`held`, in the same order).
void transactions_json(JsonWriter& w, const std::vector<tx::JournalRead>& all, const std::vector<std::uint64_t>& held) {
  w.begin_array();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& t = all[i];
    w.begin_object().key("id").value(t.id).key("time").value(t.time).key("command").value(t.command).key("steps");
    or_null(w, t.steps);
    w.key("files");
    or_null(w, t.files);
    w.key("ops").value(t.ops.size()).key("result").value(state_name(t)).key("backup_bytes").value(held[i]);
    w.end_object();
  }
  w.end_array();
}

}  // namespace

int run_history(const GlobalOptions& g, std::ostream& out) {
  const Located located = locate(g);
  std::vector<std::string> distrusted;
  const auto all = tx::transactions(located.layout.root_real, &distrusted);
  if (!g.json && !g.quiet)
    for (const auto& why : distrusted) std::cerr << "cudafix: not shown, not trusted: " << why << '\n';
  std::vector<std::uint64_t> helds;
  std::uint64_t total = 0;
  std::string text;
  for (const auto& t : all) {
    const auto held = tx::bytes_held(tx::tx_root(located.layout.root_real) + "/" + t.id);
    helds.push_back(held);
    total += held;
    // A journal written before steps and files were recorded says only its ops (renames).
    const std::string size = t.steps && t.files ? fmt::format("{}, {}", count_of(*t.steps, "step", "steps"),
                                                              count_of(*t.files, "file", "files"))
                                                : count_of(t.ops.size(), "change", "changes");
    text += fmt::format("{}  {}  {:<40} {:<20}  {}  ({:.1f} MB of backups)\n", printable(t.id), when(t.time),
                        printable(t.command), size, printable(state_name(t)), static_cast<double>(held) / 1e6);
  }
  // Backups a killed prune left are on disk too: counted and named until the next command that
  // takes the lock removes them.
  const auto leftovers = tx::prune_leftovers(located.layout.root_real);
  for (const auto& l : leftovers) {
    total += l.bytes;
    text += fmt::format(
        "{}  pruned, but a killed prune left {:.1f} MB of it, which the next command that changes "
        "the environment removes\n",
        printable(l.id), static_cast<double>(l.bytes) / 1e6);
  }
  if (g.json) {
    write_document(out, "history", located.layout.root, [&](JsonWriter& w) {
      w.key("transactions");
      transactions_json(w, all, helds);
      w.key("prune_leftovers").begin_array();
      for (const auto& l : leftovers)
        w.begin_object().key("id").value(l.id).key("backup_bytes").value(l.bytes).end_object();
      w.end_array().key("distrusted").strings(distrusted).key("backup_bytes").value(total);
    });
  } else if (!g.quiet) {
    out << (text.empty() ? "no transactions\n" : text);
    if (!text.empty())
      out << fmt::format("backups for rollback use {:.1f} MB on disk (committed transactions only)\n",
                         static_cast<double>(total) / 1e6);
  }
  return 0;
}

namespace {

// `rollback --snapshot NAME`: the snapshot's files put back, refused where it was altered since.
int rollback_snapshot(const GlobalOptions& g, const RollbackCliOptions& o, Located located, const Retention& keep,
                      std::ostream& out) {
  const std::string root = located.layout.root_real;
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
    if (g.json) {
      write_document(out, "rollback", env.layout.root, JsonFields().set("refused", why).set("altered", check.altered));
    } else {
      out << printable_lines(why) << '\n';
    }
    return 1;
  }
  if (o.dry_run) {
    t.abandon();
    return report_dry_run(
        g, out, "rollback", located.layout,
        fmt::format("Would restore snapshot '{}'{}: {} files put back, {} moved aside, {} unchanged", *o.snapshot,
                    printable(scope_text(check.scope)), check.restore, check.remove, check.unchanged),
        JsonFields()
            .set("snapshot", *o.snapshot)
            .set("restored", check.restore)
            .set("removed", check.remove)
            .set("unchanged", check.unchanged));
  }
  if (!confirmed(g, fmt::format("restore snapshot '{}' ({} files back, {} moved aside)", *o.snapshot, check.restore,
                                check.remove)))
    return declined(g, out, "rollback", env.layout.root);
  show_progress(g, t, "restoring");
  t.carry_out();
  forget_guard(root, *o.snapshot);  // a killed guard's notice ends once its snapshot is restored
  return report_done(
      g, out, "rollback", env.layout.root, t,
      fmt::format("restored snapshot '{}'{}: {} files put back, {} moved aside, {} unchanged", *o.snapshot,
                  printable(scope_text(check.scope)), check.restore, check.remove, check.unchanged),
      keep,
      JsonFields()
          .set("snapshot", *o.snapshot)
          .set("restored", check.restore)
          .set("removed", check.remove)
          .set("unchanged", check.unchanged));
}

// The transaction a rollback undoes: the one named, else the newest change in effect.
const tx::JournalRead& rollback_target(const std::vector<tx::JournalRead>& all, const RollbackCliOptions& o,
                                       const std::string& root, const Retention& keep) {
  const tx::JournalRead* target = nullptr;
  // How deep in a chain of rollbacks each transaction is: 0 a change, 1 its rollback, 2 the
  // rollback of that (a redo), ... An even depth is a change in effect once committed.
  std::map<std::string, std::string> command_of;
  for (const auto& t : all) command_of[t.id] = t.command;
  const auto depth_of = [&](const tx::JournalRead& t) {
    std::size_t depth = 0;
    std::string command = t.command, id = t.id;
    while (command.starts_with("rollback ") && !command.starts_with("rollback --snapshot") && depth < all.size()) {
      const std::string undone = command.substr(9);
      const auto it = command_of.find(undone);
      ++depth;
      if (it == command_of.end() || undone >= id) break;  // pruned, or not older: the chain ends
      id = undone;
      command = it->second;
    }
    return depth;
  };
  for (const auto& t : all) {
    // By default the newest change in effect (a change, or a redo, not yet undone), so that
    // rollback after rollback walks back through history; a rollback's own id redoes.
    const bool in_effect = t.state == tx::TxState::committed && !t.rolled_back_by && depth_of(t) % 2 == 0;
    if (o.id ? t.id == *o.id : in_effect) {
      target = &t;
      break;
    }
  }
  if (!target && o.id && tx::was_pruned(root, *o.id))
    throw r::Error(
        fmt::format("transaction {} was pruned: its backups were removed to keep the {} newest "
                    "([transactions] keep in cudafix.toml), so it can no longer be rolled back",
                    *o.id, keep.count));
  if (!target)
    throw r::Error(o.id ? fmt::format("no transaction {} in {}", *o.id, tx::tx_root(root))
                        : fmt::format("nothing to roll back in {}", root));
  if (target->state != tx::TxState::committed || target->rolled_back_by)
    throw r::Error(fmt::format("transaction {} is {}: only a committed one not rolled back can be", target->id,
                               state_name(*target)));
  return *target;
}

}  // namespace

int run_rollback(const GlobalOptions& g, const RollbackCliOptions& o, std::ostream& out) {
  Located located = locate(g, Access::write);
  if (!o.dry_run) refuse_externally_managed(located.layout, g);
  const Retention keep = retention(located);
  const std::string root = located.layout.root_real;
  const std::string venv = located.layout.root;  // as the documents name it
  tx::EnvLock lock(root, lock_wait(g), say_waiting);
  check_one_file_system(located.layout);
  if (const auto listed = r::records_listing_protected(located.layout); !listed.empty())
    throw r::Error(
        fmt::format("refused: a dist's RECORD lists cudafix's own state or the venv's files, so a wheel "
                    "may have written them and cudafix trusts none of its history: {}; nothing was changed",
                    fmt::join(listed, "; ")));
  if (o.snapshot) return rollback_snapshot(g, o, std::move(located), keep, out);
  const auto all = tx::transactions(root);
  const tx::JournalRead* target = &rollback_target(all, o, root, keep);
  tx::Transaction t(root, "rollback " + target->id);
  const auto changed = tx::plan_rollback(*target, t, o.force, tx::rollback_owners(located.layout, *target));
  const auto taken_aside =
      static_cast<std::size_t>(std::count_if(changed.begin(), changed.end(), [](const auto& c) { return !c.kept; }));
  if (!changed.empty() && !o.force) {
    t.abandon();
    const std::string why = changed_since_text(g, std::move(located), *target, changed);
    if (g.json) {
      write_document(out, "rollback", venv, JsonFields().set("refused", why).set("changed", [&changed](JsonWriter& w) {
        w.begin_array();
        for (const auto& c : changed)
          w.begin_object().key("path").value(c.path).key("what").value(c.what).key("kept").value(c.kept).end_object();
        w.end_array();
      }));
    } else {
      out << printable_lines(why) << '\n';
    }
    return 1;
  }
  if (o.dry_run) {
    t.abandon();
    return report_dry_run(
        g, out, "rollback", located.layout,
        fmt::format("Would roll back {} ({}): {} changes undone{}", target->id, target->command, t.ops().size(),
                    taken_aside == 0 ? "" : fmt::format(", {} paths changed since taken aside", taken_aside)),
        JsonFields().set("rolled_back", target->id).set("ops", t.ops().size()).set("taken_aside", taken_aside));
  }
  if (!confirmed(
          g, fmt::format("roll back {} ({}){}", target->id, target->command,
                         taken_aside == 0 ? "" : fmt::format(", taking aside {} paths changed since", taken_aside))))
    return declined(g, out, "rollback", venv);
  show_progress(g, t, "rolling back");
  t.carry_out();
  return report_done(g, out, "rollback", venv, t, fmt::format("rolled back {} ({})", target->id, target->command), keep,
                     JsonFields().set("rolled_back", target->id).set("taken_aside", taken_aside));
}

int run_snapshot(const GlobalOptions& g, const SnapshotCliOptions& o, std::ostream& out) {
  Located located = locate(g, Access::write);
  const std::string root = located.layout.root_real;
  const std::string venv = located.layout.root;  // as the documents name it
  if (o.list) {
    const auto snapshots = tx::list_snapshots(root);
    std::string text;
    for (const auto& s : snapshots)
      text += fmt::format("{:<24} {}  {} files, {:.1f} MB{}\n", printable(s.name), when(s.time), s.files,
                          static_cast<double>(s.bytes) / 1e6, printable(scope_text(s.scope)));
    if (g.json)
      write_document(out, "snapshot", venv, [&snapshots](JsonWriter& w) {
        w.key("snapshots").begin_array();
        for (const auto& s : snapshots) {
          w.begin_object().key("name").value(s.name).key("time").value(s.time).key("files").value(s.files);
          w.key("bytes").value(s.bytes).key("copied").value(s.copied).key("scope");
          if (s.scope)
            w.strings(*s.scope);
          else
            w.null();
          w.end_object();
        }
        w.end_array();
      });
    else if (!g.quiet)
      out << (snapshots.empty() ? "no snapshots\n" : text);
    return 0;
  }
  refuse_externally_managed(located.layout, g);
  tx::EnvLock lock(root, lock_wait(g), say_waiting);
  if (o.remove) {
    // Asked first as every write is: a deleted snapshot cannot be restored from.
    const auto snapshots = tx::list_snapshots(root);
    const auto it = std::find_if(snapshots.begin(), snapshots.end(),
                                 [&](const tx::SnapshotInfo& s) { return s.name == *o.remove; });
    if (it == snapshots.end())
      throw r::Error(
          fmt::format("no snapshot named '{}' in {} (`cudafix snapshot --list` lists them)", *o.remove, venv));
    if (!confirmed(g, fmt::format("delete snapshot '{}' ({} files, taken {})", it->name, it->files, when(it->time))))
      return declined(g, out, "snapshot", venv);
    tx::delete_snapshot(root, *o.remove);
    forget_guard(root, *o.remove);
    if (!g.quiet && !g.json) out << fmt::format("deleted snapshot '{}'\n", printable(*o.remove));
    if (g.json) write_document(out, "snapshot", venv, JsonFields().set("deleted", *o.remove));
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
  const auto info = tx::take_snapshot(env, name, progress_bar(g, "snapshot", "files"));
  if (g.json) {
    JsonFields doc;
    doc.set("name", info.name).set("files", info.files).set("linked", info.linked).set("copied", info.copied);
    doc.set("symlinks", info.symlinks).set("bytes", info.bytes).set("copied_bytes", info.copied_bytes);
    if (info.copied)
      doc.set("copied_because", info.copied_because);
    else
      doc.set_null("copied_because");
    write_document(out, "snapshot", venv, doc);
  } else if (!g.quiet) {
    out << fmt::format(
        "snapshot '{}': {} files ({:.1f} MB) hardlinked{}, {} symlinks recorded; `cudafix rollback "
        "--snapshot {}` restores them\n",
        info.name, info.linked, static_cast<double>(info.bytes - info.copied_bytes) / 1e6,
        info.copied ? fmt::format(", {} files copied ({:.1f} MB): no hard link can be made, {}", info.copied,
                                  static_cast<double>(info.copied_bytes) / 1e6, printable(info.copied_because))
                    : "",
        info.symlinks, info.name);
  }
  return 0;
}

namespace {

// A path as a shell word: as it is where it needs no quoting, else in single quotes.
std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || std::string_view("/._+-=:,@%").find(static_cast<char>(c)) != std::string_view::npos;
  });
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The options apply locates its environment with: the plan's own venv, unless --venv or -p names
// one (a plan carried to another folder is for the environment it was made in, not for whatever
// python3 or $VIRTUAL_ENV is found there).
GlobalOptions for_plan(const GlobalOptions& g, const r::PlanFile& plan, const std::string& name) {
  GlobalOptions out = g;
  if (g.venv || g.python || !plan.venv) return out;
  if (!plan.venv->starts_with("/"))
    throw r::Error(fmt::format("{}: venv: '{}' is not an absolute path; give the environment with --venv", name,
                               printable(*plan.venv)));
  out.venv = *plan.venv;
  return out;
}

}  // namespace

int run_apply(const GlobalOptions& options, const ApplyCliOptions& o, std::ostream& out) {
  // Parsed whole before the environment is even located: one typed value from here on.
  const r::PlanFile plan = r::parse_plan_file(r::read_plan_file(o.plan), o.plan);
  Located located = locate(for_plan(options, plan, o.plan), Access::write);
  refuse_externally_managed(located.layout, options);
  const GlobalOptions g = with_configured_sources(options, located.config);
  const Retention keep = retention(located);
  if (!g.quiet && !g.json) {
    const std::string venv = located.layout.root;
    if (!plan.venv)
      std::cerr << fmt::format("this plan names no environment; applying it to {}\n", printable(venv));
    else if (r::real_path_of(*plan.venv) == located.layout.root_real)
      std::cerr << fmt::format("this plan is for {}\n", printable(*plan.venv));
    else
      std::cerr << fmt::format("this plan is for {}; applying it to {} ({})\n", printable(*plan.venv), printable(venv),
                               g.venv ? "--venv" : "-p");
  }
  tx::EnvLock lock(located.layout.root_real, lock_wait(g), say_waiting);
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located));
  const auto& layout = writable(env);
  check_one_file_system(layout);
  const auto apply = apply_options(g, env);
  const PreparedPlan prepared = installer::apply::prepare_plan(
      env, knowledge, plan, o.plan,
      fmt::format("make a new plan: cudafix plan fix --venv {} -o {}", shell_word(env.layout.root), shell_word(o.plan)),
      apply);
  const auto said = prepared.labels();
  if (said.empty()) {  // nothing to change, verify or ask about
    if (g.json) {
      JsonWriter w;
      w.begin_object().key("schema").value(1).key("command").value("apply").key("venv").value(env.layout.root);
      w.key("steps").begin_array().end_array().key("changed").value(false).key("verified").value(false).end_object();
      out << w.str() << '\n';
    } else if (!g.quiet) {
      out << fmt::format("nothing to do: {} has no steps; nothing was changed\n", printable(o.plan));
    }
    return 0;
  }
  if (!confirmed(g, fmt::format("apply {}: {}", count_of(said.size(), "step", "steps"), fmt::join(said, ", "))))
    return declined(g, out, "apply", env.layout.root);

  tx::Transaction t(layout.root_real, "apply " + o.plan);
  StepChecks checks;
  const auto done = installer::apply::carry_out_plan(
      env, knowledge, prepared, t, apply,
      installer::apply::VerifyStepsOptions::for_command(scan_options(g), !o.no_verify, notes(g)), !o.no_verify, checks);
  if (done.failed) return verification_failed(g, out, "apply", env, t, *done.failed, checks);
  const std::size_t files = done.files;
  const std::string text_out = fmt::format("applied {} ({} files){}", count_of(said.size(), "step", "steps"), files,
                                           o.no_verify         ? ", not verified (--no-verify)"
                                           : checks.unverified ? "; not verified: " + checks.unverified_why
                                                               : ", each verified on the GPU");
  report_done(g, out, "apply", env.layout.root, t, text_out, keep,
              JsonFields()
                  .set("steps", said)
                  .set("verified", !o.no_verify && !checks.unverified)
                  .set("verification", [&](JsonWriter& w) { write_verification(w, env, checks); }));
  return checks.unverified ? 4 : 0;
}

namespace {

// install --dry-run: pip's "Would install NAME-VERSION", with the installed dist each wheel
// replaces and the files it holds.
int install_dry_run(const GlobalOptions& g, std::ostream& out, const r::Environment& env,
                    const std::vector<installer::ValidatedWheel>& wheels, const std::vector<std::string>& labels) {
  std::vector<std::string> lines, replaced;
  std::size_t files = 0;
  for (std::size_t i = 0; i < wheels.size(); ++i) {
    const auto& w = wheels[i];
    files += w.members.size();
    std::string line = fmt::format("Would install {} ({} files)", labels[i], w.members.size());
    if (const auto installed = env.dist_index(r::normalize_name(w.name))) {
      replaced.push_back(r::dist_label(env.dists[static_cast<std::size_t>(*installed)]));
      line += ", replacing " + replaced.back();
    }
    lines.push_back(line);
  }
  return report_dry_run(g, out, "install", env.layout, fmt::format("{}", fmt::join(lines, "\n")),
                        JsonFields().set("installed", labels).set("replaced", replaced).set("files", files));
}

}  // namespace

int run_install(const GlobalOptions& g, const InstallCliOptions& o, std::ostream& out) {
  // Every wheel validated before the environment is even locked.
  std::vector<installer::ValidatedWheel> wheels;
  for (const auto& w : o.wheels) wheels.push_back(installer::validate_wheel(w));
  Located located = locate(g, Access::write);
  if (!o.dry_run) refuse_externally_managed(located.layout, g);
  const Retention keep = retention(located);
  std::optional<tx::EnvLock> lock;  // a dry run only reads
  if (!o.dry_run) lock.emplace(located.layout.root_real, lock_wait(g), say_waiting);
  const auto& [env, knowledge, settings] = scan_kept(g, std::move(located), r::ScanDepth::full);
  const auto& layout = writable(env);
  check_one_file_system(layout);
  // Each dist named as pip list shows it (METADATA's Name), not as its wheel file escapes it.
  std::vector<std::string> labels;
  for (const auto& w : wheels) labels.push_back(w.project + " " + w.version);
  // Refused before a transaction begins, so that a refusal leaves none behind.
  const auto tags = environment_tags(g, env);
  for (const auto& w : wheels) installer::check_usable(w, tags.tags, requires_python_version(g, env));
  for (const auto& w : wheels) installer::check_targets(w, layout);
  if (o.dry_run) {
    // Every check the install runs: each member's CRC and RECORD hash too, found while staging.
    for (const auto& w : wheels) installer::check_members(w, g.threads);
    return install_dry_run(g, out, env, wheels, labels);
  }
  if (!confirmed(g, fmt::format("install {}", fmt::join(labels, ", "))))
    return declined(g, out, "install", env.layout.root);
  tx::Transaction t(layout.root_real, "install " + fmt::format("{}", fmt::join(labels, ", ")));
  std::size_t files = 0;
  r::EarlierSteps earlier;  // the dists replaced so far, and the paths written
  std::vector<const installer::ValidatedWheel*> to_stage;
  for (const auto& w : wheels) to_stage.push_back(&w);
  const auto staged_wheels =
      installer::stage_wheels(to_stage, layout, t, g.threads, true, progress_bar(g, "installing"));
  for (std::size_t k = 0; k < wheels.size(); ++k) {
    const auto& w = wheels[k];
    const auto& staged = staged_wheels[k];
    installer::plan_puts(staged, t);
    earlier.listed.insert(staged.targets.begin(), staged.targets.end());
    // An installed dist of that name is replaced: what it lists and no wheel here writes goes.
    if (const auto installed = env.dist_index(r::normalize_name(w.name)))
      installer::apply::stage_leftovers(env, *installed, earlier, t);
    files += staged.targets.size();
    t.mark_step();
  }
  StepChecks checks;
  checks.skip = o.no_verify;
  const auto check = installer::apply::step_verifier(
      env, knowledge, labels, t,
      installer::apply::VerifyStepsOptions::for_command(scan_options(g), !o.no_verify, notes(g)), checks);
  if (const auto failed = installer::apply::carry_out_verified(t, check, checks))
    return verification_failed(g, out, "install", env, t, *failed, checks);
  report_done(g, out, "install", env.layout.root, t,
              fmt::format("installed {} ({} files){}", fmt::join(labels, ", "), files,
                          o.no_verify         ? ", not verified (--no-verify)"
                          : checks.unverified ? "; not verified: " + checks.unverified_why
                                              : ", verified on the GPU"),
              keep,
              JsonFields()
                  .set("installed", labels)
                  .set("files", files)
                  .set("verified", !o.no_verify && !checks.unverified)
                  .set("verification", [&](JsonWriter& w) { write_verification(w, env, checks); }));
  return checks.unverified ? 4 : 0;
}

}  // namespace cudafix::cli
