// The commands that change an environment (docs/cli.md): remove, history, rollback, snapshot,
// apply and install, each one transaction of installer/txn/; and the pieces `fix` shares with
// them (cli/transaction_steps.hpp).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
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
    lines.push_back(
        fmt::format("{} {} after transaction {}{}", env.display(c.path), c.what, target.id, writer_of(env, c.path)));
  return fmt::format(
      "refused: rolling back {} ({}) would overwrite later work:\n  {}\nnothing was changed (--force takes "
      "these aside as the rollback's own backups, which `cudafix rollback` of the rollback puts back)",
      target.id, target.command, fmt::join(lines, "\n  "));
}

}  // namespace

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

const r::EnvLayout& writable(const r::Environment& env) {
  if (env.layout.kind == r::EnvKind::site_dir)
    throw r::Error(
        fmt::format("{} is a bare site folder; cudafix changes only a venv or an interpreter prefix "
                    "(give its root with --venv)",
                    env.layout.root));
  return env.layout;
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
                const nlohmann::ordered_json& extra) {
  const auto pruned = tx::prune_transactions(keep.root, keep.count);
  if (g.json) {
    auto doc = document_start(command, venv);
    doc["transaction"] = t.id();
    doc["ops"] = t.ops().size();
    for (const auto& [key, value] : extra.items())
      if (!doc.contains(key)) doc[key] = value;
    doc["pruned"] = pruned.ids;
    doc["pruned_bytes"] = pruned.bytes;
    out << doc.dump() << '\n';
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

// A --dry-run's answer, in pip's words ("Would remove ..."): what the command would change, and
// that nothing was; the exit code the command would give where it goes ahead.
int report_dry_run(const GlobalOptions& g, std::ostream& out, const std::string& command, const r::EnvLayout& layout,
                   const std::string& text, const nlohmann::ordered_json& facts) {
  if (g.json) {
    auto j = document_start(command, layout.root);
    j["dry_run"] = true;
    j.update(facts);
    out << j.dump() << '\n';
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
    return report_dry_run(g, out, "remove", layout, text,
                          {{"removed", labels}, {"deleted", del.files.size()}, {"kept", del.kept.size()}});
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
  nlohmann::ordered_json j;
  j["removed"] = labels;
  j["deleted"] = del.files.size();
  j["kept"] = del.kept.size();
  return report_done(g, out, "remove", env.layout.root, t,
                     fmt::format("removed {}: {} files moved aside, {} kept that another dist lists",
                                 fmt::join(labels, ", "), del.files.size(), del.kept.size()),
                     keep, j);
}

int run_history(const GlobalOptions& g, std::ostream& out) {
  const Located located = locate(g);
  std::vector<std::string> distrusted;
  const auto all = tx::transactions(located.layout.root_real, &distrusted);
  if (!g.json && !g.quiet)
    for (const auto& why : distrusted) std::cerr << "cudafix: not shown, not trusted: " << why << '\n';
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  std::uint64_t total = 0;
  std::string text;
  for (const auto& t : all) {
    const auto held = tx::bytes_held(tx::tx_root(located.layout.root_real) + "/" + t.id);
    total += held;
    const auto or_null = [](const std::optional<std::size_t>& n) {
      return n ? nlohmann::ordered_json(*n) : nlohmann::ordered_json();
    };
    list.push_back({{"id", t.id},
                    {"time", t.time},
                    {"command", t.command},
                    {"steps", or_null(t.steps)},
                    {"files", or_null(t.files)},
                    {"ops", t.ops.size()},
                    {"result", state_name(t)},
                    {"backup_bytes", held}});
    // A journal written before steps and files were recorded says only its ops (renames).
    const std::string size = t.steps && t.files ? fmt::format("{}, {}", count_of(*t.steps, "step", "steps"),
                                                              count_of(*t.files, "file", "files"))
                                                : count_of(t.ops.size(), "change", "changes");
    text += fmt::format("{}  {}  {:<40} {:<20}  {}  ({:.1f} MB of backups)\n", printable(t.id), when(t.time),
                        printable(t.command), size, printable(state_name(t)), static_cast<double>(held) / 1e6);
  }
  if (g.json) {
    auto doc = document_start("history", located.layout.root);
    doc["transactions"] = list;
    doc["distrusted"] = distrusted;
    doc["backup_bytes"] = total;
    out << doc.dump() << '\n';
  } else if (!g.quiet) {
    out << (all.empty() ? "no transactions\n" : text);
    if (!all.empty())
      out << fmt::format("backups for rollback use {:.1f} MB on disk (committed transactions only)\n",
                         static_cast<double>(total) / 1e6);
  }
  return 0;
}

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
      if (g.json) {
        auto doc = document_start("rollback", env.layout.root);
        doc["refused"] = why;
        doc["altered"] = check.altered;
        out << doc.dump() << '\n';
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
          {{"snapshot", *o.snapshot},
           {"restored", check.restore},
           {"removed", check.remove},
           {"unchanged", check.unchanged}});
    }
    if (!confirmed(g, fmt::format("restore snapshot '{}' ({} files back, {} moved aside)", *o.snapshot, check.restore,
                                  check.remove)))
      return declined(g, out, "rollback", env.layout.root);
    show_progress(g, t, "restoring");
    t.carry_out();
    return report_done(
        g, out, "rollback", env.layout.root, t,
        fmt::format("restored snapshot '{}'{}: {} files put back, {} moved aside, {} unchanged", *o.snapshot,
                    printable(scope_text(check.scope)), check.restore, check.remove, check.unchanged),
        keep,
        {{"snapshot", *o.snapshot},
         {"restored", check.restore},
         {"removed", check.remove},
         {"unchanged", check.unchanged}});
  }
  const auto all = tx::transactions(root);
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
  tx::Transaction t(root, "rollback " + target->id);
  const auto changed = tx::plan_rollback(*target, t, o.force);
  if (!changed.empty() && !o.force) {
    t.abandon();
    const std::string why = changed_since_text(g, std::move(located), *target, changed);
    if (g.json) {
      nlohmann::ordered_json paths = nlohmann::ordered_json::array();
      for (const auto& c : changed) paths.push_back({{"path", c.path}, {"what", c.what}});
      auto doc = document_start("rollback", venv);
      doc["refused"] = why;
      doc["changed"] = paths;
      out << doc.dump() << '\n';
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
                    changed.empty() ? "" : fmt::format(", {} paths changed since taken aside", changed.size())),
        {{"rolled_back", target->id}, {"ops", t.ops().size()}, {"taken_aside", changed.size()}});
  }
  if (!confirmed(
          g, fmt::format("roll back {} ({}){}", target->id, target->command,
                         changed.empty() ? "" : fmt::format(", taking aside {} paths changed since", changed.size()))))
    return declined(g, out, "rollback", venv);
  show_progress(g, t, "rolling back");
  t.carry_out();
  return report_done(g, out, "rollback", venv, t, fmt::format("rolled back {} ({})", target->id, target->command), keep,
                     {{"rolled_back", target->id}, {"taken_aside", changed.size()}});
}

