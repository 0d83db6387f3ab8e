#include "ops/ops.hpp"
#include "ops/shape_check.hpp"

namespace sitsrt::ops {

void attention(cpu::CpuContext& ctx, TensorView q, TensorView k, TensorView v, const cpu::KvLayerView& kv,
               std::int64_t pos0, const cpu::AttentionShape& shape, TensorView out) {
  const std::int64_t kv_width = shape.n_kv_heads * shape.head_dim;
  expect_shape("attention", "q", q, q.rows, shape.n_heads * shape.head_dim);
  expect_shape("attention", "k", k, q.rows, kv_width);
  expect_shape("attention", "v", v, q.rows, kv_width);
  expect_shape("attention", "output", out, q.rows, q.cols);
  if (shape.n_kv_heads < 1 || shape.n_heads % shape.n_kv_heads != 0) {
    raise(ErrorCode::kInternal, "attention: {} heads cannot share {} kv heads", shape.n_heads, shape.n_kv_heads);
  }
  if (pos0 < 0 || pos0 + q.rows > kv.capacity) {
    raise(ErrorCode::kInvalidArgument, "attention: positions {}..{} exceed the KV cache capacity {}", pos0,
          pos0 + q.rows - 1, kv.capacity);
  }
  cpu::kv_store(ctx, kv, k.data, k.ld, v.data, v.ld, q.rows, kv_width, pos0);
  cpu::attention(ctx, q.data, q.ld, q.rows, pos0, kv, shape, out.data, out.ld);
}

}  // namespace sitsrt::ops
