// The CUDA kernels' format decode, quantization and scale math (cuda/device_formats.hpp, plain
// C++ here) against lib/core's reference encoders and decoders and the CPU KV quantizers: every
// function a kernel uses to read a weight or write and read a cached row, checked without a GPU.
#include "core/half.hpp"
#include "core/kv_int4.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/attention/kv_quant.hpp"
#include "cuda_backend/device_formats.hpp"
#include "cuda_backend/fp8_activation_plan.hpp"
#include "cuda_backend/logit_summary_record.hpp"
#include "cuda_backend/planar_weights.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

using namespace sitsrt;

namespace {

bool same_bits(float a, float b) {
  std::uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y || (std::isnan(a) && std::isnan(b));
}

}  // namespace

TEST_CASE("cuda formats: f16, bf16 and fp8 decode as the core reference, bit for bit", "[cuda-formats]") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto code = static_cast<std::uint16_t>(h);
    INFO("f16 code " << h);
    REQUIRE(same_bits(cuda::half_to_float(code), fp16_to_fp32(code)));
    REQUIRE(same_bits(cuda::bf16_to_float(code), bf16_to_fp32(code)));
  }
  for (int c = 0; c < 256; ++c) {
    INFO("fp8 code " << c);
    REQUIRE(same_bits(cuda::fp8_e4m3_to_float(static_cast<std::uint8_t>(c)),
                      fp8_e4m3_to_fp32(static_cast<std::uint8_t>(c))));
  }
}

TEST_CASE("cuda formats: float to f16 rounds as the core reference over every 61st bit pattern", "[cuda-formats]") {
  std::uint64_t checked = 0;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 61) {
    const auto bits = static_cast<std::uint32_t>(u);
    float f;
    std::memcpy(&f, &bits, 4);
    const std::uint16_t got = cuda::float_to_half(f), want = fp32_to_fp16(f);
    if (std::isnan(f)) {
      REQUIRE((got & 0x7c00u) == 0x7c00u);
      REQUIRE((got & 0x3ffu) != 0);
    } else if (got != want) {
      FAIL("float bits " << bits << ": got f16 " << got << ", core gives " << want);
    }
    ++checked;
  }
  // The edges: ties at the subnormal boundary, the largest half, overflow.
  for (const float f : {65504.0f, 65519.99f, 65520.0f, 6.0975552e-05f, 6.1035156e-05f, 2.9802322e-08f, 5.9604645e-08f,
                        -0.0f, 1e-10f, 3.0e-08f}) {
    INFO("value " << f);
    REQUIRE(cuda::float_to_half(f) == fp32_to_fp16(f));
  }
  REQUIRE(checked > 70000000);
}

namespace {

template <DType F>
void check_format(std::int64_t n, std::uint64_t seed) {
  test::Rng rng(seed);
  std::vector<float> values = rng.normals(static_cast<std::size_t>(n), 0.7f);
  std::vector<std::uint8_t> row(row_bytes(F, n));
  quantize_row(F, values.data(), row.data(), n);
  std::vector<float> reference(static_cast<std::size_t>(n));
  dequantize_row(F, row.data(), reference.data(), n);
  for (std::int64_t e = 0; e < n; ++e) {
    INFO(name(F) << " element " << e);
    REQUIRE(same_bits(cuda::decode_element<F>(row.data(), e), reference[static_cast<std::size_t>(e)]));
  }
  for (std::int64_t e0 = 0; e0 + 8 <= n; e0 += 8) {
    float out[8];
    cuda::decode8<F>(row.data(), e0, out);
    for (int i = 0; i < 8; ++i) {
      INFO(name(F) << " decode8 at " << e0 << " + " << i);
      REQUIRE(same_bits(out[i], reference[static_cast<std::size_t>(e0 + i)]));
    }
  }
  REQUIRE(static_cast<int>(traits(F).block_size) == cuda::WeightFormat<F>::kElements);
  REQUIRE(static_cast<int>(traits(F).block_bytes) == cuda::WeightFormat<F>::kBytes);
}

}  // namespace

