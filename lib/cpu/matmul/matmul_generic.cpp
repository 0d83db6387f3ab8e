// Portable matmul kernels: plain C++ written so the compiler can vectorise it for the baseline
// target (fixed-width lane arrays, no branches in the inner loops). Also the reference the
// ISA files are tested against through the same matmul_test cases.
#include "core/kquant_blocks.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/half_generic.hpp"
#include "cpu/matmul/matmul_kernels.hpp"

#include <array>
#include <bit>
#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

inline std::uint16_t load_u16(const std::byte* p) noexcept {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

inline std::uint32_t load_u32(const std::uint8_t* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- Per-format decoders: one "chunk" of kChunk elements into floats. ----
// Quantized chunks are one block; float formats use 32-element chunks plus a scalar tail.
// Each decoder first copies or unpacks the raw bits into a small local array and then converts
// in a separate plain loop: that shape is what the vectoriser recognises (checked with
// -fopt-info-vec), where element-wise loads through memcpy or interleaved stores are not.

constexpr int kChunk = 32;

struct DecodeF32 {
  static constexpr int kBytes = 4;
  static void chunk(const std::byte* p, float* out) noexcept { std::memcpy(out, p, kChunk * 4); }
  static float element(const std::byte* p, std::int64_t i) noexcept {
    float v;
    std::memcpy(&v, p + i * 4, 4);
    return v;
  }
};
struct DecodeF16 {
  static constexpr int kBytes = 2;
  static void chunk(const std::byte* p, float* out) noexcept {
    std::uint16_t h[kChunk];
    std::memcpy(h, p, sizeof h);
    for (int j = 0; j < kChunk; ++j) out[j] = half_to_float_generic(h[j]);
  }
  static float element(const std::byte* p, std::int64_t i) noexcept {
    return half_to_float_generic(load_u16(p + i * 2));
  }
};
struct DecodeBF16 {
  static constexpr int kBytes = 2;
  static void chunk(const std::byte* p, float* out) noexcept {
    std::uint16_t h[kChunk];
    std::memcpy(h, p, sizeof h);
    for (int j = 0; j < kChunk; ++j) out[j] = std::bit_cast<float>(static_cast<std::uint32_t>(h[j]) << 16);
  }
  static float element(const std::byte* p, std::int64_t i) noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(load_u16(p + i * 2)) << 16);
  }
};

// Integer levels of a 4-bit block: low nibbles are elements 0..15, high nibbles 16..31.
inline void unpack_nibbles(const std::uint8_t* qs, std::int32_t* q) noexcept {
  for (int j = 0; j < kQBlock / 2; ++j) q[j] = qs[j] & 0x0F;
  for (int j = 0; j < kQBlock / 2; ++j) q[j + 16] = qs[j] >> 4;
}
// Adds the 5th bit (bit j of qh -> 16 on element j). Tested against a constant bit table
// with a mask select: per-lane variable shifts do not vectorise without AVX2.
inline void add_fifth_bit(std::uint32_t qh, std::int32_t* q) noexcept {
  constexpr auto kBits = [] {
    std::array<std::uint32_t, kQBlock> bits{};
    for (int j = 0; j < kQBlock; ++j) bits[static_cast<std::size_t>(j)] = 1u << j;
    return bits;
  }();
  for (int j = 0; j < kQBlock; ++j) {
    q[j] |=
        static_cast<std::int32_t>(0u - static_cast<std::uint32_t>((qh & kBits[static_cast<std::size_t>(j)]) != 0)) & 16;
  }
}
// out = d * (q - offset) [+ m]: multiply and add rounded separately, as dequantize_row does.
template <bool kMin>
inline void scale_levels(const std::int32_t* q, int offset, float d, float m, float* out) noexcept {
  for (int j = 0; j < kQBlock; ++j) {
    const float v = d * static_cast<float>(q[j] - offset);
    out[j] = kMin ? v + m : v;
  }
}

