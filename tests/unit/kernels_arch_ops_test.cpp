// The kernels added for architectures beyond plain llama — GeGLU(tanh), bias add, scale, logit
// soft-cap, per-head RMSNorm (through its op), rope with YaRN and llama3 frequency scaling —
// against naive double references written from the models' definitions (HF transformers'
// Gemma / Qwen / Llama 3.1 / YaRN formulas), on 1 and 3 threads; and ops::attention over a
// paged, quantized KV layer.
#include "cpu/attention/attention.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/elementwise/elementwise.hpp"
#include "cpu/elementwise/rope.hpp"
#include "cpu_backend/cpu_kernels.hpp"
#include "ops/ops.hpp"
#include "support/isa.hpp"
#include "support/random.hpp"
#include "support/tolerance.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

using namespace sitsrt;

namespace {

constexpr double kU = test::kUnitRoundoff;

std::vector<float> random_values(std::size_t n, test::Rng& rng, float scale) {
  std::vector<float> v = rng.normals(n, scale);
  for (auto& x : v) x = x == 0.0f ? scale : x;
  return v;
}

}  // namespace

SITSRT_ISA_TEST_CASE(isa, "geglu_tanh, add_bias, scale and soft_cap match double references", "[kernels][arch]",
                     cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512) {
  const int threads = GENERATE(1, 3);
  const std::int64_t n = GENERATE(1, 37, 40000);
  const std::int64_t rows = 3, ld = n + 3;
  CAPTURE(cpu::name(isa), threads, n);
  test::Rng rng(static_cast<std::uint64_t>(n * 5 + threads));
  std::vector<float> a = random_values(static_cast<std::size_t>(rows * ld), rng, 3.0f);
  // GeGLU extremes: exp(-2z) overflows or underflows float (clamped inside the vector exp).
  const float extremes[] = {-100.0f, 100.0f, -8.0f, 8.0f, -4.5f, 4.5f, 1e-30f, -1e-30f};
  for (std::size_t i = 0; i < std::size(extremes) && static_cast<std::int64_t>(i) < n; ++i) a[i] = extremes[i];
  const std::vector<float> b = random_values(static_cast<std::size_t>(rows * ld), rng, 2.0f);
  const std::vector<float> bias = random_values(static_cast<std::size_t>(n), rng, 0.5f);
  cpu::CpuContext ctx(threads, isa);
  std::vector<float> out(a.size());
  std::vector<double> expected, tolerance;
  std::vector<float> actual;
  const auto collect = [&](const char* what, auto reference, auto tol) {
    expected.clear();
    tolerance.clear();
    actual.clear();
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t c = 0; c < n; ++c) {
        const auto k = static_cast<std::size_t>(i * ld + c);
        const double ref = reference(a[k], b[k], bias[static_cast<std::size_t>(c)]);
        expected.push_back(ref);
        tolerance.push_back(tol(a[k], b[k], ref));
        actual.push_back(out[k]);
      }
    }
    test::check_close(expected, actual, tolerance, what);
  };

  cpu::geglu_tanh(ctx, a.data(), ld, b.data(), ld, rows, n, out.data(), ld);
  collect(
      "geglu_tanh",
      [](double x, double u, double) {
        return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x))) * u;
      },
      // the tanh argument carries ~4 u of |z| (z ~ x + 0.045 x^3), tanh a few ulp, then 3 products.
      [](double x, double u, double ref) {
        const double z = 0.8 * (std::fabs(x) + 0.045 * std::fabs(x * x * x));
        return 8 * kU * std::fabs(ref) + 8 * kU * (1.0 + z) * 0.5 * std::fabs(x) * std::fabs(u) + 1e-30;
      });
  cpu::add_bias(ctx, a.data(), ld, bias.data(), rows, n, out.data(), ld);
  collect(
      "add_bias", [](double x, double, double c) { return x + c; },
      [](double, double, double ref) { return kU * std::fabs(ref); });
  cpu::scale(ctx, a.data(), ld, 16.0f, rows, n, out.data(), ld);
  collect(
      "scale", [](double x, double, double) { return 16.0 * x; },
      [](double, double, double ref) { return kU * std::fabs(ref); });
  cpu::soft_cap(ctx, a.data(), ld, 2.5f, rows, n, out.data(), ld);
  collect(
      "soft_cap", [](double x, double, double) { return 2.5 * std::tanh(x / 2.5); },
      [](double x, double, double ref) { return 8 * kU * std::fabs(ref) + 2 * kU * std::fabs(x); });
  CHECK_THROWS(cpu::soft_cap(ctx, a.data(), ld, 0.0f, rows, n, out.data(), ld));
}

