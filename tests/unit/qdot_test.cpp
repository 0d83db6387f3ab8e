// Decode with int8-quantized activations (cpu/qdot/qdot_kernels.hpp) on every ISA level: the shared
// activation quantizer bit for bit against an independent scalar reference, and matmul with an
// int8-activation context against a double reference built from the raw block bytes and that
// quantized row (tight: only the kernel's float rounding may differ), plus the end-to-end error
// bound against the unquantized input (the activation rounding itself).
#include "core/dtype.hpp"
#include "core/half.hpp"
#include "core/kquant_blocks.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/decode_prefetch.hpp"
#include "cpu/matmul/matmul.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "support/isa.hpp"
#include "support/random.hpp"
#include "support/sanitizer.hpp"
#include "support/tolerance.hpp"

#include <sitsrt/error.hpp>

#include <stdlib.h>  // setenv / unsetenv

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <vector>

using namespace sitsrt;

namespace {

// The levels of the float and integer-dot kernels (the AMX prefill has cases of its own).
const cpu::Isa kIsas[] = {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni};

constexpr DType kIntTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ4_G128,
                               DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL};

// Independent scalar reference of the documented activation quantization.
struct RefRow {
  std::vector<std::int8_t> q;
  std::vector<float> d;
};
RefRow reference_quantize(const float* x, std::int64_t cols) {
  RefRow r{std::vector<std::int8_t>(static_cast<std::size_t>(cols)), std::vector<float>(static_cast<std::size_t>(cols / 32))};
  for (std::int64_t b = 0; b < cols / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.0f;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    r.d[static_cast<std::size_t>(b)] = d;
    for (int i = 0; i < 32; ++i) {
      const float v = x[b * 32 + i] * id;
      float rounded = std::round(v);                                        // half away from zero
      if (std::fabs(v - std::trunc(v)) == 0.5f) rounded = 2.0f * std::round(v / 2.0f);  // ties to even
      r.q[static_cast<std::size_t>(b * 32 + i)] = static_cast<std::int8_t>(rounded);
    }
  }
  return r;
}

