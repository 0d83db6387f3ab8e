// A pinned host buffer and a device buffer of the same size, the pair behind every per-step
// upload (StagingRing, GraphInputImage): the host bytes are filled, then copied on the stream.
// Freed after the stream drains, since queued copies and kernels may still use either side.
#pragma once

#include "cuda_backend/cuda_context.hpp"
#include "cuda_backend/device_allocator.hpp"

#include <cstddef>
#include <string_view>

namespace sitsrt::cuda {

class MirroredBuffer {
 public:
  MirroredBuffer(const CudaContext& context, DeviceAllocator& allocator, std::size_t bytes, std::string_view what);
  ~MirroredBuffer();
  MirroredBuffer(const MirroredBuffer&) = delete;
  MirroredBuffer& operator=(const MirroredBuffer&) = delete;

  [[nodiscard]] std::byte* host() const noexcept { return host_; }
  [[nodiscard]] std::byte* device() const noexcept { return device_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

 private:
  const CudaContext& context_;
  DeviceAllocator& allocator_;
  std::size_t bytes_;
  std::byte* host_ = nullptr;  // pinned
  std::byte* device_ = nullptr;
};

}  // namespace sitsrt::cuda
