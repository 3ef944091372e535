#include "installer/probe/verify.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <regex>
#include <set>

#include "resolver/base/text.hpp"
#include "resolver/pep/pep440.hpp"
#include "resolver/plan/dlopen_family.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer::probe {
namespace r = cudafix::resolver;

namespace {

constexpr const char* k_libcuda = "libcuda.so.1";

const StageRecord* find_stage(const ProbeRecords& records, std::string_view name) {
  for (const auto& s : records.stages)
    if (s.stage == name) return &s;
  return nullptr;
}

}  // namespace

std::optional<std::string> cudnn_consumer(const r::Environment& env, const std::string& soname) {
  std::vector<const r::SharedObject*> candidates;
  for (const auto* o : env.consumers(soname)) {
    const std::string dir = r::parent_dir(o->path);
    const auto providers = env.providers(soname);
    const bool beside_provider = std::any_of(providers.begin(), providers.end(),
                                             [&](const r::SharedObject* p) { return r::parent_dir(p->path) == dir; });
    if (!beside_provider && o->elf.status == r::ElfReadStatus::ok) candidates.push_back(o);
  }
  auto rank = [](const r::SharedObject* o) {
    return std::make_tuple(o->entry_point, o->path.find("python") != std::string::npos, o->path);
  };
  std::sort(candidates.begin(), candidates.end(), [&](auto* a, auto* b) { return rank(a) < rank(b); });
  if (candidates.empty()) return std::nullopt;
  return candidates.front()->path;
}

namespace {

// The environment's own provider of `soname` that the model would load, for the no-consumer case.
std::optional<std::string> environment_provider(const r::Environment& env, const std::string& soname) {
  for (const auto* p : env.providers(soname))
    if (p->elf.status == r::ElfReadStatus::ok && p->elf.info.soname == soname) return p->path;
  return std::nullopt;
}

// The probe's process, then the consumer (or cuDNN) and NCCL dlopened by path.
Prediction predict(const r::Environment& env, const std::string& probe, const std::optional<std::string>& library,
                   const std::optional<std::string>& nccl) {
  Prediction p = probe_process(env, probe);
  if (library) p.model->load(p.process, *library);
  if (nccl) p.model->load(p.process, *nccl);
  return p;
}

std::optional<std::pair<dev_t, ino_t>> identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return std::make_pair(st.st_dev, st.st_ino);
}

std::string soname_of(r::ElfCache& elf, const std::string& path) {
  const r::ElfRead& read = elf.get(path);
  if (read.status == r::ElfReadStatus::ok && read.info.soname) return *read.info.soname;
  return std::string(r::base_name(path));
}

}  // namespace

Prediction probe_process(const r::Environment& env, const std::string& probe) {
  r::LoaderConfig config = env.loader->config();
  config.main_executable = probe;
  Prediction p{std::make_unique<r::LoaderModel>(config, env.loader->shared_elf_cache(), env.loader->shared_ld_cache()),
               {}};
  p.process = p.model->start_process();
  const r::Resolution cuda = p.model->resolve(p.process, p.process.main, k_libcuda);
  if (cuda.found()) p.model->load(p.process, *cuda.path);
  return p;
}