TEST_CASE("head_rms_norm normalises each head on its own", "[kernels][arch]") {
  const int threads = GENERATE(1, 3);
  const std::int64_t head_dim = GENERATE(8, 128), n_heads = 4, rows = 5;
  test::Rng rng(static_cast<std::uint64_t>(head_dim + threads));
  const std::int64_t width = n_heads * head_dim;
  std::vector<float> x(static_cast<std::size_t>(rows * width));
  for (std::int64_t i = 0; i < rows * n_heads; ++i) {  // heads of very different magnitudes
    const float s = std::exp2(rng.uniform(-6.0f, 6.0f));
    for (std::int64_t e = 0; e < head_dim; ++e) x[static_cast<std::size_t>(i * head_dim + e)] = rng.normal() * s;
  }
  const std::vector<float> w = random_values(static_cast<std::size_t>(head_dim), rng, 1.0f);
  std::vector<float> y(x.size());
  cpu::CpuContext ctx(threads, cpu::Isa::kGeneric);
  // Through the op entry point (shape checks) and the CPU backend's kernels.
  const std::vector<cpu::WeightMatrix> weights{
      {cpu::WeightLayout::kF32, reinterpret_cast<const std::byte*>(w.data()), 1, head_dim,
       static_cast<std::size_t>(head_dim) * 4}};
  CpuKernels kernels(ctx, weights);
  const Device cpu0 = kernels.device();
  const auto ref = [&](std::vector<float>& v) {
    return ops::TensorRef{reinterpret_cast<std::byte*>(v.data()), DType::kF32, rows, width, width, cpu0};
  };
  ops::head_rms_norm(kernels, ref(x), n_heads, {0, DType::kF32, 1, head_dim, cpu0}, 1e-6f, ref(y));
  std::vector<double> expected, tolerance;
  for (std::int64_t i = 0; i < rows * n_heads; ++i) {
    double ss = 0;
    for (std::int64_t e = 0; e < head_dim; ++e) ss += std::pow(x[static_cast<std::size_t>(i * head_dim + e)], 2);
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(head_dim) + 1e-6);
    for (std::int64_t e = 0; e < head_dim; ++e) {
      const double ref = x[static_cast<std::size_t>(i * head_dim + e)] * scale * w[static_cast<std::size_t>(e)];
      expected.push_back(ref);
      tolerance.push_back((test::gamma(head_dim / 16 + 8) + 4 * kU) * std::fabs(ref) + 1e-30);
    }
  }
  test::check_close(expected, y, tolerance, "head_rms_norm");
}

namespace {

// HF transformers' _compute_yarn_parameters: inverse frequencies and attention factor.
std::vector<double> yarn_reference(double base, std::int64_t dim, double factor, double original, double* mscale) {
  const auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(original / (rotations * 2 * std::numbers::pi))) / (2 * std::log(base));
  };
  const double low = std::max(std::floor(correction_dim(32.0)), 0.0);
  const double high = std::min(std::ceil(correction_dim(1.0)), static_cast<double>(dim - 1));
  std::vector<double> inv(static_cast<std::size_t>(dim / 2));
  for (std::size_t i = 0; i < inv.size(); ++i) {
    const double pos_freq = std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
    const double extrapolation = 1.0 / pos_freq, interpolation = 1.0 / (factor * pos_freq);
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high == low ? 0.001 : high - low), 0.0, 1.0);
    const double extrapolation_factor = 1.0 - ramp;
    inv[i] = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  *mscale = 0.1 * std::log(factor) + 1.0;
  return inv;
}

