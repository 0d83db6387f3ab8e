#include "core/quant_blocks.hpp"

#include "core/check.hpp"
#include "core/half.hpp"
#include "core/kquant_blocks.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace sitsrt {
namespace {

std::uint32_t load_qh(const std::uint8_t* qh) {
  std::uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

void store_qh(std::uint8_t* qh, std::uint32_t v) { std::memcpy(qh, &v, 4); }

void check_blocks(DType type, std::int64_t n) {
  if (!fits_blocks(type, n)) {
    raise(ErrorCode::kInvalidArgument, "{}: row of {} elements is not a multiple of {}", name(type), n,
          traits(type).block_size);
  }
}

// The element of largest magnitude, keeping its sign (Q4_0/Q5_0 map it to -8 / -16).
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < kQBlock; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// Q4_G128 zero point (its low 4 bits; the high bits are reserved).
int q4_g128_zero(const BlockQ4_G128& b) { return b.zero & 0x0F; }

// The value of an E4M3 code from its fields (constexpr, so the table below is built at compile time).
constexpr float fp8_e4m3_value(std::uint8_t code) noexcept {
  const float sign = (code & 0x80) != 0 ? -1.0f : 1.0f;
  const std::uint32_t exponent = (code >> 3) & 0x0Fu;
  const std::uint32_t mantissa = code & 0x07u;
  if (exponent == 0x0F && mantissa == 0x07) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * static_cast<float>(mantissa) / 512.0f;  // subnormal: m * 2^-9
  return sign * std::bit_cast<float>((exponent + 127u - 7u) << 23 | mantissa << 20);  // (1 + m/8) * 2^(e-7)
}

constexpr std::array<float, 256> kFp8Values = [] {
  std::array<float, 256> v{};
  for (int c = 0; c < 256; ++c) v[static_cast<std::size_t>(c)] = fp8_e4m3_value(static_cast<std::uint8_t>(c));
  return v;
}();

// Round to nearest, ties to the even code, saturating at +-448. `tie`: the value lay exactly
// halfway between two E4M3 magnitudes, `rounded_up`: the code's magnitude is the upper one.
struct E4M3Rounding {
  std::uint8_t code;
  bool tie;
  bool rounded_up;
};
E4M3Rounding round_to_e4m3(float value) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return {static_cast<std::uint8_t>(sign | 0x7F), false, false};  // NaN
  if (abs >= 0x43E00000u) return {static_cast<std::uint8_t>(sign | 0x7E), false, false};  // >= 448, inf: saturate
  if (abs < 0x3C800000u) {  // below 2^-6: subnormal, quantum 2^-9
    // |v| * 512 < 8 is exact; adding and subtracting 2^23 rounds it to an integer, ties to even.
    const float scaled = std::bit_cast<float>(abs) * 512.0f;
    const float rounded = (scaled + 8388608.0f) - 8388608.0f;
    const auto q = static_cast<std::uint32_t>(rounded);  // q = 8 is the smallest normal's code
    return {static_cast<std::uint8_t>(sign | q), scaled - std::floor(scaled) == 0.5f, rounded > scaled};
  }
  // Normal: rebias the exponent (127 -> 7) and round the 23-bit mantissa to 3 bits, ties to
  // even; a carry out of the mantissa moves into the exponent, which is the right result.
  const std::uint32_t truncated = (abs >> 20) - ((127u - 7u) << 3);
  const std::uint32_t rest = abs & 0xFFFFFu;
  const bool tie = rest == 0x80000u;
  const bool round_up = rest > 0x80000u || (tie && (truncated & 1u) != 0);
  return {static_cast<std::uint8_t>(sign | (truncated + (round_up ? 1u : 0u))), tie, round_up};
}

// |v| rounded to the nearest E4M3 magnitude (saturating at 448). Ties may go either way: it only
// ranks candidate scales; the codes are written by fp8_e4m3_of_quotient. Compares and selects
// work on the bits (non-negative floats order like their bits), because float compares may trap
// and so keep GCC from vectorizing the search loop.
float e4m3_magnitude(float v) {
  const std::uint32_t bits = std::min(std::bit_cast<std::uint32_t>(v) & 0x7FFFFFFFu, 0x43E00000u);  // <= 448
  const float a = std::bit_cast<float>(bits);
  const float split = a * 1048577.0f;                 // Veltkamp: 2^20 + 1 keeps 24 - 20 = 4 bits
  const float normal = split - (split - a);
  const float subnormal = (a + 24576.0f) - 24576.0f;  // 1.5 * 2^14: a multiple of 2^-9
  const std::uint32_t below_normal = 0u - static_cast<std::uint32_t>(bits < 0x3C800000u);  // a < 2^-6
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(normal) & ~below_normal) |
                              (std::bit_cast<std::uint32_t>(subnormal) & below_normal));
}

