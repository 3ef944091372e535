#include "resolver/base/parallel.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <set>
#include <thread>

namespace cudafix::resolver::inline base {
namespace {

// One parallel_for: its items, the next one to take, and the pool threads still working on it.
struct Job {
  std::size_t n = 0;
  const std::function<void(std::size_t)>* fn = nullptr;
  std::atomic<std::size_t> next{0};
  unsigned seats = 0;    // pool threads it may still take (guarded by the pool's mutex)
  unsigned helpers = 0;  // pool threads working on it (guarded by the pool's mutex)
  std::mutex error_mutex;
  std::exception_ptr error;  // the first exception any call threw; the caller rethrows it

  void work() {
    for (std::size_t i = next++; i < n; i = next++) {
      try {
        (*fn)(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next = n;  // the other items are not started
      }
    }
  }
};

std::atomic<unsigned> started_anywhere{0};  // pool threads started so far, for pool_threads_started()

// Threads are started as requests need them and live until the process exits; idle ones spin
// briefly (the next phase usually follows at once), then sleep.
class Pool {
 public:
  static Pool& instance() {
    static Pool* pool = new Pool;  // never destroyed: its threads may sleep through exit()
    return *pool;
  }

  void run(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& fn) {
    Job job;
    job.n = n;
    job.fn = &fn;
    job.seats = threads - 1;
    {
      std::lock_guard lock(mutex_);
      // Enough threads for every seat of the jobs running at once (the walk and the dist-info
      // reads run side by side, each with its share of the cores), though never more than twice
      // the cores however deeply calls nest.
      seats_wanted_ += threads - 1;
      const unsigned cap = std::max(threads - 1, 2 * thread_count(0));
      while (threads_started_ < std::min(seats_wanted_, cap)) {
        std::thread([this] { serve(); }).detach();
        ++threads_started_;
        started_anywhere.fetch_add(1, std::memory_order_relaxed);
      }
      jobs_.push_back(&job);
      ++posted_;
    }
    wake_.notify_all();
    job.work();
    {
      std::unique_lock lock(mutex_);
      // No pool thread takes a seat from here on; wait for those that did.
      if (const auto it = std::find(jobs_.begin(), jobs_.end(), &job); it != jobs_.end()) jobs_.erase(it);
      done_.wait(lock, [&] { return job.helpers == 0; });
      seats_wanted_ -= threads - 1;
    }
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  void serve() {
    std::unique_lock lock(mutex_);
    while (true) {
      Job* job = take_seat();
      if (!job) {
        const std::uint64_t seen = posted_;
        lock.unlock();
        const auto until = std::chrono::steady_clock::now() + k_spin;
        while (posted_.load(std::memory_order_relaxed) == seen && std::chrono::steady_clock::now() < until)
          std::this_thread::yield();
        lock.lock();
        wake_.wait(lock, [&] { return posted_ != seen || has_seat(); });
        continue;
      }
      lock.unlock();
      job->work();
      lock.lock();
      if (--job->helpers == 0) done_.notify_all();
    }
  }

  bool has_seat() const {
    return std::any_of(jobs_.begin(), jobs_.end(), [](const Job* j) { return j->seats > 0; });
  }

  Job* take_seat() {
    for (Job* j : jobs_)
      if (j->seats > 0 && j->next.load() < j->n) {
        --j->seats;
        ++j->helpers;
        return j;
      }
    return nullptr;
  }

  static constexpr auto k_spin = std::chrono::microseconds(200);
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::deque<Job*> jobs_;
  std::atomic<std::uint64_t> posted_{0};
  unsigned threads_started_ = 0;
  unsigned seats_wanted_ = 0;  // pool threads the running jobs asked for, together
};

}  // namespace

unsigned pool_threads_started() { return started_anywhere.load(std::memory_order_relaxed); }

unsigned cores_available() {
  // Asked once: a scan asks 25 times. The set is grown until it holds every CPU the kernel knows.
  static const unsigned cores = [] {
    for (int cpus = 1024; cpus <= (1 << 20); cpus *= 2) {
      cpu_set_t* set = CPU_ALLOC(static_cast<std::size_t>(cpus));
      if (!set) break;
      const std::size_t size = CPU_ALLOC_SIZE(static_cast<std::size_t>(cpus));
      CPU_ZERO_S(size, set);
      const int rc = ::sched_getaffinity(0, size, set);
      const int count = rc == 0 ? CPU_COUNT_S(size, set) : 0;
      CPU_FREE(set);
      if (rc == 0) return static_cast<unsigned>(std::max(count, 1));
      if (errno != EINVAL) break;
    }
    const unsigned hw = std::thread::hardware_concurrency();
    return hw ? hw : 1U;
  }();
  return cores;
}

unsigned thread_count(unsigned requested) { return requested ? requested : cores_available(); }

void parallel_for(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& fn) {
  const auto t = static_cast<unsigned>(std::min<std::size_t>(thread_count(threads), std::max<std::size_t>(n, 1)));
  if (t <= 1) {
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  Pool::instance().run(n, t, fn);
}

void run_in_dependency_order(const std::vector<std::vector<std::size_t>>& waits_for, unsigned threads,
                             const std::function<void(std::size_t)>& run) {
  const std::size_t n = waits_for.size();
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::size_t> waiting(n);
  std::vector<std::vector<std::size_t>> dependents(n);
  std::set<std::size_t> ready;
  for (std::size_t t = 0; t < n; ++t) {
    waiting[t] = waits_for[t].size();
    for (std::size_t w : waits_for[t]) dependents[w].push_back(t);
    if (waiting[t] == 0) ready.insert(t);
  }
  std::size_t left = n;
  std::exception_ptr failure;
  const auto workers = std::min<std::size_t>(thread_count(threads), std::max<std::size_t>(n, 1));
  parallel_for(workers, threads, [&](std::size_t) {
    std::unique_lock lock(mutex);
    while (true) {
      changed.wait(lock, [&] { return !ready.empty() || left == 0; });
      if (ready.empty()) return;
      const std::size_t t = *ready.begin();
      ready.erase(ready.begin());
      lock.unlock();
      try {
        run(t);
      } catch (...) {
        lock.lock();
        if (!failure) failure = std::current_exception();
        ready.clear();
        left = 0;
        changed.notify_all();
        return;
      }
      lock.lock();
      if (left == 0) return;  // another task failed
      --left;
      for (std::size_t d : dependents[t])
        if (--waiting[d] == 0) ready.insert(d);
      changed.notify_all();
    }
  });
  if (failure) std::rethrow_exception(failure);
}

}  // namespace cudafix::resolver::inline base
