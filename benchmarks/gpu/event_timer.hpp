// Seconds per call of GPU work queued back to back on the default stream, timed by CUDA events:
// the one timer of the CUDA benchmarks (bench_cuda.cpp, bandwidth.cu).
#pragma once

#include "cuda_backend/cuda_check.hpp"

#include <cuda_runtime_api.h>

namespace sitsrt::bench {

// Runs call(0) .. call(repeats - 1) between two events (launch errors of earlier warm-up calls
// are checked first) and returns the seconds per call.
template <typename Call>
double seconds_per_call(int repeats, Call&& call) {
  SITSRT_CUDA_CHECK(cudaGetLastError());
  cudaEvent_t start, stop;
  SITSRT_CUDA_CHECK(cudaEventCreate(&start));
  SITSRT_CUDA_CHECK(cudaEventCreate(&stop));
  SITSRT_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < repeats; ++i) call(i);
  SITSRT_CUDA_CHECK(cudaEventRecord(stop));
  SITSRT_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  SITSRT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  SITSRT_CUDA_CHECK(cudaEventDestroy(start));
  SITSRT_CUDA_CHECK(cudaEventDestroy(stop));
  return ms * 1e-3 / repeats;
}

}  // namespace sitsrt::bench