std::vector<LoadedFile> compare_loaded(const ProbeRecords& records, Prediction& p, const r::Knowledge& knowledge,
                                       bool everything) {
  std::vector<LoadedFile> out;
  std::vector<bool> seen;
  for (const auto& m : records.mapped) {
    seen.resize(p.process.objects.size(), false);
    LoadedFile f;
    f.path = m.path;
    f.soname = soname_of(p.model->elf_cache(), m.path);
    std::optional<std::string> predicted;
    if (auto it = p.process.by_name.find(f.soname); it != p.process.by_name.end()) {
      predicted = p.process.objects[static_cast<std::size_t>(it->second)].real;
      seen[static_cast<std::size_t>(it->second)] = true;
      f.basis = "needed";
    } else if (const auto* g = knowledge.dlopen_group(f.soname)) {
      // Loaded by its dlopener: the search runs with that library's RPATH/RUNPATH.
      if (auto by = p.process.by_name.find(g->loaded_by); by != p.process.by_name.end()) {
        const r::Resolution res = p.model->resolve(p.process, by->second, f.soname);
        if (res.found()) {
          predicted = r::real_path_of(*res.path);
          // Mapped in load order: what it NEEDs comes after it, predicted from here on.
          p.model->load(p.process, *res.path);
        }
        f.basis = "dlopen";
      }
    }
    f.predicted = predicted;
    if (predicted) {
      const auto a = identity(*predicted);
      f.match = a && a->first == m.dev && a->second == m.ino;
    }
    out.push_back(std::move(f));
  }
  // Once the consumer is in, everything the model put in the process must have been mapped.
  seen.resize(p.process.objects.size(), false);
  if (everything)
    for (std::size_t i = 0; i < p.process.objects.size(); ++i) {
      const auto& o = p.process.objects[i];
      if (seen[i] || static_cast<int>(i) == p.process.main) continue;
      const auto id = identity(o.real);
      const bool mapped = id && std::any_of(records.mapped.begin(), records.mapped.end(), [&](const MappedRecord& m) {
                            return m.dev == id->first && m.ino == id->second;
                          });
      if (!mapped)
        out.push_back(
            {soname_of(p.model->elf_cache(), o.real), std::nullopt, o.real, "needed", false, false, {}, {}, {}});
    }
  std::sort(out.begin(), out.end(), [](const LoadedFile& a, const LoadedFile& b) {
    return std::tie(a.soname, a.path) < std::tie(b.soname, b.path);
  });
  return out;
}

namespace {
void add_unmapped_members(const r::Environment& env, const r::Knowledge& knowledge, std::vector<LoadedFile>& loaded) {
  std::set<std::string> mapped;
  std::vector<const r::SharedObject*> fronts;
  for (const auto& f : loaded) {
    if (!f.path) continue;
    mapped.insert(f.soname);
    if (const auto* o = env.object(r::real_path_of(*f.path)); o && f.family) fronts.push_back(o);
  }
  for (const auto* front : fronts)
    for (const auto& m : r::members_of(env, knowledge, *front)) {
      if (!m.split() || mapped.count(m.dlopen.resolution.name)) continue;
      LoadedFile f;
      f.soname = m.dlopen.resolution.name;
      f.basis = "dlopen";
      f.family = true;
      f.version = m.release;
      f.model = r::describe_place(env, m);
      mapped.insert(f.soname);
      loaded.push_back(std::move(f));
    }
}
}  // namespace

void describe_family(const r::Environment& env, const r::Knowledge& knowledge, std::vector<LoadedFile>& loaded) {
  std::set<std::string> family;
  for (const auto& [name, g] : knowledge.dlopen)
    if (g.same_dist) {
      family.insert(g.loaded_by);
      for (const auto& s : g.sonames_for(std::nullopt)) family.insert(s);
    }
  for (auto& f : loaded) f.family = family.count(f.soname) > 0;
  add_unmapped_members(env, knowledge, loaded);
  for (auto& f : loaded) {
    if (!f.path) continue;
    const std::string real = r::real_path_of(*f.path);
    if (const auto* o = env.object(real)) {
      const auto id = r::bytes_identity(env, knowledge, *o);
      std::vector<int> whose = o->owners.size() > 1 ? r::whose_bytes(env, real, o->owners) : o->owners;
      if (whose.size() == 1) f.dist = env.dists[static_cast<std::size_t>(whose.front())].name;
      f.version = id.version;
    } else if (!env.site_of(real)) {
      f.version = r::release_in_file_name(r::base_name(real), f.soname);
    }
  }
}

std::string describe_file(const r::Environment& env, const std::string& path) {
  const std::string real = r::real_path_of(path);
  const auto owners = env.owners_of(real);
  if (!owners.empty()) {
    const auto& d = env.dists[static_cast<std::size_t>(owners.front())];
    return fmt::format("{} ({} {})", env.display(real), d.name, d.version);
  }
  if (env.site_of(real)) return fmt::format("{} (no dist owns it)", env.display(real));
  const auto base = r::base_name(real);
  return base == r::base_name(path) ? path : fmt::format("{} ({})", path, base);
}

