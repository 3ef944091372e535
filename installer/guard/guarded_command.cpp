#include "installer/guard/guarded_command.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include "installer/probe/verdict.hpp"
#include "installer/txn/file_ops.hpp"
#include "installer/txn/transaction.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/state_folder.hpp"
#include "resolver/plan/fix.hpp"
#include "resolver/plan/provenance.hpp"
#include "resolver/plan/uninstall_command.hpp"

namespace cudafix::installer::guard {
namespace {

namespace r = cudafix::resolver;
namespace tx = installer::txn;
namespace pr = installer::probe;

constexpr std::chrono::milliseconds k_watch_interval{50};

// Whether a deletion holds a shared object or a link to one ("libx.so", "libx.so.9", "_C.so"):
// the loader could see it go.
bool deletes_no_library(const r::Deletion& deletion) {
  return std::none_of(deletion.files.begin(), deletion.files.end(),
                      [](const std::string& f) { return r::base_name(f).find(".so") != std::string::npos; });
}

std::string snapshot_name_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return fmt::format("guard-{}-{}", buf, ::getpid());
}

std::vector<Worse> model_worse(const r::Environment& before_env, const r::Environment& after_env,
                               const r::Knowledge& knowledge, const Judgement& before, const Judgement& after) {
  std::vector<Worse> out;
  for (const auto& key : after.error_keys)
    if (!before.error_keys.count(key)) {
      const auto cut = key.find('\n');
      out.push_back({"doctor", key.substr(0, cut), cut == std::string::npos ? "" : key.substr(cut + 1)});
    }
  // A resolution doctor does not call an error (one that moved to the host's library, where a
  // rule is configured off) still counts: the planner's judgement, as plan remove gives it.
  if (out.empty())
    for (const auto& b : r::worse_resolutions(before_env, after_env, knowledge))
      out.push_back({"resolution", b.soname, r::describe_breaks(before_env, {b})});
  return out;
}

// Where a writer's claim on a path stands now: "" when the path is as that writer left it.
struct Claim {
  std::string writer;
  std::optional<tx::Left> left;       // a transaction's record of what it left
  std::optional<std::string> sha256;  // a RECORD row's hash: the file should hold those bytes
  bool absent = false;                // an uninstall's: the path should be gone
};

std::string differs_from_claim(const std::string& path, const Claim& c) {
  if (c.left) return tx::change_at(*c.left).value_or("");
  struct stat st {};
  const bool present = ::lstat(path.c_str(), &st) == 0;
  if (c.absent) return present ? "is there again" : "";
  if (c.sha256) {
    if (!present) return "was removed";
    if (!c.sha256->empty() && (!S_ISREG(st.st_mode) || r::sha256_of_file(path) != *c.sha256))
      return "holds other bytes";
  }
  return "";
}

// The projects a pip or uv install names (`pip install X`, `python -m pip install X.whl`, `uv pip
// install X`): another guard's install is attributed by the dists of those names. Options and
// their values are skipped.
std::set<std::string> installed_projects(const std::vector<std::string>& argv) {
  std::set<std::string> out;
  std::size_t i = 0;
  for (; i + 1 < argv.size(); ++i) {
    const auto b = r::base_name(argv[i]);
    if ((b == "pip" || b == "pip3" || b.starts_with("pip3.")) && argv[i + 1] == "install") break;
  }
  static const std::set<std::string, std::less<>> with_value = {"-r",
                                                                "--requirement",
                                                                "-c",
                                                                "--constraint",
                                                                "-e",
                                                                "--editable",
                                                                "-i",
                                                                "--index-url",
                                                                "--extra-index-url",
                                                                "-f",
                                                                "--find-links",
                                                                "-t",
                                                                "--target",
                                                                "--prefix",
                                                                "--root",
                                                                "--python",
                                                                "--platform",
                                                                "--python-version",
                                                                "--implementation",
                                                                "--abi",
                                                                "--src",
                                                                "--upgrade-strategy",
                                                                "--cache-dir",
                                                                "--log",
                                                                "--report",
                                                                "-C",
                                                                "--config-settings",
                                                                "--no-binary",
                                                                "--only-binary",
                                                                "--trusted-host",
                                                                "--proxy",
                                                                "--retries",
                                                                "--timeout",
                                                                "--exists-action",
                                                                "--cert"};
  for (std::size_t k = i + 2; k < argv.size(); ++k) {
    const std::string& a = argv[k];
    if (a.starts_with("-")) {
      if (with_value.count(a)) ++k;
      continue;
    }
    std::string req = a;
    if (a.ends_with(".whl")) {  // a wheel's file name starts with its project
      req = std::string(r::base_name(a));
      req = req.substr(0, req.find('-'));
    }
    if (const auto p = r::requirement_project(req)) out.insert(r::normalize_name(*p));
  }
  return out;
}

}  // namespace

