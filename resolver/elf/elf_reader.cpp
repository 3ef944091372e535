#include "resolver/elf/elf_reader.hpp"

#include <fmt/format.h>
#include <libelf.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>

#include "resolver/base/cache_file.hpp"
#include "resolver/elf/elf_class.hpp"
#include "resolver/elf/elf_pieces.hpp"

namespace cudafix::resolver::inline elf {
namespace {

void init_libelf() {
  static std::once_flag once;
  std::call_once(once, [] { elf_version(EV_CURRENT); });
}

ElfRead invalid(const std::string& name, std::optional<std::uint64_t> offset, std::string message) {
  ElfRead r;
  r.status = ElfReadStatus::invalid;
  r.diagnostic = {name, std::nullopt, offset, std::move(message)};
  return r;
}

// The bytes of an ELF object where the reader asks for them: all of it in memory, or the first
// bytes of an open file with any other range read when asked for (one pread each, after one
// fstat that bounds them). Reading through libelf's elf_begin cost ten system calls for a small
// object (a pread of the magic, lseek, fcntl, fstat, a pread per header and per range); with the
// head in hand a small object costs three (open, pread, close) and a large one five or six.
class Image {
 public:
  Image(const char* data, std::size_t size) : head_(data), head_size_(size), size_(size) {}
  explicit Image(const ElfPieces& pieces) : pieces_(&pieces), head_(nullptr), head_size_(0), size_(pieces.size) {}
  // `head` holds the file's first `head_size` bytes; `whole` when that is all of it.
  Image(int fd, const char* head, std::size_t head_size, bool whole)
      : fd_(fd),
        head_(head),
        head_size_(head_size),
        size_(whole ? std::optional<std::size_t>(head_size) : std::nullopt) {}

  // The file's size; asked of the file system only for a message or a range past the head.
  std::size_t size() {
    if (!size_) {
      struct stat st {};
      size_ = ::fstat(fd_, &st) == 0 ? static_cast<std::size_t>(st.st_size) : head_size_;
    }
    return *size_;
  }

  // [offset, offset + n), or nothing when any of it lies outside the file or cannot be read.
  const char* bytes(std::uint64_t offset, std::uint64_t n) {
    if (pieces_) {
      const char* p = pieces_->bytes(offset, n);
      if (!p && offset <= *size_ && n <= *size_ - offset && !missing_) missing_ = std::pair{offset, n};
      return p;
    }
    if (offset <= head_size_ && n <= head_size_ - offset) return head_ + offset;
    if (fd_ < 0 || offset > size() || n > size() - offset) return nullptr;
    auto buf = std::make_unique_for_overwrite<char[]>(n);
    for (std::uint64_t have = 0; have < n;) {
      const ssize_t r = ::pread(fd_, buf.get() + have, n - have, static_cast<off_t>(offset + have));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return nullptr;
      have += static_cast<std::uint64_t>(r);
    }
    chunks_.push_back(std::move(buf));
    return chunks_.back().get();
  }

  // The first range inside the file asked for that no piece holds.
  [[nodiscard]] const std::optional<std::pair<std::uint64_t, std::uint64_t>>& missing() const { return missing_; }
  // Whether [offset, offset + n) lies in the file but no one piece holds it: an object known in
  // pieces whose reader gave the names of its string table alone (installer/wheel/strings_window).
  [[nodiscard]] bool in_no_piece(std::uint64_t offset, std::uint64_t n) const {
    return pieces_ && offset <= *size_ && n <= *size_ - offset;
  }
  // Of an object known in pieces: the bytes from `offset` to the end of the piece that holds the
  // most of them (`n` set to how many, at most `most`), or nullptr.
  const char* rest_of_piece(std::uint64_t offset, std::uint64_t most, std::uint64_t& n) const {
    const char* best = nullptr;
    n = 0;
    if (!pieces_) return nullptr;
    for (const auto& [at, piece] : pieces_->pieces)
      if (offset >= at && offset - at < piece.size() && piece.size() - (offset - at) > n) {
        n = std::min<std::uint64_t>(most, piece.size() - (offset - at));
        best = piece.data() + (offset - at);
      }
    return best;
  }