namespace {

Check loaded_files_check(const r::Environment& env, const std::vector<LoadedFile>& loaded) {
  Check c{"loaded files", true, "", "", ""};
  std::vector<std::string> bad;
  std::size_t compared = 0;
  for (const auto& f : loaded) {
    if (!f.predicted) continue;
    ++compared;
    if (f.match) continue;
    bad.push_back(f.path ? fmt::format("{}: loaded {}, predicted {}", f.soname, describe_file(env, *f.path),
                                       describe_file(env, *f.predicted))
                         : fmt::format("{}: predicted {}, never loaded", f.soname, describe_file(env, *f.predicted)));
    c.expected +=
        fmt::format("{}{} from {}", c.expected.empty() ? "" : "; ", f.soname, describe_file(env, *f.predicted));
    c.found += fmt::format("{}{} {}", c.found.empty() ? "" : "; ", f.soname,
                           f.path ? "from " + describe_file(env, *f.path) : std::string("never loaded"));
  }
  c.ok = bad.empty();
  c.detail =
      c.ok ? fmt::format("all {} files the model predicted were the ones loaded (same device and inode)", compared)
           : fmt::format("{}", fmt::join(bad, "; "));
  return c;
}

// The cuDNN version a consumer's dist pins (`nvidia-cudnn-cu13==9.19.0.56`), with the pin.
std::optional<std::pair<std::string, std::string>> pinned_cudnn(const r::Environment& env,
                                                                const std::string& consumer) {
  static const std::regex pin(R"(==\s*([0-9]+(\.[0-9]+)*))");
  for (int owner : env.owners_of(consumer)) {
    for (const auto& line : env.dists[static_cast<std::size_t>(owner)].metadata.requires_dist) {
      if (r::requirement_name(line).rfind("nvidia-cudnn", 0) != 0) continue;
      std::smatch m;
      if (std::regex_search(line, m, pin))
        return std::make_pair(fmt::format("{} requires {}", env.dists[static_cast<std::size_t>(owner)].name,
                                          line.substr(0, line.find(';'))),
                              m[1].str());
    }
  }
  return std::nullopt;
}

}  // namespace

Check cudnn_version_check(const r::Environment& env, long long version, const std::string& loaded,
                          const std::string& soname, const std::optional<std::string>& consumer) {
  const std::string real = r::real_path_of(loaded);
  Check c{"cuDNN version", true, "", "", ""};
  c.found = fmt::format("{} from {}", version, describe_file(env, loaded));
  const std::string got = fmt::format("cudnnGetVersion() = {} from {}", version, describe_file(env, loaded));
  std::optional<long long> want;
  std::string because;
  // Two dists listing the path (cuDNN 12 and 13 both write nvidia/cudnn/lib): the one whose
  // RECORD hash the bytes match installed them.
  auto owners = env.owners_of(real);
  if (owners.size() > 1)
    if (auto whose = r::whose_bytes(env, real, owners); whose.size() == 1) owners = whose;
  for (int owner : owners) {
    const auto& d = env.dists[static_cast<std::size_t>(owner)];
    if ((want = cudnn_version_number(d.version))) {
      because = fmt::format("{} {} installed it", d.name, d.version);
      break;
    }
  }
  if (env.site_of(real) == nullptr) {
    const auto providers = env.providers(soname);
    const auto pin = consumer ? pinned_cudnn(env, *consumer) : std::nullopt;
    if (pin) {
      want = cudnn_version_number(pin->second);
      because = pin->first;
    }
    if (pin || !providers.empty()) {
      c.ok = false;
      c.detail = fmt::format("the cuDNN loaded is outside the environment, not the environment's: {}{}", got,
                             want ? fmt::format("; {} ({})", because, *want) : "");
      if (want && *want != version) c.detail += fmt::format(": version mismatch, {} loaded", version);
      c.expected = want ? fmt::format("{} from the environment ({})", *want, because)
                        : std::string("the environment's own cuDNN");
      return c;
    }
  }
  if (!want) {
    c.detail = fmt::format("{}; no dist says which version to expect", got);
    return c;
  }
  c.ok = *want == version;
  c.expected = fmt::format("{} ({})", *want, because);
  c.detail = fmt::format("{}; {}, which means {}{}", got, because, *want, c.ok ? "" : ": version mismatch");
  return c;
}

