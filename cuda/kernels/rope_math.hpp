// One row of a rope target rotated in place (the rope kernel, and the KV store kernel when a rope
// pair is folded into the attention that follows it): pair j of a head (normal: (2j, 2j+1), neox:
// (j, j + rot_dims/2)) by angle pos * inv_freq[j] (double), cos/sin scaled by mscale and rounded
// to float once, each product rounded on its own, as the CPU's rope. One code for both kernels,
// so a folded rope writes the rope kernel's bits.
#pragma once

#include <cstdint>

namespace sitsrt::cuda {

__device__ inline void rope_row(float* row, std::int64_t n_heads, std::int64_t head_dim, std::int64_t rot_dims,
                                bool neox, double pos, const double* inv_freq, double mscale, std::int64_t thread,
                                std::int64_t threads) {
  const std::int64_t half = rot_dims / 2;
  for (std::int64_t t = thread; t < n_heads * half; t += threads) {
    const std::int64_t h = t / half, j = t % half;
    const double angle = pos * inv_freq[j];
    const auto cs = static_cast<float>(cos(angle) * mscale), sn = static_cast<float>(sin(angle) * mscale);
    float* head = row + h * head_dim;
    float* a = neox ? head + j : head + 2 * j;
    float* b = neox ? head + j + half : head + 2 * j + 1;
    const float x0 = *a, x1 = *b;
    // Each product rounded on its own (nvcc would fuse one into an fma).
    *a = __fmul_rn(x0, cs) - __fmul_rn(x1, sn);
    *b = __fmul_rn(x0, sn) + __fmul_rn(x1, cs);
  }
}

}  // namespace sitsrt::cuda