// HF transformers' _compute_llama3_parameters.
std::vector<double> llama3_reference(double base, std::int64_t dim, double factor, double low_ff, double high_ff,
                                     double old_context) {
  std::vector<double> inv(static_cast<std::size_t>(dim / 2));
  const double low_freq_wavelen = old_context / low_ff, high_freq_wavelen = old_context / high_ff;
  for (std::size_t i = 0; i < inv.size(); ++i) {
    const double f = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
    const double wavelen = 2 * std::numbers::pi / f;
    double scaled = wavelen > low_freq_wavelen ? f / factor : f;
    const double smooth = (old_context / wavelen - low_ff) / (high_ff - low_ff);
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) scaled = (1 - smooth) * scaled / factor + smooth * scaled;
    inv[i] = scaled;
  }
  return inv;
}

}  // namespace

TEST_CASE("rope with YaRN and llama3 scaling matches the HF definitions", "[kernels][arch]") {
  const bool yarn = GENERATE(true, false);
  const int threads = GENERATE(1, 3);
  const auto style = GENERATE(cpu::RopeStyle::kNormal, cpu::RopeStyle::kNeox);
  CAPTURE(yarn, threads, style == cpu::RopeStyle::kNeox);
  const std::int64_t head_dim = 128, n_heads = 2;
  const double base = 1000000.0, factor = 8.0, original = 4096.0;
  cpu::RopeParams params{head_dim, head_dim, static_cast<float>(base), 1.0f, nullptr, style};
  double mscale = 1.0;
  std::vector<double> inv;
  if (yarn) {
    params.freq_scale = static_cast<float>(1.0 / factor);
    params.yarn = {true, original, 32.0, 1.0, 1.0};
    inv = yarn_reference(base, head_dim, factor, original, &mscale);
  } else {
    params.llama3 = {true, factor, 1.0, 4.0, original};
    inv = llama3_reference(base, head_dim, factor, 1.0, 4.0, original);
  }
  const std::vector<std::int32_t> positions = {0, 1, 17, 4095, 4096, 30000, 131071};
  const auto rows = static_cast<std::int64_t>(positions.size());
  test::Rng rng(yarn ? 5 : 6);
  std::vector<float> x = random_values(static_cast<std::size_t>(rows * n_heads * head_dim), rng, 1.0f);
  const std::vector<float> x_in = x;
  cpu::CpuContext ctx(threads, cpu::Isa::kGeneric);
  cpu::rope(ctx, x.data(), n_heads * head_dim, rows, n_heads, positions.data(), params);
  std::vector<double> expected, tolerance;
  std::vector<float> actual;
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t h = 0; h < n_heads; ++h) {
      const std::size_t at = static_cast<std::size_t>((i * n_heads + h) * head_dim);
      for (std::int64_t j = 0; j < head_dim / 2; ++j) {
        const bool neox = style == cpu::RopeStyle::kNeox;
        const auto a = at + static_cast<std::size_t>(neox ? j : 2 * j);
        const auto b = at + static_cast<std::size_t>(neox ? j + head_dim / 2 : 2 * j + 1);
        const double theta = positions[static_cast<std::size_t>(i)] * inv[static_cast<std::size_t>(j)];
        const double x0 = x_in[a], x1 = x_in[b];
        // cos/sin rounded to float (u each), two products and a sum (3 u); the angle's own
        // double error is ~1e-16 * theta.
        const double tol = mscale * 4 * kU * (std::fabs(x0) + std::fabs(x1)) + 1e-13 * (std::fabs(x0) + std::fabs(x1));
        expected.insert(expected.end(), {mscale * (x0 * std::cos(theta) - x1 * std::sin(theta)),
                                         mscale * (x0 * std::sin(theta) + x1 * std::cos(theta))});
        tolerance.insert(tolerance.end(), {tol, tol});
        actual.insert(actual.end(), {x[a], x[b]});
      }
    }
  }
  test::check_close(expected, actual, tolerance, yarn ? "rope yarn" : "rope llama3");
}

