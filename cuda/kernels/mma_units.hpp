// The lane logic of the tensor-core decode matmul (planar_mma.cu, tiles of up to 16 rows of x over
// planar weights): one warp computes 16 weight rows x 8 rows of x per mma.sync.m16n8k16 (BF16
// operands, float accumulation). Two schemes: the block scheme below for FP8 E4M3 and INT4 g128,
// the quarter scheme (further down) for the GGUF block formats.
//
// Operands, exact where the CUDA-core kernels are exact:
//   - weights as their integer-valued codes, which BF16 holds exactly (an E4M3 value; q - zero of
//     INT4, -15..15; int8, IQ4_NL levels, 5- and 6-bit codes), the scale applied to the float sum
//     afterwards: a k16 step never mixes scale blocks;
//   - each x as two BF16 (hi = x rounded, lo = x - hi rounded), two mmas: x to within 2^-16 of
//     its value with float's range (the prefill GEMM rounds x to BF16: 2^-8).
//
// Fragments (PTX ISA, mma.m16n8k16 .bf16): lane = 4 g + t. A (16 x 16, row): register 0 holds
// row g, columns 2t, 2t + 1; register 1 row g + 8, the same columns; registers 2 and 3 the same
// rows at columns 2t + 8, 2t + 9. B (16 x 8, col): register 0 holds column g, rows 2t, 2t + 1;
// register 1 rows 2t + 8, 2t + 9. C: c0, c1 row g, columns 2t, 2t + 1; c2, c3 row g + 8.
// The k order inside a step is free (A and B take the same permutation), so a lane's four k slots
// are elements of the 16-byte unit it loaded: a scale block is 4 units (64 E4M3 codes, or the
// 128 nibbles of an INT4 g128 block), lane t of each quad loading unit 4 b + t of its two weight
// rows, and the block's kSteps steps each take 4 elements of every lane's unit.
//
// Non-finite values: an infinite x keeps its lo part 0 and F16 weights' lo parts meet only its
// finite hi parts, so an infinite x gives the CUDA cores' infinities; an infinite F16 / BF16
// weight gives NaN (its product with x's lo part, 0 where x is a BF16 value).
//
// Device code under nvcc; plain C++ otherwise with exact host stand-ins (BF16 rounding to nearest
// even, the E4M3 table), so tests/unit/cuda_planar_lanes_test.cpp runs these fragments through an
// emulated mma on the CPU.
#pragma once

#include "cuda_backend/kernels/planar_units.hpp"

#if defined(SITSRT_CUDA_EMULATION) && !defined(__CUDACC__)
namespace sitsrt::cuda_emulator {  // tests/cuda_emulator: the warp's mma.sync
void mma_bf16_m16n8k16(const std::uint32_t (&a)[4], const std::uint32_t (&b)[2], float (&c)[4]);
}
#endif

namespace sitsrt::cuda::mma {

#if !defined(__CUDACC__) && !defined(SITSRT_CUDA_EMULATION)
using planar::float4;
using planar::uint4;
#endif

// Formats the tensor-core kernel takes: a scale block of exactly 4 units.
template <DType F>
inline constexpr bool kFormat = F == DType::kFP8_E4M3 || F == DType::kQ4_G128;
template <DType F>
inline constexpr int kBlockElements = F == DType::kQ4_G128 ? 128 : 64;
template <DType F>
inline constexpr int kSteps = kBlockElements<F> / 16;  // k16 steps a scale block

struct FragA {
  std::uint32_t r[4];
};
struct FragB {
  std::uint32_t r[2];
};

// Two floats rounded to BF16 (nearest even) in one register: a in the low half (the lower k or
// column), b in the high half.
SITSRT_LANE std::uint32_t pack_bf16x2(float a, float b) {
#if defined(__CUDACC__)
  std::uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(b), "f"(a));  // first source: the high half
  return d;
#else
  const auto round = [](float f) -> std::uint32_t {
    const std::uint32_t x = float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;  // NaN stays NaN
    return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  };
  return round(a) | round(b) << 16;
#endif
}

SITSRT_LANE float bf16_low(std::uint32_t v) {
  return planar::as_float(v << 16);
}
SITSRT_LANE float bf16_high(std::uint32_t v) {
  return planar::as_float(v & 0xffff0000u);
}

