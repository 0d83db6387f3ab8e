// The constants of the C library's expf (glibc 2.28+, from ARM's optimized-routines), which the
// vector logit passes transcribe (logit_kernels_avx512.cpp / _avx2.cpp): read from glibc's
// __exp2f_data and the thresholds of its __expf_fma.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace sitsrt::cpu::detail::expf_constants {

// 2^(i/32) as doubles, each less i << 47 (the exponent bits that k adds back): the table of the
// algorithm, bit patterns of correctly rounded values (the tests check them against exp2l).
inline constexpr std::array<std::uint64_t, 32> kExp2Table = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
inline constexpr double kInvLn2N = std::bit_cast<double>(std::uint64_t{0x40471547652b82fe});  // 32 / ln 2
inline constexpr double kShift = 0x1.8p52;  // adding it rounds to an integer, left in the low bits
inline constexpr double kC0 = std::bit_cast<double>(std::uint64_t{0x3ebc6af84b912394});
inline constexpr double kC1 = std::bit_cast<double>(std::uint64_t{0x3f2ebfce50fac4f3});
inline constexpr double kC2 = std::bit_cast<double>(std::uint64_t{0x3f962e42ff0c52d6});
// Beyond |x| >= 88 the library branches: above kOverflow inf, below kUnderflow 0, between that
// and kMayUnderflow the smallest subnormal (each computed as a product so that flush-to-zero
// treats it as the library's multiply); NaN and +inf give x + x.
inline constexpr float kOverflow = 0x1.62e42ep6f;
inline constexpr float kUnderflow = -0x1.9fe368p6f;
inline constexpr float kMayUnderflow = -0x1.9d1d9ep6f;
inline constexpr std::uint32_t kSpecialBits = 0x42b00000;  // |x| >= 88.0f, inf and NaN included

}  // namespace sitsrt::cpu::detail::expf_constants
