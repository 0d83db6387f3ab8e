// The Hadamard rotation of cached K / V heads as the attention kernels apply it to q, to the
// rows they store and to their outputs (device code: every thread of a block takes part).
#pragma once

#include <cmath>
#include <cstdint>

namespace sitsrt::cuda {

// The normalised Walsh-Hadamard transform of each head of `width` values in shared memory (the
// CPU's hadamard_normalized: butterflies a + b, a - b by doubling length, then 1 / sqrt(n)).
__device__ inline void hadamard_heads(float* buf, std::int64_t width, std::int64_t head_dim) {
  const std::int64_t half = head_dim / 2;
  for (std::int64_t len = 1; len < head_dim; len *= 2) {
    for (std::int64_t t = threadIdx.x; t < width / 2; t += blockDim.x) {
      const std::int64_t h = t / half, i = t % half;
      const std::int64_t j = h * head_dim + (i / len) * 2 * len + (i % len);
      const float a = buf[j], b = buf[j + len];
      buf[j] = a + b;
      buf[j + len] = a - b;
    }
    __syncthreads();
  }
  const float s = 1.0f / sqrtf(static_cast<float>(head_dim));
  for (std::int64_t e = threadIdx.x; e < width; e += blockDim.x) buf[e] *= s;
  __syncthreads();
}

}  // namespace sitsrt::cuda
