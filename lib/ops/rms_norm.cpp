#include "cpu/norm.hpp"
#include "ops/ops.hpp"
#include "ops/shape_check.hpp"

namespace sitsrt::ops {

void rms_norm(cpu::CpuContext& ctx, TensorView x, std::span<const float> weight, float eps, TensorView y) {
  expect_shape("rms_norm", "weight", {const_cast<float*>(weight.data()), 1, static_cast<std::int64_t>(weight.size()),
                                      static_cast<std::int64_t>(weight.size())}, 1, x.cols);
  expect_shape("rms_norm", "output", y, x.rows, x.cols);
  cpu::rms_norm(ctx, x.data, x.ld, x.rows, x.cols, weight.data(), eps, y.data, y.ld);
}

void head_rms_norm(cpu::CpuContext& ctx, TensorView x, std::int64_t n_heads, std::span<const float> weight, float eps,
                   TensorView y) {
  const auto head_dim = static_cast<std::int64_t>(weight.size());
  expect_shape("head_rms_norm", "input", x, x.rows, n_heads * head_dim);
  expect_shape("head_rms_norm", "output", y, x.rows, x.cols);
  if (x.ld == x.cols && y.ld == y.cols) {  // contiguous rows: one call over rows * n_heads slices
    cpu::rms_norm(ctx, x.data, head_dim, x.rows * n_heads, head_dim, weight.data(), eps, y.data, head_dim);
    return;
  }
  for (std::int64_t r = 0; r < x.rows; ++r) {
    cpu::rms_norm(ctx, x.row(r), head_dim, n_heads, head_dim, weight.data(), eps, y.row(r), head_dim);
  }
}

}  // namespace sitsrt::ops
