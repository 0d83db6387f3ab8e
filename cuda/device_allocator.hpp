// Device memory for one CudaContext: a stream-ordered caching allocator with a byte budget.
// Blocks come from cudaMallocAsync on the context's stream (cudaMalloc / cudaFree, which order
// themselves with all device work, where the device or its virtualisation has no memory pools:
// cudaDevAttrMemoryPoolsSupported 0, or cudaMallocAsync answering cudaErrorNotSupported); a freed block goes back to a
// cache of blocks by rounded size and is handed out again to a later request of that size (on the same stream, so its
// previous user's queued work is ordered before the new one's). The budget holds every byte taken from the device (live
// and cached blocks): a request that would pass it first returns the cache to the device, then fails with kOutOfMemory
// naming what asked, the bytes asked, the budget and what is in use; so does a device that runs out first. Thread-safe.
#pragma once

#include "cuda_backend/cuda_context.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>

namespace sitsrt::cuda {

class DeviceAllocator {
 public:
  // budget_bytes 0: the device's free memory at construction, less 5% (its default budget).
  DeviceAllocator(const CudaContext& context, std::uint64_t budget_bytes);
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // At least `bytes` (> 0) bytes, 256-byte aligned; `what` names the use in errors.
  [[nodiscard]] std::byte* allocate(std::size_t bytes, std::string_view what);
  // Returns a block from allocate(ptr's request of `bytes`) to the cache.
  void deallocate(std::byte* ptr, std::size_t bytes) noexcept;
  // Returns every cached block to the device.
  void trim() noexcept;

  // The size allocate(bytes) takes from the device: 512-byte steps up to 1 MiB, 2 MiB steps above.
  [[nodiscard]] static std::size_t rounded(std::size_t bytes) noexcept;

  [[nodiscard]] std::uint64_t budget() const noexcept { return budget_; }
  [[nodiscard]] std::uint64_t live_bytes() const;        // handed out and not returned
  [[nodiscard]] std::uint64_t cached_bytes() const;      // returned, kept for reuse
  [[nodiscard]] std::uint64_t high_water_bytes() const;  // most live bytes ever

 private:
  void trim_locked() noexcept;

  // One block from the device: cudaMallocAsync, or cudaMalloc without memory pools.
  [[nodiscard]] cudaError_t device_malloc(void** ptr, std::size_t size);

  const CudaContext& context_;
  bool pools_ = true;  // cudaMallocAsync / cudaFreeAsync; false: cudaMalloc / cudaFree
  std::uint64_t budget_ = 0;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, std::byte*> cache_;  // rounded size -> block
  std::uint64_t live_ = 0;
  std::uint64_t cached_ = 0;
  std::uint64_t high_water_ = 0;
};

}  // namespace sitsrt::cuda
