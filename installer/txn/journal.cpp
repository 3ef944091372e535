#include "installer/txn/journal.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer::txn {
namespace {

std::string checksum(std::string_view json) { return resolver::sha256_hex(json).substr(0, 16); }

Op op_of(const nlohmann::json& j) {
  Op op;
  const std::string kind = j.value("op", "");
  op.kind = kind == "rmdir" ? OpKind::rmdir : kind == "mkdir" ? OpKind::mkdir : OpKind::move;
  op.from = j.value("from", "");
  op.to = j.value("to", "");
  op.path = j.value("path", "");
  op.mode = j.value("mode", 0755u);
  return op;
}

}  // namespace

std::string journal_line(const std::string& json) { return checksum(json) + " " + json + "\n"; }

JournalRead read_journal(const std::string& path) {
  const auto text = resolver::try_read_file(path);
  if (!text) throw resolver::Error(fmt::format("{}: cannot read the journal", path));
  JournalRead out;
  bool begun = false;
  std::size_t pos = 0;
  while (pos < text->size()) {
    const auto end = text->find('\n', pos);
    if (end == std::string::npos) {
      out.torn = true;  // the last line never got its newline
      break;
    }
    const std::string_view line(text->data() + pos, end - pos);
    pos = end + 1;
    if (line.size() < 18 || line[16] != ' ' || checksum(line.substr(17)) != line.substr(0, 16)) {
      out.torn = true;
      break;
    }
    const auto j = nlohmann::json::parse(line.substr(17), nullptr, false);
    if (!j.is_object()) {
      out.torn = true;
      break;
    }
    const std::string record = j.value("record", "");
    if (record == "begin") {
      begun = true;
      out.id = j.value("id", "");
      out.time = j.value("time", std::int64_t{0});
      out.command = j.value("command", "");
      out.root = j.value("root", "");
    } else if (record == "op") {
      out.ops.push_back(op_of(j));
    } else if (record == "intent_end") {
      out.state = TxState::intended;
    } else if (record == "commit") {
      out.state = TxState::committed;
    } else if (record == "aborted") {
      out.state = TxState::aborted;
      out.aborted_why = j.value("why", "");
    } else if (record == "rolled_back_by") {
      out.rolled_back_by = j.value("id", "");
    }
  }
  if (!begun) throw resolver::Error(fmt::format("{}: no begin record", path));
  return out;
}

}  // namespace cudafix::installer::txn
