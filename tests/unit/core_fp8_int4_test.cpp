// The non-GGUF weight formats: FP8 E4M3 codes against an independent double-precision
// model of the format (all 256 codes, rounding ties, saturation), and INT4 g128's layout,
// its lossless round trip of integer (q, z, fp16 d) checkpoints and its quantization error.
#include "core/dtype.hpp"
#include "core/half.hpp"
#include "core/quant_blocks.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace sitsrt;

namespace {

// OCP FP8 E4M3FN in double, from the specification: sign, 4 exponent bits (bias 7), 3 mantissa
// bits; exponent 0 is subnormal (m / 8 * 2^-6); S.1111.111 is NaN; no infinities.
double e4m3_reference(int code) {
  const double sign = (code & 0x80) != 0 ? -1.0 : 1.0;
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * (m / 8.0) * std::pow(2.0, -6);
  return sign * (1.0 + m / 8.0) * std::pow(2.0, e - 7);
}

// Nearest finite code to v by exhaustive search, ties to the even code (even mantissa), values
// beyond +-448 saturated: what fp32_to_fp8_e4m3 must return.
int nearest_code(double v) {
  int best = -1;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 256; ++c) {
    const double value = e4m3_reference(c);
    if (std::isnan(value) || std::signbit(value) != std::signbit(v)) continue;
    const double err = std::fabs(value - v);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

TEST_CASE("fp8 and int4 g128 in the dtype registry", "[core]") {
  CHECK(row_bytes(DType::kFP8_E4M3, 256) == 272);
  CHECK_FALSE(fits_blocks(DType::kFP8_E4M3, 96));
  CHECK(row_bytes(DType::kQ4_G128, 384) == 204);
  CHECK(dtype_from_name("FP8_E4M3") == DType::kFP8_E4M3);
  CHECK(dtype_from_name("q4_g128") == DType::kQ4_G128);
  CHECK_FALSE(fits_blocks(DType::kQ4_G128, 96));
}

TEST_CASE("fp8 e4m3 decodes all 256 codes as the specification's double values", "[core]") {
  for (int c = 0; c < 256; ++c) {
    CAPTURE(c);
    const double want = e4m3_reference(c);
    const float got = fp8_e4m3_to_fp32(static_cast<std::uint8_t>(c));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
      continue;
    }
    REQUIRE(static_cast<double>(got) == want);
    REQUIRE(std::signbit(got) == std::signbit(want));
  }
  CHECK(fp8_e4m3_to_fp32(0x7E) == 448.0f);
  CHECK(fp8_e4m3_to_fp32(0x01) == std::ldexp(1.0f, -9));
}

TEST_CASE("fp8 e4m3 encode: every code round-trips, ties go to even, beyond 448 saturates", "[core]") {
  for (int c = 0; c < 256; ++c) {
    const double v = e4m3_reference(c);
    if (std::isnan(v)) continue;
    CAPTURE(c);
    REQUIRE(fp32_to_fp8_e4m3(static_cast<float>(v)) == c);
  }
  // Midpoints between neighbouring codes of each sign: exactly half way goes to the even code,
  // one float either side to the nearer one.
  for (int c = 0; c < 0x7E; ++c) {
    for (const int sign : {0, 0x80}) {
      const double a = e4m3_reference(c | sign), b = e4m3_reference((c + 1) | sign);
      const auto mid = static_cast<float>((a + b) / 2.0);  // 5 significant bits: exact in float
      REQUIRE(static_cast<double>(mid) == (a + b) / 2.0);
      CAPTURE(c, sign);
      REQUIRE(fp32_to_fp8_e4m3(mid) == (((c & 1) == 0 ? c : c + 1) | sign));
      const float toward_b = std::nextafter(mid, static_cast<float>(2.0 * b - a));
      const float toward_a = std::nextafter(mid, static_cast<float>(a));
      REQUIRE(fp32_to_fp8_e4m3(toward_b) == ((c + 1) | sign));
      REQUIRE(fp32_to_fp8_e4m3(toward_a) == (c | sign));
    }
  }
  for (const float big : {448.0f, 449.0f, 463.99f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::infinity()}) {
    CAPTURE(big);
    CHECK(fp32_to_fp8_e4m3(big) == 0x7E);
    CHECK(fp32_to_fp8_e4m3(-big) == 0xFE);
  }
  CHECK((fp32_to_fp8_e4m3(std::nanf("")) & 0x7F) == 0x7F);
  CHECK(fp32_to_fp8_e4m3(std::ldexp(1.0f, -11)) == 0x00);  // a quarter of the smallest subnormal
  CHECK(fp32_to_fp8_e4m3(-0.0f) == 0x80);
}

TEST_CASE("fp8 e4m3 encode picks the nearest code for random floats (double search)", "[core]") {
  test::Rng rng(2026);
  for (int i = 0; i < 50000; ++i) {
    const float v = (rng.uniform(0.0f, 1.0f) < 0.5f ? -1.0f : 1.0f) * std::exp2(rng.uniform(-12.0f, 9.5f));
    CAPTURE(v);
    REQUIRE(fp32_to_fp8_e4m3(v) == nearest_code(v));
  }
}

TEST_CASE("fp8 e4m3 rows: block amax maps to 448, error within half a code step", "[core]") {
  test::Rng rng(31);
  const std::int64_t n = 64 * 9;
  std::vector<float> x(n);
  for (std::int64_t i = 0; i < n; ++i) x[i] = rng.normal() * std::exp2(static_cast<float>(i / 64) - 4.0f);
  std::vector<BlockFP8_E4M3> blocks(n / 64);
  quantize_row(DType::kFP8_E4M3, x.data(), blocks.data(), n);
  std::vector<float> y(n);
  dequantize_row(DType::kFP8_E4M3, blocks.data(), y.data(), n);
  for (std::int64_t b = 0; b < n / 64; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 64; ++j) amax = std::max(amax, std::fabs(x[b * 64 + j]));
    REQUIRE(blocks[b].d == amax / 448.0f);
    const double d = blocks[b].d;
    for (int j = 0; j < 64; ++j) {
      const double v = x[b * 64 + j], got = y[b * 64 + j];
      // Half the spacing of E4M3 at |v| / d (2^-4 relative for normals, 2^-10 absolute below
      // 2^-6), times d, plus the float rounding of x / d and of d * code.
      const double scaled = std::fabs(v) / d;
      const double half_step = scaled < 0x1p-6 ? 0x1p-10 : std::exp2(std::floor(std::log2(scaled)) - 4.0);
      REQUIRE(std::fabs(got - v) <= d * half_step * (1.0 + 1e-6) + std::fabs(v) * 1e-6);
    }
  }
}

