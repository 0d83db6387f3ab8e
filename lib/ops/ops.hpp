// Ops: one entry point per graph op. Each validates its operands' shapes, element types and
// devices on backend-neutral views (a mismatch is a bug in the graph builder or the executor:
// kInternal naming the op, the operand and both shapes; a position past the KV capacity is the
// caller's: kInvalidArgument) and then runs the backend's kernel through OpKernels. One .cpp
// per group of ops.
#pragma once

#include "ops/op_kernels.hpp"

#include <cstdint>
#include <span>

namespace sitsrt::ops {

// out[i] = table[ids[i]]
void embed(OpKernels& k, const WeightRef& table, std::span<const std::int32_t> ids, const TensorRef& out);
// y = rms_norm(x) * weight (y may be x)
void rms_norm(OpKernels& k, const TensorRef& x, const WeightRef& weight, float eps, const TensorRef& y);
// per head: each of the n_heads head_dim-wide slices of every row is normalised on its own with
// the same head_dim weights (Q/K norm of Qwen3 and Gemma 3); y may be x
void head_rms_norm(OpKernels& k, const TensorRef& x, std::int64_t n_heads, const WeightRef& weight, float eps,
                   const TensorRef& y);
// y = x @ W^T
void matmul(OpKernels& k, const WeightRef& w, const TensorRef& x, const TensorRef& y);
// in place; one position per row of x
void rope(OpKernels& k, const TensorRef& x, std::int64_t n_heads, std::span<const std::int32_t> positions,
          const graph::RopeAttrs& rope, const WeightRef* freq_factors);
// attention for every sequence of a batched step (rows stacked in q, k, v and out), checked as
// attention() checks each, then run as one call
void attention_batch(OpKernels& kernels, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                     std::span<const AttentionSequenceRef> sequences, const AttentionShape& shape,
                     const TensorRef& out);
// stores k, v at positions pos0.. then causal attention of q over the cache
void attention(OpKernels& kernels, const TensorRef& q, const TensorRef& k, const TensorRef& v, const KvLayerRef& kv,
               std::int64_t pos0, const AttentionShape& shape, const TensorRef& out);
// out = silu(gate) * up
void swiglu(OpKernels& k, const TensorRef& gate, const TensorRef& up, const TensorRef& out);
// out = gelu_tanh(gate) * up
void geglu_tanh(OpKernels& k, const TensorRef& gate, const TensorRef& up, const TensorRef& out);
// out = x + bias (bias broadcast over rows)
void add_bias(OpKernels& k, const TensorRef& x, const WeightRef& bias, const TensorRef& out);
// out = x * factor
void scale(OpKernels& k, const TensorRef& x, float factor, const TensorRef& out);
// out = cap * tanh(x / cap)
void soft_cap(OpKernels& k, const TensorRef& x, float cap, const TensorRef& out);
// out = a + b
void add(OpKernels& k, const TensorRef& a, const TensorRef& b, const TensorRef& out);
// out row i = x row rows[i] (out.rows == rows.size(), every index inside x)
void gather_rows(OpKernels& k, const TensorRef& x, std::span<const std::int32_t> rows, const TensorRef& out);

}  // namespace sitsrt::ops