// x0, x1 as the hi and lo BF16 pairs (x - hi is exact in float; its rounding is the only loss).
// An infinite hi (x infinite, or rounded past BF16's largest) keeps lo 0: x - hi would be NaN.
SITSRT_LANE void split_x2(float x0, float x1, std::uint32_t& hi, std::uint32_t& lo) {
  hi = pack_bf16x2(x0, x1);
  const float h0 = bf16_low(hi), h1 = bf16_high(hi);
  lo = pack_bf16x2(std::isinf(h0) ? 0.0f : planar::sub_rn(x0, h0), std::isinf(h1) ? 0.0f : planar::sub_rn(x1, h1));
}

// Two E4M3 codes (bits 0-15) as BF16, exactly: through the f16 pair the hardware converts to.
SITSRT_LANE std::uint32_t fp8x2_bf16x2(std::uint32_t codes) {
#if defined(__CUDACC__)
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  return pack_bf16x2(f.x, f.y);
#else
  return pack_bf16x2(fp8_e4m3_to_float(static_cast<std::uint8_t>(codes & 0xffu)),
                     fp8_e4m3_to_float(static_cast<std::uint8_t>((codes >> 8) & 0xffu)));
#endif
}

// a - b of two BF16 pairs of integers below 256 in magnitude (exact in any rounding): fma with 1.
SITSRT_LANE std::uint32_t sub_bf16x2(std::uint32_t a, std::uint32_t b) {
#if defined(__CUDACC__)
  std::uint32_t d;
  const std::uint32_t one = 0x3f803f80u, minus_b = b ^ 0x80008000u;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(one), "r"(minus_b));
  return d;
#else
  return pack_bf16x2(bf16_low(a) - bf16_low(b), bf16_high(a) - bf16_high(b));
#endif
}

// A k-block's side data for one weight row: the scale, and (INT4) 128 + zero as a BF16 pair.
struct BlockSide {
  float scale = 0.0f;
  std::uint32_t bias = 0;
};

template <DType F>
SITSRT_LANE BlockSide load_block_side(const std::uint8_t* row_side, std::int64_t block) {
  const std::uint32_t word = planar::load_ro(reinterpret_cast<const std::uint32_t*>(row_side) + block);
  BlockSide s;
  if constexpr (F == DType::kFP8_E4M3) {
    s.scale = planar::as_float(word);
  } else {
    s.scale = planar::half_bits_to_float(word);
    s.bias = (0x4300u | ((word >> 16) & 15u)) * 0x00010001u;  // BF16 128 + zero, twice
  }
  return s;
}

// The A fragment of step s for weight rows g (unit w0) and g + 8 (unit w8).
//   E4M3: word s of the unit; its bytes 0, 1 at columns 2t, 2t + 1 and bytes 2, 3 at 2t + 8, 2t + 9
//   (elements 16 u + 4 s + 0..3).
//   INT4: word s / 2, bytes 2h, 2h + 1 (h = s % 2); their low nibbles (elements 4(s/2) + 2h + 0..1
//   of the unit) at columns 2t, 2t + 1, their high nibbles (those elements + 16) at 2t + 8, 2t + 9;
//   each code as BF16 128 + q (exponent byte 0x43 over the nibble) minus 128 + zero.
template <DType F>
SITSRT_LANE FragA a_fragment(const uint4& w0, const uint4& w8, const BlockSide& s0, const BlockSide& s8, int step) {
  FragA a;
  if constexpr (F == DType::kFP8_E4M3) {
    const std::uint32_t r0 = planar::word_of(w0, step), r8 = planar::word_of(w8, step);
    a.r[0] = fp8x2_bf16x2(r0);
    a.r[1] = fp8x2_bf16x2(r8);
    a.r[2] = fp8x2_bf16x2(r0 >> 16);
    a.r[3] = fp8x2_bf16x2(r8 >> 16);
  } else {
    const std::uint32_t selector = step % 2 == 0 ? 0x4140u : 0x4342u;  // bytes 2h, 2h + 1 to halves
    const std::uint32_t b0 = planar::byte_perm(planar::word_of(w0, step / 2), 0u, selector);
    const std::uint32_t b8 = planar::byte_perm(planar::word_of(w8, step / 2), 0u, selector);
    a.r[0] = sub_bf16x2((b0 & 0x000f000fu) | 0x43004300u, s0.bias);
    a.r[1] = sub_bf16x2((b8 & 0x000f000fu) | 0x43004300u, s8.bias);
    a.r[2] = sub_bf16x2(((b0 >> 4) & 0x000f000fu) | 0x43004300u, s0.bias);
    a.r[3] = sub_bf16x2(((b8 >> 4) & 0x000f000fu) | 0x43004300u, s8.bias);
  }
  return a;
}