std::optional<UninstallRead> read_uninstall(const r::Environment& env, const r::Knowledge& knowledge,
                                            const std::vector<std::string>& argv, unsigned threads) {
  const auto cmd = r::parse_uninstall_command(argv);
  if (!cmd) return std::nullopt;
  UninstallRead u;
  u.tool = cmd->tool;
  std::vector<std::string> requirements = cmd->requirements;
  const auto files = r::read_requirement_files(cmd->requirement_files);
  requirements.insert(requirements.end(), files.requirements.begin(), files.requirements.end());
  u.problems = files.problems;
  for (const auto& req : requirements) {
    const auto project = r::requirement_project(req);
    if (!project) {
      u.unnamed = true;
      continue;
    }
    const auto d = env.dist_index(r::normalize_name(*project));
    if (!d) {
      u.skipped.push_back(*project);
      continue;
    }
    if (std::find(u.dists.begin(), u.dists.end(), *d) == u.dists.end()) u.dists.push_back(*d);
  }
  for (int d : u.dists) u.names.push_back(env.dists[static_cast<std::size_t>(d)].name);
  // pip and uv delete what the dists' RECORDs list, the byte code and the folders that empties;
  // an egg or a dist without RECORD is removed by guesses (top_level.txt, easy-install.pth).
  const bool by_record = std::all_of(u.dists.begin(), u.dists.end(), [&](int d) {
    const auto& dist = env.dists[static_cast<std::size_t>(d)];
    return dist.format == r::DistFormat::dist_info && dist.has_record && dist.record_problem.empty();
  });
  if (u.problems.empty() && !u.unnamed && by_record) u.scope = u.dists;
  u.touches_no_library = u.problems.empty();
  if (!u.dists.empty()) {
    u.plan = r::plan_removal(env, knowledge, u.dists, threads);
    u.touches_no_library = u.touches_no_library && deletes_no_library(u.plan->pip.deletion);
  }
  return u;
}

std::vector<Worse> probe_worse(const pr::VerifyReport& before, const pr::VerifyReport& after) {
  std::vector<Worse> out;
  std::set<std::string> passed;
  for (const auto& s : before.records.stages)
    if (s.ok) passed.insert(pr::stage_label(s));
  for (const auto& s : after.records.stages) {
    const std::string label = pr::stage_label(s);
    if (!s.ok && passed.count(label))
      out.push_back({"probe", label, s.detail.empty() ? after.verdict.message : s.detail});
  }
  for (const auto& c : after.checks) {
    if (c.ok) continue;
    const bool held = std::any_of(before.checks.begin(), before.checks.end(),
                                  [&](const pr::Check& b) { return b.check == c.check && b.ok; });
    if (held)
      out.push_back({"probe", c.check,
                     c.expected.empty() ? c.detail : fmt::format("expected {}, found {}", c.expected, c.found)});
  }
  if (out.empty() && before.verdict.outcome == pr::Outcome::ok && after.verdict.outcome != pr::Outcome::ok)
    out.push_back({"probe", std::string(pr::to_string(after.verdict.outcome)), after.verdict.message});
  return out;
}

GuardedCommand::GuardedCommand(const r::Environment& env, const r::Knowledge& knowledge, Judge judge, Settings settings,
                               Callbacks callbacks)
    : env_(env),
      knowledge_(knowledge),
      judge_(std::move(judge)),
      settings_(std::move(settings)),
      callbacks_(std::move(callbacks)) {}

GuardedCommand::~GuardedCommand() {
  close_window();
  if (probing_.valid()) (void)probing_.get();
}

void GuardedCommand::watch_guards() {
  const auto records = tx::guard_records(env_.layout.root_real);
  std::lock_guard<std::mutex> lock(guards_mutex_);
  // A record no guard holds whose snapshot never completed is no writer: its command never ran
  // under it (or was judged), and anyone may leave such a file in the window.
  for (const auto& g : records)
    if (g.snapshot != snapshot_.name && (g.alive || g.has_snapshot)) guards_seen_.emplace(g.snapshot, g);
}

