// Internal: branch-free IEEE half -> float for the portable kernels. Include only from files
// compiled for the baseline target (never from *_avx2.cpp / *_avx512.cpp: see the ODR note in
// matmul_kernels.hpp).
#pragma once

#include <bit>
#include <cstdint>

namespace sitsrt::cpu::detail {

// Exact for every input including subnormals, inf and NaN (the construction of the FP16
// library). Branch-free so block loops vectorise, unlike the renormalising loop of the
// reference fp16_to_fp32.
inline float half_to_float_generic(std::uint16_t h) noexcept {
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16;
  const std::uint32_t sign = w & 0x80000000u;
  const std::uint32_t two_w = w + w;
  const float normalized = std::bit_cast<float>((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = std::bit_cast<float>((two_w >> 17) | (126u << 23)) - 0.5f;
  // Select without a branch (a ternary here compiles to control flow that blocks vectorisation).
  const std::uint32_t is_denormal = 0u - static_cast<std::uint32_t>(two_w < (1u << 27));
  const std::uint32_t magnitude = (std::bit_cast<std::uint32_t>(denormalized) & is_denormal) |
                                  (std::bit_cast<std::uint32_t>(normalized) & ~is_denormal);
  return std::bit_cast<float>(sign | magnitude);
}

}  // namespace sitsrt::cpu::detail
