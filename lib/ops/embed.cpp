#include "ops/ops.hpp"
#include "ops/shape_check.hpp"

namespace sitsrt::ops {

void embed(cpu::CpuContext& ctx, const cpu::WeightMatrix& table, std::span<const std::int32_t> ids,
           TensorView out) {
  expect_shape("embed", "output", out, static_cast<std::int64_t>(ids.size()), table.cols);
  cpu::get_rows(ctx, table, ids.data(), static_cast<std::int64_t>(ids.size()), out.data, out.ld);
}

}  // namespace sitsrt::ops
