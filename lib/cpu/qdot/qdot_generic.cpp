// Portable integer-dot decode kernels and the activation quantizer every ISA shares (so the
// quantized row, and with it the integer dot products, are identical on every ISA level).
#include "core/kquant_blocks.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/half_generic.hpp"
#include "cpu/qdot/qdot_kernels.hpp"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace sitsrt::cpu::detail {

namespace {
std::int64_t padded_blocks(std::int64_t cols) {
  return (cols / kQBlock + 1) / 2 * 2;
}
// A section of one 4-byte value per block, rounded up to a cache line.
std::size_t small_section_bytes(std::size_t nbp) {
  return (nbp * 4 + 63) / 64 * 64;
}
constexpr std::int64_t kLaneUnitBlocks = 16;
constexpr std::size_t kLaneUnitBytes = kLaneUnitBlocks * kQBlock;
std::size_t lane_section_bytes(std::int64_t nbp) {
  return static_cast<std::size_t>((nbp + kLaneUnitBlocks - 1) / kLaneUnitBlocks) * kLaneUnitBytes;
}
}  // namespace

std::size_t quantized_row_bytes(std::int64_t cols) noexcept {
  if (cols <= 0 || cols % kQBlock != 0) return 0;
  const auto nbp = static_cast<std::size_t>(padded_blocks(cols));
  // qs, d8, neg_sum8, ds8 (32 B each; 64-byte aligned sections because nbp is even) + ds, d,
  // sum (4 B each, each section rounded up to 64 bytes) + lanes (512 B per 16 blocks).
  return nbp * (32 + 32 + 32 + 32) + 3 * small_section_bytes(nbp) + lane_section_bytes(padded_blocks(cols));
}

QuantizedRowLayout quantized_row_layout(std::int64_t cols, std::byte* buffer) noexcept {
  const std::int64_t nbp = padded_blocks(cols);
  const std::size_t small = small_section_bytes(static_cast<std::size_t>(nbp));
  std::byte* ds = buffer + nbp * 128;
  return {reinterpret_cast<std::int8_t*>(buffer),
          reinterpret_cast<float*>(buffer + nbp * 32),
          reinterpret_cast<std::int32_t*>(buffer + nbp * 64),
          reinterpret_cast<float*>(buffer + nbp * 96),
          reinterpret_cast<float*>(ds),
          reinterpret_cast<float*>(ds + small),
          reinterpret_cast<std::int32_t*>(ds + 2 * small),
          reinterpret_cast<std::int8_t*>(ds + 3 * small),
          cols / kQBlock,
          nbp};
}

void store_block_scales(const QuantizedRowLayout& l, std::int64_t b, float d, std::int32_t sum) noexcept {
  const float ds = d * static_cast<float>(sum);
  l.ds[b] = ds;
  l.d[b] = d;
  l.sum[b] = sum;
  for (int i = 0; i < 8; ++i) {
    l.d8[b * 8 + i] = d;
    l.neg_sum8[b * 8 + i] = -sum;
    l.ds8[b * 8 + i] = ds * 0.125f;
  }
}

QuantizedRow quantized_row(const QuantizedRowLayout& l) noexcept {
  return {l.qs, l.d8, l.neg_sum8, l.ds, l.ds8, l.d, l.sum, l.lanes, l.blocks};
}

void write_block_lanes(std::int64_t cols, std::byte* buffer) noexcept {
  const QuantizedRowLayout l = quantized_row_layout(cols, buffer);
  if (l.padded_blocks == 0) return;
  // The last unit's lanes past the padded blocks read as zeros.
  std::memset(l.lanes + lane_section_bytes(l.padded_blocks) - kLaneUnitBytes, 0, kLaneUnitBytes);
  for (std::int64_t b = 0; b < l.padded_blocks; ++b) {
    std::int8_t* unit = l.lanes + (b / kLaneUnitBlocks) * static_cast<std::int64_t>(kLaneUnitBytes);
    for (int m = 0; m < kQBlock / 4; ++m) std::memcpy(unit + 64 * m + 4 * (b % kLaneUnitBlocks), l.qs + kQBlock * b + 4 * m, 4);
  }
}

