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

// Hands out [0, n) in chunks of at most `chunk` to the parts of a ThreadPool::run job, so a
// thread that is slowed or descheduled holds up at most the chunk it has claimed, not the rest
// of a fixed 1/n of the work (a claimed chunk is never taken back). Each of `parts` logical
// parts (run's part index) first owns a contiguous 1/parts of the range and claims its chunks
// from the front of it, so a part's successive chunks are adjacent: a decode matvec
// keeps streaming one run of rows, and its prefetches past a chunk's end land in the next
// chunk it takes instead of in another thread's rows. A part whose range is used up takes
// chunks from the back of the others' (at most half of what is left there), and owners too take
// at most half of what is left, so the parts finish close together. With one part, chunks are
// handed out in order at full size. Lives on the submitting thread's stack for one job.
class OwnedChunkQueue {
 public:
  static constexpr int kMaxParts = 64;  // more parts share ranges (part p uses range p mod 64)

  // chunk >= 1; n < 2^32.
  OwnedChunkQueue(std::int64_t n, std::int64_t chunk, int parts) noexcept
      : n_(n), chunk_(chunk), parts_(std::clamp(parts, 1, kMaxParts)) {
    for (int p = 0; p < parts_; ++p) {
      const Range r = split_range(n, p, parts_);
      ranges_[p].bounds.store(pack(r.begin, r.end), std::memory_order_relaxed);
    }
  }
  OwnedChunkQueue(const OwnedChunkQueue&) = delete;
  OwnedChunkQueue& operator=(const OwnedChunkQueue&) = delete;

  // The next chunk for `part`, or an empty range once everything is claimed. Thread-safe.
  [[nodiscard]] Range next(int part) noexcept {
    const int own = part % parts_;
    for (int k = 0; k < parts_; ++k) {
      OwnedRange& r = ranges_[(own + k) % parts_];
      std::uint64_t bounds = r.bounds.load(std::memory_order_relaxed);
      for (;;) {
        const std::int64_t front = low(bounds), back = high(bounds), left = back - front;
        if (left <= 0) break;
        const std::int64_t size = std::min(chunk_, parts_ == 1 ? left : (left + 1) / 2);
        const bool from_front = k == 0;
        const std::uint64_t claimed = from_front ? pack(front + size, back) : pack(front, back - size);
        if (r.bounds.compare_exchange_weak(bounds, claimed, std::memory_order_relaxed)) {
          return from_front ? Range{front, front + size} : Range{back - size, back};
        }
      }
    }
    return {n_, n_};
  }

 private:
  static std::uint64_t pack(std::int64_t front, std::int64_t back) noexcept {
    return static_cast<std::uint64_t>(front) | static_cast<std::uint64_t>(back) << 32;
  }
  static std::int64_t low(std::uint64_t v) noexcept { return static_cast<std::int64_t>(v & 0xFFFFFFFFu); }
  static std::int64_t high(std::uint64_t v) noexcept { return static_cast<std::int64_t>(v >> 32); }

  struct alignas(64) OwnedRange {  // [front, back) still unclaimed; a cache line each
    std::atomic<std::uint64_t> bounds{0};
  };
  std::int64_t n_;
  std::int64_t chunk_;
  int parts_;
  OwnedRange ranges_[kMaxParts];
};

}  // namespace sitsrt
