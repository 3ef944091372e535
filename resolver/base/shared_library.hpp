// Libraries cudafix opens with dlopen the first time a command needs them, instead of linking
// them: each linked library is loaded and relocated at every start, scan and doctor included,
// whether or not the run uses it (libarchive with libxml2 and ICU cost 2.5 ms a start on the
// 2-core machine; libcrypto 1 ms).
#pragma once

#include <string>
#include <utility>

namespace cudafix::resolver::inline base {

class SharedLibrary {
 public:
  // Opens `soname` (RTLD_NOW | RTLD_LOCAL), or throws Error "cannot PURPOSE: <dlerror>". The
  // handle is never closed: the functions bound from it may be called until exit.
  SharedLibrary(const char* soname, std::string purpose);

  // Sets `slot` to the library's function `name`, or throws Error "cannot PURPOSE: SONAME has no
  // NAME" (a library of the right name but the wrong version or make).
  template <class F>
  void bind(F& slot, const char* name) const {
    slot = reinterpret_cast<F>(symbol(name));
  }

 private:
  [[nodiscard]] void* symbol(const char* name) const;

  void* handle_ = nullptr;
  std::string soname_;
  std::string purpose_;
};

// A table of a library's functions whose names are written once: LIST(X) calls X(member,
// function) for each, and the table gets a member of the function's own type from the header
// (so each call is checked against it) and binds it by the function's name. A second list of
// the same names could fall out of step with the first, binding one name into another's slot.
//
//   #define LIBFOO_FUNCTIONS(X) X(open, foo_open) X(close, foo_close)
//   CUDAFIX_SHARED_LIBRARY_TABLE(LibFoo, LIBFOO_FUNCTIONS);
//   static const LibFoo foo = load_functions<LibFoo>("libfoo.so.1", "read foo files");
#define CUDAFIX_SHARED_LIBRARY_MEMBER(member, function) decltype(&::function) member = nullptr;
#define CUDAFIX_SHARED_LIBRARY_BIND(member, function) library.bind(table.member, #function);
#define CUDAFIX_SHARED_LIBRARY_TABLE(Name, LIST)                              \
  struct Name {                                                               \
    LIST(CUDAFIX_SHARED_LIBRARY_MEMBER)                                       \
    static Name bind_all(const ::cudafix::resolver::SharedLibrary& library) { \
      Name table;                                                             \
      LIST(CUDAFIX_SHARED_LIBRARY_BIND)                                       \
      return table;                                                           \
    }                                                                         \
  }

// Opens `soname` and binds every function of `Table` (a CUDAFIX_SHARED_LIBRARY_TABLE), or throws
// SharedLibrary's Error. Callers keep the result in a function-local static: one load a process.
template <class Table>
[[nodiscard]] Table load_functions(const char* soname, std::string purpose) {
  const SharedLibrary library(soname, std::move(purpose));
  return Table::bind_all(library);
}

}  // namespace cudafix::resolver::inline base