int run_snapshot(const GlobalOptions& g, const SnapshotCliOptions& o, std::ostream& out) {
  Located located = locate(g, Access::write);
  const std::string root = located.layout.root_real;
  const std::string venv = located.layout.root;  // as the documents name it
  auto doc = document_start("snapshot", venv);
  if (o.list) {
    const auto snapshots = tx::list_snapshots(root);
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    std::string text;
    for (const auto& s : snapshots) {
      list.push_back({{"name", s.name},
                      {"time", s.time},
                      {"files", s.files},
                      {"bytes", s.bytes},
                      {"copied", s.copied},
                      {"scope", s.scope ? nlohmann::ordered_json(*s.scope) : nlohmann::ordered_json()}});
      text += fmt::format("{:<24} {}  {} files, {:.1f} MB{}\n", printable(s.name), when(s.time), s.files,
                          static_cast<double>(s.bytes) / 1e6, printable(scope_text(s.scope)));
    }
    doc["snapshots"] = list;
    if (g.json)
      out << doc.dump() << '\n';
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
    doc["deleted"] = *o.remove;
    if (g.json) out << doc.dump() << '\n';
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
    doc["name"] = info.name;
    doc["files"] = info.files;
    doc["linked"] = info.linked;
    doc["copied"] = info.copied;
    doc["symlinks"] = info.symlinks;
    doc["bytes"] = info.bytes;
    doc["copied_bytes"] = info.copied_bytes;
    doc["copied_because"] = info.copied ? nlohmann::ordered_json(info.copied_because) : nlohmann::ordered_json();
    out << doc.dump() << '\n';
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

// What differs between the plan's fingerprint and the environment now, one line each.
std::vector<std::string> fingerprint_changes(const r::Environment& env, const r::Fingerprint& fp) {
  std::vector<std::string> out;
  std::map<std::string, std::string> now;
  for (const auto& d : env.dists)
    now[d.dir_name] = r::sha256_hex(d.record_storage ? std::string_view(d.record_storage->text) : "");
  std::set<std::string> seen;
  for (const auto& [dist, sha] : fp.records) {
    seen.insert(dist);
    const auto it = now.find(dist);
    if (it == now.end())
      out.push_back(dist + " is gone");
    else if (it->second != sha)
      out.push_back(dist + "/RECORD changed");
  }
  for (const auto& [dist, sha] : now)
    if (!seen.count(dist)) out.push_back(dist + " was installed");
  for (const auto& f : fp.files) {
    struct stat st {};
    const bool exists = ::lstat(f.path.c_str(), &st) == 0;
    if (exists != f.exists) {
      out.push_back(fmt::format("{} {}", env.display(f.path), exists ? "appeared" : "is gone"));
      continue;
    }
    if (!exists) continue;
    const std::int64_t mtime = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (st.st_dev != f.dev || st.st_ino != f.ino || static_cast<std::uint64_t>(st.st_size) != f.size ||
        mtime != f.mtime_ns)
      out.push_back(env.display(f.path) + " was modified");
  }
  return out;
}

// An installed dist a wheel replaces (an upgrade, a reinstall): what its uninstall deletes the
// cudafix way (owner counting: a path a kept dist lists stays), less every path the transaction
// writes (`earlier.listed`) and what its earlier steps removed, moved aside as pip's upgrade
// uninstalls the old version: its dist-info folder whole (one op, so rollback restores it), the
// folders the leftovers empty with them, but never a folder that holds a path written here or
// one a kept dist lists. Rows a removal refuses (a scheme folder, cudafix's state) stay.
// `earlier` then counts the dist as removed and its files as deleted, for the steps after.
void plan_leftovers(const r::Environment& env, int dist, r::EarlierSteps& earlier, tx::Transaction& t) {
  auto del = r::uninstall_paths(env, {dist}, r::OwnerCounting::cudafix, earlier);
  std::set<std::string> holding_written;
  for (const auto& p : earlier.listed)
    for (std::string up = r::parent_dir(p); r::is_within(up, env.layout.root_real) && up != env.layout.root_real;
         up = r::parent_dir(up))
      if (!holding_written.insert(up).second) break;
  std::erase_if(del.dirs, [&](const std::string& d) { return holding_written.count(d) > 0; });
  std::erase_if(del.files, [&](const std::string& f) { return earlier.listed.count(f) > 0; });
  tx::plan_removal_ops(env, del, t);
  earlier.removed.insert(dist);
  earlier.deleted.insert(del.files.begin(), del.files.end());
}

}  // namespace

namespace {

namespace pr = installer::probe;

std::string steps_failed_text(std::size_t step, const std::string& label, const std::vector<pr::Problem>& failures) {
  std::string out = fmt::format("verification after step {} ({}) failed, {} {}:", step + 1, label, failures.size(),
                                failures.size() == 1 ? "check" : "checks");
  for (const auto& p : failures) out += "\n  " + p.text();
  return out;
}

// What `cudafix verify` found wrong after the last step, as problems beside the step's own.
std::vector<pr::Problem> verify_problems(const pr::VerifyReport& rep) {
  std::vector<pr::Problem> out;
  if (rep.verdict.outcome == pr::Outcome::ok) return out;
  if (!rep.failed_check) {
    const std::string where = rep.verdict.stage ? pr::stage_label(rep.records.stages[*rep.verdict.stage]) : "the probe";
    out.push_back({"the whole tree (" + where + ")", "every stage succeeds", rep.verdict.message, {}});
  }
  for (const auto& c : rep.checks)
    if (!c.ok)
      out.push_back({c.check + " (the whole tree)",
                     c.expected.empty() ? std::string("it passes") : c.expected,
                     c.found.empty() ? c.detail : c.found,
                     {}});
  return out;
}

// The environment as the probe's real loader will see it: scanned afresh (files just renamed into
// place are read, not a cache's answer), with the host's ld.so.cache, which the real loader reads
// whatever --ld-so-cache told the model.
r::Environment scan_for_probe(const GlobalOptions& g, const r::EnvLayout& layout) {
  auto opts = scan_options(g);
  opts.cache_dir.clear();
  opts.ld_so_cache.reset();
  return r::scan_environment(layout, opts);
}

// Why the baseline says the driver cannot verify anything: none here, or a driver stage that
// failed before any library of the environment was asked for; empty: it can.
std::string driver_unusable(const pr::ProbePoint& baseline) {
  if (baseline.no_driver()) return "no GPU driver (libcuda.so.1) here";
  if (baseline.verdict.outcome == pr::Outcome::ok || !baseline.failed_stage) return "";
  const std::string& stage = *baseline.failed_stage;
  if (stage.rfind("cudnn", 0) == 0 || stage == "dlopen library") return "";
  return fmt::format("the driver fails before the environment is used ({})", baseline.verdict.message);
}

std::string point_summary(const r::Environment& env, const pr::ProbePoint& pt) {
  std::string s = fmt::format("{} of {} libraries open", pt.opened(), pt.libraries.size());
  if (pt.left_out > 0) s += fmt::format(" ({} more past the limit of {} not opened)", pt.left_out, pr::k_max_opened);
  if (pt.consumer_missing) s += fmt::format(", the rest not yet: {} resolves nowhere", *pt.consumer_missing);
  if (pt.cudnn_version && pt.cudnn) s += fmt::format("; cuDNN {} from {}", *pt.cudnn_version, env.display(*pt.cudnn));
  return s;
}

}  // namespace

std::function<void(std::size_t)> step_verifier(const GlobalOptions& g, const r::Environment& env,
                                               const r::Knowledge& knowledge, const std::vector<std::string>& steps,
                                               const tx::Transaction& t, StepChecks& checks) {
  const r::EnvLayout& layout = env.layout;
  pr::VerifyOptions vo;
  vo.probe = probe_path();
  // What the whole transaction writes, opened at every point (the tree may not reach it).
  std::set<std::string> all_paths;
  for (std::size_t k = 0; k < t.step_count(); ++k) all_paths.merge(t.step_paths(k));
  const std::vector<std::string> written(all_paths.begin(), all_paths.end());
  if (!checks.skip) {
    checks.baseline = pr::probe_point(scan_for_probe(g, layout), knowledge, vo, written);
    checks.unverified_why = driver_unusable(*checks.baseline);
    checks.unverified = !checks.unverified_why.empty();
    if (!g.quiet && !g.json)
      std::cerr << (checks.unverified
                        ? fmt::format("baseline before step 1: {}; the steps go on unverified\n", checks.unverified_why)
                        : fmt::format("baseline before step 1: {}\n", point_summary(env, *checks.baseline)));
  }
  return [&g, &layout, &knowledge, &steps, &t, &checks, vo, written](std::size_t step) mutable {
    if (checks.skip || checks.unverified) return;
    const r::Environment now = scan_for_probe(g, layout);
    vo.consumer = checks.baseline->consumer;
    const bool last = step + 1 == steps.size();
    std::set<std::string> changed = t.step_paths(step);
    if (last)
      for (std::size_t k = 0; k < step; ++k) changed.merge(t.step_paths(k));
    StepChecks::Step result{step, steps[step], pr::probe_point(now, knowledge, vo, written), {}};
    result.judgement = pr::judge_step(now, *checks.baseline, result.point, changed, last);
    if (last && result.judgement.ok()) {  // a failed step says why already: no second probe
      pr::VerifyOptions whole;
      whole.probe = vo.probe;
      checks.last = pr::verify_environment(now, knowledge, whole);
      // The whole tree's check repeats what a step's own found (the same cuDNN): said once.
      for (auto& p : verify_problems(*checks.last)) {
        auto& failures = result.judgement.failures;
        if (std::none_of(failures.begin(), failures.end(),
                         [&](const pr::Problem& f) { return f.expected == p.expected && f.found == p.found; }))
          failures.push_back(std::move(p));
      }
    }
    const bool ok = result.judgement.ok();
    const std::string summary = point_summary(now, result.point);
    checks.steps.push_back(std::move(result));
    if (!ok) {
      checks.failed = true;
      throw r::Error(steps_failed_text(step, steps[step], checks.steps.back().judgement.failures));
    }
    if (!g.quiet && !g.json)
      std::cerr << fmt::format("verified after step {} ({}): {}{}\n", step + 1, steps[step], summary,
                               last ? "; the whole tree loads" : "");
  };
}

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
  try {
    t.carry_out(check);
  } catch (const r::Error& e) {
    if (!checks.failed) throw;
    if (g.json) {
      auto doc = document_start(command, env.layout.root);
      doc["transaction"] = t.id();
      doc["undone"] = true;
      doc["error"] = e.what();
      doc["exit"] = 1;
      doc["verification"] = verification_json(env, checks);
      out << doc.dump() << '\n';
    }
    std::cerr << fmt::format("cudafix: {}\n", printable_lines(e.what()));
    return 1;
  }
  return std::nullopt;
}

