// The int4 KV group quantizer of each ISA level (VecKernels::int4_quantize_groups) against the
// scalar kv_int4::quantize_group (core/kv_int4.hpp), byte for byte: every index and scale code of
// fresh random groups (a new seed each run, printed on failure) from distributions that reach the
// edge cases: Gaussian at any scale, heavy tails, magnitudes from 1e-30 to 1e30, subnormals,
// zeros of both signs, NaN and infinities, equal values, one nonzero value, values on the
// midpoints between levels (the tie rule), arbitrary bit patterns and groups where two candidate
// scales' errors cross (so an FMA in the error sum changes the choice).
#include "core/kv_int4.hpp"
#include "cpu/vec_kernels.hpp"
#include "support/isa.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using namespace sitsrt;

namespace {

constexpr int kGroup = kv_int4::kGroup;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

enum class Shape {
  kGaussian,       // one random scale 10^[-4, 4] per group
  kHeavyTailed,    // Gaussian / |Gaussian| (Cauchy-like), plus rare 100x outliers
  kMixedScales,    // every value its own magnitude in 1e-30 .. 1e30, either sign
  kSubnormal,      // magnitudes around 1e-45 .. 1e-38
  kZeros,          // Gaussian with about half the values +0 or -0
  kNonFinite,      // Gaussian with a few NaN / +inf / -inf
  kAllEqual,       // one value 32 times (any sign and magnitude, NaN, inf, 0)
  kSingleNonzero,  // zeros but one value
  kOnMidpoints,    // midpoint x scale of a code, nudged by at most one ulp: ties
  kRandomBits,     // any 32-bit pattern
  kNearTie,        // Gaussian with one value moved to where two candidates' errors cross
  kShapeCount
};

float random_magnitude(test::Rng& rng, float lo_exp, float hi_exp) {
  return std::pow(10.0f, rng.uniform(lo_exp, hi_exp)) * rng.uniform(1.0f, 9.99f);
}
float random_sign(test::Rng& rng) {
  return (rng.next() & 1) != 0 ? -1.0f : 1.0f;
}

// Each candidate's squared error as the scalar quantizer sums it (the warp's tree order).
std::array<float, kv_int4::kCandidates> candidate_errors(const float* x) {
  float pos = 0.0f, neg = 0.0f;
  for (int i = 0; i < kGroup; ++i) {
    pos = x[i] > pos ? x[i] : pos;
    neg = -x[i] > neg ? -x[i] : neg;
  }
  std::array<float, kv_int4::kCandidates> errors;
  for (int c = 0; c < kv_int4::kCandidates; ++c) {
    const float scale = kv_int4::scale_of(kv_int4::candidate(pos, neg, c)), inverse = 1.0f / scale;
    float e[kGroup];
    int index;
    for (int i = 0; i < kGroup; ++i) e[i] = kv_int4::squared_error(x[i], scale, inverse, &index);
    for (int off = kGroup / 2; off > 0; off /= 2) {
      for (int i = 0; i < off; ++i) e[i] += e[i + off];
    }
    errors[c] = e[0];
  }
  return errors;
}

// Moves one value of a Gaussian group (not its largest or smallest, so the candidates stay) by
// bisection to where candidates 0 and c's errors cross, so that which one wins rests on the last
// bit of each rounding (an FMA in the error sum flips some of these). Leaves the group Gaussian
// when no crossing is found.
void fill_near_tie(test::Rng& rng, float* x) {
  for (int i = 0; i < kGroup; ++i) x[i] = rng.normal();
  int lo_i = 0, hi_i = 0;
  for (int i = 0; i < kGroup; ++i) {
    lo_i = x[i] < x[lo_i] ? i : lo_i;
    hi_i = x[i] > x[hi_i] ? i : hi_i;
  }
  const int k = static_cast<int>(rng.next() % kGroup);
  if (k == lo_i || k == hi_i) return;
  const int c = 1 + static_cast<int>(rng.next() % 3);
  const auto difference = [&](float v) {
    x[k] = v;
    const auto e = candidate_errors(x);
    return e[c] - e[0];
  };
  float a = x[lo_i] * 0.999f, b = x[hi_i] * 0.999f;
  const bool a_below = difference(a) < 0.0f;
  if (a_below == (difference(b) < 0.0f)) {  // no crossing between the ends: try a middle point
    const float m = rng.uniform(a, b);
    if (a_below == (difference(m) < 0.0f)) return;
    b = m;
  }
  for (int step = 0; step < 64 && std::nextafter(a, b) != b; ++step) {
    const float m = a + (b - a) * 0.5f;
    if (m == a || m == b) break;
    ((difference(m) < 0.0f) == a_below ? a : b) = m;
  }
  x[k] = rng.next() % 2 == 0 ? a : b;
}

void fill_group(Shape shape, test::Rng& rng, float* x) {
  switch (shape) {
    case Shape::kGaussian: {
      const float sigma = std::pow(10.0f, rng.uniform(-4.0f, 4.0f));
      for (int i = 0; i < kGroup; ++i) x[i] = sigma * rng.normal();
      return;
    }
    case Shape::kHeavyTailed: {
      const float sigma = std::pow(10.0f, rng.uniform(-3.0f, 3.0f));
      for (int i = 0; i < kGroup; ++i) {
        x[i] = sigma * rng.normal() / std::max(std::fabs(rng.normal()), 1e-3f);
        if (rng.next() % 64 == 0) x[i] *= 100.0f;
      }
      return;
    }
    case Shape::kMixedScales:
      for (int i = 0; i < kGroup; ++i) x[i] = random_sign(rng) * random_magnitude(rng, -30.0f, 30.0f);
      return;
    case Shape::kSubnormal:
      for (int i = 0; i < kGroup; ++i) {
        x[i] = random_sign(rng) * std::bit_cast<float>(static_cast<std::uint32_t>(rng.next() % 0x01000000u));
      }
      return;
    case Shape::kZeros: {
      const float sigma = std::pow(10.0f, rng.uniform(-3.0f, 3.0f));
      for (int i = 0; i < kGroup; ++i) {
        const std::uint64_t r = rng.next() % 4;
        x[i] = r == 0 ? 0.0f : r == 1 ? -0.0f : sigma * rng.normal();
      }
      return;
    }
    case Shape::kNonFinite: {
      const float sigma = std::pow(10.0f, rng.uniform(-3.0f, 3.0f));
      const float specials[3] = {kNaN, kInf, -kInf};
      for (int i = 0; i < kGroup; ++i) {
        x[i] = rng.next() % 8 == 0 ? specials[rng.next() % 3] : sigma * rng.normal();
      }
      return;
    }
    case Shape::kAllEqual: {
      const float choices[6] = {0.0f, -0.0f, kNaN,
                                kInf, -kInf, random_sign(rng) * random_magnitude(rng, -40.0f, 38.0f)};
      const float v = rng.next() % 2 == 0 ? choices[5] : choices[rng.next() % 5];
      for (int i = 0; i < kGroup; ++i) x[i] = v;
      return;
    }
    case Shape::kSingleNonzero: {
      for (int i = 0; i < kGroup; ++i) x[i] = 0.0f;
      const float choices[4] = {kNaN, kInf, -kInf, random_sign(rng) * random_magnitude(rng, -44.0f, 38.0f)};
      x[rng.next() % kGroup] = rng.next() % 4 == 0 ? choices[rng.next() % 3] : choices[3];
      return;
    }
    case Shape::kOnMidpoints: {
      // A code near the one the group's own candidates pick (the largest value sets it), then
      // values at midpoint x scale so that x x (1 / scale) lands on or next to a midpoint.
      const auto code = static_cast<std::uint8_t>(1 + rng.next() % kv_int4::kMaxCode);
      const float scale = random_sign(rng) * kv_int4::scale_of(code);
      for (int i = 0; i < kGroup; ++i) {
        const float base = rng.next() % 4 == 0 ? kv_int4::level(static_cast<int>(rng.next() % 16))
                                               : kv_int4::midpoint(static_cast<int>(rng.next() % 15));
        float v = base * scale;
        const std::uint64_t nudge = rng.next() % 3;
        if (nudge == 1) v = std::nextafter(v, kInf);
        if (nudge == 2) v = std::nextafter(v, -kInf);
        x[i] = v;
      }
      return;
    }
    case Shape::kRandomBits:
      for (int i = 0; i < kGroup; ++i) x[i] = std::bit_cast<float>(static_cast<std::uint32_t>(rng.next()));
      return;
    case Shape::kNearTie:
      fill_near_tie(rng, x);
      return;
    case Shape::kShapeCount:
      break;
  }
}

// What kv_int4::quantize_group writes for the groups, packed as the row layout packs it.
void scalar_groups(const float* x, std::int64_t groups, std::byte* indices, std::byte* codes) {
  for (std::int64_t g = 0; g < groups; ++g) {
    std::uint8_t q[kGroup];
    codes[g] = static_cast<std::byte>(kv_int4::quantize_group(x + kGroup * g, q));
    for (int i = 0; i < kGroup / 2; ++i) indices[16 * g + i] = static_cast<std::byte>(q[2 * i] | q[2 * i + 1] << 4);
  }
}

const cpu::Isa kIsas[] = {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512};

}  // namespace

