// A transaction's write-ahead journal: what cudafix intends to do to an environment, written and
// synced before the first change, so that an interrupted run is finished or undone by the next.
//
// On disk (drawn from dpkg's updates/ journal, SQLite's hot journal and ninja's log):
//   <root>/.cudafix/tx/<id>/journal   text, one record per line:
//       <16 hex: the first 8 bytes of SHA-256 of JSON> <JSON>\n
//     {"record":"begin","id":ID,"time":UNIX_S,"command":"remove nvidia-cublas","root":ROOT}
//     {"record":"op","n":N,"op":"move","from":ABS,"to":ABS}      a rename, in the order done
//     {"record":"op","n":N,"op":"rmdir","path":ABS,"mode":M}     an emptied folder removed
//     {"record":"op","n":N,"op":"mkdir","path":ABS,"mode":M}     a folder made for a move
//     {"record":"intent_end","ops":N,"steps":S,"files":F}       every op is above; synced (S: the
//         command's steps, a plan's or one; F: the environment's files the ops change, a folder
//         moved counting what it holds; both absent in journals of versions before them)
//     {"record":"left","path":ABS,"type":T,...}                  what the ops left at a path of
//         the environment (T: "none", "dir", "file" or "symlink"; a file or symlink with "dev",
//         "ino", "size", "mtime_ns", "ctime_ns", and "sha256" (RECORD's form) where the
//         transaction knew the bytes it wrote): what a later rollback compares the disk with
//     {"record":"commit"}                                        all done; synced with the
//         `left` records in one write, so a commit never lacks them
//     {"record":"commit","undoes":ID}                            the commit of a rollback of ID:
//         the mark that ID is undone is this record, so there is no window between the two
//     {"record":"aborted","why":TEXT}                            undone; synced
//     {"record":"rolled_back_by","id":ID}                        read only: the mark versions
//                                                                before `undoes` appended to ID
//   <root>/.cudafix/tx/<id>/new/...   staged files, renamed into place by `move` ops; removed
//                                     once the transaction commits or is undone
//   <root>/.cudafix/tx/<id>/old/...   what the ops moved aside: the backups a rollback uses,
//                                     kept by committed transactions only (a rollback moves
//                                     what it replaces into its own old/, never another's)
// Nothing may follow a final record: after `aborted`, nothing; after `commit`, only
// `rolled_back_by` (with an id). Any other record there was not appended by cudafix, and the
// journal is unreadable.
// A line whose checksum does not match, or the last line without its newline, is a torn tail:
// it and everything after it are cut on reading, as ninja cuts its log. A line whose checksum
// holds but whose record this version does not know (a record or op kind it has no word for, a
// field of another type) was written on purpose, by a newer cudafix or by hand: reading stops
// there and says so (`unreadable`), and nothing is done with that transaction.
//
// What survives: every op is a rename within one file system, and the whole intent is synced
// (file and folder) before the first rename, so after a kill -9 at any point the next command
// sees the intent and each op's effect on disk, and undoes (no commit) or keeps (commit) it:
// the environment is in the before or the after state. Staged file data is synced in one batch
// before the intent, so after a power cut a committed transaction's new files hold their bytes;
// renames themselves are made durable by syncing each touched folder once, before the commit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cudafix::installer::txn {

enum class OpKind { move, rmdir, mkdir };

struct Op {
  OpKind kind = OpKind::move;
  std::string from, to;  // move
  std::string path;      // rmdir, mkdir
  std::uint32_t mode = 0755;
};

enum class TxState { open, intended, committed, aborted };

// What a transaction left at one path of the environment once its ops were done.
enum class LeftType { none, dir, file, symlink };
struct Left {
  std::string path;
  LeftType type = LeftType::none;
  std::uint64_t dev = 0, ino = 0, size = 0;
  std::int64_t mtime_ns = 0, ctime_ns = 0;
  std::string sha256;  // RECORD's form; empty where the transaction did not know the bytes
};

struct JournalRead {
  std::string id;
  std::int64_t time = 0;
  std::string command;
  std::string root;
  std::vector<Op> ops;
  std::optional<std::size_t> steps, files;  // intent_end's; absent in journals of versions before them
  TxState state = TxState::open;
  std::string aborted_why;
  std::optional<std::string> rolled_back_by;  // the committed rollback that undid it
  std::optional<std::string> undoes;          // a rollback's commit: the transaction it undid
  std::vector<Left> left;                     // empty in journals of versions before `left`
  bool torn = false;                          // a torn tail was cut
  std::string unreadable;                     // "line N: why", where a checksummed record could not be understood
};

// The largest journal read (a real one holds about 300 bytes an op; a planted sparse file could
// claim any size): a larger one cannot be read, and nothing is done with its transaction.
inline constexpr std::uint64_t k_max_journal = std::uint64_t{256} << 20;

// One line of the journal, checksummed.
[[nodiscard]] std::string journal_line(const std::string& json);
// A `left` record's JSON.
[[nodiscard]] std::string left_json(const Left& left);

// Reads a journal, cutting a torn tail. Throws resolver::Error when the file cannot be read or
// holds no begin record.
[[nodiscard]] JournalRead read_journal(const std::string& path);

}  // namespace cudafix::installer::txn