TEST_CASE("cuda formats: weight rows decode as dequantize_row, element by element and 8 at a time", "[cuda-formats]") {
  check_format<DType::kF32>(264, 1);
  check_format<DType::kF16>(264, 2);
  check_format<DType::kBF16>(264, 3);
  check_format<DType::kQ8_0>(256, 4);
  check_format<DType::kQ4_0>(256, 5);
  check_format<DType::kQ4_1>(256, 6);
  check_format<DType::kQ5_0>(256, 12);
  check_format<DType::kQ5_1>(256, 13);
  check_format<DType::kFP8_E4M3>(256, 7);
  check_format<DType::kQ4_G128>(384, 8);
  check_format<DType::kQ4_K>(512, 9);
  check_format<DType::kQ5_K>(512, 10);
  check_format<DType::kQ6_K>(512, 11);
  check_format<DType::kQ2_K>(512, 14);
  check_format<DType::kQ3_K>(512, 15);
  check_format<DType::kIQ4_NL>(256, 16);
}

// The planar layout the decode kernels read (cuda/planar_weights.hpp): every element of a packed
// matrix equals the stored row's decode, bit for bit, and the planes take the stored bytes.
template <DType F>
void check_planar(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  test::Rng rng(seed);
  const std::size_t stride = row_bytes(F, cols);
  std::vector<std::uint8_t> stored(stride * static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<float> x = rng.normals(static_cast<std::size_t>(cols), 0.01f * static_cast<float>(r + 1));
    x[static_cast<std::size_t>(r)] *= 300.0f;  // one wide block per row, so the scales differ
    quantize_row(F, x.data(), stored.data() + static_cast<std::size_t>(r) * stride, cols);
  }
  REQUIRE(cuda::planar_supports(F, cols));
  const cuda::PlanarGeometry g = cuda::planar_geometry(F, rows, cols);
  REQUIRE(g.scales_offset % 16 == 0);
  const std::size_t total = static_cast<std::size_t>(g.scales_of(rows));
  REQUIRE(total == stored.size());
  std::vector<std::uint8_t> planes(total, 0xa5);
  for (std::int64_t r = 0; r < rows; ++r) {
    cuda::planar_pack_row(F, stored.data() + static_cast<std::size_t>(r) * stride, cols,
                          planes.data() + r * g.code_row_bytes, planes.data() + g.scales_of(r));
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint8_t* row = stored.data() + static_cast<std::size_t>(r) * stride;
    const std::uint8_t* codes = planes.data() + r * g.code_row_bytes;
    const std::uint8_t* scales = planes.data() + g.scales_of(r);
    for (std::int64_t e = 0; e < cols; ++e) {
      const float got = cuda::planar_element<F>(codes, scales, e), want = cuda::decode_element<F>(row, e);
      if (!same_bits(got, want)) FAIL(name(F) << " row " << r << " element " << e << ": " << got << " vs " << want);
    }
  }
}

TEST_CASE("cuda formats: planar matrices (every planar format) decode as their stored rows", "[cuda-formats]") {
  check_planar<DType::kFP8_E4M3>(5, 384, 21);
  check_planar<DType::kFP8_E4M3>(3, 64, 22);
  check_planar<DType::kQ4_G128>(5, 384, 23);
  check_planar<DType::kQ4_G128>(2, 128, 24);
  check_planar<DType::kQ8_0>(5, 416, 25);
  check_planar<DType::kQ8_0>(2, 32, 26);
  check_planar<DType::kQ4_0>(5, 416, 27);
  check_planar<DType::kQ4_0>(2, 32, 28);
  check_planar<DType::kIQ4_NL>(5, 416, 41);
  check_planar<DType::kIQ4_NL>(2, 32, 42);
  check_planar<DType::kQ4_K>(5, 768, 29);
  check_planar<DType::kQ4_K>(2, 256, 30);
  check_planar<DType::kQ6_K>(5, 768, 31);
  check_planar<DType::kQ6_K>(2, 256, 32);
  check_planar<DType::kF16>(5, 264, 33);
  check_planar<DType::kBF16>(3, 8, 34);
  check_planar<DType::kQ4_1>(5, 416, 35);
  check_planar<DType::kQ5_0>(5, 416, 36);
  check_planar<DType::kQ5_0>(3, 32, 37);
  check_planar<DType::kQ5_1>(5, 416, 38);
  check_planar<DType::kQ5_K>(5, 768, 39);
  check_planar<DType::kQ5_K>(2, 256, 40);
  CHECK_FALSE(cuda::planar_supports(DType::kFP8_E4M3, 96));
  CHECK_FALSE(cuda::planar_supports(DType::kQ4_G128, 64));
  CHECK_FALSE(cuda::planar_supports(DType::kQ8_0, 48));
  CHECK_FALSE(cuda::planar_supports(DType::kQ4_K, 384));
  CHECK_FALSE(cuda::planar_supports(DType::kQ6_K, 128));
  CHECK_FALSE(cuda::planar_supports(DType::kF16, 260));
  CHECK_FALSE(cuda::planar_supports(DType::kQ5_K, 128));
  CHECK_FALSE(cuda::planar_supports(DType::kQ5_0, 48));
  CHECK_FALSE(cuda::planar_supports(DType::kF32, 256));
  CHECK_FALSE(cuda::planar_supports(DType::kQ3_K, 256));
  // the unit tables agree with the stored blocks (dtype.hpp): codes + side data = block bytes
  for (const DType f :
       {DType::kFP8_E4M3, DType::kQ4_G128, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
        DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF16, DType::kBF16, DType::kIQ4_NL}) {
    const cuda::PlanarUnit u = cuda::planar_unit(f);
    INFO(name(f));
    CHECK(u.block_elements == traits(f).block_size);
    CHECK(u.block_bytes == traits(f).block_bytes);
    CHECK(u.code_bytes % 16 == 0);
  }
}

