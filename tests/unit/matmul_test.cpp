// matmul and get_rows on every weight layout (stored formats and the CPU's repacked ones) x every
// ISA level this CPU supports x awkward shapes x thread counts, against a double-precision
// reference built from dequantize_row.
#include "cpu/matmul/matmul.hpp"
#include "core/dtype.hpp"
#include "core/half.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/matmul/matmul_kernels.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/repacked_blocks.hpp"
#include "cpu/weight_layout.hpp"
#include "support/isa.hpp"
#include "support/random.hpp"
#include "support/sanitizer.hpp"
#include "support/tolerance.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace sitsrt;
using cpu::WeightLayout;

namespace {

// The levels of the float and integer-dot kernels (the AMX prefill has cases of its own).
const cpu::Isa kIsas[] = {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni};

// Every layout in WeightLayout order: the stored formats, then the repacked ones.
constexpr auto kAllLayouts = [] {
  std::array<WeightLayout, cpu::kWeightLayoutCount> all{};
  for (int i = 0; i < cpu::kWeightLayoutCount; ++i) all[static_cast<std::size_t>(i)] = static_cast<WeightLayout>(i);
  return all;
}();

bool is_float_layout(WeightLayout t) {
  return t == WeightLayout::kF32 || t == WeightLayout::kF16 || t == WeightLayout::kBF16;
}

// A weight matrix in its layout plus what the reference needs: the dequantized values and the
// per-element error magnitudes (tolerance.hpp).
struct TestWeights {
  WeightLayout layout;
  std::int64_t rows, cols;
  std::size_t stride;
  std::vector<std::byte> bytes;
  std::vector<float> values;  // dequantize_row of each row
  std::vector<double> mags;

