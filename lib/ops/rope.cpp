#include "ops/ops.hpp"
#include "ops/shape_check.hpp"

namespace sitsrt::ops {

void rope(cpu::CpuContext& ctx, TensorView x, std::int64_t n_heads, std::span<const std::int32_t> positions,
          const cpu::RopeParams& params) {
  expect_shape("rope", "input", x, static_cast<std::int64_t>(positions.size()), n_heads * params.head_dim);
  if (params.rot_dims < 2 || params.rot_dims > params.head_dim || params.rot_dims % 2 != 0) {
    raise(ErrorCode::kInternal, "rope: rot_dims {} invalid for head_dim {}", params.rot_dims, params.head_dim);
  }
  cpu::rope(ctx, x.data, x.ld, x.rows, n_heads, positions.data(), params);
}

}  // namespace sitsrt::ops
