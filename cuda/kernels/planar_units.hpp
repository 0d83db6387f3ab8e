// One unit of a planar weight row (planar_weights.hpp) as a lane of the decode kernels reads it:
// its 16-byte code loads, its side data (scales, mins), and the products of its decoded weights
// with kRows rows of x accumulated into per-output sums. planar_matmul.cu runs these for kOutputs
// weight rows at a time, so one load of x serves every row it holds.
//
// Codes become floats without the F2F pipe: FP8 through cvt e4m3x2 -> f16x2 and f16 -> f32
// adds; nibble and byte codes through a byte permute into the float 2^23 + q and one exact
// subtraction. Every weight is the float decode_element gives (each product and difference
// rounded once, as the CPU's dequantize_row), so each product with x equals the reference's.
//
// Device code under nvcc; plain C++ otherwise, with each intrinsic replaced by its exact host
// equivalent, so the CPU test suite runs this very lane logic (tests/unit/cuda_planar_lanes_test.cpp).
#pragma once

#include "cuda_backend/planar_weights.hpp"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define SITSRT_LANE __device__ inline
#define SITSRT_UNROLL _Pragma("unroll")
#else
#include <cmath>
#include <cstring>
#define SITSRT_LANE inline
#define SITSRT_UNROLL
#endif