 private:
  const ElfPieces* pieces_ = nullptr;
  std::optional<std::pair<std::uint64_t, std::uint64_t>> missing_;
  int fd_ = -1;
  const char* head_;
  std::size_t head_size_;
  std::optional<std::size_t> size_;
  std::vector<std::unique_ptr<char[]>> chunks_;
};

// `count` records of `type` at `offset`, in this host's byte order; false when the bytes are
// not all in the file. The file and memory sizes of these types are the same.
template <class C, class T>
bool decode(Image& image, Elf_Type type, std::uint64_t offset, std::size_t count, unsigned encoding,
            std::vector<T>& out) {
  if (count > UINT64_MAX / sizeof(T)) return false;
  const std::uint64_t n = count * sizeof(T);
  const char* raw = image.bytes(offset, n);
  if (!raw) return false;  // before the resize: a hostile count must not allocate
  out.resize(count);
  if (count == 0) return true;
  Elf_Data src{};
  src.d_buf = const_cast<char*>(raw);
  src.d_type = type;
  src.d_version = EV_CURRENT;
  src.d_size = n;
  Elf_Data dst = src;
  dst.d_buf = out.data();
  // libelf's translation from the file's class and byte order to this host's.
  const auto translate = C::klass == ELFCLASS64 ? elf64_xlatetom : elf32_xlatetom;
  return translate(&dst, &src, encoding) != nullptr;
}

// The strings of DT_STRTAB the dynamic section names, read in the few ranges that hold them:
// the whole table is the dynamic symbols' names too, megabytes in libtorch, while SONAME,
// NEEDED and RPATH are a few hundred bytes, usually side by side.
class StringReader {
 public:
  StringReader(Image& image, std::uint64_t table, std::uint64_t size) : image_(image), table_(table), size_(size) {}

  void want(std::uint64_t off) {
    if (off < size_) wanted_.push_back(off);
  }

  // Reads every range; false when the file cannot. Of an object known in pieces, a range inside
  // the file that no piece holds is not read: each string is then read from the piece that holds
  // its start (`at`).
  bool read() {
    std::sort(wanted_.begin(), wanted_.end());
    if (size_ <= k_whole) return add(0, size_) || (skipped_ = image_.in_no_piece(table_, size_));
    for (std::size_t i = 0; i < wanted_.size();) {
      const std::uint64_t begin = wanted_[i];
      std::uint64_t last = begin;
      while (++i < wanted_.size() && wanted_[i] - last <= k_gap) last = wanted_[i];
      const std::uint64_t end = std::min<std::uint64_t>(size_, last + k_tail);
      if (add(begin, end)) continue;
      if (table_ > UINT64_MAX - end || !image_.in_no_piece(table_ + begin, end - begin)) return false;
      skipped_ = true;
    }
    return true;
  }

  // Whether read() left a range to the pieces that hold each string: one not found is then
  // unread, not outside the table.
  [[nodiscard]] bool skipped() const { return skipped_; }

  // The NUL-terminated string at `off`, or nothing when the offset or the terminator is
  // outside the table. A string longer than its range's tail is read again, whole.
  std::optional<std::string> at(std::uint64_t off) {
    if (off >= size_) return std::nullopt;
    for (const auto& r : ranges_) {
      if (off < r.begin || off >= r.end) continue;
      const char* p = r.bytes + (off - r.begin);
      if (const void* nul = std::memchr(p, 0, r.end - off)) return std::string(p, static_cast<const char*>(nul));
      if (r.end == size_) return std::nullopt;
      break;
    }
    std::uint64_t n = 0;
    if (const char* p = table_ <= UINT64_MAX - off ? image_.rest_of_piece(table_ + off, size_ - off, n) : nullptr)
      if (const void* nul = std::memchr(p, 0, n)) return std::string(p, static_cast<const char*>(nul));
    if (!add(off, size_)) return std::nullopt;
    return at(off);
  }