namespace {

// The first three numbers of a dist version ("9.19.0.56" -> 9, 19, 0), if it has them.
std::optional<std::array<long long, 3>> major_minor_patch(std::string_view dist_version) {
  const auto parts = r::split(dist_version, '.');
  if (parts.size() < 3) return std::nullopt;
  std::array<long long, 3> out{};
  for (std::size_t i = 0; i < 3; ++i) {
    const auto n = resolver::to_number<long long>(parts[i]);
    if (!n) return std::nullopt;
    out[i] = *n;
  }
  return out;
}

// NCCL's version code for a dist version: "2.28.9" -> 22809 (NCCL_VERSION_CODE since 2.9).
std::optional<long long> nccl_version_number(std::string_view dist_version) {
  const auto v = major_minor_patch(dist_version);
  if (!v) return std::nullopt;
  return (*v)[0] * 10000 + (*v)[1] * 100 + (*v)[2];
}

// The NCCL the probe loaded against the dist that owns it: ncclGetVersion() and the version the
// dist's own number means.
std::optional<Check> nccl_version_check(const r::Environment& env, const VerifyReport& rep) {
  if (!rep.nccl || !rep.nccl_version) return std::nullopt;
  Check c{"NCCL version", true, "", "", ""};
  const std::string real = r::real_path_of(*rep.nccl);
  const auto owners = env.owners_of(real);
  if (owners.empty()) {
    c.detail = fmt::format("ncclGetVersion() = {} from {}; no dist owns it", *rep.nccl_version, env.display(real));
    return c;
  }
  const auto& d = env.dists[static_cast<std::size_t>(owners.front())];
  const auto want = nccl_version_number(d.version);
  c.ok = !want || *want == *rep.nccl_version;
  c.expected = fmt::format("{} ({} {} installed it)", want.value_or(0), d.metadata.name, d.version);
  c.found = fmt::format("{} from {}", *rep.nccl_version, env.display(real));
  c.detail =
      fmt::format("ncclGetVersion() = {} from {} ({} {}){}", *rep.nccl_version, env.display(real), d.metadata.name,
                  d.version, c.ok ? "" : fmt::format(": version mismatch, the dist means {}", want.value_or(0)));
  return c;
}

// How many devices came up (a context retained), from the records.
int devices_up(const ProbeRecords& records) {
  int n = 0;
  for (const auto& s : records.stages)
    if (s.stage == "cuDevicePrimaryCtxRetain" && s.ended && s.ok) ++n;
  return n;
}

std::optional<int> runtime_major(const r::Environment& env, const Prediction& p) {
  static const std::regex cudart(R"(libcudart\.so\.([0-9]+))");
  std::optional<int> best;
  auto consider = [&](const std::string& name) {
    std::smatch m;
    if (std::regex_match(name, m, cudart)) best = std::max(best.value_or(0), std::stoi(m[1].str()));
  };
  for (const auto& [name, index] : p.process.by_name) consider(name);
  if (!best)
    for (const auto& o : env.objects)
      if (o.elf.status == r::ElfReadStatus::ok && o.elf.info.soname) consider(*o.elf.info.soname);
  return best;
}

// The driver's CUDA version against the runtime's major; and, where the kernel module's release
// is known, that release against the knowledge's minimum for that major (580.65.06 for 13).
}  // namespace