  [[nodiscard]] cpu::WeightMatrix view() const { return {layout, bytes.data(), rows, cols, stride}; }
};

// Random rows with mixed scales: each row and each 32-element stretch gets its own power-of-two
// scale (so blocks of very different magnitude share a row). Padding between rows is 0xFF:
// NaN for float formats, so a kernel reading past a row poisons its result.
TestWeights make_weights(WeightLayout layout, std::int64_t rows, std::int64_t cols, std::size_t pad, test::Rng& rng) {
  // Rows keep the alignment of their widest field, as in any model file (GGUF tensors start
  // 32-aligned and these rows are whole multiples of it): fp32 scales (FP8, Q8_K) and f32 need
  // 4 bytes, fp16 scales 2. A stride of 2 mod 4 would make the block structs misaligned (UB).
  const bool fp32_fields = layout == WeightLayout::kF32 || layout == WeightLayout::kFP8_E4M3 ||
                           layout == WeightLayout::kFP8_E4M3R || layout == WeightLayout::kQ8_K;
  const std::size_t align = fp32_fields ? 4 : 2;
  pad = (pad + align - 1) / align * align;
  TestWeights w{layout, rows, cols, row_bytes(layout, cols) + pad, {}, {}, {}};
  w.bytes.assign(w.stride * static_cast<std::size_t>(rows), std::byte{0xFF});
  w.values.resize(static_cast<std::size_t>(rows * cols));
  w.mags.resize(static_cast<std::size_t>(rows * cols));
  std::vector<float> src(static_cast<std::size_t>(cols));
  // A tiled layout (Q8_0P) has no rows of its own: the stored rows, converted as a whole matrix.
  const WeightLayout row_layout = cpu::is_tiled(layout) ? cpu::stored_layout(cpu::stored_type(layout)) : layout;
  std::vector<std::byte> stored_rows(cpu::is_tiled(layout) ? w.bytes.size() : 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::exp2(rng.uniform(-6.0f, 3.0f));
    float block_scale = 1.0f;
    for (std::int64_t c = 0; c < cols; ++c) {
      if (c % 32 == 0) block_scale = std::exp2(rng.uniform(-3.0f, 3.0f));
      float v = rng.paired_normal() * row_scale * block_scale;
      if (v == 0.0f) v = row_scale;  // never zeros
      src[static_cast<std::size_t>(c)] = v;
    }
    std::byte* row =
        (cpu::is_tiled(layout) ? stored_rows.data() : w.bytes.data()) + static_cast<std::size_t>(r) * w.stride;
    cpu::quantize_row(row_layout, src.data(), row, cols);
    cpu::dequantize_row(row_layout, row, w.values.data() + r * cols, cols);
    const auto mag = test::weight_magnitudes(row_layout, row, cols);
    std::copy(mag.begin(), mag.end(), w.mags.begin() + r * cols);
  }
  if (cpu::is_tiled(layout)) {
    cpu::CpuContext ctx(1, cpu::Isa::kGeneric, true);
    cpu::copy_to_layout(ctx, {row_layout, stored_rows.data(), rows, cols, w.stride}, layout, w.bytes.data(), w.stride);
  }
  return w;
}

std::vector<float> make_inputs(std::int64_t m, std::int64_t cols, std::int64_t ldx, test::Rng& rng) {
  std::vector<float> x(static_cast<std::size_t>((m - 1) * ldx + cols), std::nanf(""));  // gaps are NaN
  for (std::int64_t i = 0; i < m; ++i) {
    const float scale = std::exp2(rng.uniform(-4.0f, 4.0f));
    for (std::int64_t c = 0; c < cols; ++c) {
      float v = rng.paired_normal() * scale;
      x[static_cast<std::size_t>(i * ldx + c)] = v == 0.0f ? scale : v;
    }
  }
  return x;
}

struct Shape {
  std::int64_t rows, cols, m;
};

std::vector<Shape> matmul_shapes() {
  std::vector<Shape> shapes;
  for (std::int64_t rows : {1, 3, 17, 64, 129}) {
    for (std::int64_t cols : {32, 96, 256}) {
      for (std::int64_t m : {1, 2, 5, 33}) shapes.push_back({rows, cols, m});
    }
  }
  // Long rows (a real model width), several K blocks with a partial last one, M blocking.
  for (Shape s : {Shape{1, 4096, 1}, Shape{17, 4096, 1}, Shape{64, 4096, 2}, Shape{3, 4096, 33}, Shape{129, 4096, 5},
                  Shape{13, 2080, 7}, Shape{9, 96, 130}, Shape{20, 1056, 128}}) {
    shapes.push_back(s);
  }
  // Whole 128-element groups (the g128 formats skip the shapes above that are not): one group,
  // odd group counts, a partial last K block (1152 = 1024 + 128), M blocking.
  for (Shape s : {Shape{5, 128, 1}, Shape{17, 384, 1}, Shape{13, 1152, 7}, Shape{20, 1152, 128}, Shape{9, 128, 130},
                  Shape{33, 640, 2}}) {
    shapes.push_back(s);
  }
  return shapes;
}

// Shapes only the float formats can have (cols not a multiple of 32, or of 16).
std::vector<Shape> float_only_shapes() {
  return {{3, 172, 1}, {17, 172, 5}, {64, 7, 33}, {1, 1, 2}, {129, 172, 2}, {5, 1, 1}, {7, 1037, 3}};
}

// The AVX-512 FP8 decode kernel (also the AMX level's) rounds the activations to bf16 where the
// CPU has AVX512_BF16.
bool fp8_decode_rounds_to_bf16(cpu::Isa isa) {
#if defined(__x86_64__)
  return (isa == cpu::Isa::kAvx512 || isa == cpu::Isa::kAvx512Vnni || isa == cpu::Isa::kAmx) &&
         cpu::detail::avx512_bf16_supported();
#else
  (void)isa;
  return false;
#endif
}

// |x - bf16(x)| <= 2^-8 |x| (round to nearest, 8 significant bits): the extra error of a dot
// product whose activations were rounded to bf16 is at most 2^-8 sum |w| |x|.
constexpr double kBf16Rounding = 0x1p-8;

// Relative error per term of the AMX prefill on top of the float bound: x and w each rounded to
// bf16 (8 significant bits, round to nearest even: unit roundoff 2^-8 each), products exact in
// fp32: |bf16(x) bf16(w) - x w| <= (2 * 2^-8 + 2^-16) |x w|.
constexpr double kBf16OperandsError = 0x1p-7 + 0x1p-16;

// The double reference of one output and its sum of magnitudes, over 8 interleaved partial sums
// (a double sum's rounding is far below any tolerance here): one chain of dependent adds made this
// loop most of the AMX prefill case's run time (~2.5G products). Not inlined: inside check_matmul
// GCC kept the sums in memory (their addresses reach push_back).
struct ReferenceDot {
  double sum, abs_sum;
};
[[gnu::noinline]] ReferenceDot reference_dot(const float* x, const float* w, const double* mags, std::int64_t n) {
  constexpr int kLanes = 8;
  double sum[kLanes] = {}, abs_sum[kLanes] = {};
  std::int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double xv = x[c + j];
      sum[j] += xv * w[c + j];
      abs_sum[j] += std::fabs(xv) * mags[c + j];
    }
  }
  for (int j = 0; c < n; ++c, ++j) {
    const double xv = x[c];
    sum[j] += xv * w[c];
    abs_sum[j] += std::fabs(xv) * mags[c];
  }
  ReferenceDot total{0.0, 0.0};
  for (int j = 0; j < kLanes; ++j) {
    total.sum += sum[j];
    total.abs_sum += abs_sum[j];
  }
  return total;
}