namespace {

// A plan step's wheel as a file: the one it names, or, for a wheel read by range from an index,
// a download of it (cudafix's wheel cache first), its SHA-256 the plan's.
std::string planned_wheel_file(const GlobalOptions& g, const r::Environment& env, const r::PlanWheel& wheel,
                               std::optional<installer::source::WheelSources>& sources) {
  if (wheel.file) return *wheel.file;
  if (!wheel.url || wheel.sha256.empty()) throw r::Error("a step's wheel has neither a file nor a URL and its SHA-256");
  const std::string& url = *wheel.url;
  if (g.offline) throw r::Error(fmt::format("{} is not downloaded yet, and --offline forbids it", url));
  auto settings = wheel_source_settings(g, env, {});
  if (!sources) {
    if (settings.cache_dir.empty())
      throw r::Error("no cache folder for downloaded wheels: set CUDAFIX_CACHE_DIR or HOME");
    sources.emplace(settings);
  }
  const std::string real_url = installer::source::restore_credentials(url, settings.index_urls);
  const auto name = installer::source::file_name_in_url(url);
  if (!name) throw r::Error(fmt::format("{}: the URL does not end with a wheel's file name", url));
  const auto got = sources->download(real_url, wheel.sha256, *name);
  if (got.file.empty()) throw r::Error(got.problem);
  return got.file;
}

bool same_version(const std::string& a, const std::string& b) {
  const auto va = r::Version::parse(a), vb = r::Version::parse(b);
  return va && vb ? *va == *vb : a == b;
}

// The step's dist, found in the environment by its dist-info folder, and checked to be the one
// the step names (the prompt shows the name and version: they must be what is changed).
std::optional<int> bound_dist(const r::Environment& env, const r::PlanStep& st, const std::string& where) {
  const bool needs_dist = st.action != r::StepAction::install;
  if (!st.dist) {
    if (needs_dist)
      throw r::Error(fmt::format("{}.dist: a {} step names the dist it changes", where, r::to_string(st.action)));
    if (env.dist_index(r::normalize_name(st.name)))
      throw r::Error(fmt::format("{}: installs {}, which is installed already, without naming the dist it replaces",
                                 where, st.name));
    return std::nullopt;
  }
  std::optional<int> found;
  for (std::size_t i = 0; i < env.dists.size(); ++i)
    if (env.dists[i].dir_name == *st.dist) found = static_cast<int>(i);
  if (!found) throw r::Error(fmt::format("{}.dist: {} is not installed in {}", where, *st.dist, env.layout.root));
  const auto& d = env.dists[static_cast<std::size_t>(*found)];
  const bool same = d.normalized == r::normalize_name(st.name) && (!needs_dist || same_version(d.version, st.version));
  if (!same)
    throw r::Error(fmt::format("{}: says {} {} {}, but its dist {} is {}", where, r::to_string(st.action), st.name,
                               st.version, *st.dist, r::dist_label(d)));
  return found;
}

// The paths a step lists, made absolute and sorted, against what the replay computed now.
void check_paths(const r::Environment& env, const std::vector<r::PlanPath>& planned, std::vector<std::string> now,
                 const std::string& where, const std::string& label) {
  std::vector<std::string> listed;
  for (const auto& p : planned) listed.push_back(r::absolute_path(env, p));
  std::sort(listed.begin(), listed.end());
  std::sort(now.begin(), now.end());
  if (listed == now) return;
  const auto why = [&](const std::string& p) {
    return r::is_within(p, env.layout.root_real) ? env.display(p) : p + " (outside the environment)";
  };
  for (const auto& p : listed)
    if (!std::binary_search(now.begin(), now.end(), p))
      throw r::Error(
          fmt::format("{}: lists {}, which {} does not touch in this environment now", where, why(p), label));
  for (const auto& p : now)
    if (!std::binary_search(listed.begin(), listed.end(), p))
      throw r::Error(fmt::format("{}: leaves out {}, which {} touches in this environment now", where, why(p), label));
  throw r::Error(fmt::format("{}: lists a path twice", where));
}

// The plan's fingerprint with absolute paths, checked against itself: its digest, and a stamp
// for every file a step touches (fingerprint_of's set), so that what changed since is caught.
r::Fingerprint checked_fingerprint(const r::Environment& env, const r::PlanFile& plan, const std::string& name) {
  r::Fingerprint fp;
  fp.records = plan.fingerprint.records;
  std::set<std::string> stamped;
  for (const auto& f : plan.fingerprint.files) {
    fp.files.push_back({r::absolute_path(env, f.path), f.exists, f.dev, f.ino, f.size, f.mtime_ns});
    stamped.insert(fp.files.back().path);
  }
  fp.digest = plan.fingerprint.digest;
  if (r::digest_of(fp) != fp.digest)
    throw r::Error(
        fmt::format("{}: fingerprint.digest: not the digest of the fingerprint's records and files (the "
                    "plan was edited); make a new plan",
                    name));
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const auto& st = plan.steps[i];
    for (const auto* list : {&st.deletes, &st.keeps, &st.writes})
      for (const auto& p : *list) {
        const std::string abs = r::absolute_path(env, p);
        if (!abs.ends_with("/") && !stamped.count(abs))
          throw r::Error(
              fmt::format("{}: fingerprint.files: no stamp of {}, which steps[{}] touches (the plan was "
                          "edited); make a new plan",
                          name, env.display(abs), i));
      }
  }
  return fp;
}

}  // namespace

