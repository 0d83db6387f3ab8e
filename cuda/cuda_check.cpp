#include "cuda_backend/cuda_check.hpp"

#include "core/check.hpp"
#include "cuda_backend/kernels/format_dispatch.hpp"

namespace sitsrt::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  // Clears the sticky last error of a failed launch so later calls report their own status.
  static_cast<void>(cudaGetLastError());
  ErrorCode code = ErrorCode::kInternal;
  switch (status) {
    case cudaErrorMemoryAllocation:
      code = ErrorCode::kOutOfMemory;
      break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      code = ErrorCode::kUnsupported;
      break;
    default:
      break;
  }
  raise(code, "cuda: {} failed: {} ({}) at {}:{}", call, cudaGetErrorName(status), cudaGetErrorString(status), file,
        line);
}

void raise_launch_error(const char* kernel, const char* problem) {
  raise(ErrorCode::kInternal, "cuda: the {} kernel: {}", kernel, problem);
}

void raise_unsupported_format(DType format, const char* kernel) {
  raise(ErrorCode::kInternal, "cuda: the {} kernels have no {} instance", kernel, name(format));
}

}  // namespace sitsrt::cuda