// ops::attention over a paged int8-K / int4-V layer (block 16, a shuffled table) through the CPU
// backend stores the rows and attends exactly as the kernels do on the same view; the op refuses
// rows shorter than kv_row_bytes and a table that does not cover the positions.
TEST_CASE("ops::attention reads paged quantized KV layers through the CPU backend", "[kernels][attention]") {
  const std::int64_t n_heads = 4, n_kv = 2, d = 64, rows = 5, pos0 = 0, width = n_kv * d, bs = 16;
  test::Rng rng(21);
  const std::vector<float> q = random_values(static_cast<std::size_t>(rows * n_heads * d), rng, 1.0f);
  const std::vector<float> k = random_values(static_cast<std::size_t>(rows * width), rng, 1.0f);
  const std::vector<float> v = random_values(static_cast<std::size_t>(rows * width), rng, 1.0f);
  const std::size_t kb = ops::kv_row_bytes(ops::KvType::kInt8, n_kv, d),
                    vb = ops::kv_row_bytes(ops::KvType::kInt4, n_kv, d);
  const std::vector<std::int32_t> table{3, 0, 2};  // 48 positions of a 4-block pool
  std::vector<std::byte> kpool(4 * bs * kb), vpool(4 * bs * vb), kpool2(kpool.size()), vpool2(vpool.size());
  cpu::CpuContext ctx(2, cpu::Isa::kAvx2);
  const ops::AttentionShape shape{n_heads, n_kv, d, 0.125f, 0};
  const cpu::AttentionShape cpu_shape{n_heads, n_kv, d, 0.125f, 0};
  ctx.reserve_scratch(cpu::attention_scratch_floats(48, cpu_shape));
  const std::vector<cpu::WeightMatrix> weights;
  CpuKernels kernels(ctx, weights);
  const Device cpu0 = kernels.device();
  ops::KvLayerRef kv;
  kv.k_type = ops::KvType::kInt8;
  kv.v_type = ops::KvType::kInt4;
  kv.k = kpool.data();
  kv.v = vpool.data();
  kv.k_row_bytes = kb;
  kv.v_row_bytes = vb;
  kv.kv_width = width;
  kv.capacity = 48;
  kv.block_size = bs;
  kv.block_table = table;
  kv.device = cpu0;
  kv.k_rotated = true;
  const auto ref = [&](const std::vector<float>& x, std::int64_t cols) {
    return ops::TensorRef{
        reinterpret_cast<std::byte*>(const_cast<float*>(x.data())), DType::kF32, rows, cols, cols, cpu0};
  };
  std::vector<float> out(q.size()), expected(q.size());
  ops::attention(kernels, ref(q, n_heads * d), ref(k, width), ref(v, width), kv, pos0, shape, ref(out, n_heads * d));

  cpu::KvLayerView view =
      cpu::contiguous_kv(cpu::KvType::kInt8, cpu::KvType::kInt4, kpool2.data(), vpool2.data(), kb, vb, 48);
  view.block_size = bs;
  view.block_table = table;
  view.k_rotated = true;
  cpu::kv_store(ctx, view, k.data(), width, v.data(), width, rows, n_kv, d, pos0);
  cpu::attention(ctx, q.data(), n_heads * d, rows, pos0, view, cpu_shape, expected.data(), n_heads * d);
  CHECK(kpool == kpool2);
  CHECK(vpool == vpool2);
  CHECK(std::memcmp(out.data(), expected.data(), out.size() * sizeof(float)) == 0);

  ops::KvLayerRef short_rows = kv;
  short_rows.v_row_bytes = vb - 1;
  CHECK_THROWS_AS(ops::attention(kernels, ref(q, n_heads * d), ref(k, width), ref(v, width), short_rows, pos0, shape,
                                 ref(out, n_heads * d)),
                  Error);
  ops::KvLayerRef short_table = kv;
  short_table.block_table = std::span<const std::int32_t>(table).subspan(0, 1);
  CHECK_THROWS_AS(ops::attention(kernels, ref(q, n_heads * d), ref(k, width), ref(v, width), short_table, 14, shape,
                                 ref(out, n_heads * d)),
                  Error);
}