void check_matmul(WeightLayout layout, cpu::Isa isa, int threads, Shape s) {
  CAPTURE(name(layout), cpu::name(isa), threads, s.rows, s.cols, s.m);
  // AMX changes only m > 1; decode stays on the float kernels and their bound.
  const double bf16_error = isa == cpu::Isa::kAmx && s.m > 1 ? kBf16OperandsError : 0.0;
  test::Rng rng(static_cast<std::uint64_t>(s.rows * 1000003 + s.cols * 101 + s.m * 7 + static_cast<int>(layout)));
  const std::size_t pad = std::vector<std::size_t>{0, 6, 64}[static_cast<std::size_t>((s.rows + s.cols) % 3)];
  const TestWeights w = make_weights(layout, s.rows, s.cols, pad, rng);
  const std::int64_t ldx = s.cols + 3, ldy = s.rows + 5;
  const std::vector<float> x = make_inputs(s.m, s.cols, ldx, rng);

  cpu::CpuContext ctx(threads, isa);
  REQUIRE(ctx.isa() == isa);
  // Q8_0P has only the int8 AVX-512 VNNI kernels (qgemm_test; elsewhere refused: repacked_weights_test).
  if (cpu::is_tiled(layout) &&
      (!ctx.int8_activations() || cpu::detail::qdot_kernels_for(isa).matvec[static_cast<int>(layout)] == nullptr)) {
    return;
  }
  ctx.reserve_scratch(cpu::matmul_scratch_floats(w.view(), s.m));
  ctx.reserve_shared_bytes(cpu::matmul_shared_bytes(ctx, w.view(), s.m));
  constexpr float kSentinel = -12345.0f;
  std::vector<float> y(static_cast<std::size_t>(s.m * ldy), kSentinel);
  cpu::matmul(ctx, w.view(), x.data(), ldx, s.m, y.data(), ldy);
  if (s.m == 1 && !cpu::is_tiled(layout)) {  // decode: a row's result does not depend on the rows computed with it
                                             // (tiles: qgemm_test's batch invariance)
    for (std::int64_t r = 0; r < s.rows; ++r) {
      const cpu::WeightMatrix one{layout, w.bytes.data() + static_cast<std::size_t>(r) * w.stride, 1, s.cols, w.stride};
      float alone = -1.0f;
      cpu::matmul(ctx, one, x.data(), ldx, 1, &alone, 1);
      REQUIRE((alone == y[static_cast<std::size_t>(r)] || (std::isnan(alone) && std::isnan(y[static_cast<std::size_t>(r)]))));
    }
  }

  std::vector<double> expected, tolerance;
  std::vector<float> actual;
  for (std::int64_t i = 0; i < s.m; ++i) {
    for (std::int64_t r = 0; r < s.rows; ++r) {
      const auto [sum, abs_sum] =
          reference_dot(x.data() + i * ldx, w.values.data() + r * s.cols, w.mags.data() + r * s.cols, s.cols);
      expected.push_back(sum);
      const bool bf16_acts = layout == WeightLayout::kFP8_E4M3 && s.m == 1 && fp8_decode_rounds_to_bf16(isa);
      const bool fp16_decode = layout == WeightLayout::kFP8_E4M3R && s.m == 1 && cpu::detail::fp8r_decode_native(isa);
      tolerance.push_back(test::dot_tolerance(s.cols, abs_sum, test::extra_roundings(layout)) + bf16_error * abs_sum +
                          (bf16_acts ? kBf16Rounding * abs_sum : 0.0) +
                          (fp16_decode ? test::fp8r_fp16_tolerance(w.bytes.data() + static_cast<std::size_t>(r) * w.stride,
                                                                   s.cols, x.data() + i * ldx, abs_sum)
                                       : 0.0));
      actual.push_back(y[static_cast<std::size_t>(i * ldy + r)]);
    }
    for (std::int64_t r = s.rows; r < ldy && i + 1 < s.m; ++r) {  // gaps between y rows untouched
      REQUIRE(y[static_cast<std::size_t>(i * ldy + r)] == kSentinel);
    }
  }
  test::check_close(expected, actual, tolerance, "matmul");
}

}  // namespace