// Signed integer level of element i of a block (w = d * level [+ m]) and the format's offset.
int level(DType type, const std::byte* block, int i) {
  std::uint32_t qh = 0;
  switch (type) {
    case DType::kQ4_G128: {  // i < 128; sub-block i / 32 packed as Q4_0, zero point in byte 2
      const auto byte = static_cast<int>(block[4 + 16 * (i / 32) + i % 16]);
      return (i % 32 < 16 ? byte & 15 : byte >> 4) - (static_cast<int>(block[2]) & 15);
    }
    case DType::kQ8_0:
      return static_cast<int>(static_cast<std::int8_t>(block[2 + i]));
    case DType::kQ4_0:
    case DType::kQ4_1: {
      const auto byte = static_cast<int>(block[(type == DType::kQ4_0 ? 2 : 4) + i % 16]);
      const int u = i < 16 ? byte & 15 : byte >> 4;
      return type == DType::kQ4_0 ? u - 8 : u;
    }
    default: {
      const int base = type == DType::kQ5_0 ? 2 : 4;
      std::memcpy(&qh, block + base, 4);
      const auto byte = static_cast<int>(block[base + 4 + i % 16]);
      const int u = (i < 16 ? byte & 15 : byte >> 4) | static_cast<int>(((qh >> i) & 1u) << 4);
      return type == DType::kQ5_0 ? u - 16 : u;
    }
  }
}
int offset_bound(DType type) {  // the largest offset any ISA's kernel may fold into its lanes
  return type == DType::kQ8_0   ? 128
         : type == DType::kQ6_K ? 32
         : type == DType::kQ5_0 || type == DType::kQ5_1 || type == DType::kQ4_G128 ? 16
                                                                                    : 8;
}
bool has_min(DType type) {
  return type == DType::kQ4_1 || type == DType::kQ5_1 || type == DType::kQ2_K || type == DType::kQ4_K ||
         type == DType::kQ5_K;
}
float half_at(const std::byte* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// Element c of a stored row as scale * level + min (the decomposition a kernel may exploit).
struct WeightElement {
  double scale, level, min;
};
WeightElement element(DType type, const std::byte* row, std::int64_t c) {
  const int bb = traits(type).block_bytes;
  if (type == DType::kQ4_K || type == DType::kQ5_K) {
    BlockQ5_K b5{};
    BlockQ4_K b{};  // Q5_K: same d, dmin, scales; qs after its qh
    std::memcpy(&b, row + c / 256 * bb, 16);
    const std::uint8_t* qs = b.qs;
    if (type == DType::kQ5_K) {
      std::memcpy(&b5, row + c / 256 * bb, sizeof b5);
      qs = b5.qs;
    } else {
      std::memcpy(&b, row + c / 256 * bb, sizeof b);
    }
    const int e = static_cast<int>(c % 256);
    const ScaleMin sm = unpack_scale_min_k4(b.scales, e / 32);
    int u = (qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 15;
    if (type == DType::kQ5_K) u |= ((b5.qh[e % 32] >> (e / 32)) & 1) << 4;
    return {fp16_to_fp32(b.d) * static_cast<double>(sm.scale), static_cast<double>(u),
            -static_cast<double>(fp16_to_fp32(b.dmin)) * sm.min};
  }
  if (type == DType::kQ2_K || type == DType::kQ3_K) {  // 2-bit planes: byte 32 n + l, bit pair j
    const int e = static_cast<int>(c % 256), n = e / 128, j = (e % 128) / 32, l = e % 32;
    if (type == DType::kQ2_K) {
      BlockQ2_K b;
      std::memcpy(&b, row + c / 256 * bb, sizeof b);
      const int sm = b.scales[e / 16];
      return {fp16_to_fp32(b.d) * static_cast<double>(sm & 15), static_cast<double>((b.qs[32 * n + l] >> (2 * j)) & 3),
              -static_cast<double>(fp16_to_fp32(b.dmin)) * (sm >> 4)};
    }
    BlockQ3_K b;
    std::memcpy(&b, row + c / 256 * bb, sizeof b);
    const int low = (b.qs[32 * n + l] >> (2 * j)) & 3;
    const bool high = (b.hmask[l] >> (e / 32)) & 1;
    return {fp16_to_fp32(b.d) * static_cast<double>(unpack_scale_q3_k(b.scales, e / 16)),
            static_cast<double>(high ? low : low - 4), 0.0};
  }
  if (type == DType::kIQ4_NL) {
    BlockIQ4_NL b;
    std::memcpy(&b, row + c / 32 * bb, sizeof b);
    const int i = static_cast<int>(c % 32);
    const int index = i < 16 ? b.qs[i] & 15 : b.qs[i - 16] >> 4;
    return {fp16_to_fp32(b.d), static_cast<double>(kIq4nlLevels[index]), 0.0};
  }
  if (type == DType::kQ6_K) {
    BlockQ6_K b;
    std::memcpy(&b, row + c / 256 * bb, sizeof b);
    const int e = static_cast<int>(c % 256), h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int u = ((b.ql[64 * h + 32 * (j % 2) + l] >> (4 * (j / 2))) & 15) | (((b.qh[32 * h + l] >> (2 * j)) & 3) << 4);
    return {fp16_to_fp32(b.d) * static_cast<double>(b.scales[e / 16]), static_cast<double>(u - 32), 0.0};
  }
  const int bs = traits(type).block_size;  // 32, or 128 for Q4_G128
  const std::byte* blk = row + c / bs * bb;
  return {half_at(blk), static_cast<double>(level(type, blk, static_cast<int>(c % bs))), has_min(type) ? half_at(blk + 2) : 0.0};
}

void check_int8_matvec(DType type, cpu::Isa isa, int threads, std::int64_t rows, std::int64_t cols) {
  CAPTURE(name(type), cpu::name(isa), threads, rows, cols);
  test::Rng rng(static_cast<std::uint64_t>(rows * 7919 + cols * 31 + static_cast<int>(type)));
  const std::size_t row_size = row_bytes(type, cols), stride = row_size + 8;
  std::vector<std::byte> bytes(stride * static_cast<std::size_t>(rows), std::byte{0xFF});
  std::vector<float> src(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float scale = std::exp2(rng.uniform(-5.0f, 3.0f));
    for (auto& v : src) v = rng.normal() * scale + (has_min(type) ? 0.7f * scale : 0.0f);
    quantize_row(type, src.data(), bytes.data() + static_cast<std::size_t>(r) * stride, cols);
  }
  std::vector<float> x(static_cast<std::size_t>(cols));
  for (std::int64_t c = 0; c < cols; ++c) {
    if (c % 32 == 0) rng.normal();  // vary the block scales below
    x[static_cast<std::size_t>(c)] = rng.normal() * std::exp2(static_cast<float>((c / 32) % 7) - 3.0f);
  }
  if (cols >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero block: d = 0
  const RefRow xq = reference_quantize(x.data(), cols);

  cpu::CpuContext ctx(threads, isa, /*int8_activations=*/true);
  REQUIRE(ctx.isa() == isa);
  const cpu::WeightLayout layout = cpu::stored_layout(type);
  const cpu::WeightMatrix w{layout, bytes.data(), rows, cols, stride};
  ctx.reserve_shared_bytes(cpu::matmul_shared_bytes(ctx, w, 1));
  REQUIRE(cpu::matmul_shared_bytes(ctx, w, 1) > 0);
  std::vector<float> y(static_cast<std::size_t>(rows), -1.0f);
  cpu::matmul(ctx, w, x.data(), cols, 1, y.data(), rows);
  // A row's result does not depend on the rows computed with it (multi-row passes, thread split).
  for (std::int64_t r = 0; r < rows; ++r) {
    const cpu::WeightMatrix one{layout, bytes.data() + static_cast<std::size_t>(r) * stride, 1, cols, stride};
    float alone = -1.0f;
    cpu::matmul(ctx, one, x.data(), cols, 1, &alone, 1);
    REQUIRE(alone == y[static_cast<std::size_t>(r)]);
  }

  const std::int64_t nb = cols / 32;
  std::vector<double> want(y.size()), tol(y.size()), want_f(y.size()), tol_f(y.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double sum = 0.0, mag = 0.0, sum_f = 0.0, rounding = 0.0;
    const std::byte* row = bytes.data() + static_cast<std::size_t>(r) * stride;
    for (std::int64_t b = 0; b < nb; ++b) {
      const double dx = xq.d[static_cast<std::size_t>(b)];
      // Sum of min * q over each stretch with one min: the block, or (Q2_K) each 16-element half.
      double min_q = 0.0;
      const int min_stretch = type == DType::kQ2_K ? 16 : 32;
      for (int i = 0; i < 32; ++i) {
        const double q = xq.q[static_cast<std::size_t>(b * 32 + i)];
        const WeightElement we = element(type, row, b * 32 + i);
        const double xv = x[static_cast<std::size_t>(b * 32 + i)];
        sum += we.scale * dx * we.level * q + we.min * dx * q;
        mag += std::fabs(we.scale * dx) * (std::fabs(we.level) + 2.0 * offset_bound(type)) * std::fabs(q);
        min_q += we.min * q;
        sum_f += (we.scale * we.level + we.min) * xv;
        rounding += std::fabs(we.scale * we.level + we.min) * dx * 0.5;  // |x - dx q| <= dx / 2 per element
        if ((i + 1) % min_stretch == 0) {
          mag += std::fabs(dx * min_q);
          min_q = 0.0;
        }
      }
    }
    const auto i = static_cast<std::size_t>(r);
    want[i] = sum;
    tol[i] = test::dot_tolerance(2 * nb, mag, 4);
    want_f[i] = sum_f;
    tol_f[i] = rounding * 1.001 + tol[i];
  }
  test::check_close(want, y, tol, "int8-activation matvec vs its exact integer reference");
  test::check_close(want_f, y, tol_f, "int8-activation matvec vs float x (activation rounding bound)");
}

}  // namespace

SITSRT_ISA_TEST_CASE(isa, "activation quantizer matches the scalar reference bit for bit on every ISA", "[qdot]",
                     kIsas) {
  CAPTURE(cpu::name(isa));
  test::Rng rng(17);
  for (std::int64_t cols : {32, 96, 1056, 4096}) {
    CAPTURE(cols);
    std::vector<float> x = rng.normals(static_cast<std::size_t>(cols), 3.0f);
    for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(i - 16) * 0.5f;  // ties
    if (cols >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
    const RefRow ref = reference_quantize(x.data(), cols);
    std::vector<std::byte> buffer(cpu::detail::quantized_row_bytes(cols) + 64);
    auto* aligned = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(buffer.data()) + 63) / 64 * 64);
    std::memset(aligned, 0x5A, cpu::detail::quantized_row_bytes(cols));  // garbage: padding must be written
    const cpu::detail::QuantizedRow q = cpu::detail::qdot_kernels_for(isa).quantize(x.data(), cols, aligned);
    REQUIRE(q.blocks == cols / 32);
    const std::int64_t padded = (cols / 32 + 1) / 2 * 2;
    for (std::int64_t b = 0; b < padded; ++b) {
      const bool real = b < cols / 32;
      std::int32_t sum = 0;
      for (int i = 0; i < 32; ++i) {
        const std::int8_t want = real ? ref.q[static_cast<std::size_t>(b * 32 + i)] : 0;
        REQUIRE(q.qs[b * 32 + i] == want);
        REQUIRE(std::abs(static_cast<int>(want)) <= 127);
        sum += want;
      }
      const float d = real ? ref.d[static_cast<std::size_t>(b)] : 0.0f;
      for (int l = 0; l < 8; ++l) {
        REQUIRE(q.d8[b * 8 + l] == d);
        REQUIRE(q.neg_sum8[b * 8 + l] == -sum);
        REQUIRE(q.ds8[b * 8 + l] * 8.0f == q.ds[b]);
      }
      REQUIRE(q.ds[b] == d * static_cast<float>(sum));
      REQUIRE(q.d[b] == d);
      REQUIRE(q.sum[b] == sum);
    }
    // The block-lane copy (written on request): units of 16 blocks, level 4 m + e of the unit's
    // block i at 64 m + 4 i + e; blocks past the padded ones read as zeros.
    cpu::detail::write_block_lanes(cols, aligned);
    for (std::int64_t b = 0; b < (padded + 15) / 16 * 16; ++b) {
      for (int e = 0; e < 32; ++e) {
        const std::int8_t want = b < cols / 32 ? ref.q[static_cast<std::size_t>(b * 32 + e)] : 0;
        REQUIRE(q.lanes[512 * (b / 16) + 64 * (e / 4) + 4 * (b % 16) + e % 4] == want);
      }
    }
  }
}

SITSRT_ISA_TEST_CASE(isa, "int8-activation decode matches its integer reference on every ISA", "[qdot][matmul]",
                     kIsas) {
  const DType type = GENERATE(from_range(std::begin(kIntTypes), std::end(kIntTypes)));
  const int threads = GENERATE(1, 3);
  if (test::kSanitized && threads == 1) return;  // support/sanitizer.hpp
  for (std::int64_t rows : {1, 3, 17, 64, 129}) {
    for (std::int64_t cols : {32, 64, 96, 128, 256, 640, 1056, 4096, 512, 2304}) {
      if (fits_blocks(type, cols)) check_int8_matvec(type, isa, threads, rows, cols);
    }
  }
}

TEST_CASE("int8 activations leave float formats on the float path; quantized prefill takes the int8 GEMM",
          "[qdot][matmul]") {
  cpu::CpuContext ctx(1, cpu::Isa::kGeneric, true);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8_E4M3}) {
    const cpu::WeightMatrix w{cpu::stored_layout(t), nullptr, 4, 64, row_bytes(t, 64)};
    CHECK(cpu::matmul_shared_bytes(ctx, w, 1) == 0);
  }
  const cpu::WeightMatrix q{cpu::WeightLayout::kQ8_0, nullptr, 4, 64, row_bytes(DType::kQ8_0, 64)};
  CHECK(cpu::matmul_shared_bytes(ctx, q, 1) > 0);
  CHECK(cpu::matmul_shared_bytes(ctx, q, 5) >= 5 * cpu::detail::quantized_row_bytes(64));  // 5 int8 rows
  for (DType t : {DType::kF32, DType::kF16}) {
    const cpu::WeightMatrix w{cpu::stored_layout(t), nullptr, 4, 64, row_bytes(t, 64)};
    CHECK(cpu::matmul_shared_bytes(ctx, w, 5) == 0);
  }
  cpu::CpuContext float_ctx(1, cpu::Isa::kGeneric, false);
  CHECK(cpu::matmul_shared_bytes(float_ctx, q, 1) == 0);
  CHECK(cpu::matmul_shared_bytes(float_ctx, q, 5) == 0);
}