namespace sitsrt::cuda::planar {

#if !defined(__CUDACC__) && !defined(SITSRT_CUDA_EMULATION)  // (the emulator has CUDA's own)
struct uint4 {
  std::uint32_t x, y, z, w;
};
struct float4 {
  float x, y, z, w;
};
#endif

inline constexpr float kTwo23 = 8388608.0f;

// 16 bytes of weights, read once: bypass L1 (x lives there), no coherence needed (read-only).
SITSRT_LANE uint4 load_weights(const std::uint8_t* p) {
  uint4 v;
#if defined(__CUDACC__)
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
#else
  std::memcpy(&v, p, sizeof v);
#endif
  return v;
}

// A read-only load through the texture path (__ldg) of a T at p (aligned for T).
template <typename T>
SITSRT_LANE T load_ro(const T* p) {
#if defined(__CUDACC__)
  return __ldg(p);
#else
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

// Four floats of x: one 16-byte load where x is 16-byte aligned with rows a multiple of 4 apart
// (`vector`, the same for the whole launch), four loads otherwise.
SITSRT_LANE float4 load_x4(const float* p, bool vector) {
  if (vector) return load_ro(reinterpret_cast<const float4*>(p));
  return float4{load_ro(p), load_ro(p + 1), load_ro(p + 2), load_ro(p + 3)};
}

SITSRT_LANE std::uint32_t word_of(const uint4& v, int t) {
  return t == 0 ? v.x : t == 1 ? v.y : t == 2 ? v.z : v.w;
}

SITSRT_LANE std::uint32_t byte_of(const uint4& v, int b) {
  return (word_of(v, b >> 2) >> (8 * (b & 3))) & 0xffu;
}

SITSRT_LANE float half_bits_to_float(std::uint32_t bits) {
#if defined(__CUDACC__)
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
#else
  return half_to_float(static_cast<std::uint16_t>(bits & 0xffffu));
#endif
}

SITSRT_LANE float as_float(std::uint32_t bits) {
#if defined(__CUDACC__)
  return __uint_as_float(bits);
#else
  return bits_float(bits);
#endif
}

// Byte i of w under the exponent byte 0x4b: the float 2^23 + byte, exactly.
SITSRT_LANE float biased_byte(std::uint32_t w, int i) {
#if defined(__CUDACC__)
  return __uint_as_float(__byte_perm(w, 0x4b000000u, static_cast<std::uint32_t>(0x7440 | i)));
#else
  return bits_float(0x4b000000u | ((w >> (8 * i)) & 0xffu));
#endif
}

// Bytes of the 8-byte value (y, x): result byte k = byte (s >> 4k) & 7 (selectors below 8: no
// sign replication), as __byte_perm; on the host, its exact stand-in.
SITSRT_LANE std::uint32_t byte_perm(std::uint32_t x, std::uint32_t y, std::uint32_t s) {
#if defined(__CUDACC__)
  return __byte_perm(x, y, s);
#else
  const std::uint64_t bytes = static_cast<std::uint64_t>(y) << 32 | x;
  std::uint32_t out = 0;
  for (int k = 0; k < 4; ++k)
    out |= static_cast<std::uint32_t>((bytes >> (8 * ((s >> (4 * k)) & 7u))) & 0xffu) << (8 * k);
  return out;
#endif
}

// IQ4_NL: the int8 levels (device_formats.hpp iq4nl_level) of the four indices in bytes of q
// (each 0..15): two byte permutes of the table's halves, then each byte from the half its bit 3
// names.
SITSRT_LANE std::uint32_t iq4nl_levels4(std::uint32_t q) {
  const std::uint32_t low3 = q & 0x07070707u;
  const std::uint32_t selector =
      (low3 & 0xfu) | ((low3 >> 4) & 0xf0u) | ((low3 >> 8) & 0xf00u) | ((low3 >> 12) & 0xf000u);
  const std::uint32_t lower = byte_perm(0xBFAD9881u, 0xF6EADDCFu, selector);  // levels 0..7
  const std::uint32_t upper = byte_perm(0x26190D01u, 0x71594535u, selector);  // levels 8..15
  const std::uint32_t high = ((q >> 3) & 0x01010101u) * 0xffu;
  return (upper & high) | (lower & ~high);
}

// Products, sums and differences rounded once each (never contracted into an fma): hd::mul_rn,
// add_rn, sub_rn (core/host_device.hpp), __fmul_rn and kin on the device.
using hd::sub_rn;

SITSRT_LANE float dot4(const float w[4], const float4& x, float acc) {
  acc = std::fma(w[0], x.x, acc);
  acc = std::fma(w[1], x.y, acc);
  acc = std::fma(w[2], x.z, acc);
  return std::fma(w[3], x.w, acc);
}

template <DType F>
inline constexpr int kLoads = F == DType::kQ6_K ? 3 : 1;  // 16-byte code loads per unit

// Formats whose unit is 16 bytes of nibbles (32 elements; Q5_x with a fifth bit from the side).
template <DType F>
inline constexpr bool kNibbleFormat =
    F == DType::kQ4_0 || F == DType::kQ4_G128 || F == DType::kQ4_1 || F == DType::kQ5_0 || F == DType::kQ5_1 ||
    F == DType::kQ4_K || F == DType::kQ5_K || F == DType::kIQ4_NL;

// The side data of a unit as loaded: a scale word (FP8: f32; INT4 g128: f16 | zero << 16; Q8_0,
// Q4_0: f16), the Q4_K super-block header (d, dmin, 12 packed bytes), the Q6_K unit's four int8
// scales (byte k) and d, nothing for floats.
template <DType F>
struct Side {
  std::uint32_t word = 0;
};
template <>
struct Side<DType::kQ4_K> {
  uint4 header;
};
template <>
struct Side<DType::kQ5_K> {
  uint4 header;
  uint4 fifth;  // the 16 fifth-bit bytes of the unit's elements (bit s: sub-block s)
};
template <>
struct Side<DType::kQ5_0> {
  std::uint32_t word;   // d
  std::uint32_t fifth;  // bit jj: element jj's fifth bit
};
template <>
struct Side<DType::kQ5_1> {
  std::uint32_t word;  // d | m << 16
  std::uint32_t fifth;
};
template <>
struct Side<DType::kQ6_K> {
  std::uint32_t scales;
  std::uint32_t d;
};

// Unit u of a row: codes (row_codes: the row in the code plane), side data (row_side: the row in
// the side plane). Q6_K unit u is (super-block u / 4, half h = u % 4 / 2 of 128, l-range lh = u % 2
// of 16): its low nibbles at 64 h + 16 lh and 64 h + 32 + 16 lh, its high bit pairs at
// 128 + 32 h + 16 lh of the super-block's 192 code bytes.
template <DType F>
SITSRT_LANE void load_codes(const std::uint8_t* row_codes, std::int64_t u, uint4 (&w)[kLoads<F>]) {
  if constexpr (F == DType::kQ6_K) {
    const std::uint8_t* block = row_codes + 192 * (u / 4);
    const int h = static_cast<int>(u % 4) / 2, lh = static_cast<int>(u % 2);
    w[0] = load_weights(block + 64 * h + 16 * lh);
    w[1] = load_weights(block + 64 * h + 32 + 16 * lh);
    w[2] = load_weights(block + 128 + 32 * h + 16 * lh);
  } else {
    w[0] = load_weights(row_codes + 16 * u);
  }
}

template <DType F>
SITSRT_LANE Side<F> load_side(const std::uint8_t* row_side, std::int64_t u) {
  Side<F> s;
  if constexpr (F == DType::kFP8_E4M3 || F == DType::kQ4_G128) {
    s.word = load_ro(reinterpret_cast<const std::uint32_t*>(row_side) + u / 4);
  } else if constexpr (F == DType::kQ8_0) {
    s.word = load_ro(reinterpret_cast<const unsigned short*>(row_side) + u / 2);
  } else if constexpr (F == DType::kQ4_0 || F == DType::kIQ4_NL) {
    s.word = load_ro(reinterpret_cast<const unsigned short*>(row_side) + u);
  } else if constexpr (F == DType::kQ4_1) {
    s.word = load_ro(reinterpret_cast<const std::uint32_t*>(row_side) + u);
  } else if constexpr (F == DType::kQ5_0) {  // 6-byte records at even offsets: 16-bit loads
    const auto* words = reinterpret_cast<const unsigned short*>(row_side) + 3 * u;
    s.word = load_ro(words);
    s.fifth = static_cast<std::uint32_t>(load_ro(words + 1)) | static_cast<std::uint32_t>(load_ro(words + 2)) << 16;
  } else if constexpr (F == DType::kQ5_1) {
    const auto* words = reinterpret_cast<const std::uint32_t*>(row_side) + 2 * u;
    s.word = load_ro(words);
    s.fifth = load_ro(words + 1);
  } else if constexpr (F == DType::kQ4_K) {
    s.header = load_ro(reinterpret_cast<const uint4*>(row_side) + u / 8);
  } else if constexpr (F == DType::kQ5_K) {  // 48-byte records: header, then 32 fifth-bit bytes
    const auto* record = reinterpret_cast<const uint4*>(row_side) + 3 * (u / 8);
    s.header = load_ro(record);
    s.fifth = load_ro(record + 1 + u % 2);
  } else if constexpr (F == DType::kQ6_K) {
    // scales of sub-blocks 8 h + 2 k + lh (k = 0..3): byte lh of the 16-bit words 4 h + k of
    // the record (18 bytes, at an even offset); d at bytes 16-17
    const auto* words = reinterpret_cast<const unsigned short*>(row_side + 18 * (u / 4));
    const int h = static_cast<int>(u % 4) / 2, lh = static_cast<int>(u % 2);
    s.scales = 0;
    SITSRT_UNROLL
    for (int k = 0; k < 4; ++k) {
      s.scales |= ((static_cast<std::uint32_t>(load_ro(words + 4 * h + k)) >> (8 * lh)) & 0xffu) << (8 * k);
    }
    s.d = load_ro(words + 8);
  }
  return s;
}

// Q4_K sub-block s's 6-bit scale and min from the header's packed bytes 4..15
// (unpack_scale_min_k4 on registers).
SITSRT_LANE void q4k_scale_min(const uint4& header, int s, int* scale, int* min) {
  const auto packed = [&](int i) { return static_cast<int>(byte_of(header, 4 + i)); };
  if (s < 4) {
    *scale = packed(s) & 63;
    *min = packed(s + 4) & 63;
  } else {
    *scale = (packed(s + 4) & 0x0F) | ((packed(s - 4) >> 6) << 4);
    *min = (packed(s + 4) >> 4) | ((packed(s) >> 6) << 4);
  }
}

// Four E4M3 codes (little-endian in w) times the block scale d, each product rounded once.
SITSRT_LANE void decode_fp8x4(std::uint32_t w, float d, float out[4]) {
#if defined(__CUDACC__)
  const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffffu), __NV_E4M3);
  const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), __NV_E4M3);
  const float2 a = __half22float2(__half2(lo));
  const float2 b = __half22float2(__half2(hi));
  const float codes[4] = {a.x, a.y, b.x, b.y};
