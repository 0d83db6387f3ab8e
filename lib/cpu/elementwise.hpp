// Element-wise kernels over rows of floats.
#pragma once

#include "cpu/cpu_context.hpp"

#include <cstdint>

namespace sitsrt::cpu {

// out[i, j] = silu(gate[i, j]) * up[i, j]; silu(x) = x / (1 + exp(-x)). out may alias gate or up.
// exp is a SIMD polynomial on the x86 levels (a few ulp; |x| > 87 saturates smoothly, never
// inf/NaN). Large inputs are split across threads by elements, small ones run on the caller.
void swiglu(CpuContext& ctx, const float* gate, std::int64_t ldg, const float* up, std::int64_t ldu, std::int64_t rows,
            std::int64_t n, float* out, std::int64_t ldo);

// out[i, j] = a[i, j] + b[i, j]. out may alias a or b.
void add(CpuContext& ctx, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, std::int64_t rows,
         std::int64_t n, float* out, std::int64_t ldo);

}  // namespace sitsrt::cpu