QuantizedRow quantize_row_q8_act(const float* x, std::int64_t cols, std::byte* buffer) noexcept {
  const QuantizedRowLayout l = quantized_row_layout(cols, buffer);
  const std::int64_t nb = l.blocks, nbp = l.padded_blocks;
  std::int8_t* qs = l.qs;
  for (std::int64_t b = 0; b < nbp; ++b) {
    const float* xb = x + b * kQBlock;
    std::int8_t* qb = qs + b * kQBlock;
    float amax = 0.0f;
    std::int32_t sum = 0;
    float d = 0.0f;
    if (b < nb) {
      // Plain loops the baseline (SSE2) vectoriser handles: no libm calls (nearbyint and fmax are
      // calls without SSE4.1).
      for (int i = 0; i < kQBlock; ++i) {
        const float a = std::fabs(xb[i]);
        amax = a > amax ? a : amax;
      }
      d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      std::int32_t q[kQBlock];
      for (int i = 0; i < kQBlock; ++i) {
        // |x * id| <= 127 + ulps < 2^22: adding and subtracting 1.5 * 2^23 rounds it to the
        // nearest integer, ties to even (as vcvtps2dq does), in float arithmetic (the library is
        // built without -ffast-math, so the compiler keeps both operations).
        constexpr float kMagic = 12582912.0f;
        q[i] = static_cast<std::int32_t>((xb[i] * id + kMagic) - kMagic);
      }
      for (int i = 0; i < kQBlock; ++i) {
        qb[i] = static_cast<std::int8_t>(q[i]);
        sum += q[i];
      }
    } else {
      std::memset(qb, 0, kQBlock);
    }
    store_block_scales(l, b, d, sum);
  }
  return quantized_row(l);
}

namespace {

inline std::uint16_t load_u16(const void* p) noexcept {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Each format gives the block's integer levels u (so that w = d * (u - kOffset) [+ m]).
struct LevelsQ8_0 {
  using Block = BlockQ8_0;
  static constexpr bool kMin = false;
  static constexpr int kOffset = 0;
  static void levels(const Block& b, std::int32_t* u) {
    for (int i = 0; i < kQBlock; ++i) u[i] = b.qs[i];
  }
};
template <typename B, bool M, int O>
struct LevelsQ4 {
  using Block = B;
  static constexpr bool kMin = M;
  static constexpr int kOffset = O;
  static void levels(const Block& b, std::int32_t* u) {
    for (int i = 0; i < kQBlock / 2; ++i) {
      u[i] = b.qs[i] & 15;
      u[i + 16] = b.qs[i] >> 4;
    }
  }
};
template <typename B, bool M, int O>
struct LevelsQ5 {
  using Block = B;
  static constexpr bool kMin = M;
  static constexpr int kOffset = O;
  static void levels(const Block& b, std::int32_t* u) {
    std::uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int i = 0; i < kQBlock / 2; ++i) {
      u[i] = (b.qs[i] & 15) | static_cast<std::int32_t>(((qh >> i) & 1u) << 4);
      u[i + 16] = (b.qs[i] >> 4) | static_cast<std::int32_t>(((qh >> (i + 16)) & 1u) << 4);
    }
  }
};

template <typename L>
void qdot_generic(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename L::Block*>(w + static_cast<std::size_t>(r) * row_stride);
    float acc = 0.0f;
    for (std::int64_t b = 0; b < x.blocks; ++b) {
      std::int32_t u[kQBlock];
      L::levels(blocks[b], u);
      const std::int8_t* q = x.qs + b * kQBlock;
      std::int32_t dot = 0;
      for (int i = 0; i < kQBlock; ++i) dot += u[i] * q[i];
      dot += L::kOffset * x.neg_sum8[b * 8];  // (u - offset) . q, exactly
      const float d = half_to_float_generic(load_u16(&blocks[b].d)) * x.d8[b * 8];
      acc += d * static_cast<float>(dot);
      if constexpr (L::kMin) acc += half_to_float_generic(load_u16(&blocks[b].m)) * x.ds[b];
    }
    y[r] = acc;
  }
}