void GuardedCommand::close_window() {
  window_open_ = false;
  if (watcher_.joinable()) watcher_.join();
}

void GuardedCommand::phase(const char* name) const {
  if (callbacks_.phase) callbacks_.phase(name);
}

GuardedCommand::Stamp GuardedCommand::stamp_of(const std::string& path, bool follow) {
  struct stat st {};
  Stamp s;
  if ((follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) return s;
  return {true,
          static_cast<std::uint64_t>(st.st_dev),
          static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::uint64_t>(st.st_size),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
          static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
}

bool GuardedCommand::tree_changed() const {
  return std::any_of(stamps_.begin(), stamps_.end(), [](const auto& kv) {
    return kv.second != std::pair<Stamp, Stamp>{stamp_of(kv.first, false), stamp_of(kv.first, true)};
  });
}

void GuardedCommand::start_baseline() {
  if (settings_.probe.empty()) {
    probe_why_not_ = "--no-verify";
  } else {
    pr::VerifyOptions vo;
    vo.probe = settings_.probe;
    probing_ = std::async(std::launch::async, [this, vo]() -> std::optional<pr::VerifyReport> {
      return pr::verify_environment(env_, knowledge_, vo);
    });
  }
  before_ = judge_(env_);
  phase("doctor");
}

const tx::SnapshotInfo& GuardedCommand::take_snapshot(const std::optional<UninstallRead>& uninstall) {
  uninstall_ = uninstall;
  const std::optional<std::vector<int>> scope = uninstall ? uninstall->scope : std::nullopt;
  const std::string root = env_.layout.root_real;
  tx::GuardRecord rec;
  rec.snapshot = snapshot_name_now();
  rec.command = settings_.command;
  if (scope) {
    rec.scope.emplace();
    for (int d : *scope) rec.scope->push_back(env_.dists.at(static_cast<std::size_t>(d)).dir_name);
  }
  // Intent before effect: a guard killed while its snapshot is taken leaves a record that the
  // next holder of the lock finds, with the half-taken snapshot, and removes, saying so.
  record_ = std::make_unique<tx::HeldGuardRecord>(root, rec);
  tx::test_pause("guard-recorded");
  snapshot_ = tx::take_snapshot(env_, rec.snapshot, {}, scope);
  for (const auto& t : tx::transactions(root)) transactions_before_.insert(t.id);
  for (const auto& d : env_.dists) dists_before_.insert(d.dir_name);
  window_open_ = true;
  watch_guards();
  watcher_ = std::thread([this] {
    while (window_open_) {
      std::this_thread::sleep_for(k_watch_interval);
      watch_guards();
    }
  });
  phase("snapshot");
  tx::test_pause("guard-snapshotted");
  return snapshot_;
}

void GuardedCommand::finish_baseline() {
  if (probing_.valid()) before_probe_ = probing_.get();
  if (before_probe_ && before_probe_->verdict.outcome == pr::Outcome::no_driver) {
    probe_why_not_ = "no GPU driver (libcuda.so.1) here";
    before_probe_.reset();
  }
  if (!before_probe_) return;
  const auto add = [&](const std::optional<std::string>& p) {
    if (p && !p->empty()) stamps_[*p] = {stamp_of(*p, false), stamp_of(*p, true)};
  };
  for (const auto& f : before_probe_->loaded) {
    add(f.path);
    add(f.predicted);
  }
  add(before_probe_->consumer);
  add(before_probe_->cudnn);
  phase("probe");
}

bool GuardedCommand::others_wrote(const r::Environment& now) const {
  if (!guards_seen_.empty()) return true;
  for (const auto& t : tx::transactions(env_.layout.root_real))
    if (!transactions_before_.count(t.id) && t.state == tx::TxState::committed) return true;
  // A dist that appeared or went, other than those the uninstall removes.
  std::set<std::string> removed;
  if (uninstall_ && uninstall_->scope)
    for (int d : *uninstall_->scope) removed.insert(env_.dists.at(static_cast<std::size_t>(d)).dir_name);
  std::set<std::string> dists_now;
  for (const auto& d : now.dists) dists_now.insert(d.dir_name);
  for (const auto& d : dists_before_)
    if (!dists_now.count(d) && !removed.count(d)) return true;
  for (const auto& d : dists_now)
    if (!dists_before_.count(d)) return true;
  return false;
}

std::vector<Claimed> GuardedCommand::claims(const r::Environment& now, const std::vector<tx::SnapshotChange>& changes,
                                            std::vector<Claimed>& overlap) const {
  const std::string root = env_.layout.root_real;
  std::map<std::string, Claim> claimed;
  // cudafix transactions that committed in the window: their journals say what they left where.
  for (const auto& t : tx::transactions(root)) {
    if (transactions_before_.count(t.id) || t.state != tx::TxState::committed) continue;
    const std::string writer = fmt::format("cudafix transaction {} (`{}`)", t.id, r::to_valid_utf8(t.command));
    for (const auto& l : t.left) claimed.emplace(l.path, Claim{writer, l, std::nullopt, false});
  }
  // Other guards' uninstalls: the files their scopes' dists listed when this one's window opened.
  for (const auto& [name, g] : guards_seen_) {
    const std::string writer =
        fmt::format("the guard of `{}` (snapshot '{}')", r::to_valid_utf8(tx::shown_command(g.command)), g.snapshot);
    for (const auto& project : installed_projects(g.command))
      for (const auto& d : now.dists)
        if (d.normalized == project)
          for (const auto& row : d.record)
            claimed.emplace(
                r::join_normal(d.site_dir, row.path),
                Claim{writer, std::nullopt, std::string(row.hash_algo() == "sha256" ? row.hash : ""), false});
    if (!g.scope) continue;
    for (const auto& folder : *g.scope)
      for (const auto& d : env_.dists)
        if (d.dir_name == folder)
          for (const auto& row : d.record)
            claimed.emplace(r::join_normal(d.site_dir, row.path), Claim{writer, std::nullopt, std::nullopt, true});
  }
  // An uninstall writes no file: a dist that appeared in the window is another writer's install.
  const bool uninstall_only = uninstall_ && uninstall_->scope;
  if (uninstall_only)
    for (const auto& d : now.dists) {
      if (dists_before_.count(d.dir_name)) continue;
      const std::string installer(r::trim(
          r::try_read_file(d.site_dir + "/" + d.dir_name + "/INSTALLER", 256).value_or("an unknown installer")));
      const std::string writer = fmt::format("{} {} (installed by {})", d.name, d.version, r::to_valid_utf8(installer));
      for (const auto& row : d.record)
        claimed.emplace(r::join_normal(d.site_dir, row.path),
                        Claim{writer, std::nullopt, std::string(row.hash_algo() == "sha256" ? row.hash : ""), false});
    }
  std::vector<Claimed> out;
  for (const auto& c : changes) {
    auto at = claimed.find(c.path);
    if (at == claimed.end()) {
      // An uninstall only removes: bytes that changed were written by someone else.
      if (uninstall_only && c.what != "was removed")
        out.push_back({c.path, c.what, "another writer (an uninstall writes no file)", ""});
      continue;
    }
    // The uninstall removes its dists' files by intent: another writer that claims one of them
    // too (a second uninstall of the same dist, an install of it in the window) wrote the same path.
    const bool both_removed = uninstall_only && c.what == "was removed";
    const std::string found = both_removed ? "was removed by this command too" : differs_from_claim(c.path, at->second);
    if (!found.empty())
      overlap.push_back({c.path, c.what, at->second.writer, found});
    else
      out.push_back({c.path, c.what, at->second.writer, ""});
  }
  return out;
}

Outcome GuardedCommand::judge(const r::Environment& now) {
  try {
    return judge_held(now);
  } catch (...) {
    // What the command left was not judged, or not undone: the record names the snapshot.
    if (record_) record_->leave();
    throw;
  }
}

Outcome GuardedCommand::judge_held(const r::Environment& now) {
  close_window();
  watch_guards();
  Outcome out;
  const std::string root = env_.layout.root_real;
  out.after = judge_(now);
  out.worse = model_worse(env_, now, knowledge_, before_, out.after);
  phase("rescan");
  if (before_probe_ && (tree_changed() || !out.worse.empty())) {
    pr::VerifyOptions vo;
    vo.probe = settings_.probe;
    out.after_probe = pr::verify_environment(now, knowledge_, vo);
    for (auto& w : probe_worse(*before_probe_, *out.after_probe)) out.worse.push_back(std::move(w));
    phase("probe_after");
  } else {
    out.after_probe_why_not =
        before_probe_ ? "the command changed no file of the consumer's library tree" : probe_why_not_;
  }
  struct stat st {};
  out.snapshot_gone = ::lstat((tx::snapshot_dir(root, snapshot_.name) + "/manifest.json").c_str(), &st) != 0;
  const auto changes = tx::changes_since(now, snapshot_);
  out.others = claims(now, changes, out.overlap);
  std::set<std::string> not_ours;
  for (const auto* list : {&out.others, &out.overlap})
    for (const auto& c : *list) not_ours.insert(c.path);
  for (const auto& c : changes)
    if (!not_ours.count(c.path)) out.ours.push_back(c);

  const auto finish_clean = [&](Verdict v) {
    out.verdict = v;
    out.snapshot_kept = settings_.keep && !out.snapshot_gone;
    if (!out.snapshot_kept && !out.snapshot_gone) tx::delete_snapshot(root, snapshot_.name);
    phase("delete");
    return out;
  };
  if (out.worse.empty()) return finish_clean(Verdict::nothing_worse);
  if (out.snapshot_gone) {
    out.verdict = Verdict::snapshot_gone;
    return out;
  }
  if (!out.overlap.empty()) {
    out.verdict = Verdict::overlap;
    out.snapshot_kept = true;
    if (record_) record_->leave();
    return out;
  }
  // Not the command's doing: it changed nothing, or it is an uninstall the model judged harmless
  // and another writer changed the environment in the window.
  const bool harmless_uninstall = uninstall_ && uninstall_->scope && uninstall_->plan && uninstall_->plan->safe();
  if (out.ours.empty() || (harmless_uninstall && (!out.others.empty() || others_wrote(now)))) {
    if (out.others.empty()) return finish_clean(Verdict::not_ours);
    // Paths the snapshot holds were changed by writers guard believes are others (a record, a
    // journal, a RECORD: each one the command could have written itself): nothing is undone on
    // their word, but the snapshot that restores them stays, named by every later command.
    out.verdict = Verdict::not_ours;
    out.snapshot_kept = !out.snapshot_gone;
    if (record_ && out.snapshot_kept) record_->leave();
    return out;
  }
  if (settings_.keep) {
    out.verdict = Verdict::kept;
    out.snapshot_kept = true;
    return out;
  }
  tx::test_pause("guard-judged");
  undo(now, out);
  return out;
}

void GuardedCommand::undo(const r::Environment& now, Outcome& out) {
  const std::string root = env_.layout.root_real;
  std::vector<std::string> paths;
  for (const auto& c : out.ours) paths.push_back(c.path);
  tx::Transaction t(root,
                    "guard: undo `" + tx::shown_command(settings_.command) + "` (snapshot " + snapshot_.name + ")");
  const auto check = tx::plan_restore_paths(now, snapshot_, paths, t);
  if (!check.altered.empty()) {
    t.abandon();
    out.verdict = Verdict::altered;
    out.altered = check.altered;
    out.snapshot_kept = true;
    if (record_) record_->leave();
    return;
  }
  t.carry_out();
  (void)tx::prune_transactions(settings_.retention_root, settings_.retention_count);
  out.verdict = Verdict::undone;
  if (callbacks_.rescan) {
    const r::Environment again = callbacks_.rescan();
    out.still_worse = model_worse(env_, again, knowledge_, before_, judge_(again));
  }
  if (!out.still_worse.empty()) {
    out.snapshot_kept = true;
    if (record_) record_->leave();
  } else {
    tx::delete_snapshot(root, snapshot_.name);
  }
  out.transaction = t.id();
  out.restored = check.restore;
  out.moved_aside = check.remove;
  phase("undo");
}

std::vector<std::string> killed_guard_notices(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& rec : tx::guard_records(root)) {
    if (rec.alive || !rec.has_snapshot) continue;
    const std::string when =
        rec.time > 0 ? fmt::format(" (started {} s ago)", std::max<std::int64_t>(0, std::time(nullptr) - rec.time))
                     : "";
    out.push_back(fmt::format(
        "a guard was killed while `{}` ran{}, or ended without undoing it: snapshot '{}' holds the environment as it "
        "was before; `cudafix rollback --snapshot {}` restores it, `cudafix snapshot --delete {}` drops it",
        r::to_valid_utf8(tx::shown_command(rec.command)), when, rec.snapshot, rec.snapshot, rec.snapshot));
  }
  return out;
}

}  // namespace cudafix::installer::guard
