// Host-to-device uploads of the small per-step data kernels read (token ids, positions, block
// tables, attention descriptors, rope frequencies): a pinned host ring and a device ring of the
// same size. An upload fills the next stretch of the host ring and queues its copy on the
// stream, so it is ordered before the kernels that read it and after those that read the
// stretch's previous contents. Before the ring wraps, the stream is drained, so the host never
// rewrites bytes a queued copy has still to read. A caller queues the kernels that read a slot
// before it reserves the next one (one slot per launch), so a wrap never reuses device bytes
// a kernel still has to read.
#pragma once

#include "cuda_backend/cuda_context.hpp"
#include "cuda_backend/device_allocator.hpp"

#include <cstddef>
#include <mutex>
#include <span>

namespace sitsrt::cuda {

class StagingRing {
 public:
  StagingRing(const CudaContext& context, DeviceAllocator& allocator, std::size_t bytes);
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  struct Slot {
    std::byte* host = nullptr;    // fill these bytes...
    std::byte* device = nullptr;  // ...which kernels read here once committed
    std::size_t bytes = 0;
  };
  // The next `bytes` of the ring (16-byte aligned), growing it when it is smaller.
  [[nodiscard]] Slot reserve(std::size_t bytes);
  // Queues the copy of a reserved slot.
  void commit(const Slot& slot);
  // reserve + copy + commit.
  [[nodiscard]] const std::byte* upload(std::span<const std::byte> bytes);

 private:
  void allocate_ring(std::size_t bytes);
  void release_ring() noexcept;

  const CudaContext& context_;
  DeviceAllocator& allocator_;
  std::mutex mutex_;
  std::byte* host_ = nullptr;  // pinned
  std::byte* device_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t offset_ = 0;
};

}  // namespace sitsrt::cuda
