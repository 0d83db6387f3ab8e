#include "core/thread_pool.hpp"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SITSRT_CPU_RELAX() _mm_pause()
#else
#define SITSRT_CPU_RELAX() ((void)0)
#endif

namespace sitsrt {
namespace {
// About 50-100 us of spinning before sleeping: longer than the gap between two ops of a
// decode step, much shorter than the gap between requests.
constexpr int kSpinIterations = 20000;
}  // namespace

int ThreadPool::hardware_threads() noexcept {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads <= 0 ? hardware_threads() : n_threads) {
  // Start with every part claimed, so a worker that wakes before the first job finds nothing.
  next_part_.store(n_threads_);
  workers_.reserve(static_cast<std::size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

// Claims and runs parts until none is left. The job is read only after a successful claim:
// the claim synchronises with run()'s reset of next_part_, which follows the job's publication,
// and run() does not return (retiring the job) before every claimed part is done.
void ThreadPool::run_parts() {
  for (;;) {
    const int part = next_part_.fetch_add(1, std::memory_order_acq_rel);
    if (part >= n_threads_) return;
    try {
      (*job_.load(std::memory_order_acquire))(part, n_threads_);
    } catch (...) {
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    done_parts_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(FunctionRef<void(int, int)> job) {
  std::lock_guard submit(submit_mutex_);
  if (n_threads_ == 1) {
    job(0, 1);
    return;
  }
  error_ = nullptr;
  job_.store(&job, std::memory_order_release);
  done_parts_.store(0, std::memory_order_release);
  next_part_.store(0, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  run_parts();
  for (int spin = 0; done_parts_.load(std::memory_order_acquire) != n_threads_; ++spin) {
    if (spin < kSpinIterations) {
      SITSRT_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  job_.store(nullptr, std::memory_order_release);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop() {
  // Generation 0 is the state before any job; a job may be published before this thread
  // first runs, so it must not start from the current value.
  std::uint64_t seen = 0;
  for (;;) {
    std::uint64_t now = generation_.load(std::memory_order_acquire);
    for (int spin = 0; now == seen && spin < kSpinIterations; ++spin) {
      SITSRT_CPU_RELAX();
      now = generation_.load(std::memory_order_acquire);
    }
    if (now == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = now;
    if (stop_.load(std::memory_order_acquire)) return;
    run_parts();
  }
}

Range split_range(std::int64_t n, int thread_index, int n_threads, std::int64_t grain) noexcept {
  const std::int64_t units = (n + grain - 1) / grain;
  const std::int64_t per = units / n_threads;
  const std::int64_t extra = units % n_threads;
  const std::int64_t first = thread_index * per + std::min<std::int64_t>(thread_index, extra);
  const std::int64_t count = per + (thread_index < extra ? 1 : 0);
  return {std::min(n, first * grain), std::min(n, (first + count) * grain)};
}

}  // namespace sitsrt
