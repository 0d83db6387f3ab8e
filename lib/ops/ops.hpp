// Ops: validate shapes and types, then dispatch to the backend kernel (CPU only for now; the
// CUDA backend adds its own kernels behind the same entry points). One .cpp per op.
#pragma once

#include "core/tensor_view.hpp"
#include "cpu/attention.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/matmul.hpp"
#include "cpu/rope.hpp"

#include <cstdint>
#include <span>

namespace sitsrt::ops {

// out[i] = table[ids[i]]
void embed(cpu::CpuContext& ctx, const cpu::WeightMatrix& table, std::span<const std::int32_t> ids,
           TensorView out);
// y = rms_norm(x) * weight (y may be x)
void rms_norm(cpu::CpuContext& ctx, TensorView x, std::span<const float> weight, float eps, TensorView y);
// per head: each of the n_heads head_dim-wide slices of every row is normalised on its own with
// the same head_dim weights (Q/K norm of Qwen3 and Gemma 3); y may be x
void head_rms_norm(cpu::CpuContext& ctx, TensorView x, std::int64_t n_heads, std::span<const float> weight, float eps,
                   TensorView y);
// y = x @ W^T
void matmul(cpu::CpuContext& ctx, const cpu::WeightMatrix& w, TensorView x, TensorView y);
// in place; one position per row of x
void rope(cpu::CpuContext& ctx, TensorView x, std::int64_t n_heads, std::span<const std::int32_t> positions,
          const cpu::RopeParams& params);
// stores k, v at positions pos0.. then causal attention of q over the cache
void attention(cpu::CpuContext& ctx, TensorView q, TensorView k, TensorView v, const cpu::KvLayerView& kv,
               std::int64_t pos0, const cpu::AttentionShape& shape, TensorView out);
// out = silu(gate) * up
void swiglu(cpu::CpuContext& ctx, TensorView gate, TensorView up, TensorView out);
// out = gelu_tanh(gate) * up
void geglu_tanh(cpu::CpuContext& ctx, TensorView gate, TensorView up, TensorView out);
// out = x + bias (bias broadcast over rows)
void add_bias(cpu::CpuContext& ctx, TensorView x, std::span<const float> bias, TensorView out);
// out = x * factor
void scale(cpu::CpuContext& ctx, TensorView x, float factor, TensorView out);
// out = cap * tanh(x / cap)
void soft_cap(cpu::CpuContext& ctx, TensorView x, float cap, TensorView out);
// out = a + b
void add(cpu::CpuContext& ctx, TensorView a, TensorView b, TensorView out);
// out = the last out.rows rows of x
void take_last(TensorView x, TensorView out);

}  // namespace sitsrt::ops
