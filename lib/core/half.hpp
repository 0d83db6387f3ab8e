// Bit-exact conversions between float and the 16-bit float formats (IEEE fp16, bfloat16).
// Portable scalar code: SIMD kernels use their own instructions, these are the reference.
#pragma once

#include <bit>
#include <cstdint>

namespace sitsrt {

inline float fp16_to_fp32(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  std::uint32_t mantissa = h & 0x3FFu;
  std::uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mantissa <<= 1;
      } while ((mantissa & 0x400u) == 0);
      bits = sign | (static_cast<std::uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3FFu) << 13);
    }
  } else if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

// Round-to-nearest-even, overflow to infinity, NaN preserved.
inline std::uint16_t fp32_to_fp16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or nan
    return static_cast<std::uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds to >= 65520
  if (abs < 0x38800000u) {  // result is subnormal or zero
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);  // below half the smallest subnormal
    const std::uint32_t exponent = abs >> 23;
    const std::uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 126 - exponent;  // 14..24 for this range
    std::uint32_t value = mantissa >> shift;
    const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (value & 1u))) ++value;
    return static_cast<std::uint16_t>(sign | value);
  }
  std::uint32_t value = ((abs >> 13) - ((127 - 15) << 10));
  const std::uint32_t remainder = abs & 0x1FFFu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (value & 1u))) ++value;
  return static_cast<std::uint16_t>(sign | value);
}

inline float bf16_to_fp32(std::uint16_t h) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

// Round-to-nearest-even; NaN stays NaN (quiet).
inline std::uint16_t fp32_to_bf16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

}  // namespace sitsrt
