// Row-wise normalisation kernels.
#pragma once

#include "cpu/cpu_context.hpp"

#include <cstdint>

namespace sitsrt::cpu {

// y[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * weight[:], for `rows` rows of n floats.
// The sum of squares is accumulated in float SIMD lanes (tests derive the tolerance from n).
// x and y may alias. The scale 1/sqrt(mean + eps) is computed in double. Rows are split across
// threads when rows > 1. Throws kInvalidArgument when n <= 0 or rows < 0.
void rms_norm(CpuContext& ctx, const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t n, const float* weight,
              float eps, float* y, std::int64_t ldy);

}  // namespace sitsrt::cpu
