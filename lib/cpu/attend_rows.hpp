// Internal, for vec_avx2.cpp / vec_avx512.cpp only: how an attend chunk walks its K and V rows
// (row addresses resolved from the block table by attention.cpp; see AttendSide).
// Everything here has internal linkage (anonymous namespace), so each ISA file compiles its own
// copy under its own -m flags and nothing is shared at link time (see the ODR note in
// matmul_kernels.hpp).
#pragma once

#include "cpu/vec_kernels.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {
namespace {

// A kv head's rows are n_kv_heads * head_dim elements apart (2 KiB for 8 x 128 f16), and a
// paged cache's blocks anywhere in its pool, so consecutive positions often sit on different
// 4 KiB pages, where hardware prefetchers stop: decode at long context waited on every row.
// Key rows kPrefetchRows ahead are requested, across block edges (the addresses are known).
constexpr std::int64_t kPrefetchRows = 8;
// And kPrefetchRowsL2 ahead towards L2 first: with 16 decode streams the key prefetches into L1
// stalled on the L1 miss buffers (half of scores_block's samples sat on one prefetcht0), and a
// line already in L2 frees its buffer sooner. Attention per 16-stream step: ~7% less (0.35B Q8_0,
// f16 KV, contexts 128-256; 32 rows measured better than 64).
constexpr std::int64_t kPrefetchRowsL2 = 32;

// Type codes as KvType (attention/attention.hpp), which this baseline-free header cannot include.
enum RowKind : int { kRowF32 = 0, kRowF16 = 1, kRowInt8 = 2, kRowInt4 = 3 };

// Where one head's bytes lie in a row of `width` values: values, then (int8/int4) its scales.
struct HeadBytes {
  std::size_t values, value_bytes, scales, scale_bytes;
};
template <int Kind>
inline HeadBytes head_bytes(std::int64_t e0, std::int64_t d, std::int64_t width) {
  const auto z = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  if constexpr (Kind == kRowF32) return {z(4 * e0), z(4 * d), 0, 0};
  if constexpr (Kind == kRowF16) return {z(2 * e0), z(2 * d), 0, 0};
  if constexpr (Kind == kRowInt8) return {z(e0), z(d), z(width + 2 * (e0 / d)), 2};
  return {z(e0 / 2), z((d + 1) / 2), z(width / 2 + e0 / 32), z((e0 + d - 1) / 32 - e0 / 32 + 1)};
}

inline float f16_at(const std::byte* p) {
  std::uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// What each row type needs once per row (its value address; int8: the head's scale; int4: the
// row, its scales and the head's first element), shared by the ISA files, whose Row types add
// the vector `load` of 8 or 16 values.
struct RowBaseF32 {
  static constexpr int kKind = kRowF32;
  struct State {
    const float* p;
  };
  static State at(const std::byte* row, const AttendSide& s, std::int64_t) {
    return {reinterpret_cast<const float*>(row) + s.e0};
  }
};
struct RowBaseF16 {
  static constexpr int kKind = kRowF16;
  struct State {
    const std::byte* p;
  };
  static State at(const std::byte* row, const AttendSide& s, std::int64_t) { return {row + 2 * s.e0}; }
};
// Loads compute float(q) * scale: the single rounding of dequantize_span, so every level sees
// the same key and value floats.
struct RowBaseInt8 {
  static constexpr int kKind = kRowInt8;
  struct State {
    const std::byte* p;
    float scale;
  };
  static State at(const std::byte* row, const AttendSide& s, std::int64_t d) {
    return {row + s.e0, f16_at(row + s.width + 2 * (s.e0 / d))};
  }
};
// Element e = e0 + c (even: attention refuses int4 with an odd head_dim) at byte e / 2, low
// nibble first, an index into kInt4Levels; its scale is group e / 32's code byte. A step of 8 or
// 16 lanes spans at most two groups (two only when the head does not start on a multiple of the
// step). Levels and scale codes as core/kv_int4.hpp (not included: its inline functions are
// shared with baseline files).
inline constexpr std::int8_t kInt4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                1,    13,   25,  38,  53,  69,  89,  113};
// A scale code is an E5M2 float (an f16's high byte) times 2^-4: exact through F16C.
inline float int4_scale(std::byte code) {
  return _cvtsh_ss(static_cast<unsigned short>(static_cast<unsigned>(code) << 8)) * 0.0625f;
}
struct RowBaseInt4 {
  static constexpr int kKind = kRowInt4;
  struct State {
    const std::byte* row;
    const std::byte* scales;
    std::int64_t e0;
  };
  static State at(const std::byte* row, const AttendSide& s, std::int64_t) { return {row, row + s.width / 2, s.e0}; }
  // Scales of elements e .. e + left - 1: lanes below `edge` take `lo`, the others `hi`.
  struct Scales {
    float lo, hi;
    std::int64_t edge;
  };
  static Scales scales(const State& st, std::int64_t e, std::int64_t left) {
    const std::int64_t j0 = e / 32, j1 = (e + left - 1) / 32;
    const float lo = int4_scale(st.scales[j0]);
    return {lo, j1 == j0 ? lo : int4_scale(st.scales[j1]), j1 == j0 ? left : (j0 + 1) * 32 - e};
  }
};

// The four rows of the block at position p (rows has pad4(n) entries; a last partial block
// repeats row n-1: its extra scores are ignored and its value weights are 0).
struct Block4 {
  const std::byte* r[4];
};
inline Block4 block_rows(const AttendSide& s, std::int64_t p) {
  return {{s.rows[p], s.rows[p + 1], s.rows[p + 2], s.rows[p + 3]}};
}

// One cache line requested with hint Hint (_MM_HINT_T0 = 3 or _MM_HINT_T1 = 2, the locality
// levels). An asm statement, not __builtin_prefetch / _mm_prefetch: GCC 12 at -O2 deletes a
// loop whose body is only builtin prefetches (a side-effect-free loop is assumed to terminate
// and is dead), and prefetch_block's loops were compiled to nothing.
template <int Hint>
inline void prefetch_line(const char* p) {
  static_assert(Hint == 3 || Hint == 2, "T0 or T1");
  if constexpr (Hint == 3) {
    asm volatile("prefetcht0 %0" : : "m"(*p));
  } else {
    asm volatile("prefetcht1 %0" : : "m"(*p));
  }
}

// Requests this head's bytes of rows [p, p + 4) (those below n) with prefetch hint Hint.
template <int Hint, int Kind>
inline void prefetch_block(const AttendSide& s, std::int64_t p, std::int64_t n, std::int64_t d) {
  const HeadBytes hb = head_bytes<Kind>(s.e0, d, s.width);
  const std::int64_t end = std::min(p + 4, n);
  for (std::int64_t i = p; i < end; ++i) {
    const auto* row = reinterpret_cast<const char*>(s.rows[i]);
    for (std::size_t b = 0; b < hb.value_bytes; b += 64) prefetch_line<Hint & 3>(row + hb.values + b);
    if (hb.scale_bytes > 0) prefetch_line<Hint & 3>(row + hb.scales);
  }
}

}  // namespace
}  // namespace sitsrt::cpu::detail
