#include "cpu_backend/cpu_kernels.hpp"

#include "core/check.hpp"
#include "cpu/attention/attention.hpp"
#include "cpu/elementwise/elementwise.hpp"
#include "cpu/elementwise/norm.hpp"
#include "cpu/elementwise/rope.hpp"

#include <cstring>

namespace sitsrt {
namespace {

float* f32(const ops::TensorRef& t) { return reinterpret_cast<float*>(t.data); }

cpu::RopeParams rope_params(const graph::RopeAttrs& r, const float* freq_factors) {
  cpu::RopeParams params{r.head_dim, r.rot_dims, r.freq_base, r.freq_scale, freq_factors,
                         r.neox ? cpu::RopeStyle::kNeox : cpu::RopeStyle::kNormal};
  if (r.scaling == graph::RopeScaling::kYarn) {
    params.yarn = {true, r.original_context, r.yarn_beta_fast, r.yarn_beta_slow, r.yarn_attn_factor};
  } else if (r.scaling == graph::RopeScaling::kLlama3) {
    params.llama3 = {true, r.llama3_factor, r.llama3_low_freq_factor, r.llama3_high_freq_factor, r.original_context};
  }
  return params;
}

// Any layer maps onto the CPU view: the types are the same codes, the block table and row
// strides carry over (a contiguous cache is its one-block special case).
cpu::KvType cpu_kv_type(ops::KvType type) {
  switch (type) {
    case ops::KvType::kF32:
      return cpu::KvType::kF32;
    case ops::KvType::kF16:
      return cpu::KvType::kF16;
    case ops::KvType::kInt8:
      return cpu::KvType::kInt8;
    case ops::KvType::kInt4:
      return cpu::KvType::kInt4;
  }
  raise(ErrorCode::kInternal, "unknown KV type {}", static_cast<int>(type));
}

cpu::KvLayerView cpu_view(const ops::KvLayerRef& kv) {
  return {.k_type = cpu_kv_type(kv.k_type),
          .v_type = cpu_kv_type(kv.v_type),
          .k = kv.k,
          .v = kv.v,
          .k_row_bytes = kv.k_row_bytes,
          .v_row_bytes = kv.v_row_bytes,
          .capacity = kv.capacity,
          .block_size = kv.block_size,
          .block_table = kv.block_table,
          .k_rotated = kv.k_rotated,
          .v_rotated = kv.v_rotated,
          .k_offset = kv.k_offset,
          .k_scale = kv.k_scale,
          .k_recent = kv.k_recent,
          .v_recent = kv.v_recent,
          .recent_window = kv.recent_window,
          .exact_from = kv.exact_from,
          .k_head_major = kv.k_head_major,
          .v_head_major = kv.v_head_major};
}

}  // namespace

const cpu::WeightMatrix& CpuKernels::weight(const ops::WeightRef& w) const {
  if (static_cast<std::size_t>(w.id) >= weights_.size()) {
    raise(ErrorCode::kInternal, "cpu kernels: weight #{} is not bound ({} are)", w.id, weights_.size());
  }
  return weights_[static_cast<std::size_t>(w.id)];
}

const float* CpuKernels::vector(const ops::WeightRef& w) const {
  return reinterpret_cast<const float*>(weight(w).data);
}

void CpuKernels::embed(const ops::WeightRef& table, std::span<const std::int32_t> ids, const ops::TensorRef& out) {
  cpu::get_rows(ctx_, weight(table), ids.data(), static_cast<std::int64_t>(ids.size()), f32(out), out.ld);
}

void CpuKernels::rms_norm(const ops::TensorRef& x, const ops::WeightRef& w, float eps, const ops::TensorRef& y) {
  cpu::rms_norm(ctx_, f32(x), x.ld, x.rows, x.cols, vector(w), eps, f32(y), y.ld);
}

void CpuKernels::head_rms_norm(const ops::TensorRef& x, std::int64_t n_heads, const ops::WeightRef& w, float eps,
                               const ops::TensorRef& y) {
  const std::int64_t head_dim = w.cols;
  if (x.ld == x.cols && y.ld == y.cols) {  // contiguous rows: one call over rows * n_heads slices
    cpu::rms_norm(ctx_, f32(x), head_dim, x.rows * n_heads, head_dim, vector(w), eps, f32(y), head_dim);
    return;
  }
  for (std::int64_t r = 0; r < x.rows; ++r) {
    cpu::rms_norm(ctx_, f32(x) + r * x.ld, head_dim, n_heads, head_dim, vector(w), eps, f32(y) + r * y.ld, head_dim);
  }
}

void CpuKernels::matmul(const ops::WeightRef& w, const ops::TensorRef& x, const ops::TensorRef& y) {
  cpu::matmul(ctx_, weight(w), f32(x), x.ld, x.rows, f32(y), y.ld);
}

void CpuKernels::rope(const ops::TensorRef& x, std::int64_t n_heads, std::span<const std::int32_t> positions,
                      const graph::RopeAttrs& rope, const ops::WeightRef* freq_factors) {
  const cpu::RopeParams params = rope_params(rope, freq_factors ? vector(*freq_factors) : nullptr);
  cpu::rope(ctx_, f32(x), x.ld, x.rows, n_heads, positions.data(), params);
}

void CpuKernels::attention(const ops::TensorRef& q, const ops::TensorRef& k, const ops::TensorRef& v,
                           const ops::KvLayerRef& kv, std::int64_t pos0, const ops::AttentionShape& shape,
                           const ops::TensorRef& out) {
  const ops::AttentionSequenceRef one{0, q.rows, pos0, kv};
  attention_batch(q, k, v, std::span<const ops::AttentionSequenceRef>(&one, 1), shape, out);
}

void CpuKernels::attention_batch(const ops::TensorRef& q, const ops::TensorRef& k, const ops::TensorRef& v,
                                 std::span<const ops::AttentionSequenceRef> sequences,
                                 const ops::AttentionShape& shape, const ops::TensorRef& out) {
  // Every sequence's K/V rows stored, then all their (row, kv head) pairs in one dispatch.
  // Windowed (int8/int4 with an exact recent window) sides stage f16 copies of the step's rows
  // for attention, then keep the latest in each sequence's ring.
  stores_.clear();
  attends_.clear();
  const std::int64_t width = shape.n_kv_heads * shape.head_dim;
  std::int64_t staged_rows = 0;
  for (const ops::AttentionSequenceRef& s : sequences) {
    if (s.kv.recent_window > 0) staged_rows += s.n_rows;
  }
  staging_.resize(static_cast<std::size_t>(2 * staged_rows * width));
  std::int64_t staged = 0;
  for (const ops::AttentionSequenceRef& s : sequences) {
    const cpu::KvLayerView view = cpu_view(s.kv);
    cpu::KvStaging staging;
    if (view.recent_window > 0) {
      std::uint16_t* base = staging_.data() + 2 * staged * width;
      staging = {view.k_windowed() ? base : nullptr, view.v_windowed() ? base + s.n_rows * width : nullptr};
      staged += s.n_rows;
    }
    stores_.push_back(
        {view, f32(k) + s.row_begin * k.ld, k.ld, f32(v) + s.row_begin * v.ld, v.ld, s.n_rows, s.pos0, staging});
    attends_.push_back(
        {f32(q) + s.row_begin * q.ld, q.ld, s.n_rows, s.pos0, view, f32(out) + s.row_begin * out.ld, out.ld, staging});
  }
  const cpu::AttentionShape cpu_shape{shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.scale, shape.window};
  cpu::kv_store_batch(ctx_, stores_, shape.n_kv_heads, shape.head_dim);
  cpu::attention_batch(ctx_, attends_, cpu_shape);
  if (staged_rows > 0) cpu::kv_commit_recent(stores_, shape.n_kv_heads, shape.head_dim);
}

void CpuKernels::swiglu(const ops::TensorRef& gate, const ops::TensorRef& up, const ops::TensorRef& out) {
  cpu::swiglu(ctx_, f32(gate), gate.ld, f32(up), up.ld, gate.rows, gate.cols, f32(out), out.ld);
}

void CpuKernels::geglu_tanh(const ops::TensorRef& gate, const ops::TensorRef& up, const ops::TensorRef& out) {
  cpu::geglu_tanh(ctx_, f32(gate), gate.ld, f32(up), up.ld, gate.rows, gate.cols, f32(out), out.ld);
}

void CpuKernels::add_bias(const ops::TensorRef& x, const ops::WeightRef& bias, const ops::TensorRef& out) {
  cpu::add_bias(ctx_, f32(x), x.ld, vector(bias), x.rows, x.cols, f32(out), out.ld);
}

void CpuKernels::scale(const ops::TensorRef& x, float factor, const ops::TensorRef& out) {
  cpu::scale(ctx_, f32(x), x.ld, factor, x.rows, x.cols, f32(out), out.ld);
}

void CpuKernels::soft_cap(const ops::TensorRef& x, float cap, const ops::TensorRef& out) {
  cpu::soft_cap(ctx_, f32(x), x.ld, cap, x.rows, x.cols, f32(out), out.ld);
}

void CpuKernels::add(const ops::TensorRef& a, const ops::TensorRef& b, const ops::TensorRef& out) {
  cpu::add(ctx_, f32(a), a.ld, f32(b), b.ld, a.rows, a.cols, f32(out), out.ld);
}

void CpuKernels::gather_rows(const ops::TensorRef& x, std::span<const std::int32_t> rows, const ops::TensorRef& out) {
  // Rows are increasing and out never lies past x's row: copying in order never overwrites a
  // source row still to be read, even when out aliases x.
  for (std::int64_t r = 0; r < out.rows; ++r) {
    const float* src = f32(x) + rows[static_cast<std::size_t>(r)] * x.ld;
    float* dst = f32(out) + r * out.ld;
    if (dst != src) std::memcpy(dst, src, static_cast<std::size_t>(x.cols) * sizeof(float));
  }
}

}  // namespace sitsrt
