#include "ops/ops.hpp"
#include "ops/shape_check.hpp"

namespace sitsrt::ops {

void matmul(cpu::CpuContext& ctx, const cpu::WeightMatrix& w, TensorView x, TensorView y) {
  expect_shape("matmul", "input", x, x.rows, w.cols);
  expect_shape("matmul", "output", y, x.rows, w.rows);
  cpu::matmul(ctx, w, x.data, x.ld, x.rows, y.data, y.ld);
}

}  // namespace sitsrt::ops
