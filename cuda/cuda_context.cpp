#include "cuda_backend/cuda_context.hpp"

#include "core/check.hpp"
#include "cuda_backend/cuda_check.hpp"

namespace sitsrt::cuda {

int device_count(std::string* why) noexcept {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    if (why != nullptr) *why = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "the CUDA runtime reports no device";
  return count;
}

CudaContext::CudaContext(int device) : device_(device) {
  std::string why;
  const int count = device_count(&why);
  if (count == 0) raise(ErrorCode::kUnsupported, "cuda:{}: no CUDA device is usable ({})", device, why);
  if (device < 0 || device >= count) {
    raise(ErrorCode::kUnsupported, "cuda:{}: no such device (this machine has cuda:0 .. cuda:{})", device, count - 1);
  }
  make_current();
  cudaDeviceProp props{};
  SITSRT_CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  name_ = props.name;
  multiprocessors_ = props.multiProcessorCount;
  compute_capability_ = props.major * 10 + props.minor;
  total_memory_ = props.totalGlobalMem;
  SITSRT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaContext::~CudaContext() {
  if (stream_ != nullptr) {
    static_cast<void>(cudaSetDevice(device_));
    static_cast<void>(cudaStreamSynchronize(stream_));
    static_cast<void>(cudaStreamDestroy(stream_));
  }
}

void CudaContext::make_current() const {
  SITSRT_CUDA_CHECK(cudaSetDevice(device_));
}

std::uint64_t CudaContext::free_memory() const {
  make_current();
  std::size_t free = 0, total = 0;
  SITSRT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

void CudaContext::synchronize() const {
  make_current();
  SITSRT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace sitsrt::cuda
