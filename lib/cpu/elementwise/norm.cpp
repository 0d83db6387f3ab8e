#include "cpu/elementwise/norm.hpp"

#include "core/check.hpp"

#include <cmath>

namespace sitsrt::cpu {
namespace {

// One row: sum of squares in 16 float lanes (vectorisable, and an error that grows with n/16
// rather than n), the scale in double, then y = (x * scale) * weight.
void rms_norm_row(const float* x, std::int64_t n, const float* weight, float eps, float* y) {
  float acc[16] = {};
  std::int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += x[c + l] * x[c + l];
  }
  for (int l = 0; c < n; ++c, ++l) acc[l] += x[c] * x[c];
  for (int l = 0; l < 8; ++l) acc[l] += acc[l + 8];
  const float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sum) / static_cast<double>(n) + eps));
  for (c = 0; c < n; ++c) y[c] = x[c] * scale * weight[c];
}

}  // namespace

void rms_norm(CpuContext& ctx, const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t n, const float* weight,
              float eps, float* y, std::int64_t ldy) {
  if (rows < 0 || n <= 0) raise(ErrorCode::kInvalidArgument, "rms_norm: bad shape {} x {}", rows, n);
  if (rows == 1) {  // decode: one short row, not worth waking the pool
    rms_norm_row(x, n, weight, eps, y);
    return;
  }
  ctx.pool().run([&](int t, int threads) {
    const Range r = split_range(rows, t, threads);
    for (std::int64_t i = r.begin; i < r.end; ++i) rms_norm_row(x + i * ldx, n, weight, eps, y + i * ldy);
  });
}

}  // namespace sitsrt::cpu
