// Measured ceilings for the CUDA kernel benchmark (bandwidth.cu).
#pragma once

#include <cstddef>

namespace sitsrt::bench {

// GB/s of a read-only sweep over `bytes` of device memory.
double measure_read_bandwidth(std::size_t bytes, int repeats);
// TFLOP/s of a cuBLASLt BF16 x BF16 -> BF16 GEMM (f32 accumulation), column-major m x k by k x n.
double measure_bf16_gemm_tflops(int m, int n, int k, int repeats);

}  // namespace sitsrt::bench
