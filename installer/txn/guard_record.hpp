// The record a running guard keeps of itself (installer/guard/), so that a guard killed at any
// point leaves nothing that no command names.
//
//   <root>/.cudafix/guards/<snapshot>.json   0600, written and synced BEFORE the snapshot is
//       taken, and held locked (flock) while its guard lives; removed when guard ends:
//     {"snapshot":NAME,"pid":N,"time":UNIX_S,"command":[ARG...],
//      "scope":[DIST FOLDER...]|null}   the dists whose files alone its command removes (an
//                                       uninstall guard read), null where it could change anything
//   Each field is bounded (k_record_*): a record is at most k_record_max_bytes.
//
// One found unlocked belongs to a guard that was killed. With its snapshot complete (a
// manifest), the command may have run: the record stays and every command that opens the
// environment names the snapshot (`rollback --snapshot`) until it is restored or deleted. With
// no manifest (killed while its snapshot was taken, or while it was being deleted), the command
// never ran or was judged: the next holder of the environment's lock removes the record, after
// the snapshot's leftovers (changes.hpp), and says so.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace cudafix::installer::txn {

inline constexpr std::size_t k_record_max_bytes = 64 << 10;
inline constexpr std::size_t k_record_args = 64;
inline constexpr std::size_t k_record_arg_bytes = 512;
inline constexpr std::size_t k_record_scope = 256;
inline constexpr std::size_t k_records_read = 64;  // records a listing reads at most

struct GuardRecord {
  std::string snapshot;
  long pid = 0;
  std::int64_t time = 0;
  std::vector<std::string> command;
  std::optional<std::vector<std::string>> scope;
  bool alive = false;         // its guard holds it locked
  bool has_snapshot = false;  // its snapshot's manifest is there
};

// A running guard's record: written, synced and locked when made, removed when destroyed
// unless left().
class HeldGuardRecord {
 public:
  HeldGuardRecord(const std::string& root, const GuardRecord& record);
  ~HeldGuardRecord();
  HeldGuardRecord(const HeldGuardRecord&) = delete;
  HeldGuardRecord& operator=(const HeldGuardRecord&) = delete;
  // Guard ended with its snapshot kept on purpose or by failure: the record names it.
  void leave() { left_ = true; }

 private:
  std::string path_;
  int fd_ = -1;
  bool left_ = false;
};

// The records in <root>/.cudafix/guards, each read as untrusted input (a regular file, bounded,
// a snapshot name that is its file's); at most k_records_read. Reads only.
[[nodiscard]] std::vector<GuardRecord> guard_records(const std::string& root);

// The lock held: removes each record of a killed guard whose snapshot is gone or was never
// complete, each said through `say`.
void tidy_guard_records(const std::string& root, const std::function<void(const std::string&)>& say);

// Removes the record of `snapshot` (a snapshot deleted by hand: its guard's notice goes with it).
void forget_guard_record(const std::string& root, const std::string& snapshot);

// The command as a shell would show it, each word quoted where it needs to be.
[[nodiscard]] std::string shown_command(const std::vector<std::string>& argv);

}  // namespace cudafix::installer::txn