TEST_CASE("cpu isa names and detection", "[matmul]") {
  CHECK(cpu::name(cpu::Isa::kGeneric) == "generic");
  CHECK(cpu::name(cpu::Isa::kAvx2) == "avx2");
  CHECK(cpu::name(cpu::Isa::kAvx512) == "avx512");
  CHECK(cpu::isa_supported(cpu::Isa::kGeneric));
  CHECK(cpu::isa_supported(cpu::detect_isa()));
  cpu::CpuContext ctx(2, cpu::Isa::kAvx512);  // clamped to what the CPU has
  CHECK(cpu::isa_supported(ctx.isa()));
  CHECK(ctx.threads() == 2);
}

TEST_CASE("cpu scratch grows only and refuses more than reserved", "[matmul]") {
  cpu::CpuContext ctx(3, cpu::Isa::kGeneric);
  CHECK(ctx.scratch_floats() == 0);
  ctx.reserve_scratch(100);
  const std::size_t reserved = ctx.scratch_floats();
  CHECK(reserved >= 100);
  ctx.reserve_scratch(10);
  CHECK(ctx.scratch_floats() == reserved);
  for (int t = 0; t < 3; ++t) {
    float* p = ctx.scratch(t, 100);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
  }
  try {
    (void)ctx.scratch(0, reserved + 1);
    FAIL("scratch past the reservation did not throw");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInternal);
  }
  CHECK_THROWS_AS(ctx.scratch(3, 1), Error);
}

SITSRT_ISA_TEST_CASE(isa, "matmul matches a double reference for every format, ISA and shape", "[matmul]", kIsas) {
  const WeightLayout layout = GENERATE(from_range(std::begin(kAllLayouts), std::end(kAllLayouts)));
  const int threads = GENERATE(1, 3);
  if (test::kSanitized && threads == 1) return;  // support/sanitizer.hpp
  for (const Shape& s : matmul_shapes()) {
    if (fits_blocks(layout, s.cols)) check_matmul(layout, isa, threads, s);
  }
  if (traits(cpu::stored_type(layout)).block_size == 256) {  // K-quants: more super-block widths, K blocks of 1024
    for (Shape s : {Shape{5, 512, 1}, Shape{33, 768, 1}, Shape{7, 2304, 1}, Shape{7, 2304, 9}, Shape{31, 512, 3}}) {
      check_matmul(layout, isa, threads, s);
    }
  }
  if (is_float_layout(layout)) {
    for (const Shape& s : float_only_shapes()) check_matmul(layout, isa, threads, s);
  }
}

TEST_CASE("AMX prefill matches a double reference within bf16 operand rounding", "[matmul][amx][gated]") {
  SITSRT_REQUIRE_ISA(cpu::Isa::kAmx);  // (the float prefill is tested above)
  const WeightLayout layout = GENERATE(from_range(std::begin(kAllLayouts), std::end(kAllLayouts)));
  const int threads = GENERATE(1, 3);
  if (test::kSanitized && threads == 1) return;  // support/sanitizer.hpp
  for (const Shape& s : matmul_shapes()) {
    if (fits_blocks(layout, s.cols)) check_matmul(layout, cpu::Isa::kAmx, threads, s);
  }
  // Whole and partial 16 x 16 tiles and 32 x 32 blocks (rows = weight rows, m = x rows), several
  // 512-column K blocks with a partial last one, more x rows than one 256-row pass, and K not a
  // multiple of 32 (float formats).
  for (Shape s : {Shape{32, 512, 16}, Shape{48, 1024, 32}, Shape{96, 1536, 47}, Shape{33, 2560, 64},
                  Shape{64, 768, 17}, Shape{31, 256, 100}, Shape{16, 3072, 31}, Shape{40, 768, 300},
                  Shape{17, 1280, 513}}) {
    if (fits_blocks(layout, s.cols)) check_matmul(layout, cpu::Isa::kAmx, threads, s);
  }
  if (is_float_layout(layout)) {
    for (const Shape& s : float_only_shapes()) check_matmul(layout, cpu::Isa::kAmx, threads, s);
    check_matmul(layout, cpu::Isa::kAmx, threads, {40, 1037, 19});
  }
}