// Two floats of x at p (8-byte aligned where `vector`).
SITSRT_LANE void load_x2(const float* p, bool vector, float& x0, float& x1) {
#if defined(__CUDACC__)
  if (vector) {
    const float2 v = __ldg(reinterpret_cast<const float2*>(p));
    x0 = v.x;
    x1 = v.y;
    return;
  }
#else
  static_cast<void>(vector);
#endif
  x0 = planar::load_ro(p);
  x1 = planar::load_ro(p + 1);
}

// The B fragments (hi, lo) of x's row `row`, elements e .. e + 3 at rows 2t, 2t + 1 (register 0)
// and 2t + 8, 2t + 9 (register 1); zeros past xt.rows (the tile's idle columns read nothing).
SITSRT_LANE void b_fragments_x4(const planar::XTile& xt, int row, std::int64_t e, FragB& hi, FragB& lo) {
  float4 v{0.0f, 0.0f, 0.0f, 0.0f};
  if (row < xt.rows) v = planar::load_x4(xt.x + row * xt.ldx + e, xt.vector);
  split_x2(v.x, v.y, hi.r[0], lo.r[0]);
  split_x2(v.z, v.w, hi.r[1], lo.r[1]);
}

// The B fragments (hi, lo) of step s for row `row` of the tile's x (zeros past xt.rows) and the
// lane's unit u, in a_fragment's element order.
template <DType F>
SITSRT_LANE void b_fragments(const planar::XTile& xt, int row, std::int64_t u, int step, FragB& hi, FragB& lo) {
  if constexpr (F == DType::kFP8_E4M3) {
    b_fragments_x4(xt, row, 16 * u + 4 * step, hi, lo);
  } else {  // INT4: elements e, e + 1 (low nibbles) and e + 16, e + 17 (high)
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (row < xt.rows) {
      const float* xr = xt.x + row * xt.ldx;
      const std::int64_t e = 32 * u + 4 * (step / 2) + 2 * (step % 2);
      load_x2(xr + e, xt.vector, x[0], x[1]);
      load_x2(xr + e + 16, xt.vector, x[2], x[3]);
    }
    split_x2(x[0], x[1], hi.r[0], lo.r[0]);
    split_x2(x[2], x[3], hi.r[1], lo.r[1]);
  }
}

// ---- The quarter scheme, for formats whose scale blocks are smaller than a quad's 4 units
// (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K, Q6_K). Lane t of a quad takes word t (bytes
// 4t .. 4t + 3) of each 16-byte code load of the same unit, so a k16 step is 16 elements of one
// unit inside one scale block or sub-block: the step's sum takes its scale, and for formats with a
// min (elements scale * q + offset) the offset times the sum of x over the step, an mma with an
// all-ones A. The lane's 4 elements of a step are its x's 4 floats at step_x_offset + 4t.

template <DType F>
inline constexpr bool kQuarterFormat =
    F == DType::kQ8_0 || F == DType::kQ4_0 || F == DType::kQ4_1 || F == DType::kQ5_0 || F == DType::kQ5_1 ||
    F == DType::kIQ4_NL || F == DType::kQ4_K || F == DType::kQ5_K || F == DType::kQ6_K || F == DType::kF16 ||
    F == DType::kBF16;
// F16 / BF16: an mma unit is two planar units (16 elements, a step), the lane's 4 elements the
// float pairs 2t, 2t + 1 of each; F16 weights as hi + lo BF16 (exact: 11 bits in two 8-bit parts).
template <DType F>
inline constexpr bool kFloatPairs = F == DType::kF16 || F == DType::kBF16;
template <DType F>
inline constexpr bool kWeightSplit = F == DType::kF16;
template <DType F>
inline constexpr int kQuarterLoads = kFloatPairs<F> ? 2 : planar::kLoads<F>;  // words a lane takes of a unit
template <DType F>
inline constexpr int kQuarterSteps = F == DType::kQ8_0 || kFloatPairs<F> ? 1
                                     : F == DType::kQ6_K                 ? 4
                                                                         : 2;
