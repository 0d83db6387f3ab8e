// Reference decode/encode of the K-quant super-blocks and IQ4_NL (layouts: kquant_blocks.hpp,
// docs/quantization.md). Encoding is plain round-to-nearest (see encode_* comments): files
// decode correctly with any standard decoder, but bytes differ from llama.cpp's quantizer,
// which searches scales against an importance-weighted error.
#include "core/kquant_blocks.hpp"

#include "core/half.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sitsrt {
namespace {

// ---- Element positions shared by decode and encode (docs/quantization.md). ----

// Q2_K / Q3_K: element e = 128 n + 32 j + l keeps its 2 low bits in byte 32 n + l at bit 2 j.
constexpr int low2_byte(int e) { return 32 * (e / 128) + e % 32; }
constexpr int low2_shift(int e) { return 2 * ((e % 128) / 32); }
// Q4_K / Q5_K: element e = 64 p + 32 h + l: nibble h of byte 32 p + l.
constexpr int nibble_byte(int e) { return 32 * (e / 64) + e % 32; }
constexpr int nibble_shift(int e) { return 4 * ((e % 64) / 32); }
// Q6_K: element e = 128 h + 32 k + l: low nibble (k >> 1) of ql[64 h + 32 (k & 1) + l],
// high 2 bits at 2 k of qh[32 h + l].
constexpr int q6_low_byte(int e) { return 64 * (e / 128) + 32 * ((e / 32) % 2) + e % 32; }
constexpr int q6_low_shift(int e) { return 4 * (((e % 128) / 32) / 2); }
constexpr int q6_high_byte(int e) { return 32 * (e / 128) + e % 32; }
constexpr int q6_high_shift(int e) { return 2 * ((e % 128) / 32); }

// Round to nearest (ties away from zero) as int; inputs here are small and finite.
int nearest(float v) { return static_cast<int>(std::lround(v)); }

float absmax(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}
// The element of largest magnitude, with its sign.
float signed_max(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// A stored fp16 super-scale for `value / divisor`, returned both as bits and as the float the
// decoder will see (levels are chosen against the decoded scale, not the exact one).
struct HalfScale {
  std::uint16_t bits;
  float value;
};
HalfScale half_scale(float value) {
  const std::uint16_t bits = fp32_to_fp16(value);
  return {bits, fp16_to_fp32(bits)};
}

// Affine sub-blocks (Q2_K, Q4_K, Q5_K): x ~ fl(d sc) q - fl(dmin m), q in [0, nmax],
// sc, m in [0, smax]. Per sub-block: lo = min(0, min x), step = (max x - lo) / nmax, min = -lo;
// then d = max step / smax, dmin = max min / smax (fp16), sc / m rounded to nearest against
// the decoded d / dmin, and levels rounded against the decoded fl(d sc), fl(dmin m).
template <int kSub, int kCount>
struct AffineScales {
  HalfScale d, dmin;
  int sc[kCount], m[kCount];
  int q[kSub * kCount];
};
template <int kSub, int kCount>
void fit_affine(const float* x, int nmax, int smax, AffineScales<kSub, kCount>& out) {
  float step[kCount], mins[kCount];
  float max_step = 0.0f, max_min = 0.0f;
  for (int s = 0; s < kCount; ++s) {
    const float* xs = x + s * kSub;
    const float lo = std::min(0.0f, *std::min_element(xs, xs + kSub));
    const float hi = std::max(lo, *std::max_element(xs, xs + kSub));
    step[s] = (hi - lo) / static_cast<float>(nmax);
    mins[s] = -lo;
    max_step = std::max(max_step, step[s]);
    max_min = std::max(max_min, mins[s]);
  }
  out.d = half_scale(max_step / static_cast<float>(smax));
  out.dmin = half_scale(max_min / static_cast<float>(smax));
  for (int s = 0; s < kCount; ++s) {
    out.sc[s] = out.d.value > 0.0f ? std::clamp(nearest(step[s] / out.d.value), 0, smax) : 0;
    out.m[s] = out.dmin.value > 0.0f ? std::clamp(nearest(mins[s] / out.dmin.value), 0, smax) : 0;
    const float dl = out.d.value * static_cast<float>(out.sc[s]);
    const float ml = out.dmin.value * static_cast<float>(out.m[s]);
    for (int i = s * kSub; i < (s + 1) * kSub; ++i) {
      out.q[i] = dl > 0.0f ? std::clamp(nearest((x[i] + ml) / dl), 0, nmax) : 0;
    }
  }
}

// Signed sub-blocks (Q3_K, Q6_K): x ~ fl(d sc) q with q in [-half, half - 1] and sc in
// [-smax, smax]. Per sub-block the element of largest magnitude maps to level -half exactly
// (step = that element / -half, so the scale may be negative); d = max |step| / smax (fp16 for
// both formats), sc and q rounded to nearest against the decoded values.
template <int kSub, int kCount>
struct SignedScales {
  HalfScale d;
  int sc[kCount];
  int q[kSub * kCount];
};
template <int kSub, int kCount>
void fit_signed(const float* x, int half, int smax, SignedScales<kSub, kCount>& out) {
  float step[kCount];
  float max_step = 0.0f;
  for (int s = 0; s < kCount; ++s) {
    step[s] = signed_max(x + s * kSub, kSub) / static_cast<float>(-half);
    max_step = std::max(max_step, std::fabs(step[s]));
  }
  out.d = half_scale(max_step / static_cast<float>(smax));
  for (int s = 0; s < kCount; ++s) {
    out.sc[s] = out.d.value > 0.0f ? std::clamp(nearest(step[s] / out.d.value), -smax, smax) : 0;
    const float dl = out.d.value * static_cast<float>(out.sc[s]);
    for (int i = s * kSub; i < (s + 1) * kSub; ++i) {
      out.q[i] = dl != 0.0f ? std::clamp(nearest(x[i] / dl), -half, half - 1) : 0;
    }
  }
}

}  // namespace

void pack_scale_min_k4(const int* sc, const int* m, std::uint8_t* packed) noexcept {
  for (int s = 0; s < 4; ++s) {
    packed[s] = static_cast<std::uint8_t>((sc[s] & 63) | ((sc[s + 4] >> 4) << 6));
    packed[s + 4] = static_cast<std::uint8_t>((m[s] & 63) | ((m[s + 4] >> 4) << 6));
    packed[s + 8] = static_cast<std::uint8_t>((sc[s + 4] & 15) | ((m[s + 4] & 15) << 4));
  }
}

// ---- Decode ----

// The decoders walk each format in storage order (whole 32-byte runs of qs per sub-block) so
// the compiler vectorises them: they are also the portable kernels' block decoders.

void decode_block_q2_k(const BlockQ2_K& b, float* out) noexcept {
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  for (int k = 0; k < 8; ++k) {  // elements 32 k .. 32 k + 31 = sub-blocks 2 k, 2 k + 1
    const std::uint8_t* qs = b.qs + low2_byte(32 * k);
    const int shift = low2_shift(32 * k);
    for (int half = 0; half < 2; ++half) {
      const int s = 2 * k + half;
      const float dl = d * static_cast<float>(b.scales[s] & 15), ml = dmin * static_cast<float>(b.scales[s] >> 4);
      for (int l = 16 * half; l < 16 * half + 16; ++l) out[32 * k + l] = dl * static_cast<float>((qs[l] >> shift) & 3) - ml;
    }
  }
}

void decode_block_q3_k(const BlockQ3_K& b, float* out) noexcept {
  const float d = fp16_to_fp32(b.d);
  for (int k = 0; k < 8; ++k) {  // the hmask bit of element 32 k + l is bit k of hmask[l]
    const std::uint8_t* qs = b.qs + low2_byte(32 * k);
    const int shift = low2_shift(32 * k);
    for (int half = 0; half < 2; ++half) {
      const float dl = d * static_cast<float>(unpack_scale_q3_k(b.scales, 2 * k + half));
      for (int l = 16 * half; l < 16 * half + 16; ++l) {
        const int level = ((qs[l] >> shift) & 3) - 4 + 4 * ((b.hmask[l] >> k) & 1);
        out[32 * k + l] = dl * static_cast<float>(level);
      }
    }
  }
}

namespace {
// Q4_K and Q5_K: same header and nibble runs; Q5_K adds bit s of qh[l] as 16.
template <typename Block, bool kFifthBit>
void decode_k4(const Block& b, float* out) noexcept {
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  for (int s = 0; s < 8; ++s) {
    const ScaleMin sm = unpack_scale_min_k4(b.scales, s);
    const float dl = d * static_cast<float>(sm.scale), ml = dmin * static_cast<float>(sm.min);
    const std::uint8_t* qs = b.qs + nibble_byte(32 * s);
    const int shift = nibble_shift(32 * s);
    for (int l = 0; l < 32; ++l) {
      int q = (qs[l] >> shift) & 15;
      if constexpr (kFifthBit) q |= ((b.qh[l] >> s) & 1) << 4;
      out[32 * s + l] = dl * static_cast<float>(q) - ml;
    }
  }
}

}  // namespace

void decode_block_q4_k(const BlockQ4_K& b, float* out) noexcept { decode_k4<BlockQ4_K, false>(b, out); }
void decode_block_q5_k(const BlockQ5_K& b, float* out) noexcept { decode_k4<BlockQ5_K, true>(b, out); }

void decode_block_q6_k(const BlockQ6_K& b, float* out) noexcept {
  const float d = fp16_to_fp32(b.d);
  for (int k = 0; k < 8; ++k) {
    const std::uint8_t* ql = b.ql + q6_low_byte(32 * k);
    const std::uint8_t* qh = b.qh + q6_high_byte(32 * k);
    const int low_shift = q6_low_shift(32 * k), high_shift = q6_high_shift(32 * k);
    for (int half = 0; half < 2; ++half) {
      const float dl = d * static_cast<float>(b.scales[2 * k + half]);
      for (int l = 16 * half; l < 16 * half + 16; ++l) {
        const int q = ((ql[l] >> low_shift) & 15) | (((qh[l] >> high_shift) & 3) << 4);
        out[32 * k + l] = dl * static_cast<float>(q - 32);
      }
    }
  }
}

void decode_block_q8_k(const BlockQ8_K& b, float* out) noexcept {
  for (int e = 0; e < kSuperBlock; ++e) out[e] = b.d * static_cast<float>(b.qs[e]);
}

void decode_block_iq4_nl(const BlockIQ4_NL& b, float* out) noexcept {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < 16; ++j) {
    out[j] = d * static_cast<float>(kIq4nlLevels[b.qs[j] & 15]);
    out[j + 16] = d * static_cast<float>(kIq4nlLevels[b.qs[j] >> 4]);
  }
}

