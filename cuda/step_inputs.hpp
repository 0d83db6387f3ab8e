// Where the kernels' per-step host inputs (token ids, positions, output rows, rope frequencies,
// attention descriptors and block tables) go up to the device: the StagingRing for steps queued
// launch by launch, the GraphInputImage for steps replayed as a CUDA graph. CudaKernels fills a
// slot's host bytes, then commits it, then queues the kernels that read its device bytes.
#pragma once

#include <cstddef>
#include <span>

namespace sitsrt::cuda {

class StepInputs {
 public:
  struct Slot {
    std::byte* host = nullptr;    // fill these bytes...
    std::byte* device = nullptr;  // ...which kernels read here once committed
    std::size_t bytes = 0;
  };

  virtual ~StepInputs() = default;
  // `bytes` of host and device memory, 16-byte aligned.
  [[nodiscard]] virtual Slot reserve(std::size_t bytes) = 0;
  // The slot's host bytes are final: they reach its device bytes before the kernels queued next.
  virtual void commit(const Slot& slot) = 0;
  // reserve + copy + commit.
  [[nodiscard]] const std::byte* upload(std::span<const std::byte> bytes);
};

}  // namespace sitsrt::cuda