template <DType F>
inline constexpr bool kQuarterOffset = F == DType::kQ4_1 || F == DType::kQ5_1 || F == DType::kQ4_K || F == DType::kQ5_K;
template <DType F>
inline constexpr int kChunkUnits =  // a warp's units at a time (64 or 128 elements), fewer where side data is large
    F == DType::kQ6_K || F == DType::kQ5_0 || F == DType::kQ5_1 || F == DType::kQ5_K ? 2 : 4;

// The units the quarter scheme counts in a row of `planar_units` (F16 / BF16: pairs of them).
template <DType F>
SITSRT_HD std::int64_t quarter_units(std::int64_t planar_units) {
  return kFloatPairs<F> ? planar_units / 2 : planar_units;
}

// The lane's word of each code load of unit u (planar::load_codes' addresses, plus 4t).
template <DType F>
SITSRT_LANE void load_quarter(const std::uint8_t* row_codes, std::int64_t u, int t,
                              std::uint32_t (&w)[kQuarterLoads<F>]) {
  const auto word = [](const std::uint8_t* p) { return planar::load_ro(reinterpret_cast<const std::uint32_t*>(p)); };
  if constexpr (kFloatPairs<F>) {  // planar units 2u and 2u + 1
    w[0] = word(row_codes + 32 * u + 4 * t);
    w[1] = word(row_codes + 32 * u + 16 + 4 * t);
  } else if constexpr (F == DType::kQ6_K) {
    const std::uint8_t* block = row_codes + 192 * (u / 4);
    const int h = static_cast<int>(u % 4) / 2, lh = static_cast<int>(u % 2);
    w[0] = word(block + 64 * h + 16 * lh + 4 * t);
    w[1] = word(block + 64 * h + 32 + 16 * lh + 4 * t);
    w[2] = word(block + 128 + 32 * h + 16 * lh + 4 * t);
  } else {
    w[0] = word(row_codes + 16 * u + 4 * t);
  }
}

// The first of the 16 elements of step s of unit u (the lane's 4 are at + 4t).
template <DType F>
SITSRT_LANE std::int64_t step_x_offset(std::int64_t u, int step) {
  if constexpr (kFloatPairs<F>) {
    return 16 * u;  // the lane's: 16 u + 2t, + 1 and 16 u + 8 + 2t, + 1 (quarter_b_fragments)
  } else if constexpr (F == DType::kQ8_0) {
    return 16 * u;
  } else if constexpr (F == DType::kQ6_K) {
    return 256 * (u / 4) + 128 * ((u % 4) / 2) + 16 * (u % 2) + 32 * step;
  } else if constexpr (F == DType::kQ4_K || F == DType::kQ5_K) {
    return 64 * (u / 2) + 16 * (u % 2) + 32 * step;  // low nibbles: sub-block 2 (u % 8 / 2), high: the next
  } else {
    return 32 * u + 16 * step;  // byte i: element i (low nibble) and i + 16 (high)
  }
}

// A step's elements of one weight row are scale * code + offset.
struct StepScale {
  float scale = 0.0f;
  float offset = 0.0f;
};

template <DType F>
SITSRT_LANE StepScale step_scale(const planar::Side<F>& s, std::int64_t u, int step) {
  using planar::half_bits_to_float;
  if constexpr (F == DType::kQ4_1 || F == DType::kQ5_1) {
    return {half_bits_to_float(s.word), half_bits_to_float(s.word >> 16)};
  } else if constexpr (F == DType::kQ4_K || F == DType::kQ5_K) {
    int scale = 0, min = 0;
    planar::q4k_scale_min(s.header, 2 * (static_cast<int>(u % 8) / 2) + step, &scale, &min);
    return {mul_rn(half_bits_to_float(s.header.x), static_cast<float>(scale)),
            -mul_rn(half_bits_to_float(s.header.x >> 16), static_cast<float>(min))};
  } else if constexpr (F == DType::kQ6_K) {
    const auto scale = static_cast<std::int8_t>((s.scales >> (8 * step)) & 0xffu);
    return {mul_rn(half_bits_to_float(s.d), static_cast<float>(scale)), 0.0f};
  } else if constexpr (kFloatPairs<F>) {
    static_cast<void>(s);
    static_cast<void>(u);
    static_cast<void>(step);
    return {1.0f, 0.0f};
  } else {
    return {half_bits_to_float(s.word), 0.0f};  // Q8_0, Q4_0, Q5_0, IQ4_NL
  }
}

