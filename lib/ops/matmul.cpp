#include "ops/ops.hpp"
#include "ops/shape_check.hpp"

namespace sitsrt::ops {

void embed(OpKernels& k, const WeightRef& table, std::span<const std::int32_t> ids, const TensorRef& out) {
  expect_weight(k, "embed", "table", table, table.rows, table.cols);
  expect_shape(k, "embed", "output", out, static_cast<std::int64_t>(ids.size()), table.cols);
  k.embed(table, ids, out);
}

void matmul(OpKernels& k, const WeightRef& w, const TensorRef& x, const TensorRef& y) {
  expect_weight(k, "matmul", "w", w, w.rows, w.cols);
  expect_shape(k, "matmul", "input", x, x.rows, w.cols);
  expect_shape(k, "matmul", "output", y, x.rows, w.rows);
  k.matmul(w, x, y);
}

}  // namespace sitsrt::ops