TEST_CASE("q4_g128 stores integer checkpoints (q, z, fp16 d) losslessly, nibbles as Q4_0", "[core]") {
  test::Rng rng(5);
  const std::int64_t n = 128 * 3;
  std::vector<int> q(n);
  std::vector<float> x(n);
  const float scales[] = {0.25f, 0.0078125f, 3.0f};
  const int zeros[] = {5, 0, 15};
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t b = i / 128;
    // Every block holds 0 and 15 so its min/max scale is exactly the checkpoint's d.
    q[i] = i % 128 == 7 ? 0 : i % 128 == 90 ? 15 : rng.uniform_int(0, 15);
    x[i] = scales[b] * static_cast<float>(q[i] - zeros[b]);
  }
  std::vector<BlockQ4_G128> blocks(n / 128);
  quantize_row(DType::kQ4_G128, x.data(), blocks.data(), n);
  std::vector<float> y(n);
  dequantize_row(DType::kQ4_G128, blocks.data(), y.data(), n);
  for (std::int64_t b = 0; b < n / 128; ++b) {
    CAPTURE(b);
    CHECK(fp16_to_fp32(blocks[b].d) == scales[b]);
    CHECK(blocks[b].zero == zeros[b]);
    CHECK(blocks[b].reserved == 0);
    for (int s = 0; s < 4; ++s) {
      for (int j = 0; j < 16; ++j) {
        REQUIRE((blocks[b].qs[16 * s + j] & 15) == q[b * 128 + 32 * s + j]);
        REQUIRE((blocks[b].qs[16 * s + j] >> 4) == q[b * 128 + 32 * s + 16 + j]);
      }
    }
  }
  REQUIRE(std::memcmp(x.data(), y.data(), n * sizeof(float)) == 0);
}

TEST_CASE("q4_g128 round trip of random rows is within one step", "[core]") {
  test::Rng rng(17);
  const std::int64_t n = 128 * 11;
  std::vector<float> x(n);
  for (std::int64_t i = 0; i < n; ++i) x[i] = rng.normal() * 0.1f + (i / 128 == 3 ? 1.0f : 0.0f);  // block 3 > 0
  std::vector<BlockQ4_G128> blocks(n / 128);
  quantize_row(DType::kQ4_G128, x.data(), blocks.data(), n);
  std::vector<float> y(n);
  dequantize_row(DType::kQ4_G128, blocks.data(), y.data(), n);
  for (std::int64_t b = 0; b < n / 128; ++b) {
    float lo = 0.0f, hi = 0.0f;
    for (int j = 0; j < 128; ++j) {
      lo = std::min(lo, x[b * 128 + j]);
      hi = std::max(hi, x[b * 128 + j]);
    }
    // Round to nearest is half a step; the rounded zero point can push one extreme a further
    // half step into the clamp; the fp16 scale moves the largest level by <= 15 * 2^-11 steps.
    const double step = (hi - lo) / 15.0;
    for (int j = 0; j < 128; ++j) REQUIRE(std::fabs(y[b * 128 + j] - x[b * 128 + j]) <= step * 1.01);
  }
  // A constant block (range widened to contain 0) is exact up to the fp16 scale.
  std::vector<float> constant(128, -0.75f), back(128);
  BlockQ4_G128 block{};
  quantize_row(DType::kQ4_G128, constant.data(), &block, 128);
  dequantize_row(DType::kQ4_G128, &block, back.data(), 128);
  for (const float v : back) CHECK(v == Approx(-0.75f).epsilon(1e-3));
  std::vector<float> zeros(128, 0.0f);
  quantize_row(DType::kQ4_G128, zeros.data(), &block, 128);
  dequantize_row(DType::kQ4_G128, &block, back.data(), 128);
  for (const float v : back) CHECK(v == 0.0f);
}
