// The lane logic of the tensor-core decode matmul (planar_matmul.cu's mma kernel, 5-16 rows of x
// over FP8 E4M3 and INT4 g128 planar weights): one warp computes 16 weight rows x 8 rows of x per
// mma.sync.m16n8k16 (BF16 operands, float accumulation).
//
// Operands, exact where the CUDA-core kernels are exact:
//   - weights as their integer-valued codes, which BF16 holds exactly (an E4M3 value; q - zero of
//     INT4, -15..15), the block's scale applied to the block's float sum afterwards: a k16 step
//     never mixes scale blocks;
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
// Device code under nvcc; plain C++ otherwise with exact host stand-ins (BF16 rounding to nearest
// even, the E4M3 table), so tests/unit/cuda_planar_lanes_test.cpp runs these fragments through an
// emulated mma on the CPU.
#pragma once

#include "cuda_backend/kernels/planar_units.hpp"

namespace sitsrt::cuda::mma {

#if !defined(__CUDACC__)
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

// The B fragments (hi, lo) of step s for row `row` of the tile's x (zeros past xt.rows: the
// tile's idle columns read nothing) and the lane's unit u, in a_fragment's element order.
template <DType F>
SITSRT_LANE void b_fragments(const planar::XTile& xt, int row, std::int64_t u, int step, FragB& hi, FragB& lo) {
  float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (row < xt.rows) {
    const float* xr = xt.x + row * xt.ldx;
    if constexpr (F == DType::kFP8_E4M3) {
      const float4 v = planar::load_x4(xr + 16 * u + 4 * step, xt.vector);
      x[0] = v.x;
      x[1] = v.y;
      x[2] = v.z;
      x[3] = v.w;
    } else {
      const std::int64_t e = 32 * u + 4 * (step / 2) + 2 * (step % 2);
      load_x2(xr + e, xt.vector, x[0], x[1]);
      load_x2(xr + e + 16, xt.vector, x[2], x[3]);
    }
  }
  split_x2(x[0], x[1], hi.r[0], lo.r[0]);
  split_x2(x[2], x[3], hi.r[1], lo.r[1]);
}

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
#endif

}  // namespace sitsrt::cuda::mma