#else
  float codes[4];
  for (int i = 0; i < 4; ++i) codes[i] = fp8_e4m3_to_float(static_cast<std::uint8_t>(w >> (8 * i)));
#endif
  for (int i = 0; i < 4; ++i) out[i] = mul_rn(d, codes[i]);
}

// Four int8 codes times d: byte ^ 0x80 is q + 128, so 2^23 + 128 + q, minus 2^23 + 128.
SITSRT_LANE void decode_q8x4(std::uint32_t w, float d, float out[4]) {
  const std::uint32_t biased = w ^ 0x80808080u;
  SITSRT_UNROLL
  for (int i = 0; i < 4; ++i) out[i] = mul_rn(d, sub_rn(biased_byte(biased, i), kTwo23 + 128.0f));
}

// Bit 4 of byte i of the result: bit i of b (the fifth bits of four consecutive elements).
SITSRT_LANE std::uint32_t spread_fifth(std::uint32_t b) {
  return (b & 1u) << 4 | (b & 2u) << 11 | (b & 4u) << 18 | (b & 8u) << 25;
}

// Four 4- or 5-bit codes (bytes of q) as weights: kMode 0: d * (q - zero) with bias = 2^23 + zero
// (Q4_0, INT4 g128, Q5_0); 1: d * q + m (Q4_1, Q5_1); 2: d * q - m (K-quants, d and m of the
// sub-block); 3: d * level(q) (IQ4_NL). Each operation rounded once, in decode_element's order.
template <int kMode>
SITSRT_LANE void decode_codes4(std::uint32_t q, float d, float bias_or_min, float out[4]) {
  const std::uint32_t levels = kMode == 3 ? iq4nl_levels4(q) : 0u;
  SITSRT_UNROLL
  for (int i = 0; i < 4; ++i) {
    if constexpr (kMode == 3) {
      out[i] = mul_rn(d, static_cast<float>(static_cast<std::int8_t>((levels >> (8 * i)) & 0xffu)));
    } else if constexpr (kMode == 0) {
      out[i] = mul_rn(d, sub_rn(biased_byte(q, i), bias_or_min));
    } else {
      const float scaled = mul_rn(d, sub_rn(biased_byte(q, i), kTwo23));
      out[i] = kMode == 1 ? add_rn(scaled, bias_or_min) : sub_rn(scaled, bias_or_min);
    }
  }
}