// ---- Encode ----

void encode_block_q2_k(const float* x, BlockQ2_K& b) noexcept {
  AffineScales<16, 16> f;
  fit_affine(x, 3, 15, f);
  b.d = f.d.bits;
  b.dmin = f.dmin.bits;
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<std::uint8_t>(f.sc[s] | (f.m[s] << 4));
  std::memset(b.qs, 0, sizeof b.qs);
  for (int e = 0; e < kSuperBlock; ++e) b.qs[low2_byte(e)] |= static_cast<std::uint8_t>(f.q[e] << low2_shift(e));
}

void encode_block_q3_k(const float* x, BlockQ3_K& b) noexcept {
  SignedScales<16, 16> f;
  fit_signed(x, 4, 31, f);
  b.d = f.d.bits;
  std::memset(b.scales, 0, sizeof b.scales);
  for (int s = 0; s < 16; ++s) {  // inverse of unpack_scale_q3_k
    const int v = f.sc[s] + 32;
    b.scales[s % 8] |= static_cast<std::uint8_t>((v & 15) << (s < 8 ? 0 : 4));
    b.scales[8 + s % 4] |= static_cast<std::uint8_t>((v >> 4) << (2 * (s / 4)));
  }
  std::memset(b.qs, 0, sizeof b.qs);
  std::memset(b.hmask, 0, sizeof b.hmask);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int u = f.q[e] + 4;  // 0..7: bit 2 -> hmask, bits 0-1 -> qs
    b.qs[low2_byte(e)] |= static_cast<std::uint8_t>((u & 3) << low2_shift(e));
    b.hmask[e % 32] |= static_cast<std::uint8_t>((u >> 2) << (e / 32));
  }
}