// Four codes below 128 (bytes of q) minus `bias` as BF16 pairs (bytes 0, 1 and bytes 2, 3):
// 128 + q by the exponent byte 0x43, minus 128 + bias.
SITSRT_LANE void small_codes(std::uint32_t q, std::uint32_t bias, std::uint32_t& c01, std::uint32_t& c89) {
  const std::uint32_t b = (0x4300u | bias) * 0x00010001u;
  c01 = sub_bf16x2(planar::byte_perm(q, 0u, 0x4140u) | 0x43004300u, b);
  c89 = sub_bf16x2(planar::byte_perm(q, 0u, 0x4342u) | 0x43004300u, b);
}

// Four int8 codes (bytes of w) as BF16 pairs: 2^23 + 128 + q, minus 2^23 + 128, exact in BF16.
SITSRT_LANE void int8_codes(std::uint32_t w, std::uint32_t& c01, std::uint32_t& c89) {
  const std::uint32_t biased = w ^ 0x80808080u;
  float f[4];
  SITSRT_UNROLL
  for (int i = 0; i < 4; ++i) f[i] = planar::sub_rn(planar::biased_byte(biased, i), planar::kTwo23 + 128.0f);
  c01 = pack_bf16x2(f[0], f[1]);
  c89 = pack_bf16x2(f[2], f[3]);
}

// F16 pair (bits 0-15, 16-31) as hi + lo BF16 pairs, exactly (an infinity: lo 0, not NaN).
SITSRT_LANE void f16_pair_split(std::uint32_t pair, std::uint32_t& hi, std::uint32_t& lo) {
  const float a = planar::half_bits_to_float(pair), b = planar::half_bits_to_float(pair >> 16);
  hi = pack_bf16x2(a, b);
  const float h0 = bf16_low(hi), h1 = bf16_high(hi);
  lo = pack_bf16x2(std::isinf(h0) ? 0.0f : planar::sub_rn(a, h0), std::isinf(h1) ? 0.0f : planar::sub_rn(b, h1));
}

// A BF16 pair with each infinite half zeroed: x's hi parts as F16's weight lo parts meet them
// (0 * inf would be NaN where the products of the hi parts already carry the infinity).
SITSRT_LANE std::uint32_t finite_bf16x2(std::uint32_t v) {
  const std::uint32_t low = (v & 0x7fffu) == 0x7f80u ? 0u : v & 0xffffu;
  const std::uint32_t high = (v & 0x7fff0000u) == 0x7f800000u ? 0u : v & 0xffff0000u;
  return low | high;
}

// The lane's B fragments of step s of unit u (float pairs: elements 16 u + 2t, + 1 and
// 16 u + 8 + 2t, + 1; otherwise 4 consecutive floats at step_x_offset + 4t).
template <DType F>
SITSRT_LANE void quarter_b_fragments(const planar::XTile& xt, int row, std::int64_t u, int step, int t, FragB& hi,
                                     FragB& lo) {
  const std::int64_t e = step_x_offset<F>(u, step);
  if constexpr (kFloatPairs<F>) {
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (row < xt.rows) {
      const float* xr = xt.x + row * xt.ldx + e + 2 * t;
      load_x2(xr, xt.vector, x[0], x[1]);
      load_x2(xr + 8, xt.vector, x[2], x[3]);
    }
    split_x2(x[0], x[1], hi.r[0], lo.r[0]);
    split_x2(x[2], x[3], hi.r[1], lo.r[1]);
  } else {
    b_fragments_x4(xt, row, e + 4 * t, hi, lo);
  }
}

