// Work spread over cores. One set of threads serves the whole run: a scan hands work to threads
// a dozen times (walk, dist-info, ownership, ELF, each depth of the process model), and starting
// 16 threads for each of those cost 0.3-0.5 ms apiece on the 16-core machine.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace cudafix::resolver::inline base {

// The cores this process may run on (sched_getaffinity(2): a cgroup's or taskset's CPU set,
// not every CPU the machine has online); at least 1.
[[nodiscard]] unsigned cores_available();
// How many pool threads this process has started: a restriction a thread applies to itself and
// what it starts (Landlock) does not reach those already running.
[[nodiscard]] unsigned pool_threads_started();
// The threads a request for `requested` means: itself, or 0 for one per core available. The
// command line caps what a user asks for at cores_available() (cli/main); the tests ask for
// more on purpose, to run the phases that overlap from 4 threads on a 2-core machine.
[[nodiscard]] unsigned thread_count(unsigned requested);

// Runs fn(i) for i in [0, n) on the calling thread and up to `threads` - 1 pool threads (threads
// 0: one per core); returns when every call has returned. fn may itself call parallel_for: the
// caller always works on its own items, so a busy pool slows it but never blocks it.
void parallel_for(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& fn);

// Runs run(t) for t in [0, waits_for.size()), each only after run(w) has returned for every w in
// waits_for[t] (no cycles), on up to `threads` threads; among the tasks ready, the lowest t
// starts first. The first exception stops the tasks not yet started and reaches the caller.
void run_in_dependency_order(const std::vector<std::vector<std::size_t>>& waits_for, unsigned threads,
                             const std::function<void(std::size_t)>& run);

}  // namespace cudafix::resolver::inline base