TEST_CASE("int8-activation decode without reserved shared scratch throws kInternal", "[qdot]") {
  cpu::CpuContext ctx(1, cpu::Isa::kGeneric, true);
  std::vector<std::byte> data(row_bytes(DType::kQ4_0, 64) * 2);
  std::vector<float> x(64, 1.0f), y(2);
  try {
    cpu::matmul(ctx, {cpu::WeightLayout::kQ4_0, data.data(), 2, 64, row_bytes(DType::kQ4_0, 64)}, x.data(), 64, 1,
                y.data(), 2);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInternal);
  }
}

// The AVX2 integer-dot kernels (K-quants included) built with AVX-VNNI (VPDPBUSD for VPMADDUBSW +
// VPMADDWD) must give the AVX2 build's bits exactly: decode and the int8 GEMM take whichever the
// CPU has, and batch
// invariance and replayed audit logs rely on the same bits. Extremes included: Q8_0 levels of
// -128 (|w| = 128 after the sign move) against activation levels of +-127, the largest int16 pair
// sums VPMADDUBSW must not saturate.
TEST_CASE("AVX-VNNI integer-dot kernels are bit-identical to the AVX2 ones", "[qdot][gated]") {
#if defined(__x86_64__)
  SITSRT_REQUIRE_ISA(cpu::Isa::kAvx2);
  if (!cpu::detail::avx_vnni_supported()) SITSRT_SKIP("this CPU lacks AVX-VNNI");
  const cpu::detail::QdotKernels& avx2 = cpu::detail::qdot_kernels_avx2();
  const cpu::detail::QdotKernels& vnni = cpu::detail::qdot_kernels_avxvnni();
  test::Rng rng(53);
  for (const DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ4_G128,
                           DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL}) {
    const cpu::WeightLayout layout = cpu::stored_layout(type);
    const auto slot = static_cast<std::size_t>(layout);
    REQUIRE(avx2.matvec[slot] != nullptr);
    REQUIRE(vnni.matvec[slot] != nullptr);
    for (const std::int64_t cols : {128, 256, 1152, 4096}) {
      if (!fits_blocks(type, cols)) continue;  // the K-quants: multiples of 256
      CAPTURE(name(type), cols);
      const std::int64_t rows = 19, m = 7;
      const std::size_t stride = row_bytes(type, cols);
      std::vector<std::byte> w(stride * static_cast<std::size_t>(rows));
      std::vector<float> src(static_cast<std::size_t>(cols));
      for (std::int64_t r = 0; r < rows; ++r) {
        for (auto& v : src) v = rng.normal() * std::exp2(rng.uniform(-3.0f, 3.0f));
        quantize_row(type, src.data(), w.data() + static_cast<std::size_t>(r) * stride, cols);
      }
      if (type == DType::kQ8_0) {  // levels of -128: one whole block, and scattered ones
        auto* blocks = reinterpret_cast<BlockQ8_0*>(w.data());
        std::fill(std::begin(blocks[0].qs), std::end(blocks[0].qs), std::int8_t{-128});
        for (int i = 0; i < 200; ++i) {
          auto& b = blocks[static_cast<std::size_t>(rng.uniform(0.0f, 0.999f) * static_cast<float>(rows * cols / 32))];
          b.qs[static_cast<int>(rng.uniform(0.0f, 31.99f))] = -128;
        }
      }
      // m activation rows; the first block of each is +-127 throughout (one value of each sign),
      // against the all -128 block above.
      const std::size_t row_buffer = cpu::detail::quantized_row_bytes(cols);
      std::vector<std::byte> buffer(row_buffer * static_cast<std::size_t>(m) + 64);
      auto* aligned = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(buffer.data()) + 63) / 64 * 64);
      std::vector<cpu::detail::QuantizedRow> x;
      for (std::int64_t i = 0; i < m; ++i) {
        std::vector<float> a = rng.normals(static_cast<std::size_t>(cols), 2.0f);
        for (int e = 0; e < 32; ++e) a[static_cast<std::size_t>(e)] = (e + i) % 2 == 0 ? 5.0f : -5.0f;
        x.push_back(avx2.quantize(a.data(), cols, aligned + static_cast<std::size_t>(i) * row_buffer));
      }
      REQUIRE(x[0].qs[0] == 127);
      // Decode, one activation row at a time.
      for (std::int64_t i = 0; i < m; ++i) {
        std::vector<float> y_avx2(static_cast<std::size_t>(rows)), y_vnni(static_cast<std::size_t>(rows), -1.0f);
        avx2.matvec[slot](w.data(), stride, x[static_cast<std::size_t>(i)], y_avx2.data(), rows);
        vnni.matvec[slot](w.data(), stride, x[static_cast<std::size_t>(i)], y_vnni.data(), rows);
        REQUIRE(std::memcmp(y_avx2.data(), y_vnni.data(), y_avx2.size() * sizeof(float)) == 0);
      }
      // The GEMM, where the format has one at this level (Q4_G128, Q2_K, Q3_K, IQ4_NL have not).
      const cpu::detail::QgemmFn gemm_avx2 = cpu::detail::qgemm_avx2(layout);
      const cpu::detail::QgemmFn gemm_vnni = cpu::detail::qgemm_avxvnni(layout);
      REQUIRE((gemm_avx2 == nullptr) == (gemm_vnni == nullptr));
      if (gemm_avx2 == nullptr) continue;
      std::vector<float> y_avx2(static_cast<std::size_t>(rows * m)), y_vnni(static_cast<std::size_t>(rows * m), -1.0f);
      gemm_avx2(w.data(), stride, x.data(), m, y_avx2.data(), rows, rows);
      gemm_vnni(w.data(), stride, x.data(), m, y_vnni.data(), rows, rows);
      REQUIRE(std::memcmp(y_avx2.data(), y_vnni.data(), y_avx2.size() * sizeof(float)) == 0);
    }
  }