struct DecodeQ8_0 {
  using Block = BlockQ8_0;
  static constexpr int kSize = kQBlock;
  static void block(const Block& b, float* out) noexcept {
    const float d = half_to_float_generic(b.d);
    for (int j = 0; j < kQBlock; ++j) out[j] = d * static_cast<float>(b.qs[j]);
  }
};
template <typename B, bool kMin, bool kFifthBit>
struct DecodeQ4Q5 {
  using Block = B;
  static constexpr int kSize = kQBlock;
  static void block(const Block& b, float* out) noexcept {
    std::int32_t q[kQBlock];
    unpack_nibbles(b.qs, q);
    float m = 0.0f;
    if constexpr (kFifthBit) add_fifth_bit(load_u32(b.qh), q);
    if constexpr (kMin) m = half_to_float_generic(b.m);
    const int offset = kMin ? 0 : kFifthBit ? 16 : 8;
    scale_levels<kMin>(q, offset, half_to_float_generic(b.d), m, out);
  }
};
// FP8 E4M3 codes through a 256-entry table built from the reference decoder (exact, NaN codes
// included); each element d * table[code] as dequantize_row rounds it.
const std::array<float, 256> kFp8Table = [] {
  std::array<float, 256> table{};
  for (int c = 0; c < 256; ++c) table[static_cast<std::size_t>(c)] = fp8_e4m3_to_fp32(static_cast<std::uint8_t>(c));
  return table;
}();
struct DecodeFP8_E4M3 {
  using Block = BlockFP8_E4M3;
  static constexpr int kSize = kFp8Block;
  static void block(const Block& b, float* out) noexcept {
    for (int j = 0; j < kFp8Block; ++j) out[j] = b.d * kFp8Table[b.qs[j]];
  }
};
// INT4 g128: four Q4_0-shaped 32-element sub-blocks sharing one scale and zero point.
struct DecodeQ4_G128 {
  using Block = BlockQ4_G128;
  static constexpr int kSize = kGroup128;
  static void block(const Block& b, float* out) noexcept {
    const float d = half_to_float_generic(b.d);
    const int zero = b.zero & 0x0F;
    for (int s = 0; s < kGroup128 / kQBlock; ++s) {
      std::int32_t q[kQBlock];
      unpack_nibbles(b.qs + 16 * s, q);
      scale_levels<false>(q, zero, d, 0.0f, out + kQBlock * s);
    }
  }
};
using DecodeQ4_0 = DecodeQ4Q5<BlockQ4_0, false, false>;
using DecodeQ4_1 = DecodeQ4Q5<BlockQ4_1, true, false>;
using DecodeQ5_0 = DecodeQ4Q5<BlockQ5_0, false, true>;
using DecodeQ5_1 = DecodeQ4Q5<BlockQ5_1, true, true>;

// ---- 4-lane float vectors for the hot loops. ----
// The auto-vectoriser will not reassociate a float sum by itself, so lane-parallel sums written
// as arrays stay scalar (checked with -fopt-info-vec). GCC/Clang vector extensions give 128-bit
// SSE / NEON code on any target; other compilers get the same lane arithmetic in plain arrays,
// so every build associates the sums identically.
#if defined(__GNUC__)
using Vec4 = float __attribute__((vector_size(16)));
inline Vec4 load4(const float* p) noexcept {
  Vec4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline Vec4 zero4() noexcept {
  return Vec4{0.0f, 0.0f, 0.0f, 0.0f};
}
#else
struct Vec4 {
  float v[4];
  float operator[](int i) const noexcept { return v[i]; }
  friend Vec4 operator+(Vec4 a, Vec4 b) noexcept {
    return {{a.v[0] + b.v[0], a.v[1] + b.v[1], a.v[2] + b.v[2], a.v[3] + b.v[3]}};
  }
  friend Vec4 operator*(Vec4 a, Vec4 b) noexcept {
    return {{a.v[0] * b.v[0], a.v[1] * b.v[1], a.v[2] * b.v[2], a.v[3] * b.v[3]}};
  }
  Vec4& operator+=(Vec4 b) noexcept { return *this = *this + b; }
};
inline Vec4 load4(const float* p) noexcept {
  Vec4 v;
  std::memcpy(v.v, p, sizeof v.v);
  return v;
}
inline Vec4 zero4() noexcept {
  return Vec4{{0.0f, 0.0f, 0.0f, 0.0f}};
}
#endif
inline float sum4(Vec4 v) noexcept {
  return (v[0] + v[2]) + (v[1] + v[3]);
}

// ---- Decode (m == 1): y[r] = W[r, :] . x, dequantizing one chunk into a stack buffer. ----

// acc0/acc1 += a[0, 32) * b[0, 32): two 4-lane accumulators (8 partial sums).
inline void dot_chunk(const float* a, const float* b, Vec4& acc0, Vec4& acc1) noexcept {
  for (int j = 0; j < kChunk; j += 8) {
    acc0 += load4(a + j) * load4(b + j);
    acc1 += load4(a + j + 4) * load4(b + j + 4);
  }
}

// Float formats (F32/F16/BF16): any cols.
template <typename D>
void matvec_float_generic(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                          std::int64_t n_rows) {
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const std::byte* row = w + static_cast<std::size_t>(r) * row_stride;
    Vec4 acc0 = zero4(), acc1 = zero4();
    float buf[kChunk];
    std::int64_t c = 0;
    for (; c + kChunk <= cols; c += kChunk) {
      D::chunk(row + c * D::kBytes, buf);
      dot_chunk(buf, x + c, acc0, acc1);
    }
    float tail = 0.0f;
    for (; c < cols; ++c) tail += D::element(row, c) * x[c];
    y[r] = sum4(acc0 + acc1) + tail;
  }
}