namespace {

// A refusal for a fingerprint that no longer matches: the first three differences, one a line,
// and how many more, then the command that makes a new plan on a line of its own (a changed
// environment can differ in thousands of files: all of them on one line buried the way out).
std::string changed_since_plan(const std::vector<std::string>& changes, const std::string& remake) {
  constexpr std::size_t k_shown = 3;
  std::string out = fmt::format("the environment changed since the plan was made ({}); nothing was changed:",
                                count_of(changes.size(), "difference", "differences"));
  for (std::size_t i = 0; i < std::min(changes.size(), k_shown); ++i) out += "\n  " + changes[i];
  if (changes.size() > k_shown) out += fmt::format("\n  ... and {} more", changes.size() - k_shown);
  return out + "\n" + remake;
}

}  // namespace

PreparedPlan prepare_plan(const GlobalOptions& g, const r::Environment& env, const r::Knowledge& knowledge,
                          const r::PlanFile& plan, const std::string& name, const std::string& remake) {
  if (!plan.ok)
    throw r::Error(
        fmt::format("{}: ok: false: planning found no safe order, so it cannot be carried out: {}; "
                    "nothing was changed",
                    name, plan.problem.value_or("(no problem given)")));
  const auto fp = checked_fingerprint(env, plan, name);
  if (const auto changes = fingerprint_changes(env, fp); !changes.empty())
    throw r::Error(changed_since_plan(changes, remake));
  PreparedPlan out;
  std::optional<installer::source::WheelSources> sources;  // made when a step's wheel must be downloaded
  std::vector<r::Step> steps;
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const auto& st = plan.steps[i];
    const std::string where = fmt::format("{}: steps[{}]", name, i);
    PreparedStep p;
    p.label = r::step_label(st);
    r::Step step;
    step.action = st.action;
    step.dist = bound_dist(env, st, where).value_or(-1);
    step.name = st.name;
    step.version = st.version;
    if (st.action != r::StepAction::remove) {
      if (!st.wheel)
        throw r::Error(fmt::format("{}: {} has no wheel (plan again with --find-links naming it)", where, p.label));
      auto wheel = installer::validate_wheel(planned_wheel_file(g, env, *st.wheel, sources));
      if (r::sha256_of_file(wheel.path, r::DigestForm::hex) != st.wheel->sha256)
        throw r::Error(fmt::format("{} changed since the plan was made (its SHA-256 differs)", wheel.path));
      if (r::normalize_name(wheel.name) != r::normalize_name(st.name) || !same_version(wheel.version, st.version))
        throw r::Error(fmt::format("{}.wheel: {} is {} {}, not the step's {} {}", where, wheel.path, wheel.name,
                                   wheel.version, st.name, st.version));
      out.wheels.push_back(installer::read_wheel(wheel.path, {}));
      step.wheel = &out.wheels.back();
      p.wheel = std::move(wheel);
    }
    // Said with the dist's name as pip list shows it, whatever spelling the plan file has.
    r::PlanStep named;
    named.action = st.action;
    named.name = p.wheel          ? p.wheel->project
                 : step.dist >= 0 ? env.dists[static_cast<std::size_t>(step.dist)].name
                                  : st.name;
    named.version = st.version;
    p.label = r::step_label(named);
    steps.push_back(std::move(step));
    out.steps.push_back(std::move(p));
  }
  // Each step replayed on the model of the environment now, as the planner judged it: what it
  // deletes, keeps and writes must be what the plan lists, and nothing required may get worse.
  auto replayed = r::replay_steps(env, knowledge, std::move(steps), plan.cuda_major, g.threads);
  for (std::size_t i = 0; i < replayed.size(); ++i) {
    const auto& st = plan.steps[i];
    auto& now = replayed[i];
    const std::string where = fmt::format("{}: steps[{}]", name, i);
    const std::string& label = out.steps[i].label;
    check_paths(env, st.deletes, now.deletes, where + ".deletes", label);
    check_paths(env, st.keeps, now.keeps, where + ".keeps", label);
    check_paths(env, st.writes, now.writes, where + ".writes", label);
    if (!now.ok)
      throw r::Error(fmt::format("{} ({}) is unsafe in this environment now: {}; nothing was changed", where, label,
                                 r::describe_breaks(env, now.worse)));
    out.steps[i].step = std::move(now);
  }
  return out;
}

