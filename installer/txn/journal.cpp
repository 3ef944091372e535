#include "installer/txn/journal.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <optional>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/env/state_folder.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer::txn {
namespace {

std::string checksum(std::string_view json) { return resolver::sha256_hex(json).substr(0, 16); }

// An integer field. nlohmann's value() casts a float to T, undefined past T's range
// ("time":1e300, found by fuzz_journal); get_ref throws type_error for a number of another kind.
template <typename T>
T integer_or(const nlohmann::json& j, const char* key, T otherwise) {
  const auto it = j.find(key);
  if (it == j.end()) return otherwise;
  if (it->is_number_unsigned()) return static_cast<T>(it->get_ref<const nlohmann::json::number_unsigned_t&>());
  return static_cast<T>(it->get_ref<const nlohmann::json::number_integer_t&>());
}

// An op record; none for an op kind this version does not know.
std::optional<Op> op_of(const nlohmann::json& j) {
  Op op;
  const std::string kind = j.value("op", "");
  if (kind == "move") {
    op.kind = OpKind::move;
  } else if (kind == "rmdir") {
    op.kind = OpKind::rmdir;
  } else if (kind == "mkdir") {
    op.kind = OpKind::mkdir;
  } else {
    return std::nullopt;
  }
  op.from = j.value("from", "");
  op.to = j.value("to", "");
  op.path = j.value("path", "");
  op.mode = integer_or(j, "mode", 0755u);
  return op;
}

std::optional<LeftType> left_type(const std::string& word) {
  if (word == "none") return LeftType::none;
  if (word == "dir") return LeftType::dir;
  if (word == "file") return LeftType::file;
  if (word == "symlink") return LeftType::symlink;
  return std::nullopt;
}

const char* left_word(LeftType t) {
  switch (t) {
    case LeftType::none:
      return "none";
    case LeftType::dir:
      return "dir";
    case LeftType::file:
      return "file";
    case LeftType::symlink:
      return "symlink";
  }
  return "none";
}

// Takes one checksummed record into `out`; false (and `out.unreadable` says why) when this
// version does not understand it. Throws nlohmann's errors for a field of another type.
bool take_record(const nlohmann::json& j, JournalRead& out, bool& begun) {
  const std::string record = j.value("record", "");
  const bool finished = out.state == TxState::committed || out.state == TxState::aborted;
  if (finished && !(out.state == TxState::committed && record == "rolled_back_by")) {
    out.unreadable = fmt::format("a '{}' record after the transaction's final one", record.substr(0, 64));
    return false;
  }
  if (record == "begin") {
    begun = true;
    out.id = j.value("id", "");
    out.time = integer_or(j, "time", std::int64_t{0});
    out.command = j.value("command", "");
    out.root = j.value("root", "");
  } else if (record == "op") {
    const auto op = op_of(j);
    if (!op) {
      out.unreadable = fmt::format("an op of a kind this cudafix does not know ('{}')", j.value("op", ""));
      return false;
    }
    out.ops.push_back(*op);
  } else if (record == "intent_end") {
    out.state = TxState::intended;
    if (j.contains("steps")) out.steps = integer_or(j, "steps", std::size_t{0});
    if (j.contains("files")) out.files = integer_or(j, "files", std::size_t{0});
  } else if (record == "left") {
    Left left;
    left.path = j.value("path", "");
    const auto type = left_type(j.value("type", ""));
    if (!type) {
      out.unreadable = fmt::format("a left record of a type this cudafix does not know ('{}')", j.value("type", ""));
      return false;
    }
    left.type = *type;
    left.dev = integer_or(j, "dev", std::uint64_t{0});
    left.ino = integer_or(j, "ino", std::uint64_t{0});
    left.size = integer_or(j, "size", std::uint64_t{0});
    left.mtime_ns = integer_or(j, "mtime_ns", std::int64_t{0});
    left.ctime_ns = integer_or(j, "ctime_ns", std::int64_t{0});
    left.sha256 = j.value("sha256", "");
    out.left.push_back(std::move(left));
  } else if (record == "commit") {
    out.state = TxState::committed;
    if (j.contains("undoes")) out.undoes = j.value("undoes", "");
  } else if (record == "aborted") {
    out.state = TxState::aborted;
    out.aborted_why = j.value("why", "");
  } else if (record == "rolled_back_by") {
    const std::string by = j.value("id", "");
    if (!resolver::is_transaction_id(by)) {
      out.unreadable = "a rolled_back_by record whose id is not a transaction id";
      return false;
    }
    out.rolled_back_by = by;
  } else {
    out.unreadable = fmt::format("a record this cudafix does not know ('{}')", record);
    return false;
  }
  return true;
}

}  // namespace

std::string journal_line(const std::string& json) { return checksum(json) + " " + json + "\n"; }

std::string left_json(const Left& left) {
  nlohmann::json j{{"record", "left"}, {"path", left.path}, {"type", left_word(left.type)}};
  if (left.type == LeftType::file || left.type == LeftType::symlink) {
    j["dev"] = left.dev;
    j["ino"] = left.ino;
    j["size"] = left.size;
    j["mtime_ns"] = left.mtime_ns;
    j["ctime_ns"] = left.ctime_ns;
    if (!left.sha256.empty()) j["sha256"] = left.sha256;
  }
  return j.dump();
}

JournalRead read_journal(const std::string& path) {
  const auto text = resolver::try_read_file(path, k_max_journal);
  if (!text)
    throw resolver::Error(
        fmt::format("{}: cannot read the journal (not a regular file, or over {} MiB)", path, k_max_journal >> 20));
  JournalRead out;
  bool begun = false;
  std::size_t pos = 0, line_number = 0;
  while (pos < text->size()) {
    ++line_number;
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
    bool taken = false;
    try {
      taken = take_record(j, out, begun);
    } catch (const nlohmann::json::exception&) {
      out.unreadable = "a field of the wrong type";
    }
    if (!taken) {
      out.unreadable = fmt::format("line {}: {}", line_number, out.unreadable);
      break;
    }
  }
  if (!begun) throw resolver::Error(fmt::format("{}: no begin record", path));
  return out;
}

}  // namespace cudafix::installer::txn