template <typename D>
void matvec_blocks_generic(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                           std::int64_t n_rows) {
  const std::int64_t nb = cols / D::kSize;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename D::Block*>(w + static_cast<std::size_t>(r) * row_stride);
    Vec4 acc0 = zero4(), acc1 = zero4();
    float buf[D::kSize];
    for (std::int64_t b = 0; b < nb; ++b) {
      D::block(blocks[b], buf);
      for (int c = 0; c < D::kSize; c += kChunk) dot_chunk(buf + c, x + b * D::kSize + c, acc0, acc1);
    }
    y[r] = sum4(acc0 + acc1);
  }
}

// K-quants and IQ4_NL: each block is decoded by the reference decoder (kquant_blocks.cpp) into a
// stack buffer, then dotted as above. The reference decoders are scalar (slow: this is the
// portable fallback; the AVX2 and AVX-512 tables use matmul_kquant_avx2.cpp).
template <DType kType>
void matvec_decoded_generic(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                            std::int64_t n_rows) {
  using F = KquantFormat<kType>;
  const std::int64_t nb = cols / F::kElements;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename F::Block*>(w + static_cast<std::size_t>(r) * row_stride);
    Vec4 acc0 = zero4(), acc1 = zero4();
    float buf[F::kElements];
    for (std::int64_t b = 0; b < nb; ++b) {
      F::decode(blocks[b], buf);
      for (int c = 0; c < F::kElements; c += kChunk) dot_chunk(buf + c, x + b * F::kElements + c, acc0, acc1);
    }
    y[r] = sum4(acc0 + acc1);
  }
}

// ---- Dequantize n elements (GEMM tiles, get_rows). ----

template <typename D>
void dequant_float_generic(const std::byte* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + kChunk <= n; i += kChunk) D::chunk(src + i * D::kBytes, dst + i);
  for (; i < n; ++i) dst[i] = D::element(src, i);
}

template <DType kType>
void dequant_decoded_generic(const std::byte* src, float* dst, std::int64_t n) {
  using F = KquantFormat<kType>;
  const auto* blocks = reinterpret_cast<const typename F::Block*>(src);
  for (std::int64_t b = 0; b < n / F::kElements; ++b) F::decode(blocks[b], dst + b * F::kElements);
}

template <typename D>
void dequant_blocks_generic(const std::byte* src, float* dst, std::int64_t n) {
  const auto* blocks = reinterpret_cast<const typename D::Block*>(src);
  for (std::int64_t b = 0; b < n / D::kSize; ++b) D::block(blocks[b], dst + b * D::kSize);
}

// ---- Prefill tile: MR x rows times NR weight rows, 4-lane partial sums per pair. ----

constexpr int kMr = 2;
constexpr int kNr = 4;

// y[i, j] (+)= x[i, :k] . w[j, :k] for i < MR, j < NR (w rows zero-padded to a multiple of 16).
template <int MR, int NR>
void gemm_micro_generic(const float* x, std::int64_t ldx, const float* w, std::int64_t ldw, std::int64_t k, float* y,
                        std::int64_t ldy, bool accumulate) {
  Vec4 acc[MR][NR];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) acc[i][j] = zero4();
  }
  std::int64_t c = 0;
  for (; c + 4 <= k; c += 4) {
    Vec4 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = load4(w + j * ldw + c);
    for (int i = 0; i < MR; ++i) {
      const Vec4 xv = load4(x + i * ldx + c);
      for (int j = 0; j < NR; ++j) acc[i][j] += xv * wv[j];
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float s = sum4(acc[i][j]);
      for (std::int64_t t = c; t < k; ++t) s += x[i * ldx + t] * w[j * ldw + t];
      float& out = y[i * ldy + j];
      out = accumulate ? out + s : s;
    }
  }
}

template <int MR>
void gemm_row_group_generic(const float* x, std::int64_t ldx, const float* w, std::int64_t ldw, std::int64_t n,
                            std::int64_t k, float* y, std::int64_t ldy, bool accumulate) {
  std::int64_t j = 0;
  for (; j + kNr <= n; j += kNr) gemm_micro_generic<MR, kNr>(x, ldx, w + j * ldw, ldw, k, y + j, ldy, accumulate);
  for (; j < n; ++j) gemm_micro_generic<MR, 1>(x, ldx, w + j * ldw, ldw, k, y + j, ldy, accumulate);
}

