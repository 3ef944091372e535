// The file-system calls a transaction makes, in one place, each failing with a message that
// names the call, the path and the errno; and the seam the fault tests use.
//
// Test hooks, read from the environment once:
//   CUDAFIX_TEST_FAULT=CALL:N:ERRNO   the N-th call (1-based) of CALL (write, rename, fsync,
//                                     link, mkdir, rmdir, fallocate) fails with ERRNO (ENOSPC,
//                                     EIO, EACCES, EOPNOTSUPP, EINVAL).
//   CUDAFIX_TEST_FAULT_TRACE=FILE     each such call is appended to FILE as it is made, so that a
//                                     test can aim a fault at the middle of a change:
//                                       CALL N PATH     the N-th call of CALL, on PATH
//                                       mark intent     the journal's intent is synced: the
//                                                       changes to the environment start
//                                       mark commit     the commit record is synced
//   CUDAFIX_TEST_KILL_AT=N            the process kills itself (SIGKILL) at journal step N: each
//                                     journal record appended and each op carried out is a step.
//   CUDAFIX_TEST_KILL_AT=POINT        the same the first time a named point is reached (a pause
//                                     point of test_pause(POINT), or kill_point(POINT)): `snapshot-linked` (a
//                                     snapshot's files linked, its manifest not yet written), `snapshot-unlisted` (a
//                                     deleted snapshot renamed away, its files still there), `guard-recorded`,
//                                     `guard-snapshotted` (the lock still held), `guard-ran` (the command ended, the
//                                     lock not held), `guard-judged` (before the undo; installer/guard/).
//   CUDAFIX_TEST_KILL_AT=POINT:N      the same at the N-th time the named point is reached
//                                     (kill_point(POINT)): `prune`, after each step of pruning a
//                                     transaction (history.cpp says which).
//   CUDAFIX_TEST_PAUSE_AT=N:MS        the process sleeps MS milliseconds at journal step N, the
//                                     lock held: how the tests run two cudafix at once.
//   CUDAFIX_TEST_PAUSE_AT=POINT:MS[,POINT:MS...]
//                                     the same at named points (test_pause(POINT)), after a
//                                     "mark POINT" line in the fault trace: `staging`, once a
//                                     wheel's free-space check passed and before its first staged
//                                     byte is written (how a test fills the disk in between);
//                                     `mode`, once an executable staged file is written and
//                                     before its mode is set (how a test swaps its folder for a
//                                     symlink in between).
//   CUDAFIX_BENCH_NO_SYNC=1           no fsync and no syncfs at all: what durability costs, for
//                                     bench/txn_gpu.sh only (a power cut may then lose anything).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cudafix::installer::txn {

// Confinement: once a folder is registered, every call below on a path beneath it resolves the
// path's folder with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) from a descriptor of the
// folder's real path and acts on the last part with the *at call, so that a symlinked folder (or
// a ".." in a planted journal) that leads outside refuses the call, by the kernel and by name. A
// path beneath no registered folder is refused. With nothing registered, paths are used as given.
// On a kernel without openat2 (before 5.6) each folder's realpath is checked instead.
void confine_to(const std::string& folder);
// Whether openat2 does the confining (false: the realpath checks alone).
[[nodiscard]] bool kernel_confines();

void rename_path(const std::string& from, const std::string& to);
void make_dir(const std::string& path, unsigned mode);
// `path` and each missing folder above it.
void make_dirs(const std::string& path, unsigned mode = 0755);
// Removes `path` and everything below it, never following a symlink (one is removed, not
// entered); one already gone is not an error.
void remove_tree(const std::string& path);
// The same, each folder's files unlinked on a core of its own: a snapshot of a large venv holds
// tens of thousands of links. Each folder is opened beneath the tree's top through no symlink
// (openat2), so that one swapped for a link meanwhile leads nowhere; without openat2, remove_tree.
void remove_tree_on_every_core(const std::string& path);
// Unlinks a file; one already gone is not an error.
void remove_file(const std::string& path);
// open(2) of `path` (never through a final symlink), confined as above; throws naming the path.
[[nodiscard]] int open_file(const std::string& path, int flags, unsigned mode = 0644);
// Removes an empty folder; false when it is not empty (it stays).
bool remove_dir_if_empty(const std::string& path);
void link_path(const std::string& from, const std::string& to);
void sync_fd(int fd, const std::string& what);
// Starts writing `fd`'s dirty pages to disk without waiting (sync_file_range, as dpkg does
// while it unpacks), so that the batch sync after staging finds most of them written.
void start_writeback(int fd);
// Syncs the file system holding `folder` (syncfs): the staged data in one batch.
void sync_file_system(const std::string& folder);
void sync_path(const std::string& path);  // a file or a folder
// Reserves the blocks of `fd`'s first `size` bytes (posix_fallocate, retried on EINTR; the file
// grows to `size`), so that writing them through a mapping cannot meet a full file system.
// Returns 0 or the errno: ENOSPC or EDQUOT when there is no room, EOPNOTSUPP or EINVAL where the
// file system cannot reserve.
[[nodiscard]] int reserve_blocks(int fd, std::uint64_t size, const std::string& path);
// fchmod of `fd`: the mode lands on the file written through it. A chmod by path would follow
// a staging folder another process swapped for a symlink meanwhile, to a file outside, and
// Landlock does not fence mode changes. `path` names it in the error.
void set_mode(int fd, unsigned mode, const std::string& path);
// Writes all of `data` to `fd` (retrying short writes and EINTR); `path` names it in the error.
void write_all(int fd, const void* data, std::size_t size, const std::string& path);
// Appends `text` to `path` (made when absent) and syncs it.
void append_synced(const std::string& path, std::string_view text);
// Writes `text` to `path` whole, synced, by a temporary file renamed over it.
void write_synced(const std::string& path, std::string_view text);

// Whether `path` exists, not following a final symlink.
[[nodiscard]] bool exists_nofollow(const std::string& path);

// The kill hook: counts one journal step, and kills the process at the chosen one.
void journal_step();
// The named kill hook: counts one passage through `point`, and kills the process at the chosen one.
void kill_point(std::string_view point);
// Opens the fault trace file now, where one is asked for: before the Landlock fence, which
// would refuse opening it later (it lies outside the environment).
void open_test_hooks();
// A "mark WHAT" line in the fault trace, where one is asked for.
void fault_trace_mark(std::string_view what);
// The named pause point `point` (CUDAFIX_TEST_PAUSE_AT=POINT:MS): marks it in the trace, then
// sleeps; nothing unless asked for.
void test_pause(std::string_view point);

}  // namespace cudafix::installer::txn
