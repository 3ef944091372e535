// Installing a wheel: the whole archive validated before anything is written, then every member
// inflated (in parallel; libdeflate, whole, into each staged file mapped for writing) into the
// transaction's staging folder, checked against RECORD,
// and planned as the transaction's renames (installer/txn/transaction.hpp).
//
// The zip is read by installer/wheel/zip_reader (every check of the archive, its names and its sizes
// is there); on top of it, each refusal naming the member (uv's list after CVE-2025-54368,
// pypa/installer's validate_record):
//   the wheel: one `NAME-VERSION.dist-info` whose name and version are the file name's, METADATA
//     (its Name the folder's name, normalised), WHEEL (Wheel-Version major 1) and RECORD in it,
//     each at most zip::k_max_metadata (16 MiB, as entry_points.txt: the members read whole,
//     refused by name before they are inflated),
//     `.data/<scheme>` only purelib, platlib, scripts, headers or data;
//   targets: no two members landing on one file (`a/x` and `.data/purelib/a/x`; every target
//     compared again once the environment's layout is known), none outside the environment, none
//     of `.cudafix/`, `cudafix.toml`, `pyvenv.cfg`, `.lock` or `bin/python*` (through
//     `.data/data/`, `.data/scripts/` or a console script's name);
//   scripts: console and GUI script names that stay in bin/: not empty, `.` or `..`, no `/`,
//     backslash or control byte (pypa/installer writes `.tool` and `a..b`, and so does cudafix);
//   RECORD: a UTF-8 byte order mark before it dropped; rows compared by their normal names (`./a`
//     is `a`); a row twice the same is one row, twice differently a refusal; every member listed
//     with a sha256, sha384 or sha512 hash (md5, sha1 and others refused as weak), a size where
//     the row gives one (pypa/installer and pip take rows without), RECORD itself and its
//     signatures aside; no row naming what is not a member; each member's inflated bytes matching
//     its CRC, its size and RECORD's hash.
// Staging: before a byte is written, the environment's file system must have free (f_bavail)
// the wheel's files, each rounded up to its block size, plus a margin for what else the
// transaction writes (RECORD, INSTALLER, scripts, folders, the journal): 1% of those bytes, at
// least 4 MiB, plus 1 KiB a file. Each staged file's blocks are then reserved (posix_fallocate)
// before it is mapped and inflated into, so that space another process takes meanwhile refuses
// the install naming the file system's mount point, the wheel, the member and the MiB needed,
// never a SIGBUS; where the file system cannot reserve (EOPNOTSUPP, EINVAL) the member is
// written through write(2) instead. A path several wheels of one transaction write is staged at
// one place, the later wheel's bytes replacing the earlier's (as pip installing them in order
// leaves it), and put once: what is on disk is moved aside once, and undone once.
// Shebangs: a `.data/scripts/` script's `#!python` line is replaced whole by `#!<venv>/bin/python`
// (pypa/installer's fix_shebang); a console script's shebang is pypa/installer's build_shebang:
// `#!PATH`, or, for a path with a space or over 127 bytes with `#!` and the newline, the /bin/sh
// trick (`#!/bin/sh`, then `'''exec' PATH "$0" "$@"`).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "installer/txn/transaction.hpp"
#include "resolver/env/venv.hpp"

