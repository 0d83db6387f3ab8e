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
#include "cuda_backend/mirrored_buffer.hpp"
#include "cuda_backend/step_inputs.hpp"

#include <cstddef>
#include <memory>
#include <mutex>
#include <span>

namespace sitsrt::cuda {

class StagingRing final : public StepInputs {
 public:
  StagingRing(const CudaContext& context, DeviceAllocator& allocator, std::size_t bytes);
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // The next `bytes` of the ring (16-byte aligned), growing it when it is smaller.
  [[nodiscard]] Slot reserve(std::size_t bytes) override;
  // Queues the copy of a reserved slot.
  void commit(const Slot& slot) override;

 private:
  const CudaContext& context_;
  DeviceAllocator& allocator_;
  std::size_t initial_bytes_;
  std::mutex mutex_;
  std::unique_ptr<MirroredBuffer> ring_;
  std::size_t offset_ = 0;
};

}  // namespace sitsrt::cuda
