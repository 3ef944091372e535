#include "resolver/elf/elf_writer.hpp"

#include <elf.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include "resolver/base/diagnostic.hpp"
#include "resolver/elf/elf_class.hpp"

namespace cudafix::resolver::inline elf {
namespace {

std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

template <class T>
void put(std::string& buf, std::size_t off, const T& v) {
  std::memcpy(buf.data() + off, &v, sizeof v);
}

template <class E>
std::string build(const ElfSpec& spec) {
  using Addr = typename E::Addr;
  // String table: a leading NUL, then every string once.
  std::string dynstr(1, '\0');
  auto add_str = [&](const std::string& s) {
    for (std::size_t filled = 0; filled < spec.string_gap; filled += 16) dynstr.append("_ZN5other4namev", 16);
    const auto off = dynstr.size();
    dynstr += s;
    dynstr.push_back('\0');
    return off;
  };
  std::vector<std::pair<std::int64_t, std::uint64_t>> dyn;
  for (const auto& n : spec.needed) dyn.emplace_back(DT_NEEDED, add_str(n));
  if (spec.soname) dyn.emplace_back(DT_SONAME, add_str(*spec.soname));
  if (spec.rpath) dyn.emplace_back(DT_RPATH, add_str(*spec.rpath));
  if (spec.runpath) dyn.emplace_back(DT_RUNPATH, add_str(*spec.runpath));

  constexpr std::size_t nph = 3;
  const std::size_t ph_off = sizeof(typename E::Ehdr);
  const std::size_t str_off = ph_off + nph * sizeof(typename E::Phdr);
  const std::size_t sym_off = align_up(str_off + dynstr.size(), 8);
  const std::size_t hash_off = sym_off + sizeof(typename E::Sym);
  const std::size_t dyn_off = align_up(hash_off + 4 * sizeof(std::uint32_t), 8);
  dyn.emplace_back(DT_STRTAB, str_off);
  dyn.emplace_back(DT_STRSZ, dynstr.size());
  dyn.emplace_back(DT_SYMTAB, sym_off);
  dyn.emplace_back(DT_SYMENT, sizeof(typename E::Sym));
  dyn.emplace_back(DT_HASH, hash_off);
  if (spec.flags_1) dyn.emplace_back(DT_FLAGS_1, spec.flags_1);
  dyn.emplace_back(DT_NULL, 0);
  const std::size_t dyn_size = dyn.size() * sizeof(typename E::Dyn);
  const std::size_t end = dyn_off + dyn_size + spec.padding;

  std::string buf(end, '\0');
  typename E::Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = E::klass;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_ident[EI_OSABI] = ELFOSABI_SYSV;
  eh.e_type = ET_DYN;
  eh.e_machine = spec.machine;
  eh.e_version = EV_CURRENT;
  eh.e_phoff = ph_off;
  eh.e_ehsize = sizeof eh;
  eh.e_phentsize = sizeof(typename E::Phdr);
  eh.e_phnum = nph;
  put(buf, 0, eh);

  typename E::Phdr load{};
  load.p_type = PT_LOAD;
  load.p_flags = PF_R | PF_W;
  load.p_offset = 0;
  load.p_vaddr = load.p_paddr = 0;
  load.p_filesz = load.p_memsz = static_cast<decltype(load.p_filesz)>(end);
  load.p_align = 0x1000;
  typename E::Phdr dynamic{};
  dynamic.p_type = PT_DYNAMIC;
  dynamic.p_flags = PF_R | PF_W;
  dynamic.p_offset = dynamic.p_vaddr = dynamic.p_paddr = static_cast<Addr>(dyn_off);
  dynamic.p_filesz = dynamic.p_memsz = static_cast<decltype(dynamic.p_filesz)>(dyn_size);
  dynamic.p_align = 8;
  typename E::Phdr stack{};
  stack.p_type = PT_GNU_STACK;
  stack.p_flags = PF_R | PF_W;
  stack.p_align = 16;
  put(buf, ph_off, load);
  put(buf, ph_off + sizeof load, dynamic);
  put(buf, ph_off + 2 * sizeof load, stack);

  std::memcpy(buf.data() + str_off, dynstr.data(), dynstr.size());
  // .dynsym holds only the null symbol; DT_HASH: nbucket 1, nchain 1, both pointing at it.
  const std::uint32_t hash[4] = {1, 1, 0, 0};
  std::memcpy(buf.data() + hash_off, hash, sizeof hash);
  for (std::size_t i = 0; i < dyn.size(); ++i) {
    typename E::Dyn d{};
    d.d_tag = static_cast<decltype(d.d_tag)>(dyn[i].first);
    d.d_un.d_val = static_cast<decltype(d.d_un.d_val)>(dyn[i].second);
    put(buf, dyn_off + i * sizeof d, d);
  }
  return buf;
}

}  // namespace

std::string make_shared_object(const ElfSpec& spec) {
  return spec.elf_class == ELFCLASS32 ? build<Elf32Types>(spec) : build<Elf64Types>(spec);
}

void write_shared_object(const std::string& path, const ElfSpec& spec) {
  const std::string bytes = make_shared_object(spec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  if (fd < 0) throw Error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  const ssize_t w = ::write(fd, bytes.data(), bytes.size());
  const int err = errno;
  ::close(fd);
  if (w != static_cast<ssize_t>(bytes.size()))
    throw Error(fmt::format("cannot write {}: {}", path, w < 0 ? std::strerror(err) : "short write"));
}

}  // namespace cudafix::resolver::inline elf
