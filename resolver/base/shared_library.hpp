// Libraries cudafix opens with dlopen the first time a command needs them, instead of linking
// them: each linked library is loaded and relocated at every start, scan and doctor included,
// whether or not the run uses it (libarchive with libxml2 and ICU cost 2.5 ms a start on the
// 2-core machine; libcrypto 1 ms).
#pragma once

#include <string>

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

}  // namespace cudafix::resolver::inline base
