#include "cuda_backend/device_allocator.hpp"

#include "core/check.hpp"
#include "cuda_backend/cuda_check.hpp"

#include <algorithm>

namespace sitsrt::cuda {

DeviceAllocator::DeviceAllocator(const CudaContext& context, std::uint64_t budget_bytes)
    : context_(context), budget_(budget_bytes) {
  if (budget_ == 0) budget_ = context.free_memory() / 100 * 95;
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, context.device()) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    pools = 0;
  }
  pools_ = pools != 0;
}

cudaError_t DeviceAllocator::device_malloc(void** ptr, std::size_t size) {
  if (pools_) {
    const cudaError_t status = cudaMallocAsync(ptr, size, context_.stream());
    if (status != cudaErrorNotSupported) return status;
    static_cast<void>(cudaGetLastError());  // pools claimed but refused (some virtualised GPUs)
    pools_ = false;
  }
  return cudaMalloc(ptr, size);
}

DeviceAllocator::~DeviceAllocator() {
  std::lock_guard lock(mutex_);
  trim_locked();
  static_cast<void>(cudaStreamSynchronize(context_.stream()));
}

std::size_t DeviceAllocator::rounded(std::size_t bytes) noexcept {
  constexpr std::size_t kSmall = 512, kLarge = 2u << 20, kSmallLimit = 1u << 20;
  const std::size_t step = bytes <= kSmallLimit ? kSmall : kLarge;
  return (std::max<std::size_t>(bytes, 1) + step - 1) / step * step;
}

std::byte* DeviceAllocator::allocate(std::size_t bytes, std::string_view what) {
  const std::size_t size = rounded(bytes);
  const std::scoped_lock lock(context_.stream_mutex(), mutex_);
  // Device graphs are captured with every allocation done beforehand (the kernels' scratch
  // reports null and the capture is discarded): one here would invalidate the capture.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(context_.stream(), &capture) == cudaSuccess && capture != cudaStreamCaptureStatusNone) {
    raise(ErrorCode::kInternal, "cuda:{}: {} allocated while a device graph is captured", context_.device(), what);
  }
  const auto note_live = [&] {
    live_ += size;
    high_water_ = std::max(high_water_, live_);
  };
  if (const auto hit = cache_.find(size); hit != cache_.end()) {
    std::byte* ptr = hit->second;
    cache_.erase(hit);
    cached_ -= size;
    note_live();
    return ptr;
  }
  if (live_ + cached_ + size > budget_) trim_locked();
  if (live_ + size > budget_) {
    raise(ErrorCode::kOutOfMemory,
          "cuda:{}: {} needs {} bytes but only {} of the {}-byte device budget are free ({} bytes in use)",
          context_.device(), what, size, budget_ - std::min(budget_, live_), budget_, live_);
  }
  context_.make_current();
  void* ptr = nullptr;
  cudaError_t status = device_malloc(&ptr, size);
  if (status == cudaErrorMemoryAllocation && !cache_.empty()) {  // the device is short: give back and retry
    static_cast<void>(cudaGetLastError());
    trim_locked();
    status = device_malloc(&ptr, size);
  }
  if (status == cudaErrorMemoryAllocation) {
    static_cast<void>(cudaGetLastError());
    raise(ErrorCode::kOutOfMemory, "cuda:{}: {} needs {} bytes; the device has {} free ({} bytes in use here)",
          context_.device(), what, size, context_.free_memory(), live_);
  }
  SITSRT_CUDA_CHECK(status);
  note_live();
  return static_cast<std::byte*>(ptr);
}

void DeviceAllocator::deallocate(std::byte* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr) return;
  const std::size_t size = rounded(bytes);
  std::lock_guard lock(mutex_);
  try {
    cache_.emplace(size, ptr);
    live_ -= size;
    cached_ += size;
  } catch (...) {  // no host memory for the cache entry: the block stays allocated and counted
  }
}

void DeviceAllocator::trim() noexcept {
  const std::scoped_lock lock(context_.stream_mutex(), mutex_);
  trim_locked();
}

void DeviceAllocator::trim_locked() noexcept {
  if (cudaSetDevice(context_.device()) != cudaSuccess) return;
  for (const auto& [size, ptr] : cache_) {
    // cudaFree waits for the device's queued work, as the stream orders cudaFreeAsync after it
    static_cast<void>(pools_ ? cudaFreeAsync(ptr, context_.stream()) : cudaFree(ptr));
  }
  static_cast<void>(cudaGetLastError());  // an ignored failure here must not be blamed on the next launch
  cache_.clear();
  cached_ = 0;
}

std::uint64_t DeviceAllocator::live_bytes() const {
  std::lock_guard lock(mutex_);
  return live_;
}

std::uint64_t DeviceAllocator::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_;
}

std::uint64_t DeviceAllocator::high_water_bytes() const {
  std::lock_guard lock(mutex_);
  return high_water_;
}

}  // namespace sitsrt::cuda
