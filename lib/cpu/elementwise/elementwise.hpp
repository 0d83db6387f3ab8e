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

// out[i, j] = gelu_tanh(gate[i, j]) * up[i, j] (GeGLU with the tanh approximation of GELU,
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as Gemma uses). Scalar float with std::tanh.
// out may alias gate or up.
void geglu_tanh(CpuContext& ctx, const float* gate, std::int64_t ldg, const float* up, std::int64_t ldu,
                std::int64_t rows, std::int64_t n, float* out, std::int64_t ldo);

// out[i, j] = x[i, j] + bias[j] (a bias row broadcast over rows). out may alias x.
void add_bias(CpuContext& ctx, const float* x, std::int64_t ldx, const float* bias, std::int64_t rows, std::int64_t n,
              float* out, std::int64_t ldo);

// out[i, j] = x[i, j] * factor. out may alias x.
void scale(CpuContext& ctx, const float* x, std::int64_t ldx, float factor, std::int64_t rows, std::int64_t n,
           float* out, std::int64_t ldo);

// out[i, j] = cap * tanh(x[i, j] / cap) (soft cap of logits; cap > 0). out may alias x.
void soft_cap(CpuContext& ctx, const float* x, std::int64_t ldx, float cap, std::int64_t rows, std::int64_t n,
              float* out, std::int64_t ldo);

}  // namespace sitsrt::cpu
