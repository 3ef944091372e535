// Work spread over cores. One set of threads serves the whole run: a scan hands work to threads
// a dozen times (walk, dist-info, ownership, ELF, each depth of the process model), and starting
// 16 threads for each of those cost 0.3-0.5 ms apiece on the 16-core machine.
#pragma once

#include <cstddef>
#include <functional>

namespace cudafix::resolver {

// The threads a request for `requested` means: itself, or 0 for one per core.
[[nodiscard]] unsigned thread_count(unsigned requested);

// Runs fn(i) for i in [0, n) on the calling thread and up to `threads` - 1 pool threads (threads
// 0: one per core); returns when every call has returned. fn may itself call parallel_for: the
// caller always works on its own items, so a busy pool slows it but never blocks it.
void parallel_for(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& fn);

}  // namespace cudafix::resolver
