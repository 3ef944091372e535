#include "resolver/elf_reader.hpp"

#include <fmt/format.h>
#include <gelf.h>
#include <libelf.h>

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace cudafix::resolver {
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

struct Load {
  GElf_Addr vaddr;
  GElf_Off offset;
  GElf_Xword filesz;
};

std::optional<GElf_Off> vaddr_to_offset(const std::vector<Load>& loads, GElf_Addr vaddr) {
  for (const auto& l : loads)
    if (vaddr >= l.vaddr && vaddr - l.vaddr < l.filesz) return l.offset + (vaddr - l.vaddr);
  return std::nullopt;
}

// The strings of DT_STRTAB the dynamic section names, read in the few ranges that hold them:
// the whole table is the dynamic symbols' names too, megabytes in libtorch, while SONAME,
// NEEDED and RPATH are a few hundred bytes, usually side by side.
class StringReader {
 public:
  StringReader(Elf* elf, GElf_Off table, GElf_Xword size) : elf_(elf), table_(table), size_(size) {}

  void want(const std::vector<GElf_Xword>& offsets) {
    for (auto off : offsets)
      if (off < size_) wanted_.push_back(off);
  }

  // Reads every range; false when libelf cannot.
  bool read() {
    std::sort(wanted_.begin(), wanted_.end());
    if (size_ <= k_whole) return add(0, size_);
    for (std::size_t i = 0; i < wanted_.size();) {
      const GElf_Xword begin = wanted_[i];
      GElf_Xword last = begin;
      while (++i < wanted_.size() && wanted_[i] - last <= k_gap) last = wanted_[i];
      if (!add(begin, std::min<GElf_Xword>(size_, last + k_tail))) return false;
    }
    return true;
  }

  // The NUL-terminated string at `off`, or nothing when the offset or the terminator is
  // outside the table. A string longer than its range's tail is read again, whole.
  std::optional<std::string> at(GElf_Xword off) {
    if (off >= size_) return std::nullopt;
    for (const auto& r : ranges_) {
      if (off < r.begin || off >= r.end) continue;
      const char* p = r.bytes + (off - r.begin);
      if (const void* nul = std::memchr(p, 0, r.end - off)) return std::string(p, static_cast<const char*>(nul));
      if (r.end == size_) return std::nullopt;
      break;
    }
    if (!add(off, size_)) return std::nullopt;
    return at(off);
  }

 private:
  struct Range {
    GElf_Xword begin, end;
    const char* bytes;
  };
  static constexpr GElf_Xword k_whole = 64 * 1024;  // smaller tables are read in one go
  static constexpr GElf_Xword k_gap = 16 * 1024;    // offsets this close share a range
  static constexpr GElf_Xword k_tail = 4096;        // read past the last offset of a range

  bool add(GElf_Xword begin, GElf_Xword end) {
    Elf_Data* d = elf_getdata_rawchunk(elf_, static_cast<int64_t>(table_ + begin), end - begin, ELF_T_BYTE);
    if (!d) return false;
    // Newest first: a re-read of a long string replaces the range that cut it short.
    ranges_.insert(ranges_.begin(), {begin, end, static_cast<const char*>(d->d_buf)});
    return true;
  }

  Elf* elf_;
  GElf_Off table_;
  GElf_Xword size_;
  std::vector<GElf_Xword> wanted_;
  std::vector<Range> ranges_;
};

ElfRead read_elf(Elf* elf, std::size_t file_size, const std::string& name) {
  // Callers checked the magic: anything libelf will not take is a broken ELF file.
  if (elf_kind(elf) != ELF_K_ELF)
    return invalid(name, 0, fmt::format("not a complete ELF header ({} bytes)", file_size));
  GElf_Ehdr ehdr;
  if (!gelf_getehdr(elf, &ehdr)) return invalid(name, 0, fmt::format("bad ELF header: {}", elf_errmsg(-1)));
  ElfRead out;
  out.status = ElfReadStatus::ok;
  ElfInfo& info = out.info;
  info.elf_class = ehdr.e_ident[EI_CLASS];
  info.machine = ehdr.e_machine;
  info.type = ehdr.e_type;

  // The header's own count: libelf quietly reports 0 for a table that runs past the end.
  std::size_t phnum = ehdr.e_phnum;
  if (phnum == PN_XNUM && elf_getphdrnum(elf, &phnum) != 0)
    return invalid(name, ehdr.e_phoff, fmt::format("bad program header table: {}", elf_errmsg(-1)));
  if (phnum > 0 &&
      (ehdr.e_phoff >= file_size || phnum > (file_size - ehdr.e_phoff) / std::max<std::size_t>(ehdr.e_phentsize, 1)))
    return invalid(
        name, ehdr.e_phoff,
        fmt::format("program header table ({} entries) runs past the end of the file ({} bytes)", phnum, file_size));
  std::vector<Load> loads;
  std::optional<GElf_Phdr> dynamic;
  for (std::size_t i = 0; i < phnum; ++i) {
    GElf_Phdr ph;
    if (!gelf_getphdr(elf, static_cast<int>(i), &ph))
      return invalid(name, ehdr.e_phoff, fmt::format("bad program header {}: {}", i, elf_errmsg(-1)));
    if (ph.p_type == PT_LOAD) loads.push_back({ph.p_vaddr, ph.p_offset, ph.p_filesz});
    if (ph.p_type == PT_DYNAMIC && !dynamic) dynamic = ph;
  }
  if (!dynamic) return out;  // static or not loadable: no dependencies to follow
  if (dynamic->p_offset > file_size || dynamic->p_filesz > file_size - dynamic->p_offset)
    return invalid(name, dynamic->p_offset,
                   fmt::format("dynamic segment ({} bytes at {:#x}) lies outside the file ({} bytes)",
                               dynamic->p_filesz, dynamic->p_offset, file_size));
  Elf_Data* dyn = elf_getdata_rawchunk(elf, static_cast<int64_t>(dynamic->p_offset), dynamic->p_filesz, ELF_T_DYN);
  if (!dyn) return invalid(name, dynamic->p_offset, fmt::format("cannot read the dynamic segment: {}", elf_errmsg(-1)));

  std::vector<GElf_Xword> needed_offsets;
  std::optional<GElf_Xword> soname, rpath, runpath;
  GElf_Addr strtab = 0;
  GElf_Xword strsz = 0;
  const std::size_t entsize = gelf_fsize(elf, ELF_T_DYN, 1, EV_CURRENT);
  const std::size_t count = entsize ? dyn->d_size / entsize : 0;
  for (std::size_t i = 0; i < count; ++i) {
    GElf_Dyn d;
    if (!gelf_getdyn(dyn, static_cast<int>(i), &d)) break;
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
    return invalid(name, dynamic->p_offset, "dynamic section names strings but has no DT_STRTAB/DT_STRSZ");
  const auto str_off = vaddr_to_offset(loads, strtab);
  if (!str_off) return invalid(name, dynamic->p_offset, fmt::format("DT_STRTAB {:#x} is in no loaded segment", strtab));
  if (*str_off > file_size || strsz > file_size - *str_off)
    return invalid(name, *str_off,
                   fmt::format("string table ({} bytes at {:#x}) runs past the end of the file ({} bytes)", strsz,
                               *str_off, file_size));
  StringReader strings(elf, *str_off, strsz);
  strings.want(needed_offsets);
  for (const auto* off : {&soname, &rpath, &runpath})
    if (*off) strings.want({**off});
  if (!strings.read()) return invalid(name, *str_off, fmt::format("cannot read the string table: {}", elf_errmsg(-1)));
  auto outside = [&](const char* tag, GElf_Xword off) {
    return invalid(name, *str_off + off,
                   fmt::format("{} string offset {} is outside the string table ({} bytes)", tag, off, strsz));
  };
  for (auto off : needed_offsets) {
    auto s = strings.at(off);
    if (!s) return outside("DT_NEEDED", off);
    info.needed.push_back(std::move(*s));
  }
  const std::pair<const char*, std::pair<std::optional<GElf_Xword>*, std::optional<std::string>*>> named[] = {
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

}  // namespace

const std::optional<std::string>& ElfInfo::effective_rpath() const {
  static const std::optional<std::string> none;
  return runpath ? none : rpath;
}

ElfRead read_elf_memory(const void* data, std::size_t size, const std::string& name) {
  init_libelf();
  if (size < 4 || std::memcmp(data, ELFMAG, SELFMAG) != 0) return {};
  Elf* elf = elf_memory(static_cast<char*>(const_cast<void*>(data)), size);
  if (!elf) return invalid(name, 0, fmt::format("libelf: {}", elf_errmsg(-1)));
  ElfRead r = read_elf(elf, size, name);
  elf_end(elf);
  return r;
}

ElfRead read_elf_file(const std::string& path) {
  init_libelf();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return invalid(path, std::nullopt, fmt::format("cannot open: {}", std::strerror(errno)));
  unsigned char magic[SELFMAG];
  if (::pread(fd, magic, SELFMAG, 0) != SELFMAG || std::memcmp(magic, ELFMAG, SELFMAG) != 0) {
    ::close(fd);
    return {};
  }
  const off_t size = ::lseek(fd, 0, SEEK_END);
  // ELF_C_READ reads on demand with pread: the header, the program headers, the dynamic
  // segment and its strings. Mapping each file instead serialises many threads on the
  // process's mmap lock for nothing.
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  if (!elf) {
    ::close(fd);
    return invalid(path, 0, fmt::format("libelf: {}", elf_errmsg(-1)));
  }
  ElfRead r = read_elf(elf, static_cast<std::size_t>(size), path);
  elf_end(elf);
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

}  // namespace cudafix::resolver
