#include "installer/probe/protocol.hpp"

#include "resolver/base/text.hpp"

namespace cudafix::installer::probe {
namespace {

StageRecord begun(const std::string& stage, std::optional<int> device) {
  StageRecord s;
  s.stage = stage;
  s.device = device;
  return s;
}

std::vector<std::string> split_fields(std::string_view line) {
  std::vector<std::string> fields(1);
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '\t') {
      fields.emplace_back();
    } else if (c == '\\' && i + 1 < line.size()) {
      const char e = line[++i];
      fields.back() += e == 't' ? '\t' : e == 'n' ? '\n' : e;
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

std::optional<int> device_of(const std::string& s) { return s == "-" ? std::nullopt : resolver::to_number<int>(s); }

// The stage record a B or E line is about: the latest unfinished one with that name and device.
StageRecord& stage_for(ProbeRecords& out, const std::string& stage, std::optional<int> device) {
  for (auto it = out.stages.rbegin(); it != out.stages.rend(); ++it)
    if (!it->ended && it->stage == stage && it->device == device) return *it;
  out.stages.push_back(begun(stage, device));
  return out.stages.back();
}

bool parse_line(const std::vector<std::string>& f, ProbeRecords& out) {
  const std::string& kind = f[0];
  if (kind == "B" && f.size() == 3) {
    out.stages.push_back(begun(f[1], device_of(f[2])));
  } else if (kind == "E" && f.size() == 7) {
    const auto ns = resolver::to_number<long long>(f[4]);
    if (!ns || (f[3] != "0" && f[3] != "1")) return false;
    StageRecord& s = stage_for(out, f[1], device_of(f[2]));
    s.ended = true;
    s.ok = f[3] == "1";
    s.ms = static_cast<double>(*ns) / 1e6;
    s.code = f[5] == "-" ? std::nullopt : resolver::to_number<long long>(f[5]);
    s.detail = f[6];
  } else if (kind == "D" && (f.size() == 5 || f.size() == 6)) {
    const auto ordinal = resolver::to_number<int>(f[1]);
    if (!ordinal) return false;
    out.devices.push_back({*ordinal, f[2], f[3], f[4], f.size() == 6 ? f[5] : ""});
  } else if (kind == "M" && f.size() == 4) {
    const auto dev = resolver::to_number<std::uint64_t>(f[1]);
    const auto ino = resolver::to_number<std::uint64_t>(f[2]);
    if (!dev || !ino) return false;
    out.mapped.push_back({*dev, *ino, f[3]});
  } else if (kind == "X" && f.size() == 2) {
    out.finished = true;
  } else {
    return false;
  }
  return true;
}

}  // namespace

ProbeRecords parse_probe_records(std::string_view text) {
  ProbeRecords out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    // A line without its newline was torn by a kill: it is not a record.
    if (nl == std::string_view::npos || !parse_line(split_fields(line), out)) out.malformed.emplace_back(line);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  }
  return out;
}

}  // namespace cudafix::installer::probe