namespace cudafix::installer {

struct ZipMember {
  std::string name;
  std::uint16_t method = 0;
  std::uint32_t crc = 0;
  std::uint64_t compressed = 0, size = 0;
  std::uint64_t data_offset = 0;
  bool executable = false;
  std::size_t entry = 0;         // its index among the archive's entries (zip::Archive::entries)
  std::string record_algorithm;  // RECORD's: sha256, sha384 or sha512
  std::string record_hash;       // RECORD's urlsafe base64 digest
};

struct ValidatedWheel {
  std::string path;
  std::string name, version;  // from the dist-info folder ("nvidia_cudnn_cu13": its escaped name)
  std::string project;        // METADATA's Name ("nvidia-cudnn-cu13"): what pip list shows, and users are shown
  std::string dist_info;      // "name-version.dist-info"
  bool root_is_purelib = true;
  std::vector<ZipMember> members;              // files only, in archive order
  std::string entry_points;                    // entry_points.txt's text, or empty
  std::vector<std::string> tags;               // WHEEL's Tag lines ("py3-none-manylinux_2_27_x86_64")
  std::vector<std::string> name_tags;          // the file name's tags, expanded (pip judges a wheel by these)
  std::optional<std::string> requires_python;  // METADATA's Requires-Python
  std::uint64_t unpacked = 0;
  std::uint64_t size = 0;  // the file's bytes, as validated
};

// Throws resolver::Error naming the wheel, the member and what is wrong.
[[nodiscard]] ValidatedWheel validate_wheel(const std::string& path);
// The same checks over a wheel's bytes in memory (a body in pip's cache), `label` naming it in
// messages; there is no file name to check the dist-info against.
[[nodiscard]] ValidatedWheel validate_wheel_bytes(const unsigned char* data, std::size_t size,
                                                  const std::string& label);
// The file name pip would give it: NAME-VERSION-TAGS.whl, its Tag lines compressed (PEP 425).
[[nodiscard]] std::string wheel_file_name(const ValidatedWheel& wheel);

// Refuses a wheel the environment cannot use, as pip does: none of its file name's tags (its
// WHEEL's Tag lines where it has no file name) among `supported` (naming its tags and the
// environment's best), or a Requires-Python that `python_version` ("3.11.2") does not meet.
void check_usable(const ValidatedWheel& wheel, const std::vector<std::string>& supported,
                  const std::string& python_version);

// Refuses, naming the member, a wheel that would write one target twice, outside the
// environment, or any of cudafix's state, pyvenv.cfg, .lock or the interpreter (stage_wheels
// checks it too; run it before a transaction begins, so that a refusal leaves none).
// Returns every target it claimed, normal: the members' (RECORD, INSTALLER and REQUESTED aside,
// which are written anew) and the console scripts'.
std::vector<std::string> check_targets(const ValidatedWheel& wheel, const resolver::EnvLayout& layout);

struct StagedWheel {
  std::vector<std::string> targets;  // absolute, every file the install writes
  // Those of `targets` that no member of the wheel is: its console scripts, INSTALLER and
  // REQUESTED (RECORD is a member, rewritten), which a planner reading the wheel's RECORD does not list.
  std::vector<std::string> generated;
  std::uint64_t bytes = 0;
  // Each staged file's put into the environment, as plan_puts() plans it in the transaction.
  struct Put {
    std::string staged, target, hash;
    bool again = false;  // an earlier wheel of the transaction stages it too: that put stands
  };
  std::vector<Put> puts;
};

// Inflates `wheels` into tx's staging folder with `threads` threads, checks every member, writes
// each one's new RECORD (cudafix's hashes), INSTALLER ("cudafix") and REQUESTED (when
// `requested`), generates console scripts, and syncs the staged data in one batch. The members of
// all of them are inflated side by side, the largest first whichever wheel holds it (one wheel's
// largest member would otherwise leave the other cores idle while it inflates); where two wheels
// write one path, one wheel after the other, so that the later one's bytes are staged there.
// Their puts are not planned: the caller plans each wheel's with plan_puts(), in the order the
// wheels are given, between its own steps. Nothing in the environment changes until
// tx.carry_out(). `progress` (when set) hears the bytes written so far and the total of all the
// wheels, from any thread.
[[nodiscard]] std::vector<StagedWheel> stage_wheels(
    const std::vector<const ValidatedWheel*>& wheels, const resolver::EnvLayout& layout, txn::Transaction& tx,
    unsigned threads, bool requested, const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});
// Every member of `wheel` inflated and checked as staging checks it (its CRC and size, RECORD's
// hash), on `threads` threads (0: one per core), nothing written: what `install --dry-run` runs,
// so that it refuses what the install would. Throws the refusal of the first member in archive
// order that fails.
void check_members(const ValidatedWheel& wheel, unsigned threads);
// The puts of a wheel stage_wheels() staged, planned in `tx`.
void plan_puts(const StagedWheel& wheel, txn::Transaction& tx);

}  // namespace cudafix::installer