// The device's int4 store (cuda/kernels/attention.cu) emulated lane by lane: maxima over the warp,
// each candidate's squared error per lane, summed by xor-butterfly; every lane must hold the same
// sum after it (so each lane picks the same candidate).
std::uint8_t warp_quantize_int4(const float* x, std::uint8_t* index) {
  float pos = 0.0f, neg = 0.0f;
  for (int lane = 0; lane < 32; ++lane) {
    pos = std::fmax(pos, x[lane] > 0.0f ? x[lane] : 0.0f);
    neg = std::fmax(neg, -x[lane] > 0.0f ? -x[lane] : 0.0f);
  }
  std::uint8_t code = 0;
  std::fill(index, index + 32, std::uint8_t{8});
  if (!(pos > 0.0f || neg > 0.0f)) return code;
  float best_error = 0.0f;
  for (int c = 0; c < kv_int4::kCandidates; ++c) {
    const std::uint8_t candidate = kv_int4::candidate(pos, neg, c);
    float e[32];
    int q[32];
    const float scale = kv_int4::scale_of(candidate), inverse = 1.0f / scale;
    for (int lane = 0; lane < 32; ++lane) e[lane] = kv_int4::squared_error(x[lane], scale, inverse, &q[lane]);
    for (int off = 16; off > 0; off /= 2) {
      float next[32];
      for (int lane = 0; lane < 32; ++lane) next[lane] = e[lane] + e[lane ^ off];
      std::copy(next, next + 32, e);
    }
    for (int lane = 1; lane < 32; ++lane) REQUIRE(same_bits(e[lane], e[0]));
    if (c == 0 || e[0] < best_error) {
      code = candidate;
      best_error = e[0];
      for (int lane = 0; lane < 32; ++lane) index[lane] = static_cast<std::uint8_t>(q[lane]);
    }
  }
  return code;
}

