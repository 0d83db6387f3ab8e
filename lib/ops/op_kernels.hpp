// The kernels a backend provides, one per graph op, on backend-neutral views. ops::<op>
// (ops.hpp) validates shapes, types and devices and then calls these; an implementation may
// assume its arguments passed those checks. Each backend implements this over its own kernel
// library (the CPU backend over lib/cpu); the views name memory of the implementation's device.
#pragma once

#include "graph/graph.hpp"
#include "ops/kv_ref.hpp"
#include "ops/tensor_ref.hpp"

#include <cstdint>
#include <span>

namespace sitsrt::ops {

struct AttentionShape {
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;  // n_heads % n_kv_heads == 0; query head h reads KV head h / (n_heads / n_kv_heads)
  std::int64_t head_dim = 0;
  float scale = 0.0f;       // usually 1/sqrt(head_dim)
  std::int64_t window = 0;  // > 0: sliding window of that many positions
};

// One sequence of a batched attention: its rows [row_begin, row_begin + n_rows) of q, k, v and
// out, at positions pos0.. of its cache layer.
struct AttentionSequenceRef {
  std::int64_t row_begin = 0;
  std::int64_t n_rows = 0;
  std::int64_t pos0 = 0;
  KvLayerRef kv;
};

class OpKernels {
 public:
  virtual ~OpKernels() = default;
  [[nodiscard]] virtual Device device() const noexcept = 0;

  virtual void embed(const WeightRef& table, std::span<const std::int32_t> ids, const TensorRef& out) = 0;
  virtual void rms_norm(const TensorRef& x, const WeightRef& weight, float eps, const TensorRef& y) = 0;
  virtual void head_rms_norm(const TensorRef& x, std::int64_t n_heads, const WeightRef& weight, float eps,
                             const TensorRef& y) = 0;
  virtual void matmul(const WeightRef& w, const TensorRef& x, const TensorRef& y) = 0;
  // freq_factors: null, or the per-pair divisors (rot_dims / 2 values)
  virtual void rope(const TensorRef& x, std::int64_t n_heads, std::span<const std::int32_t> positions,
                    const graph::RopeAttrs& rope, const WeightRef* freq_factors) = 0;
  // Every sequence of a batched step at once (each as attention() on its rows would do).
  virtual void attention_batch(const TensorRef& q, const TensorRef& k, const TensorRef& v,
                               std::span<const AttentionSequenceRef> sequences, const AttentionShape& shape,
                               const TensorRef& out) = 0;
  virtual void attention(const TensorRef& q, const TensorRef& k, const TensorRef& v, const KvLayerRef& kv,
                         std::int64_t pos0, const AttentionShape& shape, const TensorRef& out) = 0;
  virtual void swiglu(const TensorRef& gate, const TensorRef& up, const TensorRef& out) = 0;
  virtual void geglu_tanh(const TensorRef& gate, const TensorRef& up, const TensorRef& out) = 0;
  virtual void add_bias(const TensorRef& x, const WeightRef& bias, const TensorRef& out) = 0;
  virtual void scale(const TensorRef& x, float factor, const TensorRef& out) = 0;
  virtual void soft_cap(const TensorRef& x, float cap, const TensorRef& out) = 0;
  virtual void add(const TensorRef& a, const TensorRef& b, const TensorRef& out) = 0;
  virtual void gather_rows(const TensorRef& x, std::span<const std::int32_t> rows, const TensorRef& out) = 0;
};

}  // namespace sitsrt::ops