TEST_CASE("AMX prefill needs the shared buffer for its bf16 copy of x reserved", "[matmul][amx][gated]") {
  SITSRT_REQUIRE_ISA(cpu::Isa::kAmx);
  test::Rng rng(3);
  const TestWeights w = make_weights(WeightLayout::kQ8_0, 8, 64, 0, rng);
  const std::vector<float> x = make_inputs(4, 64, 64, rng);
  std::vector<float> y(4 * 8);
  cpu::CpuContext ctx(1, cpu::Isa::kAmx);
  ctx.reserve_scratch(cpu::matmul_scratch_floats(w.view(), 4));
  CHECK(cpu::matmul_shared_bytes(ctx, w.view(), 4) >= 4 * 64 * 2);
  CHECK_THROWS_AS(cpu::matmul(ctx, w.view(), x.data(), 64, 4, y.data(), 8), Error);
  ctx.reserve_shared_bytes(cpu::matmul_shared_bytes(ctx, w.view(), 4));
  CHECK_NOTHROW(cpu::matmul(ctx, w.view(), x.data(), 64, 4, y.data(), 8));
}

TEST_CASE("matmul rejects bad weights and unreserved scratch", "[matmul]") {
  cpu::CpuContext ctx(1, cpu::Isa::kGeneric);
  std::vector<std::byte> data(4096);
  std::vector<float> x(256, 1.0f), y(256);
  const auto code_of = [&](const cpu::WeightMatrix& w, std::int64_t m) {
    try {
      cpu::matmul(ctx, w, x.data(), 64, m, y.data(), 64);
    } catch (const Error& e) {
      return e.code();
    }
    FAIL("no error");
    return ErrorCode::kInternal;
  };
  CHECK(code_of({WeightLayout::kQ8_0, data.data(), 2, 48, 48}, 1) == ErrorCode::kInvalidArgument);  // 48 % 32
  CHECK(code_of({WeightLayout::kQ8_0, data.data(), 2, 64, 67}, 1) == ErrorCode::kInvalidArgument);  // stride < 68
  CHECK(code_of({WeightLayout::kF32, data.data(), 2, 64, 256}, 2) == ErrorCode::kInternal);         // no scratch
}

SITSRT_ISA_TEST_CASE(isa, "get_rows returns dequantize_row of each id, bit for bit", "[matmul]", kIsas) {
  const WeightLayout layout = GENERATE(from_range(std::begin(kAllLayouts), std::end(kAllLayouts)));
  CAPTURE(name(layout), cpu::name(isa));
  const std::int64_t cols = is_float_layout(layout)                         ? 103
                            : traits(cpu::stored_type(layout)).block_size == 256 ? 512
                            : fits_blocks(layout, 96)                         ? 96
                                                                              : 384;
  test::Rng rng(99);
  const TestWeights table = make_weights(layout, 37, cols, 10, rng);
  const std::vector<std::int32_t> ids = {0, 36, 5, 5, 17, 1, 36, 20};
  const std::int64_t ldo = cols + 1;
  std::vector<float> out(ids.size() * static_cast<std::size_t>(ldo));
  cpu::CpuContext ctx(3, isa);
  cpu::get_rows(ctx, table.view(), ids.data(), static_cast<std::int64_t>(ids.size()), out.data(), ldo);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const float* want = table.values.data() + ids[i] * cols;
    REQUIRE(std::memcmp(out.data() + i * static_cast<std::size_t>(ldo), want, static_cast<std::size_t>(cols) * 4) == 0);
  }
}

