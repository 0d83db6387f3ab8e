// Tolerances derived from the arithmetic (dtype and problem size), in one place, and an array
// comparison that reports the worst element (index, expected, actual, tolerance).
//
// Model. Float operations are correctly rounded: fl(a op b) = (a op b)(1 + e), |e| <= u = 2^-24.
// A sum or dot product of k terms evaluated in float in ANY order (sequential, lane-parallel,
// blocked, with or without FMA) satisfies (Higham, Accuracy and Stability, Thm 3.1 / 3.5):
//     |computed - exact| <= gamma(k) * sum_i |term_i|,   gamma(k) = k u / (1 - k u).
// The kernels choose blocked and lane-parallel orders whose typical error grows like sqrt(k) or
// k / 16, but a test must hold for every order a kernel may legally pick, so the bound is used
// as is. It is still tight enough to catch real bugs: a dropped or doubled block, a wrong
// scale, a stride error or a misplaced nibble moves the result by O(1) * sum |term|.
//
// References are computed in double from the exact values the kernel sees (dequantize_row of
// the stored weights; the F16 cache read back), so only the kernel's own float rounding counts.
#pragma once

#include "core/dtype.hpp"
#include "core/half.hpp"
#include "core/kquant_blocks.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/repacked_blocks.hpp"
#include "cpu/weight_layout.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

