// CUDA runtime errors as sitsrt::Error: SITSRT_CUDA_CHECK(call) throws with the call, the
// runtime's name and description of the error, and file:line. Out-of-memory errors become
// kOutOfMemory, a missing device or driver kUnsupported, everything else kInternal. Nothing
// here aborts.
#pragma once

#include <cuda_runtime_api.h>

namespace sitsrt::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
// A launch's arguments the kernel cannot take, as sitsrt::Error (kInternal): for the kernel files,
// which do not include the error formatting.
[[noreturn]] void raise_launch_error(const char* kernel, const char* problem);

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, call, file, line);
}

}  // namespace sitsrt::cuda

#define SITSRT_CUDA_CHECK(call) ::sitsrt::cuda::check_cuda((call), #call, __FILE__, __LINE__)
// After a kernel launch: the launch's own error (bad configuration, no kernel image for this GPU).
#define SITSRT_CUDA_CHECK_LAUNCH(what) ::sitsrt::cuda::check_cuda(cudaGetLastError(), what, __FILE__, __LINE__)
