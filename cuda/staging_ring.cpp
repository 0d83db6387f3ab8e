#include "cuda_backend/staging_ring.hpp"

#include "cuda_backend/cuda_check.hpp"

#include <algorithm>
#include <cstring>

namespace sitsrt::cuda {

StagingRing::StagingRing(const CudaContext& context, DeviceAllocator& allocator, std::size_t bytes)
    : context_(context),
      allocator_(allocator),
      initial_bytes_(bytes),
      ring_(std::make_unique<MirroredBuffer>(context, allocator, bytes, "staging ring")) {}

StagingRing::Slot StagingRing::reserve(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (ring_ == nullptr) {  // a failed growth left none: a ring of the first size, or kOutOfMemory
    ring_ = std::make_unique<MirroredBuffer>(context_, allocator_, initial_bytes_, "staging ring");
    offset_ = 0;
  }
  const std::size_t size = (std::max<std::size_t>(bytes, 1) + 15) / 16 * 16;
  if (offset_ + size > ring_->size()) {
    context_.synchronize();  // every queued copy out of the ring has run
    offset_ = 0;
    if (size > ring_->size()) {
      const std::size_t old = ring_->size(), grown = std::max(2 * old, size);
      ring_.reset();  // first, so the budget has room for the larger one
      try {
        ring_ = std::make_unique<MirroredBuffer>(context_, allocator_, grown, "staging ring");
      } catch (...) {  // out of memory: a ring of the old size again (just freed), and report
        try {
          ring_ = std::make_unique<MirroredBuffer>(context_, allocator_, old, "staging ring");
        } catch (...) {  // not even that: the next reserve tries again (ensure_ring)
        }
        throw;
      }
    }
  }
  const Slot slot{ring_->host() + offset_, ring_->device() + offset_, bytes};
  offset_ += size;
  return slot;
}

void StagingRing::commit(const Slot& slot) {
  context_.make_current();
  SITSRT_CUDA_CHECK(cudaMemcpyAsync(slot.device, slot.host, slot.bytes, cudaMemcpyHostToDevice, context_.stream()));
}

}  // namespace sitsrt::cuda