std::vector<std::string> PreparedPlan::labels() const {
  std::vector<std::string> said;
  for (const auto& st : steps) said.push_back(st.label);
  return said;
}

std::size_t stage_plan(const GlobalOptions& g, const r::Environment& env, const PreparedPlan& plan,
                       tx::Transaction& t) {
  const auto& layout = writable(env);
  r::EarlierSteps earlier;  // the dists removed or replaced so far, and the paths written
  std::size_t files = 0;
  for (const auto& prepared : plan.steps) {
    const r::Step& st = prepared.step;
    if (st.action == r::StepAction::remove) {
      r::Deletion del;
      for (const auto& abs : st.deletes) {
        if (abs.ends_with("/"))
          del.dirs.push_back(abs.substr(0, abs.size() - 1));
        else
          del.files.push_back(abs);
      }
      tx::plan_removal_ops(env, del, t);
      files += del.files.size();
      earlier.removed.insert(st.dist);
      earlier.deleted.insert(del.files.begin(), del.files.end());
    } else {
      const auto staged =
          installer::stage_wheel(*prepared.wheel, layout, t, g.threads, false, progress_bar(g, "installing"));
      earlier.listed.insert(staged.targets.begin(), staged.targets.end());
      if (st.dist >= 0) plan_leftovers(env, st.dist, earlier, t);
      files += staged.targets.size();
    }
    t.mark_step();
  }
  return files;
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
  const PreparedPlan prepared = prepare_plan(g, env, knowledge, plan, o.plan,
                                             fmt::format("make a new plan: cudafix plan fix --venv {} -o {}",
                                                         shell_word(env.layout.root), shell_word(o.plan)));
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
  const std::size_t files = stage_plan(g, env, prepared, t);
  StepChecks checks;
  checks.skip = o.no_verify;
  const auto check = step_verifier(g, env, knowledge, said, t, checks);
  if (const auto rc = carry_out_verified(g, out, "apply", env, t, check, checks)) return *rc;
  const std::string text_out = fmt::format("applied {} ({} files){}", count_of(said.size(), "step", "steps"), files,
                                           o.no_verify         ? ", not verified (--no-verify)"
                                           : checks.unverified ? "; not verified: " + checks.unverified_why
                                                               : ", each verified on the GPU");
  report_done(g, out, "apply", env.layout.root, t, text_out, keep,
              {{"steps", said},
               {"verified", !o.no_verify && !checks.unverified},
               {"verification", verification_json(env, checks)}});
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
                        {{"installed", labels}, {"replaced", replaced}, {"files", files}});
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
  for (const auto& w : wheels) installer::check_targets(w, layout);
  if (o.dry_run) return install_dry_run(g, out, env, wheels, labels);
  if (!confirmed(g, fmt::format("install {}", fmt::join(labels, ", "))))
    return declined(g, out, "install", env.layout.root);
  tx::Transaction t(layout.root_real, "install " + fmt::format("{}", fmt::join(labels, ", ")));
  std::size_t files = 0;
  r::EarlierSteps earlier;  // the dists replaced so far, and the paths written
  for (const auto& w : wheels) {
    const auto staged = installer::stage_wheel(w, layout, t, g.threads, true, progress_bar(g, "installing"));
    earlier.listed.insert(staged.targets.begin(), staged.targets.end());
    // An installed dist of that name is replaced: what it lists and no wheel here writes goes.
    if (const auto installed = env.dist_index(r::normalize_name(w.name))) plan_leftovers(env, *installed, earlier, t);
    files += staged.targets.size();
    t.mark_step();
  }
  StepChecks checks;
  checks.skip = o.no_verify;
  const auto check = step_verifier(g, env, knowledge, labels, t, checks);
  if (const auto rc = carry_out_verified(g, out, "install", env, t, check, checks)) return *rc;
  report_done(g, out, "install", env.layout.root, t,
              fmt::format("installed {} ({} files){}", fmt::join(labels, ", "), files,
                          o.no_verify         ? ", not verified (--no-verify)"
                          : checks.unverified ? "; not verified: " + checks.unverified_why
                                              : ", verified on the GPU"),
              keep,
              {{"installed", labels},
               {"files", files},
               {"verified", !o.no_verify && !checks.unverified},
               {"verification", verification_json(env, checks)}});
  return checks.unverified ? 4 : 0;
}

}  // namespace cudafix::cli
