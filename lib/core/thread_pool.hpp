// A fixed set of worker threads that run one parallel job at a time.
// The calling thread takes part as thread 0, so a pool of N threads starts N-1 workers.
// Workers spin briefly after a job (decode steps arrive back to back) and then sleep on an
// atomic wait, so an idle engine does not burn a core.
#pragma once

#include "core/function_ref.hpp"

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

  // Runs job(thread_index, n_threads) on every thread and returns when all are done.
  // An exception thrown by any thread is rethrown here (the first one wins).
  // Jobs from different callers are serialised.
  void run(FunctionRef<void(int, int)> job);

  static int hardware_threads() noexcept;

 private:
  void worker_loop(int index);
  void run_guarded(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex submit_mutex_;
  FunctionRef<void(int, int)>* job_ = nullptr;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
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

}  // namespace sitsrt
