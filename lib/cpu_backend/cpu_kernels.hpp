// The CPU backend's OpKernels: each op's neutral views turned into host pointers and the
// lib/cpu kernel called with the backend's context (thread pool, ISA level, scratch). Weights
// are looked up by id in the backend's bound table (in the layout the backend chose).
#pragma once

#include "cpu/attention/attention.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/matmul/matmul.hpp"
#include "ops/op_kernels.hpp"

#include <vector>

namespace sitsrt {

class CpuKernels final : public ops::OpKernels {
 public:
  CpuKernels(cpu::CpuContext& ctx, const std::vector<cpu::WeightMatrix>& weights) : ctx_(ctx), weights_(weights) {}

  [[nodiscard]] Device device() const noexcept override { return {DeviceKind::kCpu, 0}; }
  void embed(const ops::WeightRef& table, std::span<const std::int32_t> ids, const ops::TensorRef& out) override;
  void rms_norm(const ops::TensorRef& x, const ops::WeightRef& weight, float eps, const ops::TensorRef& y) override;
  void head_rms_norm(const ops::TensorRef& x, std::int64_t n_heads, const ops::WeightRef& weight, float eps,
                     const ops::TensorRef& y) override;
  void matmul(const ops::WeightRef& w, const ops::TensorRef& x, const ops::TensorRef& y) override;
  void rope(const ops::TensorRef& x, std::int64_t n_heads, std::span<const std::int32_t> positions,
            const graph::RopeAttrs& rope, const ops::WeightRef* freq_factors) override;
  void attention_batch(const ops::TensorRef& q, const ops::TensorRef& k, const ops::TensorRef& v,
                       std::span<const ops::AttentionSequenceRef> sequences, const ops::AttentionShape& shape,
                       const ops::TensorRef& out) override;
  void attention(const ops::TensorRef& q, const ops::TensorRef& k, const ops::TensorRef& v, const ops::KvLayerRef& kv,
                 std::int64_t pos0, const ops::AttentionShape& shape, const ops::TensorRef& out) override;
  void swiglu(const ops::TensorRef& gate, const ops::TensorRef& up, const ops::TensorRef& out) override;
  void geglu_tanh(const ops::TensorRef& gate, const ops::TensorRef& up, const ops::TensorRef& out) override;
  void add_bias(const ops::TensorRef& x, const ops::WeightRef& bias, const ops::TensorRef& out) override;
  void scale(const ops::TensorRef& x, float factor, const ops::TensorRef& out) override;
  void soft_cap(const ops::TensorRef& x, float cap, const ops::TensorRef& out) override;
  void add(const ops::TensorRef& a, const ops::TensorRef& b, const ops::TensorRef& out) override;
  void gather_rows(const ops::TensorRef& x, std::span<const std::int32_t> rows, const ops::TensorRef& out) override;

 private:
  [[nodiscard]] const cpu::WeightMatrix& weight(const ops::WeightRef& w) const;
  [[nodiscard]] const float* vector(const ops::WeightRef& w) const;

  cpu::CpuContext& ctx_;
  const std::vector<cpu::WeightMatrix>& weights_;
  std::vector<cpu::KvStoreSequence> stores_;     // attention_batch's per-step lists, reused
  std::vector<cpu::AttentionSequence> attends_;
  std::vector<std::uint16_t> staging_;  // f16 copies of the step's rows of windowed K/V sides
};

}  // namespace sitsrt