void gemm_tile_generic(const float* x, std::int64_t ldx, std::int64_t m, const float* w, std::int64_t ldw,
                       std::int64_t n, std::int64_t k, float* y, std::int64_t ldy, bool accumulate, float* /*work*/) {
  std::int64_t i = 0;
  for (; i + kMr <= m; i += kMr)
    gemm_row_group_generic<kMr>(x + i * ldx, ldx, w, ldw, n, k, y + i * ldy, ldy, accumulate);
  for (; i < m; ++i) gemm_row_group_generic<1>(x + i * ldx, ldx, w, ldw, n, k, y + i * ldy, ldy, accumulate);
}

// Named instances (the table below lists them by format).
constexpr MatvecFn matvec_f32_generic = matvec_float_generic<DecodeF32>;
constexpr MatvecFn matvec_f16_generic = matvec_float_generic<DecodeF16>;
constexpr MatvecFn matvec_bf16_generic = matvec_float_generic<DecodeBF16>;
constexpr MatvecFn matvec_q8_0_generic = matvec_blocks_generic<DecodeQ8_0>;
constexpr MatvecFn matvec_q4_0_generic = matvec_blocks_generic<DecodeQ4_0>;
constexpr MatvecFn matvec_q4_1_generic = matvec_blocks_generic<DecodeQ4_1>;
constexpr MatvecFn matvec_q5_0_generic = matvec_blocks_generic<DecodeQ5_0>;
constexpr MatvecFn matvec_q5_1_generic = matvec_blocks_generic<DecodeQ5_1>;
constexpr MatvecFn matvec_fp8_generic = matvec_blocks_generic<DecodeFP8_E4M3>;
constexpr MatvecFn matvec_q4_g128_generic = matvec_blocks_generic<DecodeQ4_G128>;

constexpr MatmulKernels kGenericKernels = {
    {
        {WeightLayout::kF32, matvec_f32_generic, dequant_float_generic<DecodeF32>},
        {WeightLayout::kF16, matvec_f16_generic, dequant_float_generic<DecodeF16>},
        {WeightLayout::kBF16, matvec_bf16_generic, dequant_float_generic<DecodeBF16>},
        {WeightLayout::kQ8_0, matvec_q8_0_generic, dequant_blocks_generic<DecodeQ8_0>},
        {WeightLayout::kQ4_0, matvec_q4_0_generic, dequant_blocks_generic<DecodeQ4_0>},
        {WeightLayout::kQ4_1, matvec_q4_1_generic, dequant_blocks_generic<DecodeQ4_1>},
        {WeightLayout::kQ5_0, matvec_q5_0_generic, dequant_blocks_generic<DecodeQ5_0>},
        {WeightLayout::kQ5_1, matvec_q5_1_generic, dequant_blocks_generic<DecodeQ5_1>},
        {WeightLayout::kFP8_E4M3, matvec_fp8_generic, dequant_blocks_generic<DecodeFP8_E4M3>},
        {WeightLayout::kQ4_G128, matvec_q4_g128_generic, dequant_blocks_generic<DecodeQ4_G128>},
        // K-quant section
        {WeightLayout::kQ2_K, matvec_decoded_generic<DType::kQ2_K>, dequant_decoded_generic<DType::kQ2_K>},
        {WeightLayout::kQ3_K, matvec_decoded_generic<DType::kQ3_K>, dequant_decoded_generic<DType::kQ3_K>},
        {WeightLayout::kQ4_K, matvec_decoded_generic<DType::kQ4_K>, dequant_decoded_generic<DType::kQ4_K>},
        {WeightLayout::kQ5_K, matvec_decoded_generic<DType::kQ5_K>, dequant_decoded_generic<DType::kQ5_K>},
        {WeightLayout::kQ6_K, matvec_decoded_generic<DType::kQ6_K>, dequant_decoded_generic<DType::kQ6_K>},
        {WeightLayout::kQ8_K, matvec_decoded_generic<DType::kQ8_K>, dequant_decoded_generic<DType::kQ8_K>},
        {WeightLayout::kIQ4_NL, matvec_decoded_generic<DType::kIQ4_NL>, dequant_decoded_generic<DType::kIQ4_NL>},
        // repacked section
        {WeightLayout::kQ8_0R, matvec_q8_0r_portable, dequant_q8_0r_portable},
        {WeightLayout::kQ4_0R, matvec_q4_0r_portable, dequant_q4_0r_portable},
        {WeightLayout::kFP8_E4M3R, matvec_fp8r_portable, dequant_fp8r_portable},
        {WeightLayout::kQ4_KR, matvec_q4_kr_portable, dequant_q4_kr_portable},
        {WeightLayout::kQ8_0P, nullptr, nullptr},  // tiled: int8 kernels only (matmul.cpp checks)
    },
    gemm_tile_generic,
    32,
};
static_assert(formats_in_layout_order(kGenericKernels.formats));

}  // namespace

const MatmulKernels& matmul_kernels_generic() noexcept {
  return kGenericKernels;
}

}  // namespace sitsrt::cpu::detail
