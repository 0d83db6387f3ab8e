#include "ops/ops.hpp"
#include "ops/shape_check.hpp"

#include <tuple>

namespace sitsrt::ops {

namespace {

void check_attention(OpKernels& kernels, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                     const KvLayerRef& kv, std::int64_t pos0, const AttentionShape& shape, const TensorRef& out) {
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
  // Each side's rows must hold its type's layout (kv_row_bytes also refuses an int4 width the
  // layout cannot split into groups of 32).
  for (const auto& [side, type, bytes, rotated] : {std::tuple{"K", kv.k_type, kv.k_row_bytes, kv.k_rotated},
                                                   std::tuple{"V", kv.v_type, kv.v_row_bytes, kv.v_rotated}}) {
    const std::size_t need = kv_row_bytes(type, shape.n_kv_heads, shape.head_dim);
    if (bytes < need) {
      raise(ErrorCode::kInternal, "attention: {} cache rows of {} bytes, {} x {} {} values need {}", side, bytes,
            shape.n_kv_heads, shape.head_dim, name(type), need);
    }
    if (rotated && (shape.head_dim & (shape.head_dim - 1)) != 0) {
      raise(ErrorCode::kUnsupported, "attention: a rotated {} cache needs a power-of-two head_dim, not {}", side,
            shape.head_dim);
    }
  }
  if (pos0 < 0 || pos0 + q.rows > kv.capacity) {
    raise(ErrorCode::kInvalidArgument, "attention: positions {}..{} exceed the KV cache capacity {}", pos0,
          pos0 + q.rows - 1, kv.capacity);
  }
  // The table must cover every position this step reads or writes: 0 .. pos0 + rows - 1.
  if (kv.block_size < 1 || static_cast<std::int64_t>(kv.block_table.size()) * kv.block_size < pos0 + q.rows) {
    raise(ErrorCode::kInternal, "attention: {} blocks of {} positions do not cover positions 0..{}",
          kv.block_table.size(), kv.block_size, pos0 + q.rows - 1);
  }
}

TensorRef rows_of(TensorRef t, std::int64_t begin, std::int64_t n) {
  t.data += row_bytes(t.type, begin * t.ld);
  t.rows = n;
  return t;
}

}  // namespace

void attention(OpKernels& kernels, const TensorRef& q, const TensorRef& k, const TensorRef& v, const KvLayerRef& kv,
               std::int64_t pos0, const AttentionShape& shape, const TensorRef& out) {
  check_attention(kernels, q, k, v, kv, pos0, shape, out);
  kernels.attention(q, k, v, kv, pos0, shape, out);
}

void attention_batch(OpKernels& kernels, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                     std::span<const AttentionSequenceRef> sequences, const AttentionShape& shape,
                     const TensorRef& out) {
  std::int64_t next = 0;
  for (const AttentionSequenceRef& s : sequences) {
    if (s.row_begin != next || s.n_rows < 1 || s.row_begin + s.n_rows > q.rows) {
      raise(ErrorCode::kInternal, "attention: sequence rows {}..{} of a {}-row step out of order", s.row_begin,
            s.row_begin + s.n_rows - 1, q.rows);
    }
    next = s.row_begin + s.n_rows;
    check_attention(kernels, rows_of(q, s.row_begin, s.n_rows), rows_of(k, s.row_begin, s.n_rows),
                    rows_of(v, s.row_begin, s.n_rows), s.kv, s.pos0, shape, rows_of(out, s.row_begin, s.n_rows));
  }
  if (next != q.rows) raise(ErrorCode::kInternal, "attention: sequences cover {} of the step's {} rows", next, q.rows);
  kernels.attention_batch(q, k, v, sequences, shape, out);
}

}  // namespace sitsrt::ops