Check driver_check(const VerifyReport& rep, const r::Knowledge& knowledge, const HostFacts& host) {
  Check c{"driver version", true, "", "", ""};
  c.ok = *rep.driver_version / 1000 >= *rep.runtime_major;
  c.expected = fmt::format("a driver for CUDA {} or later", *rep.runtime_major);
  c.found = fmt::format("a driver for CUDA {}", cuda_version_text(*rep.driver_version));
  c.detail = fmt::format("the driver supports CUDA {}; the environment's runtime is CUDA {}{}",
                         cuda_version_text(*rep.driver_version), *rep.runtime_major,
                         c.ok ? "" : ": the driver is too old for it (the driver API has no error code for this)");
  const auto minimum = knowledge.minimum_driver.find(*rep.runtime_major);
  if (minimum != knowledge.minimum_driver.end() && host.kernel_module_version) {
    const auto have = r::Version::parse(*host.kernel_module_version);
    const auto need = r::Version::parse(minimum->second);
    if (have && need) {
      const bool enough = !(*have < *need);
      c.ok = c.ok && enough;
      c.expected += fmt::format(", {} or later", minimum->second);
      c.found += fmt::format(", kernel module {}", *host.kernel_module_version);
      c.detail += fmt::format("; CUDA {} needs driver {} or later, and the kernel module is {}{}", *rep.runtime_major,
                              minimum->second, *host.kernel_module_version, enough ? "" : ": too old");
    }
  }
  return c;
}

namespace {

FailureFacts failure_facts(const VerifyReport& rep) {
  FailureFacts f;
  f.outcome = rep.verdict.outcome;
  if (rep.verdict.stage) {
    const StageRecord& s = rep.records.stages[*rep.verdict.stage];
    f.stage = stage_label(s);
    f.code = s.code;
    f.detail = s.detail;
  }
  f.libcuda_path = rep.libcuda_real.value_or("");
  f.driver_version = rep.driver_version;
  f.runtime_major = rep.runtime_major;
  f.signal = rep.run.signal;
  if (!rep.run.reaped) {
    f.timeout_state = rep.run.state;
    f.timeout_wchan = rep.run.wchan;
  }
  return f;
}

}  // namespace

std::optional<long long> cudnn_version_number(std::string_view dist_version) {
  const auto v = major_minor_patch(dist_version);
  if (!v) return std::nullopt;
  return (*v)[0] * ((*v)[0] >= 9 ? 10000 : 1000) + (*v)[1] * 100 + (*v)[2];
}

int VerifyReport::exit_code() const {
  if (verdict.outcome == Outcome::no_driver) return 3;
  return verdict.outcome == Outcome::ok ? 0 : 1;
}

