#include "resolver/base/shared_library.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include "resolver/base/diagnostic.hpp"

namespace cudafix::resolver::inline base {

SharedLibrary::SharedLibrary(const char* soname, std::string purpose)
    : handle_(::dlopen(soname, RTLD_NOW | RTLD_LOCAL)), soname_(soname), purpose_(std::move(purpose)) {
  if (!handle_) throw Error(fmt::format("cannot {}: {}", purpose_, ::dlerror()));
}

void* SharedLibrary::symbol(const char* name) const {
  void* p = ::dlsym(handle_, name);
  if (!p) throw Error(fmt::format("cannot {}: {} has no {}", purpose_, soname_, name));
  return p;
}

}  // namespace cudafix::resolver::inline base
