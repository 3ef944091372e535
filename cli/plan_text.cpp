// The plans' text (cli/text_output.hpp): plan remove's deletions and what each would break, and
// plan fix's steps, the wheels they take and the verdict of each.
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "cli/printable.hpp"
#include "cli/text_output.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::cli {
namespace r = cudafix::resolver;

namespace {

std::string deletion_summary(const r::Deletion& d) {
  return fmt::format("{} and {}", count_of(d.files.size(), "file", "files"),
                     count_of(d.dirs.size(), "folder", "folders"));
}

void breaks_lines(const r::Environment& env, const std::vector<r::Break>& breaks, const Style& st, std::string& out) {
  const std::size_t limit = st.verbose ? breaks.size() : std::min<std::size_t>(breaks.size(), 20);
  for (std::size_t i = 0; i < limit; ++i) {
    const auto& b = breaks[i];
    const std::string who =
        b.consumer_dist >= 0 ? fmt::format(" ({})", env.dists[static_cast<std::size_t>(b.consumer_dist)].name) : "";
    out += fmt::format(
        "  {}{} {} {}: {} -> {}\n", shown(env, b.consumer), who, b.kind == r::RequiredBy::needed ? "NEEDs" : "dlopens",
        st.bold(b.soname), shown(env, b.before),
        b.after ? shown(env, *b.after) + (b.after_version ? " (" + *b.after_version + ")" : "") : st.bad("nothing"));
    out += st.dim(fmt::format("    {}\n", printable(b.why, k_line_limit)));
  }
  if (limit < breaks.size()) out += st.dim(fmt::format("  ... {} more; -v shows them\n", breaks.size() - limit));
}

}  // namespace

std::string plan_remove_text(const r::Environment& env, const r::RemovalPlan& plan, const Style& st) {
  std::vector<std::string> names;
  for (int d : plan.removing) {
    const auto& dist = env.dists[static_cast<std::size_t>(d)];
    names.push_back(printable(r::dist_label(dist)));
  }
  std::string out;
  if (!st.quiet) {  // -q: what breaks and the verdict only
    out = fmt::format("{} {}\n", st.bold("cudafix plan remove"), fmt::join(names, ", "));
    out += fmt::format("pip uninstall would delete {}; cudafix would delete {}", deletion_summary(plan.pip.deletion),
                       deletion_summary(plan.cudafix.deletion));
    if (!plan.cudafix.deletion.kept.empty())
      out += fmt::format(" (keeping {} that other dists list)",
                         count_of(plan.cudafix.deletion.kept.size(), "file", "files"));
    out += "\n";
  }
  auto section = [&](const char* title, const r::Outcome& o) {
    if (!o.breaks.empty()) {
      out += fmt::format("\n{} ({}):\n", st.bad(title), count_of(o.breaks.size(), "library breaks", "libraries break"));
      breaks_lines(env, o.breaks, st, out);
    }
    for (const auto& l : o.left) {
      const auto& d = env.dists[static_cast<std::size_t>(l.dist)];
      if (l.metadata_only)
        out += fmt::format("  {} {} would be left metadata-only: all {} of its files deleted\n",
                           st.bad(printable(d.name)), printable(d.version), l.paths.size());
      else
        out += fmt::format("  {} {} would lose {}, e.g. {}\n", st.warn(printable(d.name)), printable(d.version),
                           count_of(l.paths.size(), "listed file", "listed files"), shown(env, l.paths.front()));
    }
  };
  section("with pip uninstall", plan.pip);
  if (plan.cudafix.deletion.files != plan.pip.deletion.files)
    section("with cudafix's owner-counted removal", plan.cudafix);
  if (!plan.cudafix.deletion.refused.empty()) {
    out +=
        fmt::format("\n{}:\n", st.bad("refused: rows cudafix will not take at their word (it deletes none of them)"));
    for (const auto& rf : plan.cudafix.deletion.refused)
      out += fmt::format("  {}\n", printable(rf.to_string(env), k_line_limit));
  }
  if (!plan.requirement_breaks.empty()) {
    out += fmt::format("\n{}:\n", st.bad("requirements left unmet"));
    for (const auto& rb : plan.requirement_breaks) {
      const auto& d = env.dists[static_cast<std::size_t>(rb.dist)];
      out += fmt::format("  {} {} requires {}\n", printable(d.name), printable(d.version), printable(rb.requirement));
    }
  }
  if (st.quiet && plan.safe()) return "";
  out += "\n";
  if (plan.safe())
    out += st.good("safe: nothing required breaks\n");
  else if (plan.safe_with_cudafix())
    out += st.warn(
        "unsafe with pip uninstall; safe with owner counting (cudafix_would_delete), which keeps what other dists "
        "list\n");
  else if (!plan.cudafix.deletion.refused.empty())
    out += st.bad("unsafe: the dists list what no removal may delete, or cannot be read (refused above)\n");
  else
    out += st.bad("unsafe: the removal breaks what is listed above\n");
  return out;
}