// The codes of the lane's 4 elements of step s for one weight row: the A registers of columns
// 2t, 2t + 1 (c01) and 2t + 8, 2t + 9 (c89). F16: the hi parts (step_codes_lo: the lo parts).
template <DType F>
SITSRT_LANE void step_codes(const std::uint32_t (&w)[kQuarterLoads<F>], const planar::Side<F>& s, std::int64_t u, int t,
                            int step, std::uint32_t& c01, std::uint32_t& c89) {
  if constexpr (F == DType::kBF16) {
    c01 = w[0];
    c89 = w[1];
  } else if constexpr (F == DType::kF16) {
    std::uint32_t lo = 0;
    f16_pair_split(w[0], c01, lo);
    f16_pair_split(w[1], c89, lo);
  } else if constexpr (F == DType::kQ8_0) {
    int8_codes(w[0], c01, c89);
  } else if constexpr (F == DType::kQ6_K) {
    // element 128 h + 32 k + 16 lh + i: low nibble (k / 2) of load k % 2, high bits 2k of load 2
    const std::uint32_t low = (w[step % 2] >> (4 * (step / 2))) & 0x0f0f0f0fu;
    const std::uint32_t high = ((w[2] >> (2 * step)) & 0x03030303u) << 4;
    small_codes(low | high, 32u, c01, c89);
  } else {
    std::uint32_t q = step == 0 ? w[0] & 0x0f0f0f0fu : (w[0] >> 4) & 0x0f0f0f0fu;
    if constexpr (F == DType::kQ5_K) {  // byte i of fifth word t: bit s for sub-block s
      q |= ((planar::word_of(s.fifth, t) >> (2 * (static_cast<int>(u % 8) / 2) + step)) & 0x01010101u) << 4;
    } else if constexpr (F == DType::kQ5_0 || F == DType::kQ5_1) {  // bit jj: element jj of the block
      q |= planar::spread_fifth((s.fifth >> (16 * step + 4 * t)) & 15u);
    }
    if constexpr (F == DType::kIQ4_NL) {
      int8_codes(planar::iq4nl_levels4(q), c01, c89);
    } else {
      small_codes(q, F == DType::kQ4_0 ? 8u : F == DType::kQ5_0 ? 16u : 0u, c01, c89);
    }
  }
}

// The side data of a chunk's units for one weight row, loaded with the chunk's codes: each unit's
// record, but one Q4_K / Q5_K super-block header for the chunk (its 4 units share it) and of Q5_K's
// fifth bits only the lane's word of each half. unit(c): unit u0 + c's side as load_side gives
// it, or (Q5_K) with the lane's fifth word in every word (step_codes reads only word t).
template <DType F>
struct ChunkSide {
  planar::Side<F> s[kChunkUnits<F>];
  SITSRT_LANE void load(const std::uint8_t* row_side, std::int64_t u0, std::int64_t units, int /*t*/) {
    SITSRT_UNROLL
    for (int c = 0; c < kChunkUnits<F>; ++c) s[c] = planar::load_side<F>(row_side, u0 + c < units ? u0 + c : units - 1);
  }
  [[nodiscard]] SITSRT_LANE planar::Side<F> unit(int c) const { return s[c]; }
};
// The K-quant specializations take a chunk to lie in one super-block of 8 units (chunks start at
// multiples of kChunkUnits, and planar rows are whole super-blocks); Q5_K's fifth words take its
// first unit to be even.
static_assert(8 % kChunkUnits<DType::kQ4_K> == 0 && 8 % kChunkUnits<DType::kQ5_K> == 0 &&
                  kChunkUnits<DType::kQ5_K> % 2 == 0,
              "a K-quant chunk inside one super-block, Q5_K's starting on an even unit");
template <>
struct ChunkSide<DType::kQ4_K> {
  planar::Side<DType::kQ4_K> s;
  SITSRT_LANE void load(const std::uint8_t* row_side, std::int64_t u0, std::int64_t /*units*/, int /*t*/) {
    s = planar::load_side<DType::kQ4_K>(row_side, u0);
  }
  [[nodiscard]] SITSRT_LANE planar::Side<DType::kQ4_K> unit(int /*c*/) const { return s; }
};
template <>
struct ChunkSide<DType::kQ5_K> {
  uint4 header;
  std::uint32_t fifth[2];  // word t of the halves u % 2 = 0, 1
  SITSRT_LANE void load(const std::uint8_t* row_side, std::int64_t u0, std::int64_t /*units*/, int t) {
    const auto* record = reinterpret_cast<const uint4*>(row_side) + 3 * (u0 / 8);  // header, 32 fifth bytes
    header = planar::load_ro(record);
    const auto* words = reinterpret_cast<const std::uint32_t*>(record + 1);
    fifth[0] = planar::load_ro(words + t);
    fifth[1] = planar::load_ro(words + 4 + t);
  }
  [[nodiscard]] SITSRT_LANE planar::Side<DType::kQ5_K> unit(int c) const {
    const std::uint32_t f = fifth[c % 2];  // u0 is even
    return {header, uint4{f, f, f, f}};
  }
};

template <DType F>
SITSRT_LANE void step_codes_lo(const std::uint32_t (&w)[kQuarterLoads<F>], std::uint32_t& c01, std::uint32_t& c89) {
  static_assert(kWeightSplit<F>, "F16's lo parts");
  std::uint32_t hi = 0;
  f16_pair_split(w[0], hi, c01);
  f16_pair_split(w[1], hi, c89);
}