TEST_CASE("kv int4 codec: scale codes are E5M2 times 2^-4, code_at_least is the least code not below", "[cuda-formats]") {
  for (unsigned code = 0; code < 256; ++code) {
    if (((code >> 2) & 31u) == 31u) continue;  // infinities / NaN: never written
    INFO("code " << code);
    REQUIRE(same_bits(kv_int4::scale_of(static_cast<std::uint8_t>(code)),
                      fp16_to_fp32(static_cast<std::uint16_t>(code << 8)) * 0.0625f));
  }
  test::Rng rng(31);
  for (int trial = 0; trial < 20000; ++trial) {
    const float need = std::ldexp(rng.uniform(1.0f, 2.0f), static_cast<int>(rng.uniform(-24.0f, 13.0f)));
    const std::uint8_t c = kv_int4::code_at_least(need);
    INFO("need " << need << " code " << int{c});
    REQUIRE(c >= 1);
    REQUIRE(c <= kv_int4::kMaxCode);
    if (c < kv_int4::kMaxCode) REQUIRE(kv_int4::scale_of(c) >= need);
    if (c > 1) REQUIRE(kv_int4::scale_of(static_cast<std::uint8_t>(c - 1)) < need);
  }
  // Exact codes map to themselves; the levels' midpoints send ties down.
  for (std::uint8_t c = 1; c <= kv_int4::kMaxCode; ++c) REQUIRE(kv_int4::code_at_least(kv_int4::scale_of(c)) == c);
  const auto nearest = [](float v) {
    int index = -1;
    const float level = kv_int4::nearest_level(v, &index);
    REQUIRE(level == kv_int4::level(index));
    return index;
  };
  for (int l = 0; l < 15; ++l) {
    const float mid = (kv_int4::level(l) + kv_int4::level(l + 1)) / 2;
    REQUIRE(nearest(mid) == l);
    REQUIRE(nearest(std::nextafter(mid, 1e9f)) == l + 1);
    REQUIRE(nearest(kv_int4::level(l)) == l);
  }
  REQUIRE(nearest(-1e30f) == 0);
  REQUIRE(nearest(1e30f) == 15);
}

TEST_CASE("cuda formats: KV int8 and int4 scales and levels equal the CPU quantizers'", "[cuda-formats]") {
  test::Rng rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    // Mixed magnitudes, one-sided groups, tiny and huge values, zeros.
    const float magnitude = std::pow(10.0f, rng.uniform(-6.0f, 6.0f));
    std::vector<float> x = rng.normals(64, magnitude);
    if (trial % 7 == 0)
      for (float& v : x) v = std::fabs(v);
    if (trial % 11 == 0)
      for (float& v : x) v = -std::fabs(v);
    if (trial % 13 == 0) std::fill(x.begin(), x.end(), 0.0f);
    if (trial % 17 == 0) x[5] = 1e6f;

    std::int8_t q[64];
    const std::uint16_t h8 = cpu::detail::quantize_span(x.data(), 64, 127.0f, -127.0f, q);
    float amax = 0.0f;
    for (const float v : x) amax = std::max(amax, std::fabs(v));
    INFO("trial " << trial);
    REQUIRE(cuda::int8_scale(amax) == h8);
    for (int i = 0; i < 64; ++i)
      REQUIRE(cuda::quantize_level(x[static_cast<std::size_t>(i)], h8, -127.0f, 127.0f) == q[i]);

    for (int g = 0; g < 2; ++g) {
      const float* group = x.data() + 32 * g;
      std::uint8_t host[32], device[32];
      const std::uint8_t code = kv_int4::quantize_group(group, host);
      REQUIRE(warp_quantize_int4(group, device) == code);
      for (int i = 0; i < 32; ++i) REQUIRE(device[i] == host[i]);
    }
  }
}

TEST_CASE("cuda formats: cached rows read back as the CPU dequantizes them", "[cuda-formats]") {
  test::Rng rng(12);
  const std::int64_t n_kv_heads = 2, head_dim = 64, width = n_kv_heads * head_dim;
  const std::vector<float> x = rng.normals(static_cast<std::size_t>(width), 1.3f);
  for (const cpu::KvType type : {cpu::KvType::kF32, cpu::KvType::kF16, cpu::KvType::kInt8, cpu::KvType::kInt4}) {
    const std::size_t bytes = cpu::kv_row_bytes(type, n_kv_heads, head_dim);
    REQUIRE(static_cast<std::int64_t>(bytes) == cuda::kv_row_bytes(static_cast<int>(type), width, head_dim));
    std::vector<std::byte> row(bytes);
    cpu::detail::quantize_row(type, x.data(), n_kv_heads, head_dim, row.data());
    std::vector<float> reference(static_cast<std::size_t>(width));
    for (std::int64_t h = 0; h < n_kv_heads; ++h) {
      cpu::detail::dequantize_span(type, row.data(), width, head_dim, h * head_dim, head_dim,
                                   reference.data() + h * head_dim);
    }
    for (std::int64_t e = 0; e < width; ++e) {
      INFO("type " << static_cast<int>(type) << " element " << e);
      REQUIRE(same_bits(cuda::kv_element(static_cast<int>(type), reinterpret_cast<const std::uint8_t*>(row.data()),
                                         width, head_dim, e),
                        reference[static_cast<std::size_t>(e)]));
    }
  }
}