namespace {

// plan fix under -q: nothing where a plan was found; else the steps that make things worse, the
// wheels it lacks and the problem.
std::string plan_fix_errors_text(const r::Environment& env, const r::FixPlan& plan, const Style& st) {
  if (plan.ok()) return "";
  std::string out;
  for (const auto& s : plan.steps) {
    if (s.ok) continue;
    out += st.bad(fmt::format("{} {} {}: worse than before the plan:", r::to_string(s.action), printable(s.name),
                              printable(s.version))) +
           "\n";
    breaks_lines(env, s.worse, st, out);
  }
  for (const auto& need : plan.needs)
    out += fmt::format("no wheel for {} {}\n", printable(need.name), printable(need.version));
  return out + st.bad(plan.problem + "\n");
}

}  // namespace

std::string plan_fix_text(const r::Environment& env, const r::FixPlan& plan, const Style& st) {
  if (st.quiet) return plan_fix_errors_text(env, plan, st);
  std::string out = fmt::format("{} {}\n", st.bold("cudafix plan fix"), shown(env, env.layout.root));
  if (plan.target)
    out += fmt::format("target: CUDA {}{}\n", *plan.target, plan.target_given ? " (given with --cuda-major)" : "");
  const std::size_t ev_limit = st.verbose ? plan.evidence.size() : std::min<std::size_t>(plan.evidence.size(), 6);
  for (std::size_t i = 0; i < ev_limit; ++i)
    out += st.dim(fmt::format("  evidence: {}\n", printable(plan.evidence[i].why, k_line_limit)));
  if (ev_limit < plan.evidence.size())
    out += st.dim(fmt::format("  ... {} more; -v shows them\n", plan.evidence.size() - ev_limit));
  if (!plan.target && plan.ok())
    return out + st.good("nothing in the environment needs CUDA libraries: nothing to do\n");
  int n = 0;
  for (const auto& s : plan.steps) {
    const std::string head =
        fmt::format("{}. {} {} {}", ++n, r::to_string(s.action), printable(s.name), printable(s.version));
    out += fmt::format(
        "\n{}{}\n", s.ok ? st.bold(head) : st.bad(head),
        s.wheel ? st.dim(" from " + (s.wheel->file.empty() ? s.wheel->url : s.wheel->file)) : std::string());
    out += fmt::format("   why: {}\n", printable(s.why, k_line_limit));
    if (!s.deletes.empty() || !s.keeps.empty())
      out += fmt::format("   deletes {}, keeps {} that other dists list\n", count_of(s.deletes.size(), "path", "paths"),
                         count_of(s.keeps.size(), "path", "paths"));
    if (!s.writes.empty()) out += fmt::format("   writes {}\n", count_of(s.writes.size(), "file", "files"));
    if (s.wheel && (s.wheel->file.empty() || s.wheel->source != r::parent_dir(s.wheel->file)))
      out += st.dim(fmt::format("   simulated from the wheel of {}\n", s.wheel->source));
    // Read by range, an object's segment may be taken from what the bytes mid-stream read as, which
    // a crafted wheel can plant: apply, reading the downloaded wheel whole, refuses such a plan.
    if (s.wheel && s.wheel->size > 0)
      out +=
          st.dim(fmt::format("   read by range: {} of its {} bytes ({:.2f}%); apply reads it whole and refuses the "
                             "plan where its objects differ\n",
                             s.wheel->bytes_read, s.wheel->size,
                             100.0 * static_cast<double>(s.wheel->bytes_read) / static_cast<double>(s.wheel->size)));
    if (!s.simulated) out += st.warn("   not simulated: no wheel at hand, so its files are unknown\n");
    if (s.ok) {
      out += st.good("   after this step: nothing required is worse than before the plan\n");
    } else {
      out += st.bad("   after this step, worse than before the plan:\n");
      breaks_lines(env, s.worse, st, out);
    }
  }
  if (!plan.needs.empty()) {
    out += fmt::format(
        "\n{}:\n", st.warn("wheels the plan needs (give a folder with --find-links, or an index with --index-url)"));
    for (const auto& need : plan.needs) out += fmt::format("  {} {}\n", printable(need.name), printable(need.version));
  }
  if (!plan.remaining.empty()) {
    out += fmt::format("\n{}:\n", st.warn("still short of a consistent environment after the plan"));
    for (const auto& r : plan.remaining) out += fmt::format("  {}\n", r);
  }
  out += "\n";
  if (!plan.ok())
    out += st.bad(plan.problem + "\n");
  else if (plan.steps.empty())
    out += st.good(fmt::format("nothing to do: the environment is consistent for CUDA {}\n", *plan.target));
  else
    out += st.good(fmt::format("a safe order of {} found\n", count_of(plan.steps.size(), "step", "steps")));
  return out;
}

}  // namespace cudafix::cli
