// Installing a wheel: the whole archive validated before anything is written, then every member
// inflated (in parallel; libdeflate, whole, into each staged file mapped for writing) into the
// transaction's staging folder, checked against RECORD,
// and planned as the transaction's renames (installer/txn/transaction.hpp).
//
// The zip is read here, not through libarchive, because the checks need what libarchive does
// not expose: the central directory and each local header side by side, member offsets (to
// refuse overlapping data), external attributes (to refuse links and devices). Checked, each
// refusal naming the member (uv's list after CVE-2025-54368, pypa/installer's validate_record):
//   names: `..` components, absolute paths, backslashes, drive letters, NUL and control
//     characters, non-UTF-8 bytes, duplicates;
//   entries: symlinks, devices, FIFOs and sockets (by the Unix mode in the external attributes),
//     encryption, compression other than stored and deflate;
//   structure: the end record and central directory within the file, ZIP64 (not read: refused),
//     local header and central directory agreeing on name, method, CRC and sizes, member data
//     within the file and not overlapping, total size (64 GiB) and ratio (1000:1 past 1 MiB);
//   the wheel: one `NAME-VERSION.dist-info` whose name and version are the file name's, METADATA,
//     WHEEL (Wheel-Version major 1) and RECORD in it, `.data/<scheme>` only purelib, platlib,
//     scripts, headers or data, console and GUI script names without `/` or `..`;
//   RECORD: every member listed with a SHA-256 and a size (RECORD itself and its signatures
//     aside), no row naming what is not a member, and each member's inflated bytes matching its
//     CRC, its size and RECORD's hash.
#pragma once

#include <cstdint>
#include <functional>
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
  std::string record_hash;  // RECORD's urlsafe base64 SHA-256
};

struct ValidatedWheel {
  std::string path;
  std::string name, version;  // from the dist-info folder
  std::string dist_info;      // "name-version.dist-info"
  bool root_is_purelib = true;
  std::vector<ZipMember> members;  // files only, in archive order
  std::string entry_points;        // entry_points.txt's text, or empty
  std::vector<std::string> tags;   // WHEEL's Tag lines ("py3-none-manylinux_2_27_x86_64")
  std::uint64_t unpacked = 0;
};

// Throws resolver::Error naming the wheel, the member and what is wrong.
[[nodiscard]] ValidatedWheel validate_wheel(const std::string& path);
// The same checks over a wheel's bytes in memory (a body in pip's cache), `label` naming it in
// messages; there is no file name to check the dist-info against.
[[nodiscard]] ValidatedWheel validate_wheel_bytes(const unsigned char* data, std::size_t size, const std::string& label);
// The file name pip would give it: NAME-VERSION-TAGS.whl, its Tag lines compressed (PEP 425).
[[nodiscard]] std::string wheel_file_name(const ValidatedWheel& wheel);

struct StagedWheel {
  std::vector<std::string> targets;  // absolute, every file the install writes
  std::uint64_t bytes = 0;
};

// Inflates `wheel` into tx's staging folder with `threads` threads, checks every member, writes
// the new RECORD (cudafix's hashes), INSTALLER ("cudafix") and REQUESTED (when `requested`),
// generates console scripts, syncs the staged data in one batch, and plans its puts. Nothing in
// the environment changes until tx.carry_out(). `progress` (when set) hears the bytes written so
// far and the total, from any thread.
[[nodiscard]] StagedWheel stage_wheel(const ValidatedWheel& wheel, const resolver::EnvLayout& layout,
                                      txn::Transaction& tx, unsigned threads, bool requested,
                                      const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

}  // namespace cudafix::installer
