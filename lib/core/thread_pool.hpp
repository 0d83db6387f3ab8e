// A fixed set of worker threads that run one parallel job at a time.
// The calling thread takes part, so a pool of N threads starts N-1 workers. A job is split into
// N logical parts (thread_index 0..N-1, which kernels use to partition work and pick scratch);
// parts are claimed by whichever threads are running, so a worker the OS has descheduled does
// not stall the job: its part is taken by a thread that is awake. Workers spin briefly after a
// job (decode steps arrive back to back) and then sleep on an atomic wait, so an idle engine
// does not burn a core.
#pragma once

#include "core/function_ref.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace sitsrt {

class ThreadPool {
 public:
  // n_threads <= 0 means all hardware threads.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  [[nodiscard]] int size() const noexcept { return n_threads_; }

  // Runs job(part, n_threads) for every part in [0, n_threads) and returns when all are done;
  // no two threads run the same part. An exception thrown by any part is rethrown here (the
  // first one wins). Jobs from different callers are serialised.
  void run(FunctionRef<void(int, int)> job);

  static int hardware_threads() noexcept;

 private:
  void worker_loop();
  void run_parts();

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex submit_mutex_;
  std::atomic<FunctionRef<void(int, int)>*> job_{nullptr};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> next_part_{0};
  std::atomic<int> done_parts_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// Splits [0, n) into n_threads contiguous chunks aligned to `grain`; returns thread i's [begin, end).
struct Range {
  std::int64_t begin;
  std::int64_t end;
};
Range split_range(std::int64_t n, int thread_index, int n_threads, std::int64_t grain = 1) noexcept;

// Hands out [0, n) in chunks of at most `chunk` to whichever thread asks next: the parts of a
// ThreadPool::run job each call next() until it returns an empty range, so a thread that is
// slowed or descheduled holds up at most the chunk it has claimed, not the rest of a fixed 1/n
// of the work. A claimed chunk is never taken back.
// With tail_parts > 0 the chunks shrink towards the end (guided scheduling): a chunk is at most
// ceil(left / tail_parts) of the `left` unclaimed items, so the last chunks are small and the
// threads finish close together, while the early chunks keep their full size (long runs).
// Lives on the submitting thread's stack for one job (no allocation); a cache line of its own
// keeps the counter's traffic off the caller's other locals.
class alignas(64) ChunkQueue {
 public:
  // chunk >= 1, tail_parts >= 0.
  ChunkQueue(std::int64_t n, std::int64_t chunk, std::int64_t tail_parts = 0) noexcept
      : n_(n), chunk_(chunk), tail_parts_(tail_parts) {}
  ChunkQueue(const ChunkQueue&) = delete;
  ChunkQueue& operator=(const ChunkQueue&) = delete;

  // The next unclaimed chunk, or an empty range once all are claimed. Thread-safe.
  [[nodiscard]] Range next() noexcept {
    std::int64_t begin = next_.load(std::memory_order_relaxed);
    while (begin < n_) {
      const std::int64_t left = n_ - begin;
      std::int64_t size = std::min(chunk_, left);
      if (tail_parts_ > 0) size = std::min(size, (left + tail_parts_ - 1) / tail_parts_);
      if (next_.compare_exchange_weak(begin, begin + size, std::memory_order_relaxed)) return {begin, begin + size};
    }
    return {n_, n_};
  }

 private:
  std::atomic<std::int64_t> next_{0};
  std::int64_t n_;
  std::int64_t chunk_;
  std::int64_t tail_parts_;
};

}  // namespace sitsrt
