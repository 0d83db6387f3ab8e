// INT4 cached K/V groups (ops::KvType::kInt4): 32 values stored as 4-bit indices into 16
// non-uniform levels (IQ4_NL's, -127 .. 113) times one signed 8-bit scale code, 17 bytes per
// 32 values (0.266x the bytes of f16).
//
// Why these choices (docs/performance.md, "int4 KV v2"): after the Hadamard rotation cached
// values are close to Gaussian with heavy tails, where the non-uniform levels with a searched
// scale leave 30-38% less squared error than uniform levels at max |x| / 8; an 8-bit scale (an
// E5M2 float, i.e. an f16's high byte, times 2^-4 so that its range matches the former f16
// scale's for levels of +-127) gives back a third of that and brings the row under 0.28x f16.
//
// One implementation for the host (lib/cpu/attention) and the device (cuda/): every function is
// __host__ __device__ under nvcc, products and differences are rounded on their own (nvcc
// would fuse them into an fma), and a group's squared error is summed in the fixed tree order a
// warp's xor-butterfly gives, so both write the same bytes.
#pragma once

#include "core/host_device.hpp"

#include <cstdint>

namespace sitsrt::kv_int4 {

using hd::add_rn;
using hd::bits_to_float;
using hd::div_rn;
using hd::float_to_bits;
using hd::mul_rn;
using hd::sub_rn;

inline constexpr int kGroup = 32;              // values per scale
inline constexpr std::uint8_t kMaxCode = 0x7B;  // largest finite E5M2 magnitude (57344 x 2^-4)

// Level of index i (0..15), as an integer-valued float: -127, -104, -83, -65, -49, -35, -22, -10,
// 1, 13, 25, 38, 53, 69, 89, 113, as int8 bytes of two 64-bit constants (a table indexed at run
// time would sit in a GPU thread's local memory).
SITSRT_HOST_DEVICE float level(int i) {
  constexpr std::uint64_t kLow = 0xF6EADDCFBFAD9881ull, kHigh = 0x7159453526190D01ull;
  const std::uint64_t bytes = (i & 8) != 0 ? kHigh : kLow;
  return static_cast<float>(static_cast<std::int8_t>(static_cast<std::uint8_t>(bytes >> (8 * (i & 7)))));
}

// The scale a code stands for: sign (bit 7), exponent (bits 2..6, bias 15), mantissa (bits 0..1)
// as in E5M2, times 2^-4; exact. Codes are ordered like their magnitudes. Exponent 31
// (infinities, NaN) is never written.
SITSRT_HOST_DEVICE float scale_of(std::uint8_t code) {
  const std::uint32_t exponent = (code >> 2) & 31u, mantissa = code & 3u;
  const float magnitude = exponent == 0 ? static_cast<float>(mantissa) * 9.5367431640625e-7f  // m x 2^-20
                                        : bits_to_float((exponent + 108u) << 23 | mantissa << 21);
  return (code & 0x80u) != 0 ? -magnitude : magnitude;
}

// The smallest magnitude code whose scale is >= need (need > 0, or NaN: kMaxCode), clamped to
// 1 .. kMaxCode.
SITSRT_HOST_DEVICE std::uint8_t code_at_least(float need) {
  if (!(need < 57344.0f * 0.0625f)) return kMaxCode;
  if (need <= 4.0f * 9.5367431640625e-7f) {  // subnormal codes 1..3, then code 4 = 2^-18
    const float steps = need * 1048576.0f;       // need / 2^-20, exact
    return static_cast<std::uint8_t>(steps <= 1.0f ? 1 : steps <= 2.0f ? 2 : steps <= 3.0f ? 3 : 4);
  }
  const std::uint32_t bits = float_to_bits(need);
  std::uint32_t code = ((bits >> 23) - 108u) << 2 | ((bits >> 21) & 3u);  // truncated to 2 mantissa bits
  if ((bits & 0x1fffffu) != 0) ++code;                                    // round up (a carry is right)
  return static_cast<std::uint8_t>(code < kMaxCode ? code : kMaxCode);
}

// Midpoints between neighbouring levels and the gaps between them (exact in float).
SITSRT_HOST_DEVICE float midpoint(int j) {
  const float mids[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                          7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};
  return mids[j];
}
SITSRT_HOST_DEVICE float gap(int j) {
  const float gaps[15] = {23.0f, 21.0f, 18.0f, 16.0f, 14.0f, 13.0f, 12.0f, 11.0f,
                          12.0f, 12.0f, 13.0f, 15.0f, 16.0f, 20.0f, 24.0f};
  return gaps[j];
}

// The level nearest to v (ties to the lower level; NaN gives the lowest) and its index, without
// branches: one comparison per midpoint (a binary search mispredicts on every value, and made
// the int4 store cost a third of SmolLM2's decode step). Sums of integers: exact in any order.
SITSRT_HOST_DEVICE float nearest_level(float v, int* index) {
  float level = -127.0f;
  int above = 0;
  for (int j = 0; j < 15; ++j) {
    const bool up = v > midpoint(j);
    above += up ? 1 : 0;
    level += up ? gap(j) : 0.0f;
  }
  *index = above;
  return level;
}

// Squared error of x on the level nearest to x / scale (x times the scale's reciprocal inverse).
SITSRT_HOST_DEVICE float squared_error(float x, float scale, float inverse, int* index) {
  const float level = nearest_level(mul_rn(x, inverse), index);
  const float d = sub_rn(x, mul_rn(level, scale));  // level x scale is exact (<= 10 bits)
  return mul_rn(d, d);
}

// Candidate i (0..3) of a group whose largest positive value is pos and largest negative
// magnitude neg: for each sign of the scale (i / 2: first the one that sends the wider side to
// the -127 level), the smallest code that clips nothing and the one below it (a code above it
// lowered the squared error of Gaussian groups by 1.5% more, for half again the time).
SITSRT_HOST_DEVICE std::uint8_t candidate(float pos, float neg, int i) {
  const bool positive_wider = pos >= neg;
  const bool negative_scale = (i / 2 == 0) == positive_wider;  // a negative scale maps x > 0 to the -127 side
  const float to_low = negative_scale ? pos : neg, to_high = negative_scale ? neg : pos;
  const float a = div_rn(to_low, 127.0f), b = div_rn(to_high, 113.0f);
  const int c = code_at_least(a > b ? a : b) - i % 2;
  const int clamped = c < 1 ? 1 : c;
  return static_cast<std::uint8_t>(clamped | (negative_scale ? 0x80 : 0));
}

inline constexpr int kCandidates = 4;

// Host form: quantizes x[0..32) into index[0..32) and returns the scale code (0 for a group of
// zeros, or one whose values are all NaN or +-0). Loops over the 32 values with fixed trip counts
// and selects instead of branches, so they vectorise. The device form runs the same candidates
// with a lane per value and sums each candidate's error by xor-butterfly
// (cuda/kernels/attention.cu).
inline std::uint8_t quantize_group(const float* x, std::uint8_t* index) noexcept {
  float pos = 0.0f, neg = 0.0f;
  for (int i = 0; i < kGroup; ++i) {
    pos = x[i] > pos ? x[i] : pos;
    neg = -x[i] > neg ? -x[i] : neg;
  }
  if (!(pos > 0.0f) && !(neg > 0.0f)) {
    for (int i = 0; i < kGroup; ++i) index[i] = 8;  // level 1 x scale 0
    return 0;
  }
  std::uint8_t best = 0;
  float best_error = 0.0f;
  float v[kGroup], level[kGroup], e[kGroup];
  for (int c = 0; c < kCandidates; ++c) {
    const std::uint8_t code = candidate(pos, neg, c);
    const float scale = scale_of(code), inverse = div_rn(1.0f, scale);
    for (int i = 0; i < kGroup; ++i) {
      v[i] = x[i] * inverse;
      level[i] = -127.0f;
    }
    for (int j = 0; j < 15; ++j) {
      const float m = midpoint(j), g = gap(j);
      for (int i = 0; i < kGroup; ++i) level[i] += v[i] > m ? g : 0.0f;
    }
    for (int i = 0; i < kGroup; ++i) {
      const float d = x[i] - level[i] * scale;
      e[i] = d * d;
    }
    for (int off = kGroup / 2; off > 0; off /= 2) {  // the tree of a warp's xor-butterfly
      for (int i = 0; i < off; ++i) e[i] += e[i + off];
    }
    if (c == 0 || e[0] < best_error) {
      best = code;
      best_error = e[0];
    }
  }
  const float inverse = div_rn(1.0f, scale_of(best));
  int above[kGroup];
  for (int i = 0; i < kGroup; ++i) {
    v[i] = x[i] * inverse;
    above[i] = 0;
  }
  for (int j = 0; j < 15; ++j) {
    const float m = midpoint(j);
    for (int i = 0; i < kGroup; ++i) above[i] += v[i] > m ? 1 : 0;
  }
  for (int i = 0; i < kGroup; ++i) index[i] = static_cast<std::uint8_t>(above[i]);
  return best;
}

}  // namespace sitsrt::kv_int4
