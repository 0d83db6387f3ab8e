#include "cpu/rope.hpp"

#include "core/check.hpp"

#include <algorithm>
#include <cmath>

namespace sitsrt::cpu {
namespace {

// Pairs handled per pass: their frequencies and one row's cos/sin live on the stack.
constexpr std::int64_t kPairChunk = 64;

}  // namespace

// Angles are computed in double (theta = pos * freq_scale * base^(-2i/rot_dims) / factor_i)
// and cos/sin are evaluated in double, then rounded to float once: the only float error is
// in the rotation itself. Every row and head reuses the row's cos/sin.
void rope(CpuContext& ctx, float* x, std::int64_t ldx, std::int64_t rows, std::int64_t n_heads,
          const std::int32_t* positions, const RopeParams& params) {
  const std::int64_t hd = params.head_dim, rot = params.rot_dims;
  if (hd <= 0 || rot < 0 || rot > hd || rot % 2 != 0 || n_heads < 0 || rows < 0) {
    raise(ErrorCode::kInvalidArgument, "rope: bad shape head_dim={} rot_dims={} n_heads={} rows={}", hd, rot, n_heads,
          rows);
  }
  if (!(params.freq_base > 0.0f)) raise(ErrorCode::kInvalidArgument, "rope: freq_base {} <= 0", params.freq_base);
  const std::int64_t half = rot / 2;
  if (rows == 0 || half == 0 || n_heads == 0) return;
  const bool neox = params.style == RopeStyle::kNeox;
  const auto rotate_rows = [&](std::int64_t r0, std::int64_t r1) {
    double inv_freq[kPairChunk];
    float cs[kPairChunk], sn[kPairChunk];
    for (std::int64_t j0 = 0; j0 < half; j0 += kPairChunk) {
      const std::int64_t nj = std::min(kPairChunk, half - j0);
      for (std::int64_t j = 0; j < nj; ++j) {
        const double exponent = -2.0 * static_cast<double>(j0 + j) / static_cast<double>(rot);
        const double factor = params.freq_factors != nullptr ? params.freq_factors[j0 + j] : 1.0;
        inv_freq[j] =
            static_cast<double>(params.freq_scale) * std::pow(static_cast<double>(params.freq_base), exponent) / factor;
      }
      for (std::int64_t i = r0; i < r1; ++i) {
        const double pos = positions[i];
        for (std::int64_t j = 0; j < nj; ++j) {
          const double theta = pos * inv_freq[j];
          cs[j] = static_cast<float>(std::cos(theta));
          sn[j] = static_cast<float>(std::sin(theta));
        }
        for (std::int64_t h = 0; h < n_heads; ++h) {
          float* head = x + i * ldx + h * hd;
          // normal: pair (2j, 2j+1); neox: pair (j, j + half).
          float* a = neox ? head + j0 : head + 2 * j0;
          float* b = neox ? head + j0 + half : head + 2 * j0 + 1;
          const std::int64_t step = neox ? 1 : 2;
          for (std::int64_t j = 0; j < nj; ++j) {
            const float x0 = a[j * step], x1 = b[j * step];
            a[j * step] = x0 * cs[j] - x1 * sn[j];
            b[j * step] = x0 * sn[j] + x1 * cs[j];
          }
        }
      }
    }
  };
  if (rows == 1) {
    rotate_rows(0, 1);
    return;
  }
  ctx.pool().run([&](int t, int threads) {
    const Range r = split_range(rows, t, threads);
    if (r.end > r.begin) rotate_rows(r.begin, r.end);
  });
}

}  // namespace sitsrt::cpu
