// FP8 E4M3 decode from the repacked FP8R layout (cpu/repacked_blocks.hpp) with AVX512-FP16.
// Reached only where the CPU has AVX512_FP16 and AVX512_VBMI (matmul_avx512.cpp's FP8R entry checks).
//
// Why fp16: FP8R codes become fp16 values exactly in two integer operations per 32 (below), and
// vfmaddph does 32 products per instruction at the fp32 FMA's rate, where the BF16 kernel on
// stored FP8 pays two vdpbf16ps at one per 2 cycles plus a subnormal check per block (measured in
// cache, 1 thread: about 5 vs 10 cycles per 64 weights). The FP8R layout gives every block's
// scale as an fp16 r_i relative to its group's fp32 s, so it is applied by a memory-broadcast FMA.
//
// Numerics, per call: x is scaled by 2^k so that max |x| * 2^k lies in [128, 256) and rounded
// to fp16 (relative error <= 2^-11; values under 2^-14 after scaling lose precision gradually).
// Per block, t = sum of two products per lane (w / 256 as fp16, exact), then a_i += t * r_i, in
// fp16, alternating two accumulators. |w / 256| <= 1.875 (NaN codes included), |x| <= 256 and
// |r_i| <= 1, so a lane of a block is at most 960 and a group's 16 blocks sum to at most 15360:
// fp16 (max 65504) never overflows. Each group's lanes are widened to fp32 and FMA'd with s;
// the row's sum times 256 * 2^-k is y. Rows whose x holds inf or NaN take the portable kernel,
// which propagates them as float arithmetic does. A row's result does not depend on the rows
// decoded with it.
#include "cpu/decode_prefetch.hpp"
#include "cpu/matmul/matmul_kernels.hpp"
#include "cpu/repacked_blocks.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <math.h>  // frexpf / ldexpf: plain C functions (see the ODR note in matmul_kernels.hpp)

#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

// Widest row the table entry prepares on the stack (64 KiB of fp16: no allocation, and no std::
// container instantiated with these flags); decode proper prepares in the context's scratch.
constexpr std::int64_t kStackCols = 32768;

// The order in which fp16_over256 leaves a 64-code block's codes: of each 8-code qword q, codes
// 0..3 in words 4q..4q+3 of the first vector, codes 4..7 in those of the second.
struct alignas(64) WordIndices {  // a plain array: no std:: template with these flags (matmul_kernels.hpp)
  std::uint16_t idx[32];
};
constexpr WordIndices code_order(int half) {
  WordIndices t{};
  for (int w = 0; w < 32; ++w) t.idx[w] = static_cast<std::uint16_t>(8 * (w / 4) + 4 * half + w % 4);
  return t;
}
constexpr WordIndices kFirstCodes = code_order(0), kSecondCodes = code_order(1);

// vpmultishiftqb control: word w = 4q + k of a vector takes code c = 4 half + k of qword q, its
// high byte the code itself (bits 8c..8c+7: s m0 e3 e2 e1 e0 m2 m1) and its low byte bits
// 8c-1..8c+6, which put m0 in bit 7.
struct alignas(64) ByteIndices {
  std::uint8_t idx[64];
};
constexpr ByteIndices shift_control(int half) {
  ByteIndices t{};
  for (int w = 0; w < 32; ++w) {
    const int c = 4 * half + w % 4;
    t.idx[2 * w] = static_cast<std::uint8_t>((8 * c + 63) % 64);
    t.idx[2 * w + 1] = static_cast<std::uint8_t>(8 * c);
  }
  return t;
}
constexpr ByteIndices kFirstShifts = shift_control(0), kSecondShifts = shift_control(1);