TEST_CASE("get_rows rejects an out-of-range id naming it and the row count", "[matmul]") {
  test::Rng rng(5);
  const TestWeights table = make_weights(WeightLayout::kQ4_0, 37, 64, 0, rng);
  cpu::CpuContext ctx(1, cpu::Isa::kGeneric);
  std::vector<float> out(3 * 64);
  for (std::int32_t bad : {37, -1, 1000}) {
    const std::vector<std::int32_t> ids = {1, bad, 2};
    try {
      cpu::get_rows(ctx, table.view(), ids.data(), 3, out.data(), 64);
      FAIL("no error for id " << bad);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      const std::string message = e.what();
      CHECK_THAT(message, Catch::Contains("id " + std::to_string(bad)) && Catch::Contains("37 rows"));
    }
  }
}

SITSRT_ISA_TEST_CASE(isa, "f16 weights decode every half value exactly on every ISA", "[matmul]", kIsas) {
  CAPTURE(cpu::name(isa));
  std::vector<std::uint16_t> halves(65536);
  for (std::uint32_t h = 0; h < 65536; ++h) halves[h] = static_cast<std::uint16_t>(h);
  const cpu::WeightMatrix table{WeightLayout::kF16, reinterpret_cast<const std::byte*>(halves.data()), 1, 65536,
                                131072};
  std::vector<float> out(65536);
  const std::int32_t id = 0;
  cpu::CpuContext ctx(1, isa);
  cpu::get_rows(ctx, table, &id, 1, out.data(), 65536);
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float want = fp16_to_fp32(static_cast<std::uint16_t>(h));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(out[h]));
    } else {
      REQUIRE(std::memcmp(&out[h], &want, 4) == 0);
    }
  }
}

SITSRT_ISA_TEST_CASE(isa, "fp8 e4m3 weights decode every code as dequantize_row on every ISA", "[matmul]", kIsas) {
  CAPTURE(cpu::name(isa));
  // Four blocks holding the 256 codes, scales that keep every product normal and one that makes
  // the smallest ones subnormal floats (the scale-by-256 path must still round identically).
  for (const float d : {0.75f, 3.0e-3f, 1.0e-36f}) {
    std::vector<BlockFP8_E4M3> blocks(4);
    for (int c = 0; c < 256; ++c) blocks[static_cast<std::size_t>(c / 64)].qs[c % 64] = static_cast<std::uint8_t>(c);
    for (int b = 0; b < 4; ++b) blocks[static_cast<std::size_t>(b)].d = b % 2 == 0 ? d : -d;
    std::vector<float> want(256), out(256);
    dequantize_row(DType::kFP8_E4M3, blocks.data(), want.data(), 256);
    const cpu::WeightMatrix table{WeightLayout::kFP8_E4M3, reinterpret_cast<const std::byte*>(blocks.data()), 1, 256,
                                  272};
    const std::int32_t id = 0;
    cpu::CpuContext ctx(1, isa);
    cpu::get_rows(ctx, table, &id, 1, out.data(), 256);
    for (int c = 0; c < 256; ++c) {
      if ((c & 0x7F) == 0x7F) continue;  // NaN codes: never written by the encoder (the SIMD
                                         // decoders read them as +-480, see quantization.md)
      CAPTURE(d, c);
      REQUIRE(std::memcmp(&out[static_cast<std::size_t>(c)], &want[static_cast<std::size_t>(c)], 4) == 0);
    }
  }
}