TEST_CASE("the logit summary's order key ranks logits descending, signed zeros as one", "[cuda]") {
  test::Rng rng(907);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {0.0f,
                               -0.0f,
                               inf,
                               -inf,
                               std::numeric_limits<float>::denorm_min(),
                               -std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::lowest(),
                               1.0f,
                               -1.0f,
                               1.0f,
                               0.5f};
  for (int i = 0; i < 400; ++i)
    values.push_back(rng.normal() * std::pow(10.0f, static_cast<float>(rng.uniform_int(-30, 30))));
  for (const float a : values) {
    for (const float b : values) {
      CAPTURE(a, b);
      REQUIRE((cuda::descending_key(a) < cuda::descending_key(b)) == (a > b));
      REQUIRE((cuda::descending_key(a) == cuda::descending_key(b)) == (a == b));
    }
  }
  CHECK(cuda::summary_record_bytes(1) % 8 == 0);
  CHECK(cuda::summary_record_bytes(cuda::kMaxSummaryBest) == sizeof(cuda::SummaryHeader) + 8 * cuda::kMaxSummaryBest);
}

namespace {

// Stored FP8 E4M3 rows (rows x cols) in the planar layout the backend uploads.
std::vector<std::uint8_t> planar_fp8(const std::vector<std::uint8_t>& stored, std::int64_t rows, std::int64_t cols) {
  const cuda::PlanarGeometry g = cuda::planar_geometry(DType::kFP8_E4M3, rows, cols);
  const std::size_t stride = row_bytes(DType::kFP8_E4M3, cols);
  std::vector<std::uint8_t> planes(stored.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    cuda::planar_pack_row(DType::kFP8_E4M3, stored.data() + static_cast<std::size_t>(r) * stride, cols,
                          planes.data() + r * g.code_row_bytes, planes.data() + g.scales_of(r));
  }
  return planes;
}

}  // namespace

TEST_CASE("fp8_channel_scales finds one scale per row only where every block of the row has it", "[cuda]") {
  test::Rng rng(908);
  const std::int64_t rows = 5, cols = 256;
  const std::size_t stride = row_bytes(DType::kFP8_E4M3, cols);
  std::vector<std::uint8_t> stored(stride * rows);
  std::vector<float> want(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    want[static_cast<std::size_t>(r)] = rng.uniform(0.01f, 1.0f);
    for (std::int64_t b = 0; b < cols / 64; ++b) {
      BlockFP8_E4M3 block{};
      block.d = want[static_cast<std::size_t>(r)];
      for (auto& q : block.qs) q = static_cast<std::uint8_t>(rng.uniform_int(0, 0x7e));
      std::memcpy(stored.data() + r * stride + b * sizeof(block), &block, sizeof(block));
    }
  }
  const cuda::PlanarGeometry g = cuda::planar_geometry(DType::kFP8_E4M3, rows, cols);
  const auto pack = [&] { return planar_fp8(stored, rows, cols); };
  const std::optional<std::vector<float>> found = cuda::fp8_channel_scales(pack().data(), g, rows);
  REQUIRE(found.has_value());
  CHECK(*found == want);
  // One block of one row with another scale: per-block scales, no channel scales.
  float other = want[3] * 1.5f;
  std::memcpy(stored.data() + 3 * stride + 2 * sizeof(BlockFP8_E4M3), &other, sizeof(other));
  CHECK_FALSE(cuda::fp8_channel_scales(pack().data(), g, rows).has_value());
  // Rows from the quantizers: quantize_row_fp8_per_channel's are found (their scales), the
  // per-block search's are not.
  for (const bool per_channel : {true, false}) {
    std::vector<float> scales(rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      std::vector<float> x = rng.normals(static_cast<std::size_t>(cols), 0.1f * static_cast<float>(r + 1));
      for (std::int64_t i = 0; i < cols; i += 64) x[static_cast<std::size_t>(i)] *= static_cast<float>(1 + i / 64);
      std::uint8_t* row = stored.data() + r * stride;
      if (per_channel) {
        quantize_row_fp8_per_channel(x.data(), row, cols);
      } else {
        quantize_row(DType::kFP8_E4M3, x.data(), row, cols);
      }
      std::memcpy(&scales[static_cast<std::size_t>(r)], row, sizeof(float));
    }
    const std::optional<std::vector<float>> channel = cuda::fp8_channel_scales(pack().data(), g, rows);
    CAPTURE(per_channel);
    REQUIRE(channel.has_value() == per_channel);
    if (per_channel) CHECK(*channel == scales);
  }
}

