#include "ops/ops.hpp"
#include "ops/shape_check.hpp"

namespace sitsrt::ops {

void rope(OpKernels& k, const TensorRef& x, std::int64_t n_heads, std::span<const std::int32_t> positions,
          const graph::RopeAttrs& rope, const WeightRef* freq_factors) {
  expect_shape(k, "rope", "input", x, static_cast<std::int64_t>(positions.size()), n_heads * rope.head_dim);
  if (rope.rot_dims < 2 || rope.rot_dims > rope.head_dim || rope.rot_dims % 2 != 0) {
    raise(ErrorCode::kInternal, "rope: rot_dims {} invalid for head_dim {}", rope.rot_dims, rope.head_dim);
  }
  if (freq_factors != nullptr) expect_weight(k, "rope", "freq_factors", *freq_factors, 1, rope.rot_dims / 2, true);
  k.rope(x, n_heads, positions, rope, freq_factors);
}

}  // namespace sitsrt::ops
