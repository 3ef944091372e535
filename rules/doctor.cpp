#include "rules/doctor.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <tuple>

#include "resolver/base/diagnostic.hpp"
#include "resolver/env/requirements.hpp"
#include "resolver/env/system_packages.hpp"
#include "rules/checks/context.hpp"
#include "rules/knowledge.hpp"
#include "rules/rule.hpp"

namespace cudafix::rules {
namespace r = cudafix::resolver;
using checks::rule_wanted;

std::string_view to_string(Severity s) {
  switch (s) {
    case Severity::error:
      return "error";
    case Severity::warning:
      return "warning";
    case Severity::info:
      return "info";
  }
  return "error";
}

std::optional<Severity> severity_from(std::string_view s) {
  if (s == "error") return Severity::error;
  if (s == "warning") return Severity::warning;
  if (s == "info") return Severity::info;
  return std::nullopt;
}

const std::vector<std::string>& rule_ids() {
  static const std::vector<std::string> ids = [] {
    std::vector<std::string> out;
    for (const auto* rule : registry()) out.emplace_back(rule->id);
    return out;
  }();
  return ids;
}

namespace {

const std::string& subject_of(const Finding& f) {
  if (!f.dists.empty()) return f.dists.front();
  if (!f.sonames.empty()) return f.sonames.front();
  if (!f.paths.empty()) return f.paths.front();
  return f.message;
}

void sort_and_number(std::vector<Finding>& found) {
  std::vector<std::size_t> order(found.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = found[a];
    const auto& y = found[b];
    return std::forward_as_tuple(x.severity, x.rule, subject_of(x), x.message) <
           std::forward_as_tuple(y.severity, y.rule, subject_of(y), y.message);
  });
  std::vector<int> new_id(found.size());
  for (std::size_t k = 0; k < order.size(); ++k) new_id[order[k]] = static_cast<int>(k) + 1;
  std::vector<Finding> sorted;
  for (auto i : order) {
    Finding f = std::move(found[i]);
    f.id = new_id[i];
    for (auto& cause : f.caused_by) cause = new_id[static_cast<std::size_t>(cause)];
    sorted.push_back(std::move(f));
  }
  found = std::move(sorted);
}

void check_rule_names(const DoctorOptions& options) {
  for (const auto* list : {&options.select, &options.ignore})
    for (const auto& id : *list)
      if (std::find(rule_ids().begin(), rule_ids().end(), id) == rule_ids().end())
        throw r::Error(fmt::format("unknown rule '{}'; the rules are: {}", id, fmt::join(rule_ids(), ", ")));
}

// PEP 668: pip refuses to change an externally managed environment, and Debian and the PEP point
// to the system's package or a venv, never to --break-system-packages first. A reinstall of a dist
// the system's package manager installed is that package manager's (dpkg's file lists tell which
// package); any other pip command runs in a venv that sees the system's packages
// (--system-site-packages), so that what the system's dists need is had without writing beneath
// the prefix; a requirement of a system package names that package, whose distribution is the
// one to provide it.
void adapt_to_externally_managed(const r::Environment& env, std::vector<Finding>& found) {
  constexpr std::string_view pip = "pip ";
  const auto dist_named = [&](const std::string& dir_name) -> const r::DistInfo* {
    for (const auto& d : env.dists)
      if (d.dir_name == dir_name) return &d;
    return nullptr;
  };
  const auto folder_of = [&](const std::string& dir_name) -> std::string {
    const r::DistInfo* d = dist_named(dir_name);
    return d ? d->site_dir + "/" + d->dir_name : "";
  };
  std::vector<std::string> folders;  // the dists reinstalled and those whose requirement is missing
  for (const auto& f : found)
    if (f.remedy && f.remedy->command.starts_with(pip))
      for (const auto& d : f.remedy->action == "reinstall" ? f.remedy->dists : f.dists)
        if (auto folder = folder_of(d); !folder.empty()) folders.push_back(std::move(folder));
  const auto owners = r::debian_owners(env.layout.root, folders);
  const auto owner_of = [&](const std::string& dir_name) -> const std::string* {
    const auto it = owners.find(folder_of(dir_name));
    return it == owners.end() ? nullptr : &it->second;
  };
  for (auto& f : found) {
    if (!f.remedy || !f.remedy->command.starts_with(pip)) continue;
    if (f.remedy->action == "reinstall" && f.remedy->dists.size() == 1)
      if (const std::string* package = owner_of(f.remedy->dists.front())) {
        f.remedy->command = fmt::format("apt install --reinstall {}", *package);
        continue;
      }
    if (f.remedy->action == "install" && f.dists.size() == 1 && f.remedy->dists.size() == 1)
      if (const std::string* package = owner_of(f.dists.front()))
        f.evidence.push_back(fmt::format(
            "{} is the system's (dpkg: {}): the distribution's package of {} (apt search {}) serves every user, "
            "a venv that sees the system's packages one project",
            r::dist_label(*dist_named(f.dists.front())), *package, f.remedy->dists.front(), f.remedy->dists.front()));
    f.remedy->command = fmt::format("{}/bin/python3 -m venv --system-site-packages .venv && .venv/bin/{}",
                                    env.layout.root, f.remedy->command);
  }
}

}  // namespace

