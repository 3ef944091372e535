// libFuzzer: the PEP 751 lock reader (resolver/pep/pylock.hpp) must never crash and refuse
// anything malformed with an Error; a lock it accepts is written back to text it reads again to
// the same value, and writing that value again gives the same bytes.
#include <cstdint>
#include <string>
#include <string_view>

#include "resolver/base/diagnostic.hpp"
#include "resolver/pep/pylock.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace r = cudafix::resolver;
  r::Lock lock;
  try {
    lock = r::parse_lock(std::string_view(reinterpret_cast<const char*>(data), size), "pylock.toml");
  } catch (const r::Error&) {
    return 0;
  }
  const std::string text = r::write_lock(lock);
  r::Lock again;
  try {
    again = r::parse_lock(text, "written.toml");
  } catch (const r::Error&) {
    __builtin_trap();  // what the writer wrote, the reader must read
  }
  r::sort_lock(lock);
  if (!(again == lock) || r::write_lock(again) != text) __builtin_trap();
  return 0;
}
