// The decode matmul kernels take the rows of x as a compile-time count (their accumulators live
// in registers), up to kMaxTileRows at a time: larger steps run as consecutive tiles.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace sitsrt::cuda {

inline constexpr int kMaxTileRows = 8;

// Calls launch(std::integral_constant<int, rows>{}, x_tile, y_tile) for each tile of up to
// kMaxTileRows rows of the m rows of x (ldx apart) and y (ldy apart).
template <typename Launch>
void for_each_row_tile(std::int64_t m, const float* x, std::int64_t ldx, float* y, std::int64_t ldy, Launch&& launch) {
  for (std::int64_t r0 = 0; r0 < m; r0 += kMaxTileRows) {
    const auto rows = static_cast<int>(m - r0 < kMaxTileRows ? m - r0 : kMaxTileRows);
    const float* xt = x + r0 * ldx;
    float* yt = y + r0 * ldy;
    [&]<int... kR>(std::integer_sequence<int, kR...>) {
      static_cast<void>(
          ((rows == kR + 1 ? (launch(std::integral_constant<int, kR + 1>{}, xt, yt), true) : false) || ...));
    }
    (std::make_integer_sequence<int, kMaxTileRows>{});
  }
}

}  // namespace sitsrt::cuda