 private:
  struct Range {
    std::uint64_t begin, end;
    const char* bytes;
  };
  static constexpr std::uint64_t k_whole = std::uint64_t{64} * 1024;  // smaller tables are read in one go
  static constexpr std::uint64_t k_gap = std::uint64_t{16} * 1024;    // offsets this close share a range
  static constexpr std::uint64_t k_tail = 4096;                       // read past the last offset of a range

  bool add(std::uint64_t begin, std::uint64_t end) {
    if (table_ > UINT64_MAX - end) return false;  // a hostile offset must not wrap into the file
    const char* bytes = image_.bytes(table_ + begin, end - begin);
    if (!bytes) return false;
    // Newest first: a re-read of a long string replaces the range that cut it short.
    ranges_.insert(ranges_.begin(), {begin, end, bytes});
    return true;
  }

  Image& image_;
  bool skipped_ = false;  // a range no one piece held was left to the strings' own pieces
  std::uint64_t table_;
  std::uint64_t size_;
  std::vector<std::uint64_t> wanted_;
  std::vector<Range> ranges_;
};

// The ELF header and the program headers: what the object is, and where the loader finds the
// rest. `error` is invalid when they cannot be read.
struct Headers {
  ElfRead error;
  ElfInfo info;  // class, machine and type
  ElfLayout layout;
  bool dynamic = false;  // a PT_DYNAMIC was found (of any size)
};

template <class C>
Headers read_headers(Image& image, unsigned encoding, const std::string& name) {
  Headers out;
  std::vector<typename C::Ehdr> ehdrs;
  if (!decode<C>(image, ELF_T_EHDR, 0, 1, encoding, ehdrs)) {
    out.error = invalid(name, 0, fmt::format("not a complete ELF header ({} bytes)", image.size()));
    return out;
  }
  const auto& ehdr = ehdrs.front();
  out.info.elf_class = ehdr.e_ident[EI_CLASS];
  out.info.machine = ehdr.e_machine;
  out.info.type = ehdr.e_type;
  out.layout.elf_class = ehdr.e_ident[EI_CLASS];
  out.layout.encoding = static_cast<std::uint8_t>(encoding);

  std::size_t phnum = ehdr.e_phnum;
  if (phnum == PN_XNUM) {  // too many for the header: the count is section 0's sh_info
    std::vector<typename C::Shdr> shdr0;
    if (ehdr.e_shoff == 0 || !decode<C>(image, ELF_T_SHDR, ehdr.e_shoff, 1, encoding, shdr0)) {
      out.error = invalid(name, ehdr.e_shoff,
                          "bad program header table: e_phnum is PN_XNUM and section header 0 cannot be read");
      return out;
    }
    phnum = shdr0.front().sh_info;
  }
  if (phnum > 0 && ehdr.e_phentsize != sizeof(typename C::Phdr)) {
    out.error =
        invalid(name, ehdr.e_phoff,
                fmt::format("program header entries are {} bytes, not {}", ehdr.e_phentsize, sizeof(typename C::Phdr)));
    return out;
  }
  std::vector<typename C::Phdr> phdrs;
  if (!decode<C>(image, ELF_T_PHDR, ehdr.e_phoff, phnum, encoding, phdrs)) {
    out.error = invalid(
        name, ehdr.e_phoff,
        fmt::format("program header table ({} entries) runs past the end of the file ({} bytes)", phnum, image.size()));
    return out;
  }
  for (const auto& ph : phdrs) {
    if (ph.p_type == PT_LOAD) out.layout.loads.push_back({ph.p_offset, ph.p_vaddr, ph.p_filesz});
    if (ph.p_type == PT_DYNAMIC && !out.dynamic) {
      out.dynamic = true;
      out.layout.dynamic_offset = ph.p_offset;
      out.layout.dynamic_size = ph.p_filesz;
    }
  }
  return out;
}

template <class C>
ElfLayoutRead read_layout(Image& image, unsigned encoding, const std::string& name) {
  Headers h = read_headers<C>(image, encoding, name);
  ElfLayoutRead out;
  if (h.error.status == ElfReadStatus::invalid) {
    out.status = ElfReadStatus::invalid;
    out.diagnostic = std::move(h.error.diagnostic);
    return out;
  }
  const ElfLayout& l = h.layout;
  if (l.dynamic_offset > image.size() || l.dynamic_size > image.size() - l.dynamic_offset) {
    out.status = ElfReadStatus::invalid;
    out.diagnostic = invalid(name, l.dynamic_offset,
                             fmt::format("dynamic segment ({} bytes at {:#x}) lies outside the file ({} bytes)",
                                         l.dynamic_size, l.dynamic_offset, image.size()))
                         .diagnostic;
    return out;
  }
  out.status = ElfReadStatus::ok;
  out.layout = std::move(h.layout);
  return out;
}

// Reads what the dynamic loader reads: the ELF header, the program headers, the PT_DYNAMIC
// segment and the strings it names. Section headers, which ld.so never looks at, are ignored (but
// for section 0 when it holds the count of program headers).
template <class C>
ElfRead read_elf(Image& image, unsigned encoding, const std::string& name) {
  Headers h = read_headers<C>(image, encoding, name);
  if (h.error.status == ElfReadStatus::invalid) return std::move(h.error);
  ElfRead out;
  out.status = ElfReadStatus::ok;
  out.info = std::move(h.info);
  ElfInfo& info = out.info;
  const ElfLayout& layout = h.layout;
  if (!h.dynamic) return out;  // static or not loadable: no dependencies to follow
  std::vector<typename C::Dyn> dyns;
  if (!decode<C>(image, ELF_T_DYN, layout.dynamic_offset, layout.dynamic_size / sizeof(typename C::Dyn), encoding,
                 dyns))
    return invalid(name, layout.dynamic_offset,
                   fmt::format("dynamic segment ({} bytes at {:#x}) lies outside the file ({} bytes)",
                               layout.dynamic_size, layout.dynamic_offset, image.size()));

  std::vector<std::uint64_t> needed_offsets;
  std::optional<std::uint64_t> soname, rpath, runpath;
  std::uint64_t strtab = 0, strsz = 0;
  for (const auto& d : dyns) {
    if (d.d_tag == DT_NULL) break;
    switch (d.d_tag) {
      case DT_NEEDED:
        needed_offsets.push_back(d.d_un.d_val);
        break;
      case DT_SONAME:
        soname = d.d_un.d_val;
        break;
      case DT_RPATH:
        rpath = d.d_un.d_val;
        break;
      case DT_RUNPATH:
        runpath = d.d_un.d_val;
        break;
      case DT_STRTAB:
        strtab = d.d_un.d_ptr;
        break;
      case DT_STRSZ:
        strsz = d.d_un.d_val;
        break;
      case DT_FLAGS_1:
        info.flags_1 = d.d_un.d_val;
        break;
      default:
        break;
    }
  }
  const bool wants_strings = !needed_offsets.empty() || soname || rpath || runpath;
  if (!wants_strings) return out;
  if (!strtab || !strsz)
    return invalid(name, layout.dynamic_offset, "dynamic section names strings but has no DT_STRTAB/DT_STRSZ");
  const auto str_off = layout.file_offset(strtab);
  if (!str_off)
    return invalid(name, layout.dynamic_offset, fmt::format("DT_STRTAB {:#x} is in no loaded segment", strtab));
  StringReader strings(image, *str_off, strsz);
  for (auto off : needed_offsets) strings.want(off);
  for (const auto* off : {&soname, &rpath, &runpath})
    if (*off) strings.want(**off);
  // Only the ranges that hold the names are read: a table that claims more than the file
  // holds is an error when those ranges run out of the file.
  if (!strings.read()) {
    if (*str_off > image.size() || strsz > image.size() - *str_off)
      return invalid(name, *str_off,
                     fmt::format("string table ({} bytes at {:#x}) runs past the end of the file ({} bytes)", strsz,
                                 *str_off, image.size()));
    return invalid(name, *str_off, "cannot read the string table");
  }
  auto outside = [&](const char* tag, std::uint64_t off) {
    if (strings.skipped() && off < strsz) return invalid(name, *str_off, "cannot read the string table");
    return invalid(name, *str_off + off,
                   fmt::format("{} string offset {} is outside the string table ({} bytes)", tag, off, strsz));
  };
  for (auto off : needed_offsets) {
    auto s = strings.at(off);
    if (!s) return outside("DT_NEEDED", off);
    info.needed.push_back(std::move(*s));
  }
  const std::pair<const char*, std::pair<std::optional<std::uint64_t>*, std::optional<std::string>*>> named[] = {
      {"DT_SONAME", {&soname, &info.soname}},
      {"DT_RPATH", {&rpath, &info.rpath}},
      {"DT_RUNPATH", {&runpath, &info.runpath}}};
  for (const auto& [tag, slots] : named) {
    if (!*slots.first) continue;
    *slots.second = strings.at(**slots.first);
    if (!*slots.second) return outside(tag, **slots.first);
  }
  return out;
}

// The identification bytes libelf needs to translate the rest: class, byte order, version; then
// `read` for the class, or why they cannot be read.
template <class Result, class Read>
Result by_class(Image& image, const std::string& name, Read read) {
  init_libelf();
  const auto wrong = [&](std::uint64_t offset, std::string message) {
    Result r;
    r.status = ElfReadStatus::invalid;
    r.diagnostic = invalid(name, offset, std::move(message)).diagnostic;
    return r;
  };
  const char* ident = image.bytes(0, EI_NIDENT);
  if (!ident) return wrong(0, fmt::format("not a complete ELF header ({} bytes)", image.size()));
  const auto klass = static_cast<unsigned char>(ident[EI_CLASS]);
  const auto data = static_cast<unsigned char>(ident[EI_DATA]);
  const auto version = static_cast<unsigned char>(ident[EI_VERSION]);
  if (data != ELFDATA2LSB && data != ELFDATA2MSB)
    return wrong(EI_DATA, fmt::format("unknown ELF byte order {} (e_ident[EI_DATA])", data));
  if (version != EV_CURRENT)
    return wrong(EI_VERSION, fmt::format("unknown ELF version {} (e_ident[EI_VERSION])", version));
  if (klass == ELFCLASS64) return read(Elf64Types{}, data);
  if (klass == ELFCLASS32) return read(Elf32Types{}, data);
  return wrong(EI_CLASS, fmt::format("unknown ELF class {} (e_ident[EI_CLASS])", klass));
}

ElfRead read_elf(Image& image, const std::string& name) {
  return by_class<ElfRead>(image, name, [&]<class C>(C, unsigned data) { return read_elf<C>(image, data, name); });
}

}  // namespace

const std::optional<std::string>& ElfInfo::effective_rpath() const {
  static const std::optional<std::string> none;
  return runpath ? none : rpath;
}

std::optional<std::uint64_t> ElfLayout::file_offset(std::uint64_t vaddr) const {
  for (const auto& l : loads)
    if (vaddr >= l.vaddr && vaddr - l.vaddr < l.filesz && l.offset <= UINT64_MAX - (vaddr - l.vaddr))
      return l.offset + (vaddr - l.vaddr);
  return std::nullopt;
}

const char* ElfPieces::bytes(std::uint64_t offset, std::uint64_t n) const {
  if (offset > size || n > size - offset) return nullptr;
  for (const auto& [at, piece] : pieces)
    if (offset >= at && offset - at <= piece.size() && n <= piece.size() - (offset - at))
      return piece.data() + (offset - at);
  return nullptr;
}

ElfLayoutRead read_elf_layout(const ElfPieces& object, const std::string& name) {
  const char* magic = object.bytes(0, SELFMAG);
  if (!magic || std::memcmp(magic, ELFMAG, SELFMAG) != 0) return {};
  Image image(object);
  auto out = by_class<ElfLayoutRead>(image, name,
                                     [&]<class C>(C, unsigned data) { return read_layout<C>(image, data, name); });
  out.incomplete = out.status == ElfReadStatus::invalid && image.missing().has_value();
  return out;
}

ElfRead read_elf_pieces(const ElfPieces& object, const std::string& name) {
  const char* magic = object.bytes(0, SELFMAG);
  if (!magic || std::memcmp(magic, ELFMAG, SELFMAG) != 0) return {};
  Image image(object);
  return read_elf(image, name);
}

std::optional<std::pair<std::uint64_t, std::uint64_t>> missing_piece(const ElfPieces& object, const std::string& name) {
  const char* magic = object.bytes(0, SELFMAG);
  if (!magic || std::memcmp(magic, ELFMAG, SELFMAG) != 0) return std::nullopt;
  Image image(object);
  if (read_elf(image, name).status != ElfReadStatus::invalid) return std::nullopt;
  return image.missing();
}

ElfRead read_elf_memory(const void* data, std::size_t size, const std::string& name) {
  if (size < SELFMAG || std::memcmp(data, ELFMAG, SELFMAG) != 0) return {};
  Image image(static_cast<const char*>(data), size);
  return read_elf(image, name);
}

// The first bytes of a file, read in one go: the headers of any object, all of a small one.
constexpr std::size_t k_elf_head = std::size_t{16} * 1024;

ElfRead read_elf_file(const std::string& path) { return read_elf_file(path, nullptr); }

ElfRead read_elf_file(const std::string& path, std::optional<Stamp>* stamp) {
  // O_NONBLOCK: a FIFO named like a library must not hang the scan; its read then fails.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return invalid(path, std::nullopt, fmt::format("cannot open: {}", std::strerror(errno)));
  if (stamp) *stamp = stamp_at(fd, "", AT_EMPTY_PATH, S_IFREG);
  // The head holds the headers, and the whole of a small object. On the heap, reused by the
  // thread: on a thread's stack its pages would be faulted in anew by every thread.
  static thread_local const std::unique_ptr<char[]> head = std::make_unique_for_overwrite<char[]>(k_elf_head);
  ssize_t n;
  do n = ::pread(fd, head.get(), k_elf_head, 0);
  while (n < 0 && errno == EINTR);
  ElfRead r;
  if (n >= SELFMAG && std::memcmp(head.get(), ELFMAG, SELFMAG) == 0) {
    // A regular file's pread stops short only at its end.
    Image image(fd, head.get(), static_cast<std::size_t>(n), static_cast<std::size_t>(n) < k_elf_head);
    r = read_elf(image, path);
  }
  ::close(fd);
  return r;
}

std::string machine_name(std::uint16_t machine) {
  switch (machine) {
    case EM_X86_64:
      return "x86_64";
    case EM_AARCH64:
      return "aarch64";
    case EM_386:
      return "i386";
    case EM_ARM:
      return "arm";
    case EM_PPC64:
      return "ppc64";
    case EM_S390:
      return "s390";
    case EM_RISCV:
      return "riscv";
    default:
      return fmt::format("machine-{}", machine);
  }
}

std::vector<std::string> flags_1_names(std::uint64_t f) {
  static const std::pair<std::uint64_t, const char*> names[] = {
      {DF_1_NOW, "NOW"},       {DF_1_GLOBAL, "GLOBAL"}, {DF_1_NODELETE, "NODELETE"},
      {DF_1_NOOPEN, "NOOPEN"}, {DF_1_ORIGIN, "ORIGIN"}, {DF_1_NODEFLIB, "NODEFLIB"},
      {DF_1_PIE, "PIE"}};
  std::vector<std::string> out;
  for (auto [bit, n] : names)
    if (f & bit) out.emplace_back(n);
  return out;
}

}  // namespace cudafix::resolver::inline elf