// d (finite, >= 0) rounded to nearest even at 11 significant bits: the CPU backend's FP8R repack
// (cpu/repacked_blocks.hpp) then holds every block scale exactly as an fp16 multiple of a power of two.
float with_11_significant_bits(float d) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(d);
  return std::bit_cast<float>((u + 0xFFFu + ((u >> 13) & 1u)) & ~0x1FFFu);
}

// Squared error of the block encoded with scale d (codes of x * (1 / d), see above).
float fp8_block_error(const float* x, float d) {
  const float inv = 1.0f / d;
  float e2[kFp8Block];
  for (int j = 0; j < kFp8Block; ++j) {
    const float e = std::fabs(x[j]) - d * e4m3_magnitude(x[j] * inv);
    e2[j] = e * e;
  }
  // Pairwise halving: a float reduction vectorizes only when its order is spelled out.
  for (int width = kFp8Block / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) e2[j] += e2[j + width];
  }
  return e2[0];
}

// E4M3 code of x / d rounded once: the float quotient can land exactly on a midpoint of two
// E4M3 neighbours when the exact quotient is not, so such a tie is resolved by the sign of the
// exact remainder x - q d (fma), which says on which side of the midpoint x / d lies.
std::uint8_t fp8_e4m3_of_quotient(float x, float d) {
  const float q = x / d;
  const E4M3Rounding r = round_to_e4m3(q);
  if (!r.tie) return r.code;
  const float remainder = std::fma(-q, d, x);  // exact: x - q d for the rounded quotient q
  if (remainder == 0.0f) return r.code;        // an exact tie: the even code
  const bool exact_above = (remainder > 0.0f) == (q > 0.0f);  // in magnitude (d > 0)
  if (exact_above == r.rounded_up) return r.code;
  return static_cast<std::uint8_t>(exact_above ? r.code + 1 : r.code - 1);  // the other neighbour
}

// Scale search (minimum squared error): E4M3's grid is relative, so where the block's large
// elements fall between grid points depends on the scale; trying 36 scales from amax / 448
// * 2^(-4/32) (the largest element slightly clipped) to amax / 448 * 2^(31/32) (one octave
// lower: every alignment of the grid) and keeping the best lowers the weight error and the
// measured KL divergence by about 30% (docs/performance.md) at ~36 cheap evaluations per block.
void quantize_fp8_block(const float* x, BlockFP8_E4M3& b) {
  float amax = 0.0f;
  for (int j = 0; j < kFp8Block; ++j) amax = std::max(amax, std::fabs(x[j]));
  if (amax == 0.0f || !std::isfinite(amax)) {
    b.d = amax / 448.0f;  // 0 (codes 0), or inf / NaN propagated as before
    for (int j = 0; j < kFp8Block; ++j) b.qs[j] = b.d != 0.0f ? fp32_to_fp8_e4m3(x[j] / b.d) : 0;
    return;
  }
  // Coarse-to-fine over d = amax / 448 * 2^(k / 32), k in [-4, 32): every 4th k, then the 3
  // on either side of the best one (15 evaluations instead of 36).
  static const std::array<float, 36> factors = [] {
    std::array<float, 36> f{};
    for (int k = -4; k < 32; ++k) f[static_cast<std::size_t>(k + 4)] = std::exp2(static_cast<float>(k) / 32.0f);
    return f;
  }();
  const float base = amax / 448.0f;
  float best_err = std::numeric_limits<float>::infinity();
  int best = 4;  // k = 0
  const auto consider = [&](int i) {
    const float err = fp8_block_error(x, with_11_significant_bits(base * factors[static_cast<std::size_t>(i)]));
    if (err < best_err) {
      best_err = err;
      best = i;
    }
  };
  for (int i = 4; i < 36; i += 4) consider(i);
  consider(0);
  const int coarse = best;
  for (int i = std::max(0, coarse - 3); i <= std::min(35, coarse + 3); ++i) {
    if (i != coarse) consider(i);
  }
  const float best_d = with_11_significant_bits(base * factors[static_cast<std::size_t>(best)]);
  b.d = best_d;
  if (b.d == 0.0f) b.d = std::numeric_limits<float>::denorm_min();  // amax / 448 underflowed
  for (int j = 0; j < kFp8Block; ++j) b.qs[j] = fp8_e4m3_of_quotient(x[j], b.d);
}