// x[0, n) * 2^k as fp16, per 64-element block in code order (kFirstCodes, then kSecondCodes).
void scaled_activations_fp16(const float* x, std::int64_t n, int k, std::uint16_t* out) {
  const __m512 scale = _mm512_set1_ps(static_cast<float>(k));
  const __m512i first = _mm512_load_si512(kFirstCodes.idx), second = _mm512_load_si512(kSecondCodes.idx);
  for (std::int64_t b = 0; b < n; b += kFp8Block, x += kFp8Block, out += kFp8Block) {
    __m256i h[4];
    for (int q = 0; q < 4; ++q) {
      h[q] = _mm512_cvtps_ph(_mm512_scalef_ps(_mm512_loadu_ps(x + 16 * q), scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1);  // elements 0..31
    const __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(h[2]), h[3], 1);  // elements 32..63
    _mm512_storeu_si512(out, _mm512_permutex2var_epi16(lo, first, hi));
    _mm512_storeu_si512(out + 32, _mm512_permutex2var_epi16(lo, second, hi));
  }
}

// 32 FP8R codes -> fp16 code / 256, exactly: vpmultishiftqb gathers each fp16's bytes (above),
// the mask clears bit 14 (m0's copy) and bits 6..0: s 0 e3 e2 e1 e0 m2 m1 m0 0000000 is the
// E4M3 value times 2^-8 (exponent bias 7 vs 15, subnormals included).
inline __m512h fp16_over256(__m512i control, __m512i codes) {
  return _mm512_castsi512_ph(_mm512_and_si512(_mm512_multishift_epi64_epi8(control, codes), _mm512_set1_epi16(static_cast<short>(0xBF80))));
}
// Adds block `codes`' t * r to a (x16: the block's 64 activations in code order).
inline __m512h block_fp16(const std::byte* codes, const std::uint16_t* x16, const _Float16* r, __m512h a) {
  const __m512i c = _mm512_loadu_si512(codes);
  __m512h t = _mm512_mul_ph(fp16_over256(_mm512_load_si512(kFirstShifts.idx), c), _mm512_castsi512_ph(_mm512_loadu_si512(x16)));
  t = _mm512_fmadd_ph(fp16_over256(_mm512_load_si512(kSecondShifts.idx), c), _mm512_castsi512_ph(_mm512_loadu_si512(x16 + 32)), t);
  return _mm512_fmadd_ph(t, _mm512_set1_ph(*r), a);
}
// acc[i] += sum over the groups of s * (group sum) for R rows of nb blocks.
template <int R>
inline void fp8r_rows(const std::byte* w, std::size_t row_stride, std::int64_t nb, const std::uint16_t* x16,
                      __m512 (&acc)[R]) {
  static const _Float16 kOne = 1.0f;  // a one-block group's implied r
  for (std::int64_t g = 0; g * kFp8RepackGroupBlocks < nb; ++g, x16 += kRepackGroupElements) {
    const RepackGroup group = fp8_repack_group(g, nb);
    const std::size_t codes_bytes = static_cast<std::size_t>(group.blocks) * kFp8Block;
    __m512h a0[R], a1[R];
    for (int i = 0; i < R; ++i) a0[i] = a1[i] = _mm512_setzero_ph();
    const std::byte* rel[R];
    for (int i = 0; i < R; ++i) {
      const std::byte* at = w + static_cast<std::size_t>(i) * row_stride + group.offset + codes_bytes + 4;
      rel[i] = group.blocks > 1 ? at : reinterpret_cast<const std::byte*>(&kOne);
    }
    int b = 0;
    for (; b + 2 <= group.blocks; b += 2) {
      const std::size_t pos = group.offset + static_cast<std::size_t>(b) * kFp8Block;
      // As the stored layout's offset of block b (68 bytes each), 3 lines per 2 blocks: the
      // prefetch runs slightly ahead of the codes and also covers each group's scales.
      const DecodePrefetch& policy = prefetch_policy();
      const std::size_t ahead = group.offset + static_cast<std::size_t>(b) * sizeof(BlockFP8_E4M3) + policy.row_ahead;
      const std::size_t wrap = ahead >= row_stride ? static_cast<std::size_t>(R - 1) * row_stride : 0;
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const std::byte* row = w + static_cast<std::size_t>(i) * row_stride;
        for (int line = 0; line < 3; ++line) prefetch_line(row + ahead + wrap + 64 * line, policy.to_l2);
        const auto* r = reinterpret_cast<const _Float16*>(rel[i]);
        a0[i] = block_fp16(row + pos, x16 + b * kFp8Block, r + b, a0[i]);
        a1[i] = block_fp16(row + pos + kFp8Block, x16 + (b + 1) * kFp8Block, r + b + 1, a1[i]);
      }
    }
    for (int i = 0; i < R; ++i) {
      const std::byte* row = w + static_cast<std::size_t>(i) * row_stride;
      if (b < group.blocks) {
        a0[i] = block_fp16(row + group.offset + static_cast<std::size_t>(b) * kFp8Block, x16 + b * kFp8Block,
                           reinterpret_cast<const _Float16*>(rel[i]) + b, a0[i]);
      }
      const __m512i sum = _mm512_castph_si512(_mm512_add_ph(a0[i], a1[i]));
      const __m512 wide = _mm512_add_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(sum)),
                                        _mm512_cvtph_ps(_mm512_extracti64x4_epi64(sum, 1)));
      float s;
      std::memcpy(&s, row + group.offset + codes_bytes, 4);
      acc[i] = _mm512_fmadd_ps(wide, _mm512_set1_ps(s), acc[i]);
    }
  }
}

