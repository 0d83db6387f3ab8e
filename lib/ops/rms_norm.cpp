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

}  // namespace sitsrt::ops
