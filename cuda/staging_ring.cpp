#include "cuda_backend/staging_ring.hpp"

#include "cuda_backend/cuda_check.hpp"

#include <algorithm>
#include <cstring>

namespace sitsrt::cuda {

StagingRing::StagingRing(const CudaContext& context, DeviceAllocator& allocator, std::size_t bytes)
    : context_(context), allocator_(allocator) {
  allocate_ring(bytes);
}

StagingRing::~StagingRing() {
  release_ring();
}

void StagingRing::allocate_ring(std::size_t bytes) {
  context_.make_current();
  void* host = nullptr;
  SITSRT_CUDA_CHECK(cudaMallocHost(&host, bytes));
  host_ = static_cast<std::byte*>(host);
  try {
    device_ = allocator_.allocate(bytes, "staging ring");
  } catch (...) {
    static_cast<void>(cudaFreeHost(host_));
    host_ = nullptr;
    throw;
  }
  capacity_ = bytes;
  offset_ = 0;
}

void StagingRing::release_ring() noexcept {
  if (host_ == nullptr) return;
  static_cast<void>(cudaSetDevice(context_.device()));
  static_cast<void>(cudaStreamSynchronize(context_.stream()));
  static_cast<void>(cudaFreeHost(host_));
  allocator_.deallocate(device_, capacity_);
  host_ = device_ = nullptr;
  capacity_ = 0;
}

StagingRing::Slot StagingRing::reserve(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  const std::size_t size = (std::max<std::size_t>(bytes, 1) + 15) / 16 * 16;
  if (offset_ + size > capacity_) {
    context_.synchronize();  // every queued copy out of the ring has run
    offset_ = 0;
    if (size > capacity_) {
      const std::size_t grown = std::max(2 * capacity_, size);
      release_ring();
      allocate_ring(grown);
    }
  }
  const Slot slot{host_ + offset_, device_ + offset_, bytes};
  offset_ += size;
  return slot;
}

void StagingRing::commit(const Slot& slot) {
  context_.make_current();
  SITSRT_CUDA_CHECK(cudaMemcpyAsync(slot.device, slot.host, slot.bytes, cudaMemcpyHostToDevice, context_.stream()));
}

const std::byte* StagingRing::upload(std::span<const std::byte> bytes) {
  const Slot slot = reserve(bytes.size());
  if (!bytes.empty()) std::memcpy(slot.host, bytes.data(), bytes.size());
  commit(slot);
  return slot.device;
}

}  // namespace sitsrt::cuda
