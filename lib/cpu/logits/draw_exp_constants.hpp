// Constants of the draw weights' vector exp (logit_kernels_avx512.cpp / _avx2.cpp): the weights
// (float) exp((l - max) / T) the sampler draws from, in double as the sampler's scalar form takes
// them. Unlike the softmax sums' expf, the C library's double exp is not transcribed: the vector
// form is accurate to a few ulp and a lane is handed back to std::exp when its value lies near a
// float rounding boundary (kBand), which leaves every other lane's float equal to the library's.
#pragma once

#include <array>

namespace sitsrt::cpu::detail::draw_exp_constants {

inline constexpr double kInvLn2 = 0x1.71547652b82fep0;
inline constexpr double kLn2Hi = 0x1.62e42fefa39efp-1;   // ln 2 rounded to double
inline constexpr double kLn2Lo = 0x1.abc9e3b39803fp-56;  // ln 2 - kLn2Hi
// 1 / k!, k = 0 .. 13: on |r| <= ln 2 / 2 the Taylor polynomial's truncation is below 2^-57.
inline constexpr std::array<double, 14> kTaylor = [] {
  std::array<double, 14> c{};
  double factorial = 1.0;
  for (int k = 0; k < 14; ++k) {
    if (k > 0) factorial *= k;
    c[static_cast<std::size_t>(k)] = 1.0 / factorial;
  }
  return c;
}();
// Relative half-width of the band checked around each result: the polynomial's and the
// library's errors (a few ulp of 2^-52 each) fit in it many times over.
inline constexpr double kBand = 0x1p-46;
// Below this x, exp(x) < 2^-288, which every exp rounds to float 0.
inline constexpr double kZeroBelow = -200.0;

}  // namespace sitsrt::cpu::detail::draw_exp_constants