// Accumulators of kTiles m16 tiles by kNTiles n8 tiles set to zero.
template <int kTiles, int kNTiles>
SITSRT_LANE void zero(float (&v)[kTiles][kNTiles][4]) {
  SITSRT_UNROLL
  for (int mt = 0; mt < kTiles; ++mt) {
    SITSRT_UNROLL
    for (int nt = 0; nt < kNTiles; ++nt) {
      SITSRT_UNROLL
      for (int i = 0; i < 4; ++i) v[mt][nt][i] = 0.0f;
    }
  }
}

inline constexpr std::uint32_t kOnesBf16x2 = 0x3f803f80u;  // the all-ones A's registers

// Where c[i] of lane `lane` sits in the 16 x 8 C tile: its row (weight row of the m16 tile) and
// column (row of x in the n8 tile).
SITSRT_LANE int c_row(int lane, int i) {
  return lane / 4 + 8 * (i / 2);
}
SITSRT_LANE int c_column(int lane, int i) {
  return 2 * (lane % 4) + i % 2;
}

#if defined(__CUDACC__)
// c += A B over one k16 step (float accumulation).
__device__ inline void mma_bf16(const FragA& a, const FragB& b, float (&c)[4]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}
#elif defined(SITSRT_CUDA_EMULATION)
// The tests' CPU emulator (tests/cuda_emulator): the warp's fragments exchanged, as the mma does.
inline void mma_bf16(const FragA& a, const FragB& b, float (&c)[4]) {
  cuda_emulator::mma_bf16_m16n8k16(a.r, b.r, c);
}
#endif

#if defined(__CUDACC__) || defined(SITSRT_CUDA_EMULATION)
// One FP8 / INT4 g128 scale block of kTiles m16 tiles (codes w, side data) by kNTiles n8 tiles of
// x, added to acc: x's fragments of step s and n8 tile nt from x_fragments(s, nt, hi, lo); the hi
// and lo parts in separate sums (two chains of dependent mmas instead of one twice as long),
// added before the block's scale.
template <DType F, int kTiles, int kNTiles, typename XFragments>
SITSRT_LANE void add_scale_block(const uint4 (&w)[kTiles][2], const BlockSide (&side)[kTiles][2],
                                 XFragments&& x_fragments, float (&acc)[kTiles][kNTiles][4]) {
  float sum_hi[kTiles][kNTiles][4], sum_lo[kTiles][kNTiles][4];
  zero(sum_hi);
  zero(sum_lo);
  SITSRT_UNROLL
  for (int step = 0; step < kSteps<F>; ++step) {
    FragB hi[kNTiles], lo[kNTiles];
    SITSRT_UNROLL
    for (int nt = 0; nt < kNTiles; ++nt) x_fragments(step, nt, hi[nt], lo[nt]);
    SITSRT_UNROLL
    for (int mt = 0; mt < kTiles; ++mt) {
      const FragA frag = a_fragment<F>(w[mt][0], w[mt][1], side[mt][0], side[mt][1], step);
      SITSRT_UNROLL
      for (int nt = 0; nt < kNTiles; ++nt) {
        mma_bf16(frag, hi[nt], sum_hi[mt][nt]);
        mma_bf16(frag, lo[nt], sum_lo[mt][nt]);
      }
    }
  }
  SITSRT_UNROLL
  for (int mt = 0; mt < kTiles; ++mt) {
    SITSRT_UNROLL
    for (int nt = 0; nt < kNTiles; ++nt) {
      SITSRT_UNROLL
      for (int i = 0; i < 4; ++i) {
        acc[mt][nt][i] = fmaf(side[mt][i / 2].scale, sum_hi[mt][nt][i] + sum_lo[mt][nt][i], acc[mt][nt][i]);
      }
    }
  }
}

// The code words and side data of one chunk of the quarter scheme for kTiles m16 tiles (codes and
// sides: each tile's rows g and g + 8, as arrays [kTiles][2] of pointers), every load in flight
// before the chunk's steps; units past `units` (a partial last chunk: not summed) load the last.
template <DType F, int kTiles, typename Rows>
SITSRT_LANE void load_quarter_chunk(const Rows& codes, const Rows& sides, std::int64_t u0, std::int64_t units, int t,
                                    std::uint32_t (&w)[kChunkUnits<F>][kTiles][2][kQuarterLoads<F>],
                                    ChunkSide<F> (&side)[kTiles][2]) {
  SITSRT_UNROLL
  for (int mt = 0; mt < kTiles; ++mt) {
    SITSRT_UNROLL
    for (int h = 0; h < 2; ++h) {
      SITSRT_UNROLL
      for (int c = 0; c < kChunkUnits<F>; ++c) {
        load_quarter<F>(codes[mt][h], u0 + c < units ? u0 + c : units - 1, t, w[c][mt][h]);
      }
      side[mt][h].load(sides[mt][h], u0, units, t);
    }
  }
}

