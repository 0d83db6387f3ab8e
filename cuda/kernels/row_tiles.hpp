// The decode matmul kernels take the rows of x as a compile-time count of accumulators (they live
// in registers), up to kMaxTileRows at a time: larger steps run as consecutive tiles, and a tile
// of r rows runs the kernel of the next power of two with the rest idle (4 kernels per format
// to build and ship instead of 8, the same weight traffic).
#pragma once

#include <cstdint>
#include <type_traits>

namespace sitsrt::cuda {

inline constexpr int kMaxTileRows = 8;

// Calls launch(std::integral_constant<int, bucket>{}, rows, x_tile, y_tile) for each tile of up
// to kMaxTileRows rows of the m rows of x (ldx apart) and y (ldy apart); bucket: 1, 2, 4 or 8,
// the smallest not below rows.
template <typename Launch>
void for_each_row_tile(std::int64_t m, const float* x, std::int64_t ldx, float* y, std::int64_t ldy, Launch&& launch) {
  for (std::int64_t r0 = 0; r0 < m; r0 += kMaxTileRows) {
    const auto rows = static_cast<int>(m - r0 < kMaxTileRows ? m - r0 : kMaxTileRows);
    const float* xt = x + r0 * ldx;
    float* yt = y + r0 * ldy;
    if (rows == 1) {
      launch(std::integral_constant<int, 1>{}, rows, xt, yt);
    } else if (rows == 2) {
      launch(std::integral_constant<int, 2>{}, rows, xt, yt);
    } else if (rows <= 4) {
      launch(std::integral_constant<int, 4>{}, rows, xt, yt);
    } else {
      launch(std::integral_constant<int, kMaxTileRows>{}, rows, xt, yt);
    }
  }
}

}  // namespace sitsrt::cuda