#else
  SITSRT_SKIP("AVX-VNNI kernels exist on x86-64 only");
#endif
}

// The decode kernels' weight prefetch (cpu/decode_prefetch.hpp) only moves time: every kernel case
// above runs under this machine's policy and checks exact results. Here: the policies and the
// override's parsing, and that a mistyped override stops an engine's context with the variable named.
TEST_CASE("decode prefetch policy: per vendor, SITSRT_DECODE_PREFETCH parsed or refused") {
  const cpu::DecodePrefetch intel = cpu::decode_prefetch_for_vendor("GenuineIntel");
  CHECK_FALSE(intel.to_l2);
  CHECK(intel.row_ahead == 1536);
  CHECK(intel.stream_ahead == 2048);
  for (const char* vendor : {"AuthenticAMD", "HygonGenuine"}) {
    const cpu::DecodePrefetch amd = cpu::decode_prefetch_for_vendor(vendor);
    CHECK(amd.to_l2);
    CHECK(amd.row_ahead == 4096);
    CHECK(amd.stream_ahead == 4096);
  }
  CHECK_FALSE(cpu::decode_prefetch_for_vendor("").to_l2);  // unknown (or not x86): Intel's
  CHECK(cpu::describe(intel) == "l1, 1536 B ahead, 2048 B in one stream");
  CHECK(cpu::describe(cpu::decode_prefetch_for_vendor("AuthenticAMD")) == "l2, 4096 B ahead");

  cpu::DecodePrefetch p = cpu::parse_decode_prefetch("l2", intel);
  CHECK((p.to_l2 && p.row_ahead == 1536 && p.stream_ahead == 2048));
  p = cpu::parse_decode_prefetch("l1:3072", cpu::decode_prefetch_for_vendor("AuthenticAMD"));
  CHECK((!p.to_l2 && p.row_ahead == 3072 && p.stream_ahead == 3072));
  p = cpu::parse_decode_prefetch("l2:512:8192", intel);
  CHECK((p.to_l2 && p.row_ahead == 512 && p.stream_ahead == 8192));
  for (const char* bad : {"", "l3", "L2", "l2:", "l2:0", "l2:-64", "l2:4k", "l2:4096:", "l2:4096:x", "l2:4096:1:2",
                          "l1:2000000", "l2 :4096"}) {
    INFO(bad);
    CHECK_THROWS_WITH(cpu::parse_decode_prefetch(bad, intel), Catch::Contains("SITSRT_DECODE_PREFETCH"));
  }
  // A context refuses a mistyped override (decode_prefetch() itself keeps the CPU's policy).
  REQUIRE(setenv("SITSRT_DECODE_PREFETCH", "l2:lots", 1) == 0);
  CHECK_THROWS_WITH(cpu::CpuContext(1, cpu::Isa::kGeneric, true), Catch::Contains("SITSRT_DECODE_PREFETCH='l2:lots'"));
  REQUIRE(setenv("SITSRT_DECODE_PREFETCH", "l1:2048", 1) == 0);
  CHECK_NOTHROW(cpu::CpuContext(1, cpu::Isa::kGeneric, true));
  REQUIRE(setenv("SITSRT_DECODE_PREFETCH", "", 1) == 0);  // set but empty: as unset
  CHECK_NOTHROW(cpu::CpuContext(1, cpu::Isa::kGeneric, true));
  REQUIRE(unsetenv("SITSRT_DECODE_PREFETCH") == 0);
}