TEST_CASE("fp8_block128_scales finds the 128 x 128 grid only where every block of it has one scale", "[cuda]") {
  test::Rng rng(909);
  // 300 rows (bands of 128, 128 and 44) x 384 columns (3 column blocks: ld 4, one padding)
  const std::int64_t rows = 300, cols = 384;
  const std::size_t stride = row_bytes(DType::kFP8_E4M3, cols);
  std::vector<float> values(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = rng.normal() * std::exp2(static_cast<float>(i / 128 % 5) - 2.0f);
  }
  std::vector<std::uint8_t> stored(stride * rows);
  const auto quantize = [&](bool blocks) {
    for (std::int64_t band = 0; band * 128 < rows; ++band) {
      const std::int64_t count = std::min<std::int64_t>(128, rows - band * 128);
      if (blocks) {
        quantize_band_fp8_block128(values.data() + band * 128 * cols, stored.data() + band * 128 * stride, count, cols);
      } else {
        for (std::int64_t r = band * 128; r < band * 128 + count; ++r) {
          quantize_row_fp8_per_channel(values.data() + r * cols, stored.data() + r * stride, cols);
        }
      }
    }
  };
  const cuda::PlanarGeometry g = cuda::planar_geometry(DType::kFP8_E4M3, rows, cols);
  const auto pack = [&] { return planar_fp8(stored, rows, cols); };
  quantize(true);
  const std::optional<std::vector<float>> grid = cuda::fp8_block128_scales(pack().data(), g, rows, cols);
  REQUIRE(grid.has_value());
  const std::int64_t ld = cuda::fp8_block128_scales_ld(cols);
  CHECK(ld == 4);
  REQUIRE(grid->size() == static_cast<std::size_t>(3 * ld));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; c += 64) {
      float d = 0.0f;
      std::memcpy(&d, stored.data() + r * stride + c / 64 * sizeof(BlockFP8_E4M3), sizeof(d));
      CAPTURE(r, c);
      REQUIRE(d > 0.0f);
      REQUIRE((*grid)[static_cast<std::size_t>(r / 128 * ld + c / 128)] == d);
    }
  }
  for (std::int64_t band = 0; band < 3; ++band) CHECK((*grid)[static_cast<std::size_t>(band * ld + 3)] == 0.0f);
  // One 64-block of a late row with another scale: no grid.
  float other = 3.0f;
  std::memcpy(stored.data() + 200 * stride + 5 * sizeof(BlockFP8_E4M3), &other, sizeof(other));
  CHECK_FALSE(cuda::fp8_block128_scales(pack().data(), g, rows, cols).has_value());
  // Per-channel rows (each row its own scale): no grid; a width of 64 mod 128: no grid.
  quantize(false);
  CHECK_FALSE(cuda::fp8_block128_scales(pack().data(), g, rows, cols).has_value());
  quantize(true);
  CHECK_FALSE(cuda::fp8_block128_scales(pack().data(), g, rows, cols - 64).has_value());
}

