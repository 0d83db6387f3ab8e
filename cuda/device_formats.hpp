// Format decode, quantization and scale math shared by the CUDA kernels and the host: every
// function is __host__ __device__ under nvcc and plain inline C++ otherwise, so the CPU test
// suite (tests/unit/cuda_formats_test.cpp) checks them against lib/core's reference encoders
// and the CPU KV quantizers without a GPU. Layouts are those of core/quant_blocks.hpp (weights)
// and ops::KvType (cached K/V rows); this header repeats the byte offsets because device code
// reads raw bytes, and the tests pin them to the structs.
#pragma once

#include "core/dtype.hpp"
#include "core/kv_int4.hpp"

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SITSRT_HD __host__ __device__ inline
#else
#define SITSRT_HD inline
#endif

namespace sitsrt::cuda {

// Bit casts and singly rounded products and sums (never fused into an fma), shared with the
// host build through core/host_device.hpp so both decoders stay bit-identical.
SITSRT_HD std::uint32_t float_bits(float f) {
  return hd::float_to_bits(f);
}
SITSRT_HD float bits_float(std::uint32_t u) {
  return hd::bits_to_float(u);
}
using hd::add_rn;
using hd::mul_rn;

// Little-endian loads from byte addresses of any alignment (blocks are 18, 20, 34 bytes long).
SITSRT_HD std::uint16_t load_u16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | p[1] << 8);
}
SITSRT_HD std::uint32_t load_u32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

// IEEE binary16 -> float, exact (subnormals, infinities and NaN included).
SITSRT_HD float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | mantissa << 13);
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float m = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign != 0 ? -m : m;
  }
  return bits_float(sign | (exponent + 112) << 23 | mantissa << 13);
}

// float -> binary16, round to nearest even (as core/half.hpp's fp32_to_fp16); overflow gives
// infinity, NaN stays a quiet NaN.
SITSRT_HD std::uint16_t float_to_half(float f) {
  const std::uint32_t x = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // infinity or NaN
    return static_cast<std::uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
  }
  if (ax >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65536: infinity
  const std::uint32_t e = ax >> 23;
  if (e < 113) {  // below 2^-14: a subnormal half, q = value / 2^-24 = m * 2^(e - 126)
    const std::uint32_t shift = 126 - e;
    if (e == 0 || shift > 24) return sign;  // below half the smallest subnormal (or a float subnormal)
    const std::uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    std::uint32_t q = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u) != 0)) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  std::uint32_t h = (e - 112) << 10 | ((ax >> 13) & 0x3ffu);
  const std::uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0)) ++h;  // a carry into the exponent is right
  return static_cast<std::uint16_t>(sign | h);
}