// INT4 g128: each 128-group spans 4 activation blocks; sub-block s is packed as a Q4_0 block
// and the group's zero point z is the offset, cancelled exactly with the block's level sum.
void qdot_q4_g128_generic(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                          std::int64_t n_rows) {
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* groups = reinterpret_cast<const BlockQ4_G128*>(w + static_cast<std::size_t>(r) * row_stride);
    float acc = 0.0f;
    for (std::int64_t b = 0; b < x.blocks; ++b) {
      const BlockQ4_G128& g = groups[b / 4];
      const std::uint8_t* qs = g.qs + 16 * (b % 4);
      const std::int8_t* q = x.qs + b * kQBlock;
      std::int32_t dot = 0;
      for (int i = 0; i < kQBlock / 2; ++i) dot += (qs[i] & 15) * q[i] + (qs[i] >> 4) * q[i + 16];
      dot += (g.zero & 15) * x.neg_sum8[b * 8];  // (u - z) . q, exactly
      acc += half_to_float_generic(load_u16(&g.d)) * x.d8[b * 8] * static_cast<float>(dot);
    }
    y[r] = acc;
  }
}

// Row loop of the K-quant integer kernels: add(block, B, acc) adds super-block B of the row.
template <typename Block, typename AddBlock>
void qdot_rows(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows,
               AddBlock add) {
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const Block*>(w + static_cast<std::size_t>(r) * row_stride);
    float acc = 0.0f;
    for (std::int64_t B = 0; B < x.blocks / 8; ++B) add(blocks[B], B, acc);
    y[r] = acc;
  }
}

// K-quants: a 256-element super-block spans 8 activation blocks. Q4_K sub-block s (32 elements,
// w = fl(d sc) u - fl(dmin m)) is activation block 8 B + s and adds fl(fl(d sc) d_x) (u . q) -
// fl(dmin m) ds_x; Q6_K's 16-element sub-blocks (w = fl(d sc) (u - 32)) are the halves of one.
template <typename Block>
void qdot_k4_generic(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  constexpr bool kFifthBit = std::is_same_v<Block, BlockQ5_K>;  // Q5_K: bit s of qh[l] adds 16
  qdot_rows<Block>(w, row_stride, x, y, n_rows, [&x](const Block& blk, std::int64_t B, float& acc) {
    const float d = half_to_float_generic(load_u16(&blk.d)), dmin = half_to_float_generic(load_u16(&blk.dmin));
    for (int s = 0; s < 8; ++s) {
      const std::int64_t xb = 8 * B + s;
      const std::int8_t* q = x.qs + 32 * xb;
      const std::uint8_t* qs = blk.qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      std::int32_t dot = 0;
      for (int i = 0; i < 32; ++i) {
        int u = (qs[i] >> shift) & 15;
        if constexpr (kFifthBit) u |= ((blk.qh[i] >> s) & 1) << 4;
        dot += u * q[i];
      }
      const ScaleMin sm = unpack_scale_min_k4(blk.scales, s);
      const float dl = d * static_cast<float>(sm.scale), ml = dmin * static_cast<float>(sm.min);
      acc += dl * x.d8[xb * 8] * static_cast<float>(dot);
      acc -= ml * x.ds[xb];
    }
  });
}

// Q2_K / Q3_K: group k (activation block 8 B + k) holds sub-blocks 2 k and 2 k + 1; element
// 32 k + l has its low two bits at bit pair k % 4 of qs[32 (k / 4) + l] (Q3_K: bit k of hmask[l]
// adds 4 to the level - 4; Q2_K: w = fl(d sc) u - fl(dmin m), the min times the half's sum of q).
template <typename Block>
void qdot_k2_generic(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  constexpr bool kQ3 = std::is_same_v<Block, BlockQ3_K>;
  qdot_rows<Block>(w, row_stride, x, y, n_rows, [&x](const Block& blk, std::int64_t B, float& acc) {
    const float d = half_to_float_generic(load_u16(&blk.d));
    for (int k = 0; k < 8; ++k) {
      const std::int64_t xb = 8 * B + k;
      const std::int8_t* q = x.qs + 32 * xb;
      const std::uint8_t* qs = blk.qs + 32 * (k / 4);
      const int shift = 2 * (k % 4);
      std::int32_t dot[2] = {0, 0}, qsum[2] = {0, 0};
      for (int l = 0; l < 32; ++l) {
        int u = (qs[l] >> shift) & 3;
        if constexpr (kQ3) u += 4 * ((blk.hmask[l] >> k) & 1) - 4;
        dot[l / 16] += u * q[l];
        qsum[l / 16] += q[l];
      }
      for (int half = 0; half < 2; ++half) {
        const int s = 2 * k + half;
        if constexpr (kQ3) {
          const float dl = d * static_cast<float>(unpack_scale_q3_k(blk.scales, s));
          acc += dl * x.d8[xb * 8] * static_cast<float>(dot[half]);
        } else {
          const float dl = d * static_cast<float>(blk.scales[s] & 15);
          const float ml = half_to_float_generic(load_u16(&blk.dmin)) * static_cast<float>(blk.scales[s] >> 4);
          acc += dl * x.d8[xb * 8] * static_cast<float>(dot[half]);
          acc -= ml * x.d8[xb * 8] * static_cast<float>(qsum[half]);
        }
      }
    }
  });
}