// GPTQ's min-max rule: the range is widened to contain 0 (so a constant block is exact and
// zero stays representable), d = (max - min) / 15 rounded to fp16, z = round(-min / d), and
// q = clamp(round(x / d) + z, 0, 15) with the stored (fp16) d; rounding is half to even, as
// torch.round.
void quantize_q4_g128_block(const float* x, BlockQ4_G128& b) {
  float lo = 0.0f, hi = 0.0f;
  for (int j = 0; j < kGroup128; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  b.d = fp32_to_fp16((hi - lo) / 15.0f);
  b.reserved = 0;
  const float d = fp16_to_fp32(b.d);
  if (d == 0.0f) {
    b.zero = 0;
    std::memset(b.qs, 0, sizeof b.qs);
    return;
  }
  const int z = static_cast<int>(std::clamp(std::nearbyint(-lo / d), 0.0f, 15.0f));
  b.zero = static_cast<std::uint8_t>(z);
  const auto level = [&](float v) { return std::clamp(static_cast<int>(std::nearbyint(v / d)) + z, 0, 15); };
  for (int s = 0; s < kGroup128 / kQBlock; ++s) {
    for (int j = 0; j < kQBlock / 2; ++j) {
      const int q0 = level(x[kQBlock * s + j]), q1 = level(x[kQBlock * s + 16 + j]);
      b.qs[16 * s + j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
    }
  }
}

// Whole-block loops over the K-quant / IQ4_NL block codecs (kquant_blocks.cpp).
template <typename Block, int kElements>
void decode_blocks(void (*decode)(const Block&, float*) noexcept, const void* src, float* dst, std::int64_t nb) {
  const auto* b = static_cast<const Block*>(src);
  for (std::int64_t i = 0; i < nb; ++i) decode(b[i], dst + i * kElements);
}
template <typename Block, int kElements>
void encode_blocks(void (*encode)(const float*, Block&) noexcept, const float* src, void* dst, std::int64_t nb) {
  auto* b = static_cast<Block*>(dst);
  for (std::int64_t i = 0; i < nb; ++i) encode(src + i * kElements, b[i]);
}

}  // namespace

float fp8_e4m3_to_fp32(std::uint8_t code) noexcept { return kFp8Values[code]; }

std::uint8_t fp32_to_fp8_e4m3(float value) noexcept { return round_to_e4m3(value).code; }

void dequantize_row(DType type, const void* src, float* dst, std::int64_t n) {
  check_blocks(type, n);
  const std::int64_t nb = n / traits(type).block_size;
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
      return;
    case DType::kF16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
      return;
    }
    case DType::kBF16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
      return;
    }
    case DType::kQ8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (std::int64_t i = 0; i < nb; ++i, dst += kQBlock) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < kQBlock; ++j) dst[j] = d * static_cast<float>(b[i].qs[j]);
      }
      return;
    }
    case DType::kQ4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      for (std::int64_t i = 0; i < nb; ++i, dst += kQBlock) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < kQBlock / 2; ++j) {
          dst[j] = d * static_cast<float>((b[i].qs[j] & 0x0F) - 8);
          dst[j + 16] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
        }
      }
      return;
    }
    case DType::kQ4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(src);
      for (std::int64_t i = 0; i < nb; ++i, dst += kQBlock) {
        const float d = fp16_to_fp32(b[i].d);
        const float m = fp16_to_fp32(b[i].m);
        for (int j = 0; j < kQBlock / 2; ++j) {
          dst[j] = d * static_cast<float>(b[i].qs[j] & 0x0F) + m;
          dst[j + 16] = d * static_cast<float>(b[i].qs[j] >> 4) + m;
        }
      }
      return;
    }
    case DType::kQ5_0: {
      const auto* b = static_cast<const BlockQ5_0*>(src);
      for (std::int64_t i = 0; i < nb; ++i, dst += kQBlock) {
        const float d = fp16_to_fp32(b[i].d);
        const std::uint32_t qh = load_qh(b[i].qh);
        for (int j = 0; j < kQBlock / 2; ++j) {
          const int hi0 = static_cast<int>((qh >> j) & 1u) << 4;
          const int hi1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
          dst[j] = d * static_cast<float>(((b[i].qs[j] & 0x0F) | hi0) - 16);
          dst[j + 16] = d * static_cast<float>(((b[i].qs[j] >> 4) | hi1) - 16);
        }
      }
      return;
    }
    case DType::kQ5_1: {
      const auto* b = static_cast<const BlockQ5_1*>(src);
      for (std::int64_t i = 0; i < nb; ++i, dst += kQBlock) {
        const float d = fp16_to_fp32(b[i].d);
        const float m = fp16_to_fp32(b[i].m);
        const std::uint32_t qh = load_qh(b[i].qh);
        for (int j = 0; j < kQBlock / 2; ++j) {
          const int hi0 = static_cast<int>((qh >> j) & 1u) << 4;
          const int hi1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
          dst[j] = d * static_cast<float>((b[i].qs[j] & 0x0F) | hi0) + m;
          dst[j + 16] = d * static_cast<float>((b[i].qs[j] >> 4) | hi1) + m;
        }
      }
      return;
    }
    case DType::kFP8_E4M3: {
      const auto* b = static_cast<const BlockFP8_E4M3*>(src);
      for (std::int64_t i = 0; i < nb; ++i, dst += kFp8Block) {
        for (int j = 0; j < kFp8Block; ++j) dst[j] = b[i].d * fp8_e4m3_to_fp32(b[i].qs[j]);
      }
      return;
    }
    case DType::kQ4_G128: {
      const auto* b = static_cast<const BlockQ4_G128*>(src);
      for (std::int64_t i = 0; i < nb; ++i, dst += kGroup128) {
        const float d = fp16_to_fp32(b[i].d);
        const int z = q4_g128_zero(b[i]);
        for (int s = 0; s < kGroup128 / kQBlock; ++s) {
          for (int j = 0; j < kQBlock / 2; ++j) {
            const std::uint8_t byte = b[i].qs[16 * s + j];
            dst[kQBlock * s + j] = d * static_cast<float>((byte & 0x0F) - z);
            dst[kQBlock * s + 16 + j] = d * static_cast<float>((byte >> 4) - z);
          }
        }
      }
      return;
    }
    case DType::kQ2_K: return decode_blocks<BlockQ2_K, kSuperBlock>(decode_block_q2_k, src, dst, nb);
    case DType::kQ3_K: return decode_blocks<BlockQ3_K, kSuperBlock>(decode_block_q3_k, src, dst, nb);
    case DType::kQ4_K: return decode_blocks<BlockQ4_K, kSuperBlock>(decode_block_q4_k, src, dst, nb);
    case DType::kQ5_K: return decode_blocks<BlockQ5_K, kSuperBlock>(decode_block_q5_k, src, dst, nb);
    case DType::kQ6_K: return decode_blocks<BlockQ6_K, kSuperBlock>(decode_block_q6_k, src, dst, nb);
    case DType::kQ8_K: return decode_blocks<BlockQ8_K, kSuperBlock>(decode_block_q8_k, src, dst, nb);
    case DType::kIQ4_NL: return decode_blocks<BlockIQ4_NL, kQBlock>(decode_block_iq4_nl, src, dst, nb);
  }
  raise(ErrorCode::kInternal, "dequantize_row: unknown dtype");
}