template <int R>
inline void fp8r_pass(const std::byte* w, std::size_t row_stride, std::int64_t nb, const std::uint16_t* x16,
                      float scale_back, float* y) {
  __m512 acc[R];
  for (auto& a : acc) a = _mm512_setzero_ps();
  fp8r_rows<R>(w, row_stride, nb, x16, acc);
  for (int i = 0; i < R; ++i) y[i] = _mm512_reduce_add_ps(acc[i]) * scale_back;
}

}  // namespace

HalfRow prepare_half_row_avx512fp16(const float* x, std::int64_t cols, std::byte* buffer) noexcept {
  // max |x|, and whether x is finite (x * 0 is 0 for finite x, NaN for inf or NaN).
  __m512 m = _mm512_setzero_ps(), finite = _mm512_setzero_ps();
  for (std::int64_t c = 0; c < cols; c += 16) {
    const __m512 v = _mm512_loadu_ps(x + c);
    m = _mm512_max_ps(m, _mm512_abs_ps(v));
    finite = _mm512_add_ps(finite, _mm512_mul_ps(v, _mm512_setzero_ps()));
  }
  if (_mm512_cmp_ps_mask(finite, finite, _CMP_UNORD_Q) != 0) return {};
  int e = 0;
  frexpf(_mm512_reduce_max_ps(m), &e);  // max = f 2^e, f in [0.5, 1); 0 gives e = 0
  if (e < -64 || e > 64) return {};  // far outside any activation's range: keep float arithmetic
  auto* x16 = reinterpret_cast<std::uint16_t*>(buffer);
  scaled_activations_fp16(x, cols, 8 - e, x16);  // max |x| 2^k in [128, 256)
  return {x16, 8 - e, true};
}

void matvec_fp8r_half_avx512fp16(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x,
                                 const HalfRow& h, float* y, std::int64_t n_rows) {
  if (!h.valid) {  // inf / NaN in x: float arithmetic propagates them
    matvec_fp8r_portable(w, row_stride, cols, x, y, n_rows);
    return;
  }
  const float scale_back = ldexpf(1.0f, 8 - h.k);  // 256 * 2^-k
  const std::int64_t nb = cols / kFp8Block;
  // Eight rows per pass: the fp16 activations are loaded once for eight rows, and eight streams
  // keep more lines in flight (A/B at 2 threads: 5 of 5 runs faster than four rows, +1-4%).
  std::int64_t r = 0;
  for (; r + 8 <= n_rows; r += 8) fp8r_pass<8>(w + static_cast<std::size_t>(r) * row_stride, row_stride, nb, h.x16, scale_back, y + r);
  for (; r + 4 <= n_rows; r += 4) fp8r_pass<4>(w + static_cast<std::size_t>(r) * row_stride, row_stride, nb, h.x16, scale_back, y + r);
  for (; r < n_rows; ++r) fp8r_pass<1>(w + static_cast<std::size_t>(r) * row_stride, row_stride, nb, h.x16, scale_back, y + r);
}

void matvec_fp8r_avx512fp16(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                            std::int64_t n_rows) {
  if (cols > kStackCols) {
    matvec_fp8r_portable(w, row_stride, cols, x, y, n_rows);
    return;
  }
  alignas(64) std::byte buffer[kStackCols * 2];
  const HalfRow h = prepare_half_row_avx512fp16(x, cols, buffer);
  matvec_fp8r_half_avx512fp16(w, row_stride, cols, x, h, y, n_rows);
}

}  // namespace sitsrt::cpu::detail