SITSRT_HD float bf16_to_float(std::uint16_t b) {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

// OCP FP8 E4M3FN: bias 7, no infinities, 0x7f / 0xff NaN, largest finite 448.
SITSRT_HD float fp8_e4m3_to_float(std::uint8_t code) {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t exponent = (code >> 3) & 0xfu, mantissa = code & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return bits_float(0x7fc00000u | sign);
  if (exponent == 0) {  // subnormal: mantissa * 2^-9
    const float m = static_cast<float>(mantissa) * 0.001953125f;
    return sign != 0 ? -m : m;
  }
  return bits_float(sign | (exponent + 120) << 23 | mantissa << 20);
}

// ---- weight formats -----------------------------------------------------------------------
// Byte layout of one block (core/quant_blocks.hpp): elements per block and bytes per block.
template <DType F>
struct WeightFormat;
template <>
struct WeightFormat<DType::kF32> {
  static constexpr int kElements = 1, kBytes = 4;
};
template <>
struct WeightFormat<DType::kF16> {
  static constexpr int kElements = 1, kBytes = 2;
};
template <>
struct WeightFormat<DType::kBF16> {
  static constexpr int kElements = 1, kBytes = 2;
};
template <>
struct WeightFormat<DType::kQ8_0> {  // f16 d, 32 x int8
  static constexpr int kElements = 32, kBytes = 34;
};
template <>
struct WeightFormat<DType::kQ4_0> {  // f16 d, 16 bytes of nibbles (offset 8)
  static constexpr int kElements = 32, kBytes = 18;
};
template <>
struct WeightFormat<DType::kQ4_1> {  // f16 d, f16 m, 16 bytes of nibbles
  static constexpr int kElements = 32, kBytes = 20;
};
template <>
struct WeightFormat<DType::kQ5_0> {  // f16 d, 32 fifth bits (u32), 16 bytes of nibbles (offset 16)
  static constexpr int kElements = 32, kBytes = 22;
};
template <>
struct WeightFormat<DType::kQ5_1> {  // f16 d, f16 m, 32 fifth bits, 16 bytes of nibbles
  static constexpr int kElements = 32, kBytes = 24;
};
template <>
struct WeightFormat<DType::kFP8_E4M3> {  // f32 d, 64 x e4m3
  static constexpr int kElements = 64, kBytes = 68;
};
template <>
struct WeightFormat<DType::kQ4_G128> {  // f16 d, zero nibble, reserved, 64 bytes of nibbles
  static constexpr int kElements = 128, kBytes = 68;
};
// K-quants: 256-element super-blocks (core/kquant_blocks.hpp).
template <>
struct WeightFormat<DType::kQ4_K> {  // f16 d, f16 dmin, 12 bytes of 6-bit (scale, min), 128 bytes of nibbles
  static constexpr int kElements = 256, kBytes = 144;
};
template <>
struct WeightFormat<DType::kQ5_K> {  // as Q4_K, then 32 bytes of fifth bits before the nibbles
  static constexpr int kElements = 256, kBytes = 176;
};
template <>
struct WeightFormat<DType::kQ6_K> {  // 128 bytes of low nibbles, 64 of high pairs, 16 int8 scales, f16 d
  static constexpr int kElements = 256, kBytes = 210;
};
template <>
struct WeightFormat<DType::kQ2_K> {  // 16 (scale | min << 4), 64 bytes of 2-bit levels, f16 d, f16 dmin
  static constexpr int kElements = 256, kBytes = 84;
};
template <>
struct WeightFormat<DType::kQ3_K> {  // 32 bytes of high bits, 64 of 2-bit levels, 12 of 6-bit scales, f16 d
  static constexpr int kElements = 256, kBytes = 110;
};
template <>
struct WeightFormat<DType::kIQ4_NL> {  // f16 d, 16 bytes of table indices (nibbles as Q4_0)
  static constexpr int kElements = 32, kBytes = 18;
};

// IQ4_NL's 16 levels (core/kquant_blocks.hpp kIq4nlLevels) as bytes of two constants, since
// device code cannot index a host table: level i is byte i % 8 of the low (i < 8) or high one.
SITSRT_HD int iq4nl_level(int index) {
  constexpr std::uint64_t kLow = 0xF6EADDCFBFAD9881ull, kHigh = 0x7159453526190D01ull;
  const std::uint64_t levels = index < 8 ? kLow : kHigh;
  return static_cast<std::int8_t>(static_cast<std::uint8_t>(levels >> (8 * (index % 8))));
}

// Q3_K: the signed scale (-32..31) of sub-block s (0..15) from the 12 packed bytes.
SITSRT_HD int unpack_scale_q3_k(const std::uint8_t* packed, int s) {
  const int low = s < 8 ? packed[s] & 0x0F : packed[s - 8] >> 4;
  const int high = (packed[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Q4_K / Q5_K: sub-block s's 6-bit scale and min from the 12 packed bytes.
SITSRT_HD void unpack_scale_min_k4(const std::uint8_t* packed, int s, int* scale, int* min) {
  if (s < 4) {
    *scale = packed[s] & 63;
    *min = packed[s + 4] & 63;
  } else {
    *scale = (packed[s + 4] & 0x0F) | ((packed[s - 4] >> 6) << 4);
    *min = (packed[s + 4] >> 4) | ((packed[s] >> 6) << 4);
  }
}

// The value of element e of a row in format F: the float the CPU reference dequantize_row gives,
// bit for bit (its products and sums in the same order, each rounded on its own).
template <DType F>
SITSRT_HD float decode_element(const std::uint8_t* row, std::int64_t e) {
  if constexpr (F == DType::kF32) {
    return bits_float(load_u32(row + 4 * e));
  } else if constexpr (F == DType::kF16) {
    return half_to_float(load_u16(row + 2 * e));
  } else if constexpr (F == DType::kBF16) {
    return bf16_to_float(load_u16(row + 2 * e));
  } else {
    constexpr int kN = WeightFormat<F>::kElements;
    const std::uint8_t* block = row + (e / kN) * WeightFormat<F>::kBytes;
    const int j = static_cast<int>(e % kN);
    if constexpr (F == DType::kQ8_0) {
      return half_to_float(load_u16(block)) * static_cast<float>(static_cast<std::int8_t>(block[2 + j]));
    } else if constexpr (F == DType::kQ4_0) {
      const int q = j < 16 ? (block[2 + j] & 15) : (block[2 + j - 16] >> 4);
      return half_to_float(load_u16(block)) * static_cast<float>(q - 8);
    } else if constexpr (F == DType::kQ4_1) {
      const int q = j < 16 ? (block[4 + j] & 15) : (block[4 + j - 16] >> 4);
      return add_rn(mul_rn(half_to_float(load_u16(block)), static_cast<float>(q)), half_to_float(load_u16(block + 2)));
    } else if constexpr (F == DType::kQ5_0 || F == DType::kQ5_1) {
      constexpr int kQh = F == DType::kQ5_0 ? 2 : 4;  // the fifth bits, then the nibbles
      const int low = j < 16 ? (block[kQh + 4 + j] & 15) : (block[kQh + 4 + j - 16] >> 4);
      const int q = low | static_cast<int>((load_u32(block + kQh) >> j) & 1u) << 4;
      const float d = half_to_float(load_u16(block));
      if constexpr (F == DType::kQ5_0) return d * static_cast<float>(q - 16);
      return add_rn(mul_rn(d, static_cast<float>(q)), half_to_float(load_u16(block + 2)));
    } else if constexpr (F == DType::kFP8_E4M3) {
      return bits_float(load_u32(block)) * fp8_e4m3_to_float(block[4 + j]);
    } else if constexpr (F == DType::kQ4_G128) {
      const int sub = j / 32, jj = j % 32;
      const std::uint8_t byte = block[4 + 16 * sub + (jj % 16)];
      const int q = jj < 16 ? (byte & 15) : (byte >> 4);
      return half_to_float(load_u16(block)) * static_cast<float>(q - (block[2] & 15));
    } else if constexpr (F == DType::kQ4_K || F == DType::kQ5_K) {
      // x = (d * scale) * q - (dmin * min); q's low nibble at byte 32 (j / 64) + j % 32 of the
      // nibbles (high half for the odd 32-element sub-block), Q5_K's fifth bit at bit s of qh[j % 32].
      const int s = j / 32, l = j % 32;
      int scale = 0, min = 0;
      unpack_scale_min_k4(block + 4, s, &scale, &min);
      const std::uint8_t* qs = block + (F == DType::kQ4_K ? 16 : 48);
      int q = (qs[32 * (j / 64) + l] >> (4 * (s % 2))) & 15;
      if constexpr (F == DType::kQ5_K) q |= ((block[16 + l] >> s) & 1) << 4;
      const float dl = mul_rn(half_to_float(load_u16(block)), static_cast<float>(scale));
      const float ml = mul_rn(half_to_float(load_u16(block + 2)), static_cast<float>(min));
      return mul_rn(dl, static_cast<float>(q)) - ml;
    } else if constexpr (F == DType::kQ2_K || F == DType::kQ3_K) {
      // Element 128 n + 32 k + l: 2 low bits at 2 k of qs[32 n + l]; Q2_K: x = (d * (scale & 15))
      // * q - dmin * (scale >> 4) per 16-element sub-block; Q3_K: bit k of hmask[l] adds 4 to
      // q - 4, x = (d * scale) * level.
      const int l = j % 32, k = (j % 128) / 32;
      constexpr int kQs = F == DType::kQ2_K ? 16 : 32;
      const int low = (block[kQs + 32 * (j / 128) + l] >> (2 * k)) & 3;
      if constexpr (F == DType::kQ2_K) {
        const int sc = block[j / 16];
        const float dl = mul_rn(half_to_float(load_u16(block + 80)), static_cast<float>(sc & 15));
        const float ml = mul_rn(half_to_float(load_u16(block + 82)), static_cast<float>(sc >> 4));
        return mul_rn(dl, static_cast<float>(low)) - ml;
      } else {
        const int level = low - 4 + 4 * ((block[l] >> (j / 32)) & 1);
        const float dl =
            mul_rn(half_to_float(load_u16(block + 108)), static_cast<float>(unpack_scale_q3_k(block + 96, j / 16)));
        return mul_rn(dl, static_cast<float>(level));
      }
    } else if constexpr (F == DType::kIQ4_NL) {
      const int index = j < 16 ? (block[2 + j] & 15) : (block[2 + j - 16] >> 4);
      return half_to_float(load_u16(block)) * static_cast<float>(iq4nl_level(index));
    } else if constexpr (F == DType::kQ6_K) {
      // Element 128 h + 32 k + l: low nibble (k / 2) of ql[64 h + 32 (k % 2) + l], high two bits
      // at 2 k of qh[32 h + l]; x = (d * scale[j / 16]) * (q - 32).
      const int h = j / 128, k = (j % 128) / 32, l = j % 32;
      const int low = (block[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15;
      const int high = (block[128 + 32 * h + l] >> (2 * k)) & 3;
      const float dl = mul_rn(half_to_float(load_u16(block + 208)),
                              static_cast<float>(static_cast<std::int8_t>(block[192 + j / 16])));
      return mul_rn(dl, static_cast<float>((low | high << 4) - 32));
    }
  }
}

// Elements [e0, e0 + 8) of a row (e0 % 8 == 0, so they share one block): out[i] as
// decode_element(row, e0 + i), with the block's scale read once.
template <DType F>
SITSRT_HD void decode8(const std::uint8_t* row, std::int64_t e0, float* out) {
  if constexpr (WeightFormat<F>::kElements == 1 || WeightFormat<F>::kElements == 256 || F == DType::kQ5_0 ||
                F == DType::kQ5_1 || F == DType::kIQ4_NL) {
    for (int i = 0; i < 8; ++i) out[i] = decode_element<F>(row, e0 + i);
  } else {
    constexpr int kN = WeightFormat<F>::kElements;
    const std::uint8_t* block = row + (e0 / kN) * WeightFormat<F>::kBytes;
    const int j = static_cast<int>(e0 % kN);
    if constexpr (F == DType::kQ8_0) {
      const float d = half_to_float(load_u16(block));
      for (int i = 0; i < 8; ++i) out[i] = d * static_cast<float>(static_cast<std::int8_t>(block[2 + j + i]));
    } else if constexpr (F == DType::kQ4_0 || F == DType::kQ4_1) {
      constexpr int kQs = F == DType::kQ4_0 ? 2 : 4;
      const float d = half_to_float(load_u16(block));
      const bool high = j >= 16;
      const std::uint8_t* qs = block + kQs + (high ? j - 16 : j);
      for (int i = 0; i < 8; ++i) {
        const int q = high ? qs[i] >> 4 : qs[i] & 15;
        if constexpr (F == DType::kQ4_0) {
          out[i] = d * static_cast<float>(q - 8);
        } else {
          out[i] = add_rn(mul_rn(d, static_cast<float>(q)), half_to_float(load_u16(block + 2)));
        }
      }
    } else if constexpr (F == DType::kFP8_E4M3) {
      const float d = bits_float(load_u32(block));
      for (int i = 0; i < 8; ++i) out[i] = d * fp8_e4m3_to_float(block[4 + j + i]);
    } else if constexpr (F == DType::kQ4_G128) {
      const float d = half_to_float(load_u16(block));
      const int zero = block[2] & 15, sub = j / 32, jj = j % 32;
      const std::uint8_t* qs = block + 4 + 16 * sub + (jj % 16);
      for (int i = 0; i < 8; ++i) out[i] = d * static_cast<float>((jj < 16 ? qs[i] & 15 : qs[i] >> 4) - zero);
    }
  }
}

// ---- cached K/V rows (ops::KvType layouts) -------------------------------------------------

// Round to nearest even for |v| < 2^22 (larger values are clamped by the callers), written as
// the CPU quantizers write it so both give the same integers: adding and subtracting 1.5 * 2^23.
SITSRT_HD float round_even(float v) {
#if defined(__CUDA_ARCH__)
  return rintf(v);  // the same integer wherever it matters (|v| < 2^22), and for NaN / infinities
#else
  return (v + 12582912.0f) - 12582912.0f;
#endif
}

// The smallest positive f16 not below x (0 < x < 65504): a scale taken this way keeps every
// |x| / scale within the integer range.
SITSRT_HD std::uint16_t f16_at_least(float x) {
  std::uint16_t h = float_to_half(x);
  if (half_to_float(h) < x) ++h;  // positive halves are ordered like their bit patterns
  return h;
}

// INT8 rows: one f16 scale per head from the head's max |x|; 0 for a head of zeros (or NaN).
SITSRT_HD std::uint16_t int8_scale(float amax) {
  if (!(amax > 0.0f)) return 0;
  const float s = amax / 127.0f;
  return f16_at_least(s < 65504.0f ? s : 65504.0f);
}

// The level of x under scale code h: round_even(x / scale) clamped to [qmin, qmax]; a NaN gives
// qmin, as on the CPU. A zero scale (a group of zeros) gives 0.
SITSRT_HD int quantize_level(float x, std::uint16_t h, float qmin, float qmax) {
  if (h == 0) return 0;
  float r = round_even(x / half_to_float(h));
  r = r > qmax ? qmax : r;
  r = r >= qmin ? r : qmin;
  return static_cast<int>(r);
}

// Bytes of one cached row of kv_width values (ops::kv_row_bytes): f32, f16, int8 + f16 per
// head, int4 + a scale code per 32 values (core/kv_int4.hpp).
SITSRT_HD std::int64_t kv_row_bytes(int type, std::int64_t kv_width, std::int64_t head_dim) {
  switch (type) {
    case 0:
      return 4 * kv_width;
    case 1:
      return 2 * kv_width;
    case 2:
      return kv_width + 2 * (kv_width / head_dim);
    default:
      return kv_width / 2 + kv_width / kv_int4::kGroup;
  }
}

// Element e of a cached row (ops::KvType code `type`: 0 f32, 1 f16, 2 int8, 3 int4) of
// kv_width values with heads of head_dim.
SITSRT_HD float kv_element(int type, const std::uint8_t* row, std::int64_t kv_width, std::int64_t head_dim,
                           std::int64_t e) {
  switch (type) {
    case 0:
      return bits_float(load_u32(row + 4 * e));
    case 1:
      return half_to_float(load_u16(row + 2 * e));
    case 2:
      return static_cast<float>(static_cast<std::int8_t>(row[e])) *
             half_to_float(load_u16(row + kv_width + 2 * (e / head_dim)));
    default: {
      const int index = (e & 1) != 0 ? row[e / 2] >> 4 : row[e / 2] & 15;
      return kv_int4::level(index) * kv_int4::scale_of(row[kv_width / 2 + e / kv_int4::kGroup]);
    }
  }
}

}  // namespace sitsrt::cuda
