#include "ops/ops.hpp"
#include "ops/shape_check.hpp"

namespace sitsrt::ops {

void attention(OpKernels& kernels, const TensorRef& q, const TensorRef& k, const TensorRef& v, const KvLayerRef& kv,
               std::int64_t pos0, const AttentionShape& shape, const TensorRef& out) {
  const std::int64_t kv_width = shape.n_kv_heads * shape.head_dim;
  expect_shape(kernels, "attention", "q", q, q.rows, shape.n_heads * shape.head_dim);
  expect_shape(kernels, "attention", "k", k, q.rows, kv_width);
  expect_shape(kernels, "attention", "v", v, q.rows, kv_width);
  expect_shape(kernels, "attention", "output", out, q.rows, q.cols);
  if (shape.n_kv_heads < 1 || shape.n_heads % shape.n_kv_heads != 0) {
    raise(ErrorCode::kInternal, "attention: {} heads cannot share {} kv heads", shape.n_heads, shape.n_kv_heads);
  }
  if (kv.device != kernels.device() || kv.k == nullptr || kv.v == nullptr || kv.kv_width != kv_width) {
    raise(ErrorCode::kInternal, "attention: KV cache of width {} on {} for {} kv heads x {} on {}", kv.kv_width,
          device_name(kv.device), shape.n_kv_heads, shape.head_dim, device_name(kernels.device()));
  }
  if (kv.block_size < 1 || static_cast<std::int64_t>(kv.block_table.size()) * kv.block_size < kv.capacity) {
    raise(ErrorCode::kInternal, "attention: {} blocks of {} positions cannot hold the capacity {}",
          kv.block_table.size(), kv.block_size, kv.capacity);
  }
  if (pos0 < 0 || pos0 + q.rows > kv.capacity) {
    raise(ErrorCode::kInvalidArgument, "attention: positions {}..{} exceed the KV cache capacity {}", pos0,
          pos0 + q.rows - 1, kv.capacity);
  }
  kernels.attention(q, k, v, kv, pos0, shape, out);
}

}  // namespace sitsrt::ops
