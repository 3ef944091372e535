// libFuzzer: a transaction's journal (installer/txn/journal.hpp) as anything can plant it must
// be read without a crash: a torn tail cut, an unknown record stopped at, a file without a begin
// record refused with an Error. The first byte picks the shape: 0, the rest is the file as it
// is (torn lines, wrong checksums); otherwise each line of the rest is written with its right
// checksum, so that the records themselves are fuzzed. read_journal reads a path: the input is
// written to one file in a folder of this process's own under TMPDIR.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "installer/txn/journal.hpp"
#include "resolver/base/diagnostic.hpp"

namespace {

std::string journal_file() {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/fuzz_journal.XXXXXX";
  if (!::mkdtemp(dir.data())) __builtin_trap();
  return dir + "/journal";
}

std::string as_journal(std::string_view in) {
  if (in.empty() || in.front() == 0) return std::string(in.empty() ? in : in.substr(1));
  in.remove_prefix(1);
  std::string out;
  while (!in.empty()) {
    const auto nl = in.find('\n');
    const std::string_view line = in.substr(0, nl);
    if (nl == std::string_view::npos) {
      out += line;  // the last line without its newline: a torn tail
      break;
    }
    out += cudafix::installer::txn::journal_line(std::string(line));
    in.remove_prefix(nl + 1);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = journal_file();
  const std::string text = as_journal(std::string_view(reinterpret_cast<const char*>(data), size));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) __builtin_trap();
  ::close(fd);
  namespace tx = cudafix::installer::txn;
  try {
    const tx::JournalRead j = tx::read_journal(path);
    for (const auto& op : j.ops)
      if (op.kind != tx::OpKind::move && op.kind != tx::OpKind::rmdir && op.kind != tx::OpKind::mkdir) __builtin_trap();
  } catch (const cudafix::resolver::Error&) {
  }
  return 0;
}