// One chunk of the quarter scheme (units u0 .. u0 + kChunkUnits - 1, those below `units`) of
// kTiles m16 tiles (code words w[c][mt][h], side data) by kNTiles n8 tiles of x, added to acc: x's
// fragments of unit u, step s and n8 tile nt from x_fragments(u, s, nt, hi, lo); each step's sum
// scaled, and for the formats with a min its offset times the step's x sums (an all-ones mma).
template <DType F, int kTiles, int kNTiles, typename XFragments>
SITSRT_LANE void add_quarter_chunk(const std::uint32_t (&w)[kChunkUnits<F>][kTiles][2][kQuarterLoads<F>],
                                   const ChunkSide<F> (&side)[kTiles][2], std::int64_t u0, std::int64_t units, int t,
                                   XFragments&& x_fragments, float (&acc)[kTiles][kNTiles][4]) {
  const FragA ones{{kOnesBf16x2, kOnesBf16x2, kOnesBf16x2, kOnesBf16x2}};
  SITSRT_UNROLL
  for (int c = 0; c < kChunkUnits<F>; ++c) {
    const std::int64_t u = u0 + c;
    if (u >= units) break;
    SITSRT_UNROLL
    for (int step = 0; step < kQuarterSteps<F>; ++step) {
      FragB hi[kNTiles], lo[kNTiles];
      SITSRT_UNROLL
      for (int nt = 0; nt < kNTiles; ++nt) x_fragments(u, step, nt, hi[nt], lo[nt]);
      float x_sums[kNTiles][4];  // every weight row's: the sums of x over the step
      if constexpr (kQuarterOffset<F>) {
        SITSRT_UNROLL
        for (int nt = 0; nt < kNTiles; ++nt) {
          SITSRT_UNROLL
          for (int i = 0; i < 4; ++i) x_sums[nt][i] = 0.0f;
          mma_bf16(ones, hi[nt], x_sums[nt]);
          mma_bf16(ones, lo[nt], x_sums[nt]);
        }
      }
      SITSRT_UNROLL
      for (int mt = 0; mt < kTiles; ++mt) {
        const planar::Side<F> s0 = side[mt][0].unit(c), s8 = side[mt][1].unit(c);
        FragA frag;
        step_codes<F>(w[c][mt][0], s0, u, t, step, frag.r[0], frag.r[2]);
        step_codes<F>(w[c][mt][1], s8, u, t, step, frag.r[1], frag.r[3]);
        const StepScale scale[2] = {step_scale<F>(s0, u, step), step_scale<F>(s8, u, step)};
        FragA frag_lo{};  // F16: the weights' lo parts too
        if constexpr (kWeightSplit<F>) {
          step_codes_lo<F>(w[c][mt][0], frag_lo.r[0], frag_lo.r[2]);
          step_codes_lo<F>(w[c][mt][1], frag_lo.r[1], frag_lo.r[3]);
        }
        SITSRT_UNROLL
        for (int nt = 0; nt < kNTiles; ++nt) {
          float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          mma_bf16(frag, hi[nt], sum);
          mma_bf16(frag, lo[nt], sum);
          if constexpr (kWeightSplit<F>) {
            const FragB finite_hi{{finite_bf16x2(hi[nt].r[0]), finite_bf16x2(hi[nt].r[1])}};
            mma_bf16(frag_lo, finite_hi, sum);
            mma_bf16(frag_lo, lo[nt], sum);
          }
          SITSRT_UNROLL
          for (int i = 0; i < 4; ++i) {
            acc[mt][nt][i] = fmaf(scale[i / 2].scale, sum[i], acc[mt][nt][i]);
            if constexpr (kQuarterOffset<F>) acc[mt][nt][i] = fmaf(scale[i / 2].offset, x_sums[nt][i], acc[mt][nt][i]);
          }
        }
      }
    }
  }
}
#endif

}  // namespace sitsrt::cuda::mma