namespace {
// Q4_K and Q5_K share d, dmin, the packed scales and the nibble runs; Q5_K adds the qh bits.
template <typename Block, int kNmax>
void encode_k4(const float* x, Block& b) noexcept {
  constexpr bool kFifthBit = kNmax == 31;
  AffineScales<32, 8> f;
  fit_affine(x, kNmax, 63, f);
  b.d = f.d.bits;
  b.dmin = f.dmin.bits;
  pack_scale_min_k4(f.sc, f.m, b.scales);
  std::memset(b.qs, 0, sizeof b.qs);
  if constexpr (kFifthBit) std::memset(b.qh, 0, sizeof b.qh);
  for (int e = 0; e < kSuperBlock; ++e) {
    b.qs[nibble_byte(e)] |= static_cast<std::uint8_t>((f.q[e] & 15) << nibble_shift(e));
    if constexpr (kFifthBit) b.qh[e % 32] |= static_cast<std::uint8_t>((f.q[e] >> 4) << (e / 32));
  }
}

}  // namespace

void encode_block_q4_k(const float* x, BlockQ4_K& b) noexcept { encode_k4<BlockQ4_K, 15>(x, b); }
void encode_block_q5_k(const float* x, BlockQ5_K& b) noexcept { encode_k4<BlockQ5_K, 31>(x, b); }