VerifyReport verify_environment(const r::Environment& env, const r::Knowledge& knowledge, const VerifyOptions& o) {
  VerifyReport rep;
  ProbeCommand cmd;
  cmd.program = o.probe;
  cmd.timeout = o.timeout;
  cmd.env = environment_with_library_path(env.loader->config().ld_library_path);
  rep.consumer =
      o.consumer ? std::optional<std::string>(r::real_path_of(*o.consumer)) : cudnn_consumer(env, o.cudnn_soname);
  if (rep.consumer) {
    cmd.args = {"--consumer", *rep.consumer, "--cudnn-soname", o.cudnn_soname};
  } else if ((rep.cudnn = environment_provider(env, o.cudnn_soname))) {
    cmd.args = {"--cudnn", *rep.cudnn, "--cudnn-soname", o.cudnn_soname};
  } else {
    const std::string why = fmt::format("no {} in the environment", o.cudnn_soname);
    for (const char* s : {"dlopen consumer", "cudnnGetVersion", "cudnnCreate", "cudnnDestroy"})
      rep.skipped.push_back({s, why});
  }
  if (o.nccl) {
    // The libnccl.so.2 the consumer's tree resolves to, as the model predicts it; else the
    // environment's own.
    Prediction first = predict(env, o.probe, rep.consumer ? rep.consumer : rep.cudnn, std::nullopt);
    if (auto it = first.process.by_name.find(o.nccl_soname); it != first.process.by_name.end())
      rep.nccl = first.process.objects[static_cast<std::size_t>(it->second)].real;
    else
      rep.nccl = environment_provider(env, o.nccl_soname);
    if (rep.nccl)
      cmd.args.insert(cmd.args.end(), {"--nccl", *rep.nccl});
    else
      rep.skipped.push_back({"ncclAllReduce", fmt::format("no {} in the environment", o.nccl_soname)});
  }
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) rep.visible_devices = visible;

  rep.run = run_probe(cmd);
  rep.records = parse_probe_records(rep.run.output);
  rep.verdict = judge(rep.records, rep.run);
  // The probe dlopens NCCL only where two devices came up: the model does as it did.
  const bool nccl_loaded = rep.nccl && find_stage(rep.records, "dlopen libnccl.so.2");
  Prediction prediction =
      predict(env, o.probe, rep.consumer ? rep.consumer : rep.cudnn, nccl_loaded ? rep.nccl : std::nullopt);
  if (const auto* s = find_stage(rep.records, "dlopen libcuda.so.1"); s && s->ok) {
    rep.libcuda = s->detail;
    rep.libcuda_real = r::real_path_of(s->detail);
  }
  if (const auto* s = find_stage(rep.records, "cuDriverGetVersion"); s && s->ok)
    rep.driver_version = resolver::to_number<int>(s->detail);
  if (const auto* s = find_stage(rep.records, "cudnnGetVersion"); s && s->ok)
    rep.cudnn_version = resolver::to_number<long long>(s->detail);
  rep.runtime_major = runtime_major(env, prediction);
  if (const auto* s = find_stage(rep.records, "ncclGetVersion"); s && s->ok)
    rep.nccl_version = resolver::to_number<long long>(s->detail);
  if (rep.nccl && rep.verdict.outcome == Outcome::ok && !find_stage(rep.records, "ncclCommInitAll"))
    rep.skipped.push_back(
        {"ncclAllReduce",
         fmt::format("an all-reduce needs two or more GPUs; {} visible{}", devices_up(rep.records),
                     rep.visible_devices ? fmt::format(" (CUDA_VISIBLE_DEVICES={})", *rep.visible_devices) : "")});

  const auto* loaded_stage = find_stage(rep.records, rep.consumer ? "dlopen consumer" : "dlopen cuDNN");
  rep.loaded = compare_loaded(rep.records, prediction, knowledge, loaded_stage && loaded_stage->ok);
  describe_family(env, knowledge, rep.loaded);
  // Where the probe never came to load the environment's library (no driver: it stops at
  // libcuda.so.1), what it mapped is its own start-up, not the environment: no check ran.
  if (loaded_stage)
    rep.checks.push_back(loaded_files_check(env, rep.loaded));
  else
    rep.skipped.push_back({"loaded files", fmt::format("not compared: the probe loaded nothing of the environment ({} "
                                                       "did not run)",
                                                       rep.consumer ? "dlopen consumer" : "dlopen cuDNN")});
  const auto cudnn_loaded = std::find_if(rep.loaded.begin(), rep.loaded.end(),
                                         [&](const LoadedFile& f) { return f.soname == o.cudnn_soname && f.path; });
  if (rep.cudnn_version && cudnn_loaded != rep.loaded.end())
    rep.checks.push_back(
        cudnn_version_check(env, *rep.cudnn_version, *cudnn_loaded->path, o.cudnn_soname, rep.consumer));
  if (auto c = nccl_version_check(env, rep)) rep.checks.push_back(*c);
  const HostFacts host = gather_host_facts(env.loader->config().ld_library_path);
  if (rep.driver_version && rep.runtime_major) rep.checks.push_back(driver_check(rep, knowledge, host));

  rep.diagnosis = diagnose(failure_facts(rep), host);
  if (const auto* counted = find_stage(rep.records, "cuDeviceGetCount"); counted && counted->ok) {
    std::vector<std::string> seen;
    for (const auto& d : rep.records.devices) seen.push_back(d.pci);
    for (auto& e : hidden_devices(host, seen)) rep.diagnosis.push_back(std::move(e));
  }
  if (rep.verdict.outcome == Outcome::ok) {
    const auto failed = std::find_if(rep.checks.begin(), rep.checks.end(), [](const Check& c) { return !c.ok; });
    if (failed != rep.checks.end()) {
      rep.verdict.outcome = Outcome::error;
      rep.failed_check = failed->check;
      rep.verdict.message =
          fmt::format("every call succeeded, but the {} check failed: {}", failed->check, failed->detail);
      for (auto it = failed + 1; it != rep.checks.end(); ++it)
        if (!it->ok) rep.verdict.message += fmt::format("; and the {} check failed: {}", it->check, it->detail);
      if (failed->check == "driver version") rep.diagnosis = {driver_age(failure_facts(rep))};
    }
  }
  return rep;
}

}  // namespace cudafix::installer::probe
