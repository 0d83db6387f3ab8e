// Fused decode (m == 1) products: several weights that read the same input row, computed in one
// parallel region with the input quantized once, and element-wise epilogues (SwiGLU, residual
// add) applied to each claimed chunk of rows as soon as its products are done. A decode step of a
// 24-layer model otherwise pays ~260 fork-joins, each a few microseconds of two cores waiting.
// Every output is bit-identical to the unfused ops (same kernels, same quantized input, same
// row kernels for the epilogues), whatever the thread count.
#pragma once

#include "cpu/cpu_context.hpp"
#include "cpu/matmul/matmul.hpp"

#include <cstdint>
#include <span>

namespace sitsrt::cpu {

struct MatvecTarget {
  const WeightMatrix* weight;
  float* y;  // weight->rows outputs
};

// y_k = W_k x for every target (all W_k with the same cols); rows of the targets, concatenated,
// are split over the threads.
void matvec_group(CpuContext& ctx, std::span<const MatvecTarget> targets, const float* x);

// g = Wg x, u = Wu x, out = silu(g) * u (Wg and Wu with the same shape; out may alias g or u).
void matvec_swiglu(CpuContext& ctx, const WeightMatrix& gate, const WeightMatrix& up, const float* x, float* g,
                   float* u, float* out);
// The same with out = gelu_tanh(g) * u (cpu::geglu_tanh's values).
void matvec_geglu(CpuContext& ctx, const WeightMatrix& gate, const WeightMatrix& up, const float* x, float* g, float* u,
                  float* out);

// y = W x, out = residual + y (out may alias residual, not x).
void matvec_add(CpuContext& ctx, const WeightMatrix& w, const float* x, float* y, const float* residual, float* out);

// Shared scratch bytes these need (the int8 input row, when any weight has an integer path).
std::size_t matvec_group_shared_bytes(const CpuContext& ctx, std::span<const WeightMatrix* const> weights) noexcept;

}  // namespace sitsrt::cpu
