#include "ops/ops.hpp"
#include "ops/shape_check.hpp"

namespace sitsrt::ops {

void rms_norm(OpKernels& k, const TensorRef& x, const WeightRef& weight, float eps, const TensorRef& y) {
  expect_weight(k, "rms_norm", "weight", weight, 1, x.cols, true);
  expect_shape(k, "rms_norm", "input", x, x.rows, x.cols);
  expect_shape(k, "rms_norm", "output", y, x.rows, x.cols);
  k.rms_norm(x, weight, eps, y);
}

void head_rms_norm(OpKernels& k, const TensorRef& x, std::int64_t n_heads, const WeightRef& weight, float eps,
                   const TensorRef& y) {
  expect_weight(k, "head_rms_norm", "weight", weight, 1, weight.cols, true);
  expect_shape(k, "head_rms_norm", "input", x, x.rows, n_heads * weight.cols);
  expect_shape(k, "head_rms_norm", "output", y, x.rows, x.cols);
  k.head_rms_norm(x, n_heads, weight, eps, y);
}

}  // namespace sitsrt::ops
