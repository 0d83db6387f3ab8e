// Internal (baseline-compiled files only: kv_store.cpp, attention.cpp, vec_generic.cpp): the
// scalar quantizers of cached rows, their scalar dequantization (the generic attend path) and
// the normalised Walsh-Hadamard transform. Row layouts: see KvType in attention.hpp.
#pragma once

#include "core/half.hpp"
#include "core/kv_int4.hpp"
#include "cpu/attention/attention.hpp"
#include "cpu/half_generic.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sitsrt::cpu::detail {

// The smallest positive f16 not below x (x > 0, finite, below 65504): a scale taken this way
// keeps every |x| / scale within the integer range, so the only error is the rounding of q.
inline std::uint16_t f16_at_least(float x) noexcept {
  std::uint16_t h = fp32_to_fp16(x);
  if (fp16_to_fp32(h) < x) ++h;  // positive halves are ordered like their bit patterns
  return h;
}

// Symmetric quantization of n values with `qmax` = 127 (int8): returns the f16 scale and writes
// q = round-to-nearest-even(x / scale), clamped to [qmin, qmax].
inline std::uint16_t quantize_span(const float* x, std::int64_t n, float qmax, float qmin, std::int8_t* q) noexcept {
  float amax = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  if (!(amax > 0.0f)) {  // zeros (or NaN): q = 0 with scale 0
    std::fill(q, q + n, std::int8_t{0});
    return 0;
  }
  const std::uint16_t h = f16_at_least(std::min(amax / qmax, 65504.0f));
  const float scale = fp16_to_fp32(h);
  for (std::int64_t i = 0; i < n; ++i) {
    // Written so a NaN input becomes qmin instead of an undefined conversion (std::clamp keeps
    // NaN; std::fmax is a libm call in the baseline build).
    // Round to nearest even by adding and subtracting 1.5 * 2^23 (exact for |v| < 2^22, where
    // q lives; larger values only get clamped): nearbyintf is a libm call in the baseline build.
    const float v = x[i] / scale;
    float r = (v + 12582912.0f) - 12582912.0f;
    r = r > qmax ? qmax : r;
    r = r >= qmin ? r : qmin;
    q[i] = static_cast<std::int8_t>(r);
  }
  return h;
}

// Groups of 32 values as kv_int4::quantize_group quantizes them, indices packed two a byte (low
// nibble first) at indices + 16 g, codes at codes[g]: VecKernels::int4_quantize_groups' generic
// form, and the reference its SIMD forms match byte for byte.
inline void quantize_int4_groups(const float* x, std::int64_t groups, std::byte* indices, std::byte* codes) noexcept {
  std::uint8_t q[kv_int4::kGroup];
  for (std::int64_t j = 0; j < groups; ++j) {
    const std::uint8_t code = kv_int4::quantize_group(x + kv_int4::kGroup * j, q);
    for (int i = 0; i < kv_int4::kGroup / 2; ++i)
      indices[16 * j + i] = static_cast<std::byte>(q[2 * i] | q[2 * i + 1] << 4);
    codes[j] = static_cast<std::byte>(code);
  }
}

// One row of `width` values (heads of head_dim) in `type`'s layout at dst.
inline void quantize_row(KvType type, const float* x, std::int64_t n_kv_heads, std::int64_t head_dim,
                         std::byte* dst) noexcept {
  const std::int64_t width = n_kv_heads * head_dim;
  switch (type) {
    case KvType::kF32:
      std::memcpy(dst, x, static_cast<std::size_t>(width) * 4);
      return;
    case KvType::kF16:
      for (std::int64_t e = 0; e < width; ++e) {
        const std::uint16_t h = fp32_to_fp16(x[e]);
        std::memcpy(dst + 2 * e, &h, 2);
      }
      return;
    case KvType::kInt8: {
      auto* q = reinterpret_cast<std::int8_t*>(dst);
      for (std::int64_t g = 0; g < n_kv_heads; ++g) {
        const std::uint16_t h = quantize_span(x + g * head_dim, head_dim, 127.0f, -127.0f, q + g * head_dim);
        std::memcpy(dst + width + 2 * g, &h, 2);
      }
      return;
    }
    case KvType::kInt4:  // core/kv_int4.hpp: indices, then one scale code per 32 values
      quantize_int4_groups(x, width / kv_int4::kGroup, dst, dst + width / 2);
      return;
  }
}

inline float f16_at(const std::byte* p) noexcept {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float_generic(h);
}

// Elements [e0, e0 + n) of a row of `width` values, as float (dequantized: q * scale, one
// rounding). The value the SIMD paths compute in registers for the same element. One loop per
// type so the f32/f16/int8 ones vectorise for the baseline target (the generic attend path).
inline void dequantize_span(KvType type, const std::byte* row, std::int64_t width, std::int64_t head_dim,
                            std::int64_t e0, std::int64_t n, float* dst) noexcept {
  switch (type) {
    case KvType::kF32:
      std::memcpy(dst, row + 4 * e0, static_cast<std::size_t>(n) * 4);
      return;
    case KvType::kF16:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, row + 2 * (e0 + i), 2);
        dst[i] = half_to_float_generic(h);
      }
      return;
    case KvType::kInt8: {  // one head: e0 .. e0 + n - 1 share head e0 / head_dim's scale
      const float scale = f16_at(row + width + 2 * (e0 / head_dim));
      const auto* q = reinterpret_cast<const std::int8_t*>(row) + e0;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(q[i]) * scale;
      return;
    }
    case KvType::kInt4:
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t e = e0 + i;
        const unsigned byte = static_cast<unsigned>(row[e / 2]);
        const int index = static_cast<int>((e % 2 == 0 ? byte : byte >> 4) & 0xFu);
        dst[i] = kv_int4::level(index) * kv_int4::scale_of(static_cast<std::uint8_t>(row[width / 2 + e / 32]));
      }
      return;
  }
}

// x <- H x / sqrt(n) for n a power of two (H the Sylvester Hadamard matrix): orthonormal and
// its own inverse. Butterflies in a fixed order, so the result is deterministic.
inline void hadamard_normalized(float* x, std::int64_t n) noexcept {
  for (std::int64_t len = 1; len < n; len *= 2) {
    for (std::int64_t i = 0; i < n; i += 2 * len) {
      for (std::int64_t j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
    }
  }
  const float s = 1.0f / std::sqrt(static_cast<float>(n));
  for (std::int64_t i = 0; i < n; ++i) x[i] *= s;
}

inline bool is_power_of_two(std::int64_t n) noexcept {
  return n > 0 && (n & (n - 1)) == 0;
}

// Rotation acts on head vectors held on the stack (kv_store) or in scratch: at most this long.
inline constexpr std::int64_t kMaxRotatedHeadDim = 1024;

}  // namespace sitsrt::cpu::detail