TEST_CASE("plan_fp8_activations covers every row, in whole 8 rows for block scales, within the buffers", "[cuda]") {
  constexpr std::int64_t kCodes = 16 << 20, kScales = 1 << 18;
  // The prefill GEMM's own shapes: 77 rows (two overlapping halves of 40), several chunks of
  // 16384-wide rows (1024 a chunk, the last ending at m), and too few rows for block scaling.
  {
    const cuda::Fp8ActivationPlan p = cuda::plan_fp8_activations(true, 77, 1024, kCodes, kScales);
    REQUIRE(p.chunks.size() == 2);
    CHECK((p.chunks[0].first == 0 && p.chunks[0].rows == 40 && p.chunks[1].first == 37 && p.chunks[1].rows == 40));
    CHECK(p.resident);
    CHECK(p.chunks[1].codes_offset == 37 * 1024);
    CHECK(p.chunks[1].scales_offset == 40 * 8);
  }
  {
    const cuda::Fp8ActivationPlan p = cuda::plan_fp8_activations(true, 1100, 16384, kCodes, kScales);
    REQUIRE(p.chunks.size() == 2);
    CHECK((p.chunks[0].rows == 1024 && p.chunks[1].first == 1020 && p.chunks[1].rows == 80));
    CHECK_FALSE(p.resident);
  }
  CHECK(cuda::plan_fp8_activations(true, 64, 1024, kCodes, kScales).chunks.size() == 1);
  CHECK(cuda::plan_fp8_activations(false, 77, 1024, kCodes, kScales).chunks.size() == 1);
  CHECK(cuda::plan_fp8_activations(true, 7, 1024, kCodes, kScales).chunks.empty());
  CHECK(cuda::plan_fp8_activations(true, 64, 1000, kCodes, kScales).chunks.empty());  // not whole blocks of 128
  // Properties over random shapes and buffer sizes.
  test::Rng rng(910);
  for (int trial = 0; trial < 5000; ++trial) {
    const bool blocks = rng.uniform_int(0, 1) == 1;
    const std::int64_t k = 128 * rng.uniform_int(1, 64), m = rng.uniform_int(1, 3000);
    const std::int64_t code_bytes = k * rng.uniform_int(1, 2000), scale_floats = rng.uniform_int(1, 1 << 16);
    const cuda::Fp8ActivationPlan p = cuda::plan_fp8_activations(blocks, m, k, code_bytes, scale_floats);
    CAPTURE(blocks, m, k, code_bytes, scale_floats);
    const std::int64_t per_row = blocks ? k / 128 : 1;
    const std::int64_t cap = std::min(code_bytes / k, scale_floats / per_row) / (blocks ? 8 : 1) * (blocks ? 8 : 1);
    if (cap < 1 || (blocks && m < 8)) {
      REQUIRE(p.chunks.empty());
      continue;
    }
    REQUIRE_FALSE(p.chunks.empty());
    std::vector<int> covered(static_cast<std::size_t>(m), 0);
    std::int64_t scales_total = 0, computed = 0;
    for (std::size_t i = 0; i < p.chunks.size(); ++i) {
      const cuda::Fp8ActivationChunk& c = p.chunks[i];
      REQUIRE(c.rows >= 1);
      REQUIRE(c.rows <= cap);
      REQUIRE(c.first >= 0);
      REQUIRE(c.first + c.rows <= m);
      if (blocks) REQUIRE(c.rows % 8 == 0);
      for (std::int64_t r = c.first; r < c.first + c.rows; ++r) ++covered[static_cast<std::size_t>(r)];
      if (p.resident) {  // codes at the rows' own place, scale regions one after another (disjoint)
        REQUIRE(c.codes_offset == c.first * k);
        REQUIRE(c.scales_offset == scales_total);
      } else {
        REQUIRE(c.codes_offset == 0);
        REQUIRE(c.scales_offset == 0);
      }
      if (blocks) REQUIRE(c.codes_offset % 128 == 0);  // cuBLASLt is told the alignment it has
      REQUIRE(c.codes_offset + c.rows * k <= code_bytes);
      REQUIRE(c.scales_offset + c.rows * per_row <= scale_floats);
      scales_total += c.rows * per_row;
      computed += c.rows;
      // in order; only the last chunk overlaps the one before it: by fewer than 8 rows, or fewer
      // than 16 where the two are a single chunk's halves
      if (i > 0) {
        const cuda::Fp8ActivationChunk& before = p.chunks[i - 1];
        const std::int64_t overlap = before.first + before.rows - c.first;
        REQUIRE(overlap >= 0);
        if (overlap > 0) {
          REQUIRE(blocks);
          REQUIRE(i + 1 == p.chunks.size());
          REQUIRE(overlap < (p.chunks.size() == 2 && before.first == 0 && m < cap ? 16 : 8));
        }
      }
    }
    for (std::int64_t r = 0; r < m; ++r) REQUIRE(covered[static_cast<std::size_t>(r)] >= 1);
    REQUIRE(computed < m + 16);  // at most 15 rows computed twice
    // resident exactly when every row's codes and every chunk's scales fit at once
    REQUIRE(p.resident == (m * k <= code_bytes && scales_total <= scale_floats));
  }
}