r::ScanDepth scan_depth_for(const DoctorOptions& options) {
  check_rule_names(options);
  auto depth = r::ScanDepth::dists;
  for (const auto* rule : registry())
    if (rule_wanted(options, rule->id)) depth = std::max(depth, rule->depth);
  return depth;
}

bool parses_requirements(const DoctorOptions& options) {
  return std::any_of(registry().begin(), registry().end(),
                     [&](const Rule* rule) { return rule->reads_requirements && rule_wanted(options, rule->id); });
}

DoctorReport run_doctor(const r::Environment& env, const r::Knowledge& knowledge, const DoctorOptions& options) {
  check_rule_names(options);
  DoctorReport report;
  checks::Context c{env, knowledge, options, r::marker_environment_of(env.layout), report, {}, {}, {}, {}, {}, {}};
  c.index_sonames();
  if (scan_depth_for(options) != r::ScanDepth::dists) c.groups = checks::missing_groups(env);
  // Root causes first, so that the findings they cause can name them.
  for (const bool roots : {true, false})
    for (const auto* rule : registry())
      if (rule->root_cause == roots && rule_wanted(options, rule->id)) rule->check(c);
  sort_and_number(c.found);
  if (env.layout.externally_managed) adapt_to_externally_managed(env, c.found);
  report.findings = std::move(c.found);
  for (const auto& f : report.findings) {
    if (f.severity == Severity::error) ++report.errors;
    if (f.severity == Severity::warning) ++report.warnings;
    if (f.severity == Severity::info) ++report.infos;
  }
  return report;
}

void merge_rule_settings(const toml::table& doc, const std::string& source, std::map<std::string, RuleSettings>& into) {
  const auto* node = doc.get("rules");
  if (!node) return;
  auto where = [&](const toml::node& n) { return fmt::format("{}:{}", source, n.source().begin.line); };
  const auto* table = node->as_table();
  if (!table) throw r::Error(fmt::format("{}: [rules] must be a table of rules", where(*node)));
  for (const auto& [key, value] : *table) {
    const std::string id(key.str());
    if (std::find(rule_ids().begin(), rule_ids().end(), id) == rule_ids().end())
      throw r::Error(
          fmt::format("{}: unknown rule '{}'; the rules are: {}", where(value), id, fmt::join(rule_ids(), ", ")));
    const auto* t = value.as_table();
    if (!t) throw r::Error(fmt::format("{}: [rules.{}] must be a table", where(value), id));
    RuleSettings& s = into[id];
    if (const auto* en = t->get("enabled")) {
      if (!en->is_boolean()) throw r::Error(fmt::format("{}: rules.{}.enabled must be true or false", where(*en), id));
      s.enabled = en->as_boolean()->get();
    }
    if (const auto* sev = t->get("severity")) {
      const auto v = sev->value<std::string>();
      const auto parsed = v ? severity_from(*v) : std::nullopt;
      if (!parsed)
        throw r::Error(
            fmt::format("{}: rules.{}.severity must be \"error\", \"warning\" or \"info\"", where(*sev), id));
      s.severity = parsed;
    }
    if (const auto* allow = t->get("allow")) {
      const auto* list = allow->as_array();
      if (!list) throw r::Error(fmt::format("{}: rules.{}.allow must be a list of strings", where(*allow), id));
      for (const auto& item : *list) {
        const auto v = item.value<std::string>();
        if (!v) throw r::Error(fmt::format("{}: rules.{}.allow must be a list of strings", where(item), id));
        s.allow.push_back(*v);
      }
    }
  }
}

}  // namespace cudafix::rules