void quantize_row(DType type, const float* src, void* dst, std::int64_t n) {
  check_blocks(type, n);
  const std::int64_t nb = n / traits(type).block_size;
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
      return;
    case DType::kF16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (std::int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (std::int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
      return;
    }
    case DType::kQ8_0: {
      auto* b = static_cast<BlockQ8_0*>(dst);
      for (std::int64_t i = 0; i < nb; ++i, src += kQBlock) {
        float amax = 0.0f;
        for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(src[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = fp32_to_fp16(d);
        for (int j = 0; j < kQBlock; ++j) b[i].qs[j] = static_cast<std::int8_t>(std::lround(src[j] * id));
      }
      return;
    }
    case DType::kQ4_0: {
      auto* b = static_cast<BlockQ4_0*>(dst);
      for (std::int64_t i = 0; i < nb; ++i, src += kQBlock) {
        const float d = signed_absmax(src) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = fp32_to_fp16(d);
        for (int j = 0; j < kQBlock / 2; ++j) {
          const int q0 = std::min(15, static_cast<int>(static_cast<std::int8_t>(src[j] * id + 8.5f)));
          const int q1 = std::min(15, static_cast<int>(static_cast<std::int8_t>(src[j + 16] * id + 8.5f)));
          b[i].qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
    case DType::kQ4_1: {
      auto* b = static_cast<BlockQ4_1*>(dst);
      for (std::int64_t i = 0; i < nb; ++i, src += kQBlock) {
        const auto [lo, hi] = std::minmax_element(src, src + kQBlock);
        const float min = *lo;
        const float d = (*hi - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = fp32_to_fp16(d);
        b[i].m = fp32_to_fp16(min);
        for (int j = 0; j < kQBlock / 2; ++j) {
          const int q0 = std::min(15, static_cast<int>(static_cast<std::int8_t>((src[j] - min) * id + 0.5f)));
          const int q1 =
              std::min(15, static_cast<int>(static_cast<std::int8_t>((src[j + 16] - min) * id + 0.5f)));
          b[i].qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
    case DType::kQ5_0: {
      auto* b = static_cast<BlockQ5_0*>(dst);
      for (std::int64_t i = 0; i < nb; ++i, src += kQBlock) {
        const float d = signed_absmax(src) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = fp32_to_fp16(d);
        std::uint32_t qh = 0;
        for (int j = 0; j < kQBlock / 2; ++j) {
          const int q0 = std::min(31, static_cast<int>(static_cast<std::int8_t>(src[j] * id + 16.5f)));
          const int q1 = std::min(31, static_cast<int>(static_cast<std::int8_t>(src[j + 16] * id + 16.5f)));
          b[i].qs[j] = static_cast<std::uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
          qh |= static_cast<std::uint32_t>((q0 & 0x10) >> 4) << j;
          qh |= static_cast<std::uint32_t>((q1 & 0x10) >> 4) << (j + 16);
        }
        store_qh(b[i].qh, qh);
      }
      return;
    }
    case DType::kQ5_1: {
      auto* b = static_cast<BlockQ5_1*>(dst);
      for (std::int64_t i = 0; i < nb; ++i, src += kQBlock) {
        const auto [lo, hi] = std::minmax_element(src, src + kQBlock);
        const float min = *lo;
        const float d = (*hi - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = fp32_to_fp16(d);
        b[i].m = fp32_to_fp16(min);
        std::uint32_t qh = 0;
        for (int j = 0; j < kQBlock / 2; ++j) {
          const int q0 = std::min(31, static_cast<int>(static_cast<std::int8_t>((src[j] - min) * id + 0.5f)));
          const int q1 =
              std::min(31, static_cast<int>(static_cast<std::int8_t>((src[j + 16] - min) * id + 0.5f)));
          b[i].qs[j] = static_cast<std::uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
          qh |= static_cast<std::uint32_t>((q0 & 0x10) >> 4) << j;
          qh |= static_cast<std::uint32_t>((q1 & 0x10) >> 4) << (j + 16);
        }
        store_qh(b[i].qh, qh);
      }
      return;
    }
    case DType::kFP8_E4M3: {
      auto* b = static_cast<BlockFP8_E4M3*>(dst);
      for (std::int64_t i = 0; i < nb; ++i, src += kFp8Block) quantize_fp8_block(src, b[i]);
      return;
    }
    case DType::kQ4_G128: {
      auto* b = static_cast<BlockQ4_G128*>(dst);
      for (std::int64_t i = 0; i < nb; ++i, src += kGroup128) quantize_q4_g128_block(src, b[i]);
      return;
    }
    case DType::kQ2_K: return encode_blocks<BlockQ2_K, kSuperBlock>(encode_block_q2_k, src, dst, nb);
    case DType::kQ3_K: return encode_blocks<BlockQ3_K, kSuperBlock>(encode_block_q3_k, src, dst, nb);
    case DType::kQ4_K: return encode_blocks<BlockQ4_K, kSuperBlock>(encode_block_q4_k, src, dst, nb);
    case DType::kQ5_K: return encode_blocks<BlockQ5_K, kSuperBlock>(encode_block_q5_k, src, dst, nb);
    case DType::kQ6_K: return encode_blocks<BlockQ6_K, kSuperBlock>(encode_block_q6_k, src, dst, nb);
    case DType::kQ8_K: return encode_blocks<BlockQ8_K, kSuperBlock>(encode_block_q8_k, src, dst, nb);
    case DType::kIQ4_NL: return encode_blocks<BlockIQ4_NL, kQBlock>(encode_block_iq4_nl, src, dst, nb);
  }
  raise(ErrorCode::kInternal, "quantize_row: unknown dtype");
}

namespace {

// The largest magnitude of the finite elements: an infinity saturates to +-448 and a NaN stays
// NaN in its own code, instead of one non-finite element setting every scale it shares.
float finite_amax(const float* x, std::int64_t n, float amax) {
  for (std::int64_t j = 0; j < n; ++j) {
    if (std::isfinite(x[j])) amax = std::max(amax, std::fabs(x[j]));
  }
  return amax;
}

// The unsearched FP8 scale of elements whose finite amax is `amax`: amax / 448 to 11 bits (0
// for no finite nonzero element: every code 0).
float fp8_scale_of_amax(float amax) {
  if (!(amax > 0.0f)) return 0.0f;
  const float d = with_11_significant_bits(amax / 448.0f);          // as quantize_fp8_block's unsearched scale
  return d != 0.0f ? d : std::numeric_limits<float>::denorm_min();  // amax / 448 underflowed
}

void encode_fp8_block(const float* x, float d, BlockFP8_E4M3& b) {
  b.d = d;
  for (int j = 0; j < kFp8Block; ++j) b.qs[j] = d != 0.0f ? fp8_e4m3_of_quotient(x[j], d) : 0;
}

}  // namespace

void quantize_row_fp8_per_channel(const float* src, void* dst, std::int64_t n) {
  check_blocks(DType::kFP8_E4M3, n);
  const float d = fp8_scale_of_amax(finite_amax(src, n, 0.0f));
  auto* b = static_cast<BlockFP8_E4M3*>(dst);
  for (std::int64_t i = 0; i < n / kFp8Block; ++i) encode_fp8_block(src + i * kFp8Block, d, b[i]);
}

void quantize_rows(DType type, Fp8Scaling fp8_scaling, const float* src, void* dst, std::int64_t rows, std::int64_t n) {
  if (type == DType::kFP8_E4M3 && fp8_scaling == Fp8Scaling::kBlock128) {
    quantize_band_fp8_block128(src, dst, rows, n);
    return;
  }
  const std::size_t stride = row_bytes(type, n);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::byte* out = static_cast<std::byte*>(dst) + static_cast<std::size_t>(r) * stride;
    if (type == DType::kFP8_E4M3 && fp8_scaling == Fp8Scaling::kPerChannel) {
      quantize_row_fp8_per_channel(src + r * n, out, n);
    } else {
      quantize_row(type, src + r * n, out, n);
    }
  }
}

bool fp8_rows_scaled_as(Fp8Scaling scaling, const void* blocks, std::int64_t rows, std::int64_t n) noexcept {
  if (scaling == Fp8Scaling::kSearchedBlock) return true;
  const auto* b = static_cast<const BlockFP8_E4M3*>(blocks);
  const std::int64_t per_row = n / kFp8Block;
  // The block whose scale block (r, j) shares: the row's first, or its 128 x 128 block's first.
  const auto leader = [&](std::int64_t r, std::int64_t j) {
    return scaling == Fp8Scaling::kPerChannel ? r * per_row : r / 128 * 128 * per_row + j / 2 * 2;
  };
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < per_row; ++j) {
      // Bits compared, not values: a scale is one float the kernels read as stored.
      if (std::memcmp(&b[r * per_row + j].d, &b[leader(r, j)].d, sizeof(float)) != 0) return false;
    }
  }
  return true;
}

void quantize_band_fp8_block128(const float* src, void* dst, std::int64_t rows, std::int64_t n) {
  check_blocks(DType::kFP8_E4M3, n);
  if (rows < 0 || rows > 128) {
    raise(ErrorCode::kInvalidArgument, "fp8 128 x 128 blocks: a band of {} rows (1 to 128)", rows);
  }
  const std::int64_t blocks_per_row = n / kFp8Block;
  auto* b = static_cast<BlockFP8_E4M3*>(dst);
  for (std::int64_t c0 = 0; c0 < n; c0 += 128) {
    const std::int64_t width = std::min<std::int64_t>(128, n - c0);
    float amax = 0.0f;
    for (std::int64_t r = 0; r < rows; ++r) amax = finite_amax(src + r * n + c0, width, amax);
    const float d = fp8_scale_of_amax(amax);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = c0; c < c0 + width; c += kFp8Block) {
        encode_fp8_block(src + r * n + c, d, b[r * blocks_per_row + c / kFp8Block]);
      }
    }
  }
}

}  // namespace sitsrt
