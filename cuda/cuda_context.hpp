// One CUDA device as the backend uses it: the device index, its properties and one stream on
// which every kernel and copy of the backend is ordered. Made explicitly and passed to what
// needs it (no global state); every call that may come from another host thread first makes
// the device current (the CUDA runtime's current device is per thread).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <string>

namespace sitsrt::cuda {

// Devices the runtime sees; 0 with `why` set (driver missing, no device) when none.
[[nodiscard]] int device_count(std::string* why = nullptr) noexcept;

class CudaContext {
 public:
  // Throws kUnsupported naming the devices present when `device` is not one of them.
  explicit CudaContext(int device);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  void make_current() const;
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] int multiprocessors() const noexcept { return multiprocessors_; }
  [[nodiscard]] int compute_capability() const noexcept { return compute_capability_; }  // 90 for sm_90
  [[nodiscard]] std::uint64_t total_memory() const noexcept { return total_memory_; }
  [[nodiscard]] std::uint64_t free_memory() const;
  // Waits for everything queued on the stream; throws the first asynchronous error.
  void synchronize() const;
  // Held while a host thread queues work on the stream (kernels, copies, stream-ordered
  // allocations), so a decode graph's stream capture never takes in another thread's work.
  // Recursive: a step's kernels allocate through the allocator, which takes it too.
  [[nodiscard]] std::recursive_mutex& stream_mutex() const noexcept { return stream_mutex_; }

 private:
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::string name_;
  int multiprocessors_ = 0;
  int compute_capability_ = 0;
  std::uint64_t total_memory_ = 0;
  mutable std::recursive_mutex stream_mutex_;
};

}  // namespace sitsrt::cuda