void encode_block_q6_k(const float* x, BlockQ6_K& b) noexcept {
  SignedScales<16, 16> f;
  fit_signed(x, 32, 127, f);
  b.d = f.d.bits;
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<std::int8_t>(f.sc[s]);
  std::memset(b.ql, 0, sizeof b.ql);
  std::memset(b.qh, 0, sizeof b.qh);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int u = f.q[e] + 32;  // 0..63
    b.ql[q6_low_byte(e)] |= static_cast<std::uint8_t>((u & 15) << q6_low_shift(e));
    b.qh[q6_high_byte(e)] |= static_cast<std::uint8_t>((u >> 4) << q6_high_shift(e));
  }
}

// d = max |x| / 127 in fp32, q = round(x / d).
void encode_block_q8_k(const float* x, BlockQ8_K& b) noexcept {
  const float amax = absmax(x, kSuperBlock);
  b.d = amax / 127.0f;
  const float id = b.d > 0.0f ? 1.0f / b.d : 0.0f;
  for (int e = 0; e < kSuperBlock; ++e) b.qs[e] = static_cast<std::int8_t>(std::clamp(nearest(x[e] * id), -127, 127));
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += b.qs[16 * g + i];
    b.bsums[g] = static_cast<std::int16_t>(sum);
  }
}

// d = (element of largest magnitude) / -127 (fp16), so it maps to level -127 exactly; every
// element takes the nearest of the 16 levels to x / d.
void encode_block_iq4_nl(const float* x, BlockIQ4_NL& b) noexcept {
  const HalfScale d = half_scale(signed_max(x, 32) / -127.0f);
  b.d = d.bits;
  const float id = d.value != 0.0f ? 1.0f / d.value : 0.0f;
  int index[32];
  for (int j = 0; j < 32; ++j) {
    const float v = x[j] * id;
    int best = 0;
    for (int k = 1; k < 16; ++k) {
      if (std::fabs(v - kIq4nlLevels[k]) < std::fabs(v - kIq4nlLevels[best])) best = k;
    }
    index[j] = best;
  }
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(index[j] | (index[j + 16] << 4));
}

}  // namespace sitsrt