// Where the unit reads x: the tile's first row, rows ldx apart, of which the first `rows` (at
// most the accumulators' kRows) are real; vector: load_x4's choice.
struct XTile {
  const float* x;
  std::int64_t ldx;
  int rows;
  bool vector;
};

// Adds wf[o] . x[r][offset, offset + 4) to acc[o][r] for the tile's rows: one x load serves every
// output. Accumulators of rows past xt.rows stay.
template <int kOutputs, int kRows>
SITSRT_LANE void accumulate4(const float (&wf)[kOutputs][4], const XTile& xt, std::int64_t offset,
                             float (&acc)[kOutputs][kRows]) {
  SITSRT_UNROLL
  for (int r = 0; r < kRows; ++r) {
    if (r >= xt.rows) break;  // a tile of fewer rows than accumulators
    const float4 xv = load_x4(xt.x + r * xt.ldx + offset, xt.vector);
    SITSRT_UNROLL
    for (int o = 0; o < kOutputs; ++o) acc[o][r] = dot4(wf[o], xv, acc[o][r]);
  }
}

// Decodes unit u of kOutputs weight rows (w[o], s[o]) at once, four elements of each at a time:
// sink(offset, wf) takes wf[o][0..3], the weights of elements offset .. offset + 3 of row o, in
// the order accumulate_unit sums them (every element of the unit exactly once).
template <DType F, int kOutputs, typename Sink>
SITSRT_LANE void decode_unit(const uint4 (&w)[kOutputs][kLoads<F>], const Side<F> (&s)[kOutputs], std::int64_t u,
                             Sink&& sink) {
  if constexpr (F == DType::kFP8_E4M3 || F == DType::kQ8_0) {  // 16 byte codes: elements 16 u + 4 t + i
    SITSRT_UNROLL
    for (int t = 0; t < 4; ++t) {
      float wf[kOutputs][4];
      SITSRT_UNROLL
      for (int o = 0; o < kOutputs; ++o) {
        if constexpr (F == DType::kFP8_E4M3) {
          decode_fp8x4(word_of(w[o][0], t), as_float(s[o].word), wf[o]);
        } else {
          decode_q8x4(word_of(w[o][0], t), half_bits_to_float(s[o].word), wf[o]);
        }
      }
      sink(16 * u + 4 * t, wf);
    }
  } else if constexpr (kNibbleFormat<F>) {
    // word t: low nibbles elements base + 4 t + i, high nibbles base + kHigh + 4 t + i
    constexpr bool kSuper = F == DType::kQ4_K || F == DType::kQ5_K;
    constexpr bool kFifth = F == DType::kQ5_0 || F == DType::kQ5_1 || F == DType::kQ5_K;
    constexpr int kMode = kSuper ? 2 : F == DType::kQ4_1 || F == DType::kQ5_1 ? 1 : F == DType::kIQ4_NL ? 3 : 0;
    constexpr int kHigh = kSuper ? 32 : 16;
    const std::int64_t base = kSuper ? 64 * (u / 2) + 16 * (u % 2) : 32 * u;
    const int sub = 2 * (static_cast<int>(u % 8) / 2);  // K-quants: sub-blocks sub, sub + 1 (g = u % 8 / 2)
    float dl[kOutputs][2], ml[kOutputs][2];
    SITSRT_UNROLL
    for (int o = 0; o < kOutputs; ++o) {
      if constexpr (kSuper) {
        const float d = half_bits_to_float(s[o].header.x), dmin = half_bits_to_float(s[o].header.x >> 16);
        SITSRT_UNROLL
        for (int i = 0; i < 2; ++i) {
          int scale = 0, min = 0;
          q4k_scale_min(s[o].header, sub + i, &scale, &min);
          dl[o][i] = mul_rn(d, static_cast<float>(scale));
          ml[o][i] = mul_rn(dmin, static_cast<float>(min));
        }
      } else {
        dl[o][0] = dl[o][1] = half_bits_to_float(s[o].word);
        if constexpr (kMode == 1) {  // the min
          ml[o][0] = half_bits_to_float(s[o].word >> 16);
        } else {  // INT4 g128: the zero nibble in bits 16-19; Q4_0: 8; Q5_0: 16
          ml[o][0] = kTwo23 + (F == DType::kQ4_G128 ? static_cast<float>((s[o].word >> 16) & 15u)
                               : F == DType::kQ5_0  ? 16.0f
                                                    : 8.0f);
        }
        ml[o][1] = ml[o][0];
      }
    }
    SITSRT_UNROLL
    for (int t = 0; t < 4; ++t) {
      float low[kOutputs][4], high[kOutputs][4];
      SITSRT_UNROLL
      for (int o = 0; o < kOutputs; ++o) {
        const std::uint32_t word = word_of(w[o][0], t);
        std::uint32_t lq = word & 0x0f0f0f0fu, hq = (word >> 4) & 0x0f0f0f0fu;
        if constexpr (F == DType::kQ5_K) {  // byte i of fifth word t: bit s for sub-block s
          lq |= ((word_of(s[o].fifth, t) >> sub) & 0x01010101u) << 4;
          hq |= ((word_of(s[o].fifth, t) >> (sub + 1)) & 0x01010101u) << 4;
        } else if constexpr (kFifth) {  // bit jj: element jj of the block
          lq |= spread_fifth((s[o].fifth >> (4 * t)) & 15u);
          hq |= spread_fifth((s[o].fifth >> (16 + 4 * t)) & 15u);
        }
        decode_codes4<kMode>(lq, dl[o][0], ml[o][0], low[o]);
        decode_codes4<kMode>(hq, dl[o][1], ml[o][1], high[o]);
      }
      // each accumulator takes the low products, then the high ones
      sink(base + 4 * t, low);
      sink(base + kHigh + 4 * t, high);
    }
  } else if constexpr (F == DType::kQ6_K) {
    // element 128 h + 32 k + 16 lh + 4 t + i: low nibble (k / 2) of w[k % 2] word t, high bits
    // 2k of w[2] word t; (d * scale_k) * (q - 32)
    const int h = static_cast<int>(u % 4) / 2, lh = static_cast<int>(u % 2);
    const std::int64_t base = 256 * (u / 4) + 128 * h + 16 * lh;
    SITSRT_UNROLL
    for (int k = 0; k < 4; ++k) {
      float dl[kOutputs];
      SITSRT_UNROLL
      for (int o = 0; o < kOutputs; ++o) {
        const auto scale = static_cast<std::int8_t>((s[o].scales >> (8 * k)) & 0xffu);
        dl[o] = mul_rn(half_bits_to_float(s[o].d), static_cast<float>(scale));
      }
      SITSRT_UNROLL
      for (int t = 0; t < 4; ++t) {
        float wf[kOutputs][4];
        SITSRT_UNROLL
        for (int o = 0; o < kOutputs; ++o) {
          const std::uint32_t low = (word_of(w[o][k % 2], t) >> (4 * (k / 2))) & 0x0f0f0f0fu;
          const std::uint32_t high = ((word_of(w[o][2], t) >> (2 * k)) & 0x03030303u) << 4;
          SITSRT_UNROLL
          for (int i = 0; i < 4; ++i) wf[o][i] = mul_rn(dl[o], sub_rn(biased_byte(low | high, i), kTwo23 + 32.0f));
        }
        sink(base + 32 * k + 4 * t, wf);
      }
    }
  } else {
    static_assert(F == DType::kF16 || F == DType::kBF16, "a planar format (planar_unit)");
    // eight 16-bit floats: elements 8 u + 4 p + i from words 2 p and 2 p + 1
    SITSRT_UNROLL
    for (int p = 0; p < 2; ++p) {
      float wf[kOutputs][4];
      SITSRT_UNROLL
      for (int o = 0; o < kOutputs; ++o) {
        SITSRT_UNROLL
        for (int i = 0; i < 2; ++i) {
          const std::uint32_t word = word_of(w[o][0], 2 * p + i);
          if constexpr (F == DType::kF16) {
            wf[o][2 * i] = half_bits_to_float(word);
            wf[o][2 * i + 1] = half_bits_to_float(word >> 16);
          } else {
            wf[o][2 * i] = as_float(word << 16);
            wf[o][2 * i + 1] = as_float(word & 0xffff0000u);
          }
        }
      }
      sink(8 * u + 4 * p, wf);
    }
  }
}

// Adds the unit's products with the tile's rows of x to acc[o][r], for kOutputs weight rows
// (w[o], s[o]) at once.
template <DType F, int kOutputs, int kRows>
SITSRT_LANE void accumulate_unit(const uint4 (&w)[kOutputs][kLoads<F>], const Side<F> (&s)[kOutputs], const XTile& xt,
                                 std::int64_t u, float (&acc)[kOutputs][kRows]) {
  decode_unit<F, kOutputs>(
      w, s, u, [&](std::int64_t offset, const float(&wf)[kOutputs][4]) { accumulate4(wf, xt, offset, acc); });
}

}  // namespace sitsrt::cuda::planar