SITSRT_ISA_TEST_CASE(isa, "int4 KV groups: every byte as kv_int4::quantize_group, edge cases included", "[int4]",
                     kIsas) {
  const auto quantize = cpu::detail::vec_kernels_for(isa).int4_quantize_groups;
  const std::uint64_t seed = std::random_device{}() | static_cast<std::uint64_t>(std::random_device{}()) << 32;
  CAPTURE(seed);
  test::Rng rng(seed);
  // Batches of 64 groups, one distribution per batch, the input one float past an aligned
  // address (the kernels load unaligned); >= 100k groups over all distributions.
  constexpr std::int64_t kBatch = 64;
  constexpr int kBatchesPerShape = 160;
  std::vector<float> x(kBatch * kGroup + 1);
  std::vector<std::byte> want(kBatch * 17), got(kBatch * 17);
  std::int64_t groups = 0;
  for (int s = 0; s < static_cast<int>(Shape::kShapeCount); ++s) {
    const auto shape = static_cast<Shape>(s);
    CAPTURE(s);
    for (int b = 0; b < kBatchesPerShape; ++b) {
      for (std::int64_t g = 0; g < kBatch; ++g) fill_group(shape, rng, x.data() + 1 + kGroup * g);
      scalar_groups(x.data() + 1, kBatch, want.data(), want.data() + 16 * kBatch);
      std::fill(got.begin(), got.end(), std::byte{0x5A});
      quantize(x.data() + 1, kBatch, got.data(), got.data() + 16 * kBatch);
      if (want != got) {  // name the first group that differs
        for (std::int64_t g = 0; g < kBatch; ++g) {
          CAPTURE(g);
          const float* xg = x.data() + 1 + kGroup * g;
          CAPTURE(std::vector<float>(xg, xg + kGroup));
          REQUIRE(std::to_integer<int>(got[16 * kBatch + g]) == std::to_integer<int>(want[16 * kBatch + g]));
          for (int i = 0; i < 16; ++i) {
            CAPTURE(i);
            REQUIRE(std::to_integer<int>(got[16 * g + i]) == std::to_integer<int>(want[16 * g + i]));
          }
        }
      }
      groups += kBatch;
    }
  }
  REQUIRE(groups >= 100000);
}

SITSRT_ISA_TEST_CASE(isa, "int4 KV groups: a group of zeros, NaN or +-0 gets code 0 and level 1", "[int4]", kIsas) {
  const auto quantize = cpu::detail::vec_kernels_for(isa).int4_quantize_groups;
  for (const float v : {0.0f, -0.0f, kNaN}) {
    std::array<float, kGroup> x;
    x.fill(v);
    x[3] = -0.0f;
    x[7] = kNaN;
    std::array<std::byte, 17> out;
    quantize(x.data(), 1, out.data(), out.data() + 16);
    for (int i = 0; i < 16; ++i) REQUIRE(std::to_integer<int>(out[i]) == 0x88);
    REQUIRE(std::to_integer<int>(out[16]) == 0);
  }
}