// IQ4_NL: one activation block per weight block; w = d * T[index].
void qdot_iq4_nl_generic(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                         std::int64_t n_rows) {
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const BlockIQ4_NL*>(w + static_cast<std::size_t>(r) * row_stride);
    float acc = 0.0f;
    for (std::int64_t b = 0; b < x.blocks; ++b) {
      const std::int8_t* q = x.qs + 32 * b;
      std::int32_t dot = 0;
      for (int i = 0; i < 16; ++i) {
        dot += kIq4nlLevels[blocks[b].qs[i] & 15] * q[i] + kIq4nlLevels[blocks[b].qs[i] >> 4] * q[i + 16];
      }
      acc += half_to_float_generic(load_u16(&blocks[b].d)) * x.d8[b * 8] * static_cast<float>(dot);
    }
    y[r] = acc;
  }
}

void qdot_q6_k_generic(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                       std::int64_t n_rows) {
  qdot_rows<BlockQ6_K>(w, row_stride, x, y, n_rows, [&x](const BlockQ6_K& blk, std::int64_t B, float& acc) {
    const float d = half_to_float_generic(load_u16(&blk.d));
    for (int k = 0; k < 8; ++k) {  // element e = 32 k + l = 128 h + 32 j + l
      const int h = k / 4, j = k % 4;
      const std::int64_t xb = 8 * B + k;
      const std::int8_t* q = x.qs + 32 * xb;
      const std::uint8_t* ql = blk.ql + 64 * h + 32 * (j % 2);
      const std::uint8_t* qh = blk.qh + 32 * h;
      std::int32_t dot[2] = {0, 0};
      for (int l = 0; l < 32; ++l) {
        const int u = ((ql[l] >> (4 * (j / 2))) & 15) | (((qh[l] >> (2 * j)) & 3) << 4);
        dot[l / 16] += (u - 32) * q[l];
      }
      for (int half = 0; half < 2; ++half) {
        const float dl = d * static_cast<float>(blk.scales[2 * k + half]);
        acc += dl * x.d8[xb * 8] * static_cast<float>(dot[half]);
      }
    }
  });
}

constexpr QdotKernels kGeneric = {{
    nullptr,                                                   // f32
    nullptr,                                                   // f16
    nullptr,                                                   // bf16
    qdot_generic<LevelsQ8_0>,                                  // q8_0
    qdot_generic<LevelsQ4<BlockQ4_0, false, 8>>,               // q4_0
    qdot_generic<LevelsQ4<BlockQ4_1, true, 0>>,                // q4_1
    qdot_generic<LevelsQ5<BlockQ5_0, false, 16>>,              // q5_0
    qdot_generic<LevelsQ5<BlockQ5_1, true, 0>>,                // q5_1
    nullptr,                                                   // fp8_e4m3: float activations
    qdot_q4_g128_generic,                                      // q4_g128
    // K-quant section (no Q8_K path)
    qdot_k2_generic<BlockQ2_K>, qdot_k2_generic<BlockQ3_K>, qdot_k4_generic<BlockQ4_K>, qdot_k4_generic<BlockQ5_K>,
    qdot_q6_k_generic, nullptr, qdot_iq4_nl_generic,
    // repacked section: only the AVX-512 VNNI level has kernels (weights are repacked only there)
    nullptr, nullptr,
}, quantize_row_q8_act};

}  // namespace

const QdotKernels& qdot_kernels_generic() noexcept {
  return kGeneric;
}

}  // namespace sitsrt::cpu::detail