#if defined(__x86_64__)
namespace {

// One row of two blocks filled with 1.0 (0x38) but for code c at element p, and x one-hot at
// p: y = d * e4m3(c) with no other rounding, so any decode error shows. Exponent-0 codes
// (zero, subnormals) send their block down the BF16 kernel's F16C fallback; the others keep it
// on the vdpbf16ps path (the filler code has exponent 7).
void check_fp8_every_code(const char* kernel_name, cpu::detail::MatvecFn kernel) {
  for (const float d : {0.75f, -3.0e-3f}) {
    for (int c = 0; c < 256; ++c) {
      const int p = (c * 37) % 128;
      std::vector<BlockFP8_E4M3> blocks(2);
      for (BlockFP8_E4M3& b : blocks) {
        b.d = d;
        std::memset(b.qs, 0x38, sizeof b.qs);
      }
      blocks[static_cast<std::size_t>(p / 64)].qs[p % 64] = static_cast<std::uint8_t>(c);
      std::vector<float> x(128, 0.0f);
      x[static_cast<std::size_t>(p)] = 1.0f;
      float y = 0.0f;
      kernel(reinterpret_cast<const std::byte*>(blocks.data()), 136, 128, x.data(), &y, 1);
      const float want = (c & 0x7F) == 0x7F ? d * ((c & 0x80) != 0 ? -480.0f : 480.0f)  // NaN codes
                                            : d * fp8_e4m3_to_fp32(static_cast<std::uint8_t>(c));
      CAPTURE(kernel_name, d, c, p);
      REQUIRE(y == want);  // equal values (the -0 code sums to +0 with the other products)
    }
  }
}

// Rows from the encoder, then exponent-0 codes planted in every third block (the BF16
// kernel's fallback) and blocks of very different scales. Tolerance: the dot product's
// float rounding (k + 2 roundings per term), plus 2^-8 sum |w x| for bf16 activations.
void check_fp8_random_rows(const char* kernel_name, cpu::detail::MatvecFn kernel) {
  test::Rng rng(4242);
  const bool bf16 = std::string(kernel_name) == "bf16";
  // 32768: the widest row the BF16 kernel takes; 32832: one block more, run by the F16C one.
  for (const Shape s : {Shape{1, 64, 1}, Shape{3, 128, 1}, Shape{17, 192, 1}, Shape{64, 4096, 1}, Shape{5, 1344, 1},
                        Shape{2, 32768, 1}, Shape{2, 32832, 1}}) {
    CAPTURE(kernel_name, s.rows, s.cols);
    TestWeights w = make_weights(WeightLayout::kFP8_E4M3, s.rows, s.cols, 4, rng);
    for (std::int64_t r = 0; r < s.rows; ++r) {
      auto* blocks = reinterpret_cast<BlockFP8_E4M3*>(w.bytes.data() + static_cast<std::size_t>(r) * w.stride);
      for (std::int64_t b = r % 3; b < s.cols / 64; b += 3) {
        for (int k = 0; k < 3; ++k) {
          blocks[b].qs[rng.uniform_int(0, 63)] = static_cast<std::uint8_t>(rng.uniform_int(0, 7) | (k == 1 ? 0x80 : 0));
        }
      }
      dequantize_row(DType::kFP8_E4M3, blocks, w.values.data() + r * s.cols, s.cols);
    }
    const std::vector<float> x = make_inputs(1, s.cols, s.cols, rng);
    std::vector<float> y(static_cast<std::size_t>(s.rows));
    kernel(w.bytes.data(), w.stride, s.cols, x.data(), y.data(), s.rows);
    std::vector<double> expected, tolerance;
    for (std::int64_t r = 0; r < s.rows; ++r) {
      double sum = 0.0, abs_sum = 0.0;
      for (std::int64_t c = 0; c < s.cols; ++c) {
        const double wv = w.values[static_cast<std::size_t>(r * s.cols + c)], xv = x[static_cast<std::size_t>(c)];
        sum += wv * xv;
        abs_sum += std::fabs(wv * xv);
      }
      expected.push_back(sum);
      tolerance.push_back(test::dot_tolerance(s.cols, abs_sum, 2) + (bf16 ? kBf16Rounding * abs_sum : 0.0));
    }
    test::check_close(expected, y, tolerance, "fp8 matvec");
  }
}

}  // namespace

// The AVX-512 FP8 decode kernels (matmul_kernels.hpp): the F16C one runs where the CPU has AVX-512,
// the BF16 one where it also has AVX512-BF16.
TEST_CASE("fp8 e4m3 AVX-512 f16c decode kernel: every code exactly, and a double reference on random rows",
          "[matmul][gated]") {
  SITSRT_REQUIRE_ISA(cpu::Isa::kAvx512);
  check_fp8_every_code("f16c", cpu::detail::matvec_fp8_avx512_f16c);
  check_fp8_random_rows("f16c", cpu::detail::matvec_fp8_avx512_f16c);
}

TEST_CASE("fp8 e4m3 AVX-512 bf16 decode kernel: every code exactly, through both block paths, and random rows",
          "[matmul][gated]") {
  SITSRT_REQUIRE_ISA(cpu::Isa::kAvx512);
  if (!cpu::detail::avx512_bf16_supported()) SITSRT_SKIP("this CPU lacks AVX512-BF16");
  check_fp8_every_code("bf16", cpu::detail::matvec_fp8_avx512_bf16);
  check_fp8_random_rows("bf16", cpu::detail::matvec_fp8_avx512_bf16);
}
#endif