namespace sitsrt::test {

inline constexpr double kUnitRoundoff = 0x1p-24;  // float, round to nearest

// gamma(k) = k u / (1 - k u): relative bound after k roundings on any path.
inline double gamma(std::int64_t k) {
  const double ku = static_cast<double>(k) * kUnitRoundoff;
  return ku / (1.0 - ku);
}

// A float dot product of length k against its exact value, where abs_sum = sum_i |x_i * w_i|.
// `extra_roundings` covers per-term steps beyond multiply-and-add: a quantized kernel scales
// each block's partial sum by d (one more rounding) and the reference weight is itself
// fl(d * q) (another), so quantized formats pass 2 (4 for formats with a min, whose weight is
// fl(fl(d q) + m)).
inline double dot_tolerance(std::int64_t k, double abs_sum, int extra_roundings = 0) {
  return gamma(k + extra_roundings) * abs_sum;
}

// Roundings a matmul kernel may add per term on top of the k of the dot product itself. The
// repacked layouts' float kernels dot the dequantized weights: the default.
inline int extra_roundings(cpu::WeightLayout layout) {
  using cpu::WeightLayout;
  switch (layout) {
    case WeightLayout::kF32:
    case WeightLayout::kF16:
    case WeightLayout::kBF16:
      return 1;
    case WeightLayout::kQ4_1:
    case WeightLayout::kQ5_1:
      return 4;
    // K-quants: the weight is fl(fl(d sc) q) [- fl(dmin m)], the kernel rounds fl(d sc), the
    // sub-block partial sum times it, and (min formats) the min term and its subtraction.
    case WeightLayout::kQ2_K:
    case WeightLayout::kQ4_K:
    case WeightLayout::kQ5_K:
      return 6;
    case WeightLayout::kQ3_K:
    case WeightLayout::kQ6_K:
      return 4;
    default:
      return 2;
  }
}

// The magnitude each weight contributes to the error bound: |w| for plain and scale-only
// formats; |d q| + |m| for formats with a min, whose kernels sum d (q . x) and m sum(x)
// separately (so cancellation between d q and m does not shrink the bound). The repacked
// layouts' kernels multiply the dequantized weights: |w|.
inline std::vector<double> weight_magnitudes(cpu::WeightLayout layout, const void* row, std::int64_t n) {
  std::vector<double> mag(static_cast<std::size_t>(n));
  std::vector<float> w(static_cast<std::size_t>(n));
  cpu::dequantize_row(layout, row, w.data(), n);
  for (std::int64_t i = 0; i < n; ++i) mag[static_cast<std::size_t>(i)] = std::fabs(w[static_cast<std::size_t>(i)]);
  if (cpu::is_repacked(layout)) return mag;
  const DType type = cpu::stored_type(layout);
  if (type == DType::kQ2_K || type == DType::kQ4_K || type == DType::kQ5_K) {
    // The min term of each element is what the block decodes to with every level zeroed.
    const int block_bytes = traits(type).block_bytes;
    std::vector<std::byte> zeroed(static_cast<const std::byte*>(row),
                                  static_cast<const std::byte*>(row) + n / kSuperBlock * block_bytes);
    for (std::int64_t b = 0; b < n / kSuperBlock; ++b) {
      std::byte* block = zeroed.data() + b * block_bytes;
      if (type == DType::kQ2_K) std::memset(block + offsetof(BlockQ2_K, qs), 0, sizeof(BlockQ2_K::qs));
      if (type == DType::kQ4_K) std::memset(block + offsetof(BlockQ4_K, qs), 0, sizeof(BlockQ4_K::qs));
      if (type == DType::kQ5_K) std::memset(block + offsetof(BlockQ5_K, qh), 0, sizeof(BlockQ5_K::qh) + sizeof(BlockQ5_K::qs));
    }
    std::vector<float> minus_min(static_cast<std::size_t>(n));
    dequantize_row(type, zeroed.data(), minus_min.data(), n);
    for (std::size_t i = 0; i < mag.size(); ++i) {
      mag[i] = std::fabs(static_cast<double>(w[i]) - minus_min[i]) + std::fabs(minus_min[i]);  // |d sc q| + |dmin m|
    }
    return mag;
  }
  if (type != DType::kQ4_1 && type != DType::kQ5_1) return mag;
  const auto* bytes = static_cast<const std::byte*>(row);
  const int block_bytes = traits(type).block_bytes;
  for (std::int64_t b = 0; b < n / kQBlock; ++b) {
    std::uint16_t m_bits;  // both formats: fp16 d at offset 0, fp16 m at offset 2
    std::memcpy(&m_bits, bytes + b * block_bytes + 2, 2);
    const double m = fp16_to_fp32(m_bits);
    for (std::int64_t j = b * kQBlock; j < (b + 1) * kQBlock; ++j) {
      const auto i = static_cast<std::size_t>(j);
      mag[i] = std::fabs(static_cast<double>(w[i]) - m) + std::fabs(m);  // |d q| + |m|
    }
  }
  return mag;
}

// Extra error of the AVX512-FP16 FP8R decode (cpu/matmul/matvec_fp8r_avx512fp16.cpp) for one row
// against x: fp16 arithmetic (unit roundoff 2^-11) on each term's path rounds x, the product,
// the block's pair sum, the r_i FMA, up to 8 accumulations and the pair of accumulators: 13
// roundings, so gamma16(13) * sum |w x|; plus, where results fall in fp16's subnormal range,
// at most half its spacing (2^-25 in units of the scaled sum, 2^e |s| in real units with
// max |x| = f 2^e) per operation, 4 per lane and block (32 lanes).
inline double fp8r_fp16_tolerance(const void* row, std::int64_t cols, const float* x, double abs_sum) {
  const std::int64_t nb = cols / kFp8Block;
  std::vector<BlockFP8_E4M3> blocks(static_cast<std::size_t>(nb));
  cpu::unpack_row_fp8r(static_cast<const std::byte*>(row), blocks.data(), nb);
  double max_d = 0.0, max_x = 0.0;
  for (const BlockFP8_E4M3& b : blocks) max_d = std::max(max_d, std::fabs(static_cast<double>(b.d)));
  for (std::int64_t c = 0; c < cols; ++c) max_x = std::max(max_x, std::fabs(static_cast<double>(x[c])));
  int e = 0;
  std::frexp(max_x, &e);
  const double u16 = 0x1p-11, roundings = 13.0;
  const double relative = roundings * u16 / (1.0 - roundings * u16);
  const double absolute = static_cast<double>(nb) * 32.0 * 4.0 * 0x1p-25 * std::ldexp(1.0, e) * 2.0 * max_d;
  return relative * abs_sum + absolute;
}

// Softmax-weighted sum out = sum_p P_p v_p with P = softmax(s), when every score carries an
// absolute error of at most score_err: each P_p moves by at most P_p * (2 score_err + rounding
// of exp, of the n-term sum of exponentials, of the division), and the n-term weighted sum
// adds gamma(n) more. weighted_abs = sum_p P_p |v_p| (exact P). exp_ulps: accuracy of the
// kernel's exp (the SIMD exp is within a few ulp; 8 is a safe margin).
inline double softmax_weighted_tolerance(double score_err, std::int64_t n, double weighted_abs, int exp_ulps = 8) {
  const double p_rel = 2.0 * score_err + gamma(n + exp_ulps + 4);
  return (p_rel * (1.0 + p_rel) + gamma(n + 2)) * weighted_abs;
}

struct Mismatch {
  std::int64_t count = 0;   // elements out of tolerance
  std::int64_t index = -1;  // the worst one (largest error / tolerance)
  double expected = 0.0, actual = 0.0, tolerance = 0.0;
};

inline Mismatch find_mismatch(std::span<const double> expected, std::span<const float> actual,
                              std::span<const double> tolerance) {
  Mismatch m;
  double worst = -1.0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double err = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    const double ratio = std::isnan(err) ? std::numeric_limits<double>::infinity() : err / (tolerance[i] + 1e-300);
    if (!(err <= tolerance[i])) ++m.count;
    if (ratio > worst) {
      worst = ratio;
      m.index = static_cast<std::int64_t>(i);
      m.expected = expected[i];
      m.actual = actual[i];
      m.tolerance = tolerance[i];
    }
  }
  return m;
}

// One Catch assertion per array: passes, or fails naming the worst element.
inline void check_close(std::span<const double> expected, std::span<const float> actual,
                        std::span<const double> tolerance, std::string_view what) {
  REQUIRE(expected.size() == actual.size());
  REQUIRE(expected.size() == tolerance.size());
  const Mismatch m = find_mismatch(expected, actual, tolerance);
  INFO(what << ": " << m.count << " of " << expected.size() << " elements out of tolerance; worst at index " << m.index
            << ": expected " << m.expected << ", actual " << m.actual << ", tolerance " << m.tolerance);
  CHECK(m.count == 0);
}

}  // namespace sitsrt::test
