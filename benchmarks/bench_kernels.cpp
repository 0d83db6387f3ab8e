// bench_kernels: CPU kernel throughput beside its physical floor. Not a test.
//
// Intended build line (benchmarks/CMakeLists.txt):
//   add_executable(bench_kernels bench_kernels.cpp)
//   target_link_libraries(bench_kernels PRIVATE sitsrt_kernels sitsrt_warnings)
//
// For each ISA level the CPU supports (forced through CpuContext) and threads = 1 and all:
//   matvec (decode, m = 1) of a rows x cols weight per format: GB/s of weight bytes streamed,
//     and that as a fraction of the measured DRAM read bandwidth for the same thread count.
//     The weights cycle through copies totalling --ws-mib (default 1 GiB, above any LLC) so
//     they come from DRAM, as a model's do during decode.
//   GEMM (prefill) with m = --m rows of x: GFLOP/s (2 m rows cols per call) and the fraction
//     of the measured FMA peak of that ISA and thread count.
//   attention decode at --ctx context: contiguous and paged (block 16) caches, F16, INT8 and
//     INT4 K/V: ms per layer and GB/s of cache bytes read vs the read bandwidth, and the cost of
//     storing the rows (kv_store) per 32 values.
//   --m-sweep 1,2,4,...: per format, microseconds per rows x cols matmul at each m with f32 and
//     with int8 activations (weights cycling through the copies, from DRAM), beside the weight
//     floor (matrix bytes / read bandwidth) and the compute roof (2 m rows cols over the FMA peak,
//     and for int8 over the vpdpbusd peak where the level has it).
// Every figure is the median of --repeats timed runs after one warm-up run.
//
// Usage: bench_kernels [--rows N] [--cols N] [--m N] [--ctx N] [--repeats N] [--ws-mib N]
//                      [--attention-only 1] [--threads N] [--isa generic|avx2|avx512|avx512vnni|amx]
//                      [--formats f32,q8_0,...] [--m-sweep 1,2,4,8]
#include "core/aligned_buffer.hpp"
#include "core/dtype.hpp"
#include "core/memory_bandwidth.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/attention/attention.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/matmul/matmul.hpp"
#include "cpu/repacked_blocks.hpp"

#include <sitsrt/error.hpp>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

using namespace sitsrt;

namespace {

struct Options {
  std::int64_t rows = 4096, cols = 4096, m = 128, ctx = 4096;
  int repeats = 5;
  std::size_t ws_mib = 1024;
  int threads = 0;  // 0: all
  std::vector<cpu::Isa> isas;
  std::vector<cpu::WeightLayout> formats;  // stored formats and the CPU's repacked layouts
  bool attention_only = false;
  std::vector<std::int64_t> m_sweep;       // empty: no sweep table
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Median wall time of `repeats` runs of fn after one warm-up run.
double median_seconds(int repeats, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    t.push_back(seconds_since(start));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// ---- FMA peak: independent FMA chains (more than latency x ports), no memory traffic. ----

#if defined(__x86_64__)
__attribute__((target("avx512f"))) double fma_loop_avx512(std::int64_t iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (std::int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  volatile float sink = out[0];  // keeps the chains alive
  (void)sink;
  return static_cast<double>(iters) * 16 * 16 * 2;  // flops
}
// vpdpbusd chains: 64 multiply-adds (128 int ops) per instruction.
__attribute__((target("avx512f,avx512vnni"))) double dpbusd_loop_avx512(std::int64_t iters) {
  __m512i acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (std::int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  __m512i s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_epi32(s, acc[i]);
  alignas(64) std::int32_t out[16];
  _mm512_store_si512(out, s);
  volatile std::int32_t sink = out[0];
  (void)sink;
  return static_cast<double>(iters) * 16 * 64 * 2;  // int ops
}
__attribute__((target("avx2,fma"))) double fma_loop_avx2(std::int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (std::int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  alignas(32) float out[8];
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_store_ps(out, s);
  volatile float sink = out[0];
  (void)sink;
  return static_cast<double>(iters) * 12 * 8 * 2;
}
#endif

// Portable multiply-add loop (what the generic kernels can use): 48 lanes = 12 SSE/NEON
// chains, enough to cover the multiply + add latency.
double fma_loop_generic(std::int64_t iters) {
  float acc[48];
  for (int i = 0; i < 48; ++i) acc[i] = static_cast<float>(i) * 1e-3f;
  for (std::int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 48; ++i) acc[i] = acc[i] * 0.999999f + 1e-7f;
  }
  volatile float sink = acc[0];
  (void)sink;
  return static_cast<double>(iters) * 48 * 2;
}

// Peak int8 multiply-add ops/s (2 per multiply-add) with vpdpbusd, or 0 below avx512vnni.
double dpbusd_peak(cpu::CpuContext& ctx) {
#if defined(__x86_64__)
  if (ctx.isa() != cpu::Isa::kAvx512Vnni && ctx.isa() != cpu::Isa::kAmx) return 0.0;
  const std::int64_t iters = 10'000'000;
  std::vector<double> ops(static_cast<std::size_t>(ctx.threads()));
  double best = 0.0;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    ctx.pool().run([&](int t, int) { ops[static_cast<std::size_t>(t)] = dpbusd_loop_avx512(iters); });
    double total = 0.0;
    for (double o : ops) total += o;
    best = std::max(best, total / seconds_since(start));
  }
  return best;
#else
  (void)ctx;
  return 0.0;
#endif
}

// Peak single-precision FLOP/s of this ISA with the context's threads.
double fma_peak(cpu::CpuContext& ctx) {
  const std::int64_t iters = 20'000'000;
  std::vector<double> flops(static_cast<std::size_t>(ctx.threads()));
  const auto run = [&] {
    ctx.pool().run([&](int t, int) {
      switch (ctx.isa()) {
#if defined(__x86_64__)
        case cpu::Isa::kAvx512:
        case cpu::Isa::kAvx512Vnni:
        case cpu::Isa::kAmx:  // fp32 FMA peak (the AMX tile peak is not measured here)
          flops[static_cast<std::size_t>(t)] = fma_loop_avx512(iters);
          break;
        case cpu::Isa::kAvx2:
          flops[static_cast<std::size_t>(t)] = fma_loop_avx2(iters);
          break;
#endif
        default:
          flops[static_cast<std::size_t>(t)] = fma_loop_generic(iters / 4);
          break;
      }
    });
  };
  run();
  double best = 0.0;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    double total = 0.0;
    for (double f : flops) total += f;
    best = std::max(best, total / seconds_since(start));
  }
  return best;
}

// ---- Weights ----

struct Matrices {
  AlignedBuffer bytes;
  std::size_t matrix_bytes = 0;
  int copies = 0;
  cpu::WeightMatrix at(cpu::WeightLayout layout, std::int64_t rows, std::int64_t cols, int i) {
    return {layout, bytes.data() + static_cast<std::size_t>(i) * matrix_bytes, rows, cols, row_bytes(layout, cols)};
  }
};

Matrices make_matrices(cpu::WeightLayout layout, const std::vector<float>& source, std::int64_t rows, std::int64_t cols,
                       std::size_t min_total) {
  Matrices m;
  m.matrix_bytes = row_bytes(layout, cols) * static_cast<std::size_t>(rows);
  m.copies = static_cast<int>(std::max<std::size_t>(1, (min_total + m.matrix_bytes - 1) / m.matrix_bytes));
  m.bytes = AlignedBuffer(m.matrix_bytes * static_cast<std::size_t>(m.copies), "bench weights");
  const std::size_t rb = row_bytes(layout, cols);
  // A tiled layout (q8_0p) has no rows of its own: the stored rows, converted as a whole matrix.
  const cpu::WeightLayout row_layout = cpu::is_tiled(layout) ? cpu::stored_layout(cpu::stored_type(layout)) : layout;
  std::vector<std::byte> stored(cpu::is_tiled(layout) ? m.matrix_bytes : 0);
  std::byte* rows_at = cpu::is_tiled(layout) ? stored.data() : m.bytes.data();
  for (std::int64_t r = 0; r < rows; ++r) {
    cpu::quantize_row(row_layout, source.data() + r * cols, rows_at + static_cast<std::size_t>(r) * rb, cols);
  }
  if (cpu::is_tiled(layout)) {
    cpu::CpuContext one(1, cpu::Isa::kGeneric);
    cpu::copy_to_layout(one, {row_layout, stored.data(), rows, cols, rb}, layout, m.bytes.data(), rb);
  }
  for (int c = 1; c < m.copies; ++c) {
    std::memcpy(m.bytes.data() + static_cast<std::size_t>(c) * m.matrix_bytes, m.bytes.data(), m.matrix_bytes);
  }
  return m;
}

// One attention case: the cache's element types and block size (0: contiguous).
struct AttentionCase {
  const char* name;
  cpu::KvType k_type, v_type;
  std::int64_t block_size;
  bool rotated;
};

// Decode at --ctx positions (32 q / 8 kv heads, d = 128) for contiguous and paged (blocks of 16
// in a shuffled order, as a pool hands them out) caches of each type: GB/s of cache bytes read
// (K and V rows, scales included) beside the read bandwidth. K+V of 4096 f16 positions is
// 16 MiB, so the cache may sit partly in the LLC: above 100% of bw means it did.
void bench_attention_step(cpu::CpuContext& ctx, const Options& opt, double bandwidth);

void bench_attention(cpu::CpuContext& ctx, const Options& opt, double bandwidth) {
  const cpu::AttentionShape shape{32, 8, 128, 1.0f / std::sqrt(128.0f)};
  const std::int64_t width = shape.n_kv_heads * shape.head_dim;
  std::vector<float> rows(static_cast<std::size_t>(width * opt.ctx));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (auto& x : rows) x = normal(rng);
  std::vector<float> q(static_cast<std::size_t>(shape.n_heads * shape.head_dim)), out(q.size());
  for (auto& x : q) x = normal(rng);
  ctx.reserve_scratch(cpu::attention_scratch_floats(opt.ctx, shape));
  using cpu::KvType;
  const AttentionCase cases[] = {
      {"f16/f16 contiguous", KvType::kF16, KvType::kF16, 0, false},
      {"f16/f16 paged 16", KvType::kF16, KvType::kF16, 16, false},
      {"int8/int8 contiguous", KvType::kInt8, KvType::kInt8, 0, false},
      {"int8/int8 paged 16", KvType::kInt8, KvType::kInt8, 16, false},
      {"int8/int8 paged 16 rot", KvType::kInt8, KvType::kInt8, 16, true},
      {"int8/int4 paged 16", KvType::kInt8, KvType::kInt4, 16, false},
      {"int4/int4 paged 16", KvType::kInt4, KvType::kInt4, 16, false},
  };
  std::printf("  attention decode ctx=%lld (32 q / 8 kv heads, d=128), K/V types and layout:\n",
              static_cast<long long>(opt.ctx));
  std::printf("  %-24s %9s %12s %10s %7s %14s\n", "cache", "ms/layer", "bytes/pos", "GB/s", "of bw", "store ns/32 v");
  for (const AttentionCase& c : cases) {
    const std::size_t kb = cpu::kv_row_bytes(c.k_type, shape.n_kv_heads, shape.head_dim);
    const std::size_t vb = cpu::kv_row_bytes(c.v_type, shape.n_kv_heads, shape.head_dim);
    AlignedBuffer k(kb * static_cast<std::size_t>(opt.ctx), "bench k"),
        v(vb * static_cast<std::size_t>(opt.ctx), "bench v");
    std::vector<std::int32_t> table;
    cpu::KvLayerView kv = cpu::contiguous_kv(c.k_type, c.v_type, k.data(), v.data(), kb, vb, opt.ctx);
    if (c.block_size > 0) {
      table.resize(static_cast<std::size_t>((opt.ctx + c.block_size - 1) / c.block_size));
      for (std::size_t b = 0; b < table.size(); ++b) table[b] = static_cast<std::int32_t>(b);
      std::shuffle(table.begin(), table.end(), rng);
      kv.block_size = c.block_size;
      kv.block_table = table;
    }
    kv.k_rotated = kv.v_rotated = c.rotated;
    // Storing every position: the conversion's cost per 32 values (an int4 group) of K and V.
    const double store = median_seconds(opt.repeats, [&] {
      cpu::kv_store(ctx, kv, rows.data(), width, rows.data(), width, opt.ctx, shape.n_kv_heads, shape.head_dim, 0);
    });
    const double s = median_seconds(
        opt.repeats, [&] { cpu::attention(ctx, q.data(), 0, 1, opt.ctx - 1, kv, shape, out.data(), 0); });
    const double bytes = static_cast<double>(kb + vb) * static_cast<double>(opt.ctx);
    std::printf("  %-24s %9.3f %12zu %10.1f %6.0f%% %14.1f\n", c.name, s * 1e3, kb + vb, bytes / s / 1e9,
                100.0 * bytes / s / bandwidth, store * 1e9 / static_cast<double>(2 * opt.ctx * width / 32));
    std::fflush(stdout);
  }
  bench_attention_step(ctx, opt, bandwidth);
}

// A serving decode step's attention: 16 sequences of 192 positions (one query row each) over 24
// layers' f16 caches of the 0.35B acceptance model's shape (16 q / 8 kv heads, d = 64), paged in
// blocks of 16 handed out as the pool does (each prompt's blocks together, then decode blocks
// interleaved across the sequences). Its floor: the K and V bytes read over the read bandwidth.
void bench_attention_step(cpu::CpuContext& ctx, const Options& opt, double bandwidth) {
  constexpr int kSequences = 16, kLayers = 24, kBlock = 16, kPromptBlocks = 8;
  constexpr std::int64_t kPositions = 192, kBlocksPerSequence = kPositions / kBlock;
  const cpu::AttentionShape shape{16, 8, 64, 0.125f};
  const std::size_t row = cpu::kv_row_bytes(cpu::KvType::kF16, shape.n_kv_heads, shape.head_dim);
  const std::size_t plane = row * kBlock * kSequences * kBlocksPerSequence;
  AlignedBuffer cache(2 * plane * kLayers, "bench kv step");
  std::mt19937 rng(5);
  auto* halves = reinterpret_cast<std::uint16_t*>(cache.data());
  for (std::size_t i = 0; i < cache.size() / 2; ++i) halves[i] = static_cast<std::uint16_t>(0x3000 + (rng() & 0x3FF));
  std::vector<std::vector<std::int32_t>> tables(kSequences);
  std::int32_t next = 0;
  for (auto& t : tables) {
    for (int b = 0; b < kPromptBlocks; ++b) t.push_back(next++);
  }
  for (std::int64_t b = kPromptBlocks; b < kBlocksPerSequence; ++b) {
    for (auto& t : tables) t.push_back(next++);
  }
  std::vector<float> q(static_cast<std::size_t>(kSequences * shape.n_heads * shape.head_dim)), out(q.size());
  std::normal_distribution<float> normal;
  for (auto& x : q) x = normal(rng);
  ctx.reserve_scratch(cpu::attention_scratch_floats(kPositions, shape));
  std::vector<cpu::AttentionSequence> batch(kSequences);
  const std::int64_t ld = shape.n_heads * shape.head_dim;
  // Row-major blocks (each position's heads together), then head-major (each kv head's
  // positions of a block together, the CPU backend's pools): the values read are the same.
  for (const bool head_major : {false, true}) {
    const double s = median_seconds(opt.repeats, [&] {
      for (int l = 0; l < kLayers; ++l) {
        std::byte* k = cache.data() + 2 * plane * static_cast<std::size_t>(l);
        for (int i = 0; i < kSequences; ++i) {
          cpu::AttentionSequence& a = batch[static_cast<std::size_t>(i)];
          a.q = q.data() + i * ld;
          a.ldq = a.ldo = ld;
          a.rows = 1;
          a.pos0 = kPositions - 1;
          a.kv = cpu::contiguous_kv(cpu::KvType::kF16, cpu::KvType::kF16, k, k + plane, row, row, kPositions);
          a.kv.block_size = kBlock;
          a.kv.block_table = tables[static_cast<std::size_t>(i)];
          a.kv.k_head_major = a.kv.v_head_major = head_major;
          a.out = out.data() + i * ld;
        }
        cpu::attention_batch(ctx, batch, shape);
      }
    });
    const double bytes = 2.0 * static_cast<double>(row) * kPositions * kSequences * kLayers;
    std::printf(
        "  attention decode step: %d sequences x %lld positions, %d layers (16 q / 8 kv heads, d=64, f16 "
        "paged 16, %s): %.2f ms, %.1f GB/s, %.0f%% of bw (floor %.2f ms)\n",
        kSequences, static_cast<long long>(kPositions), kLayers, head_major ? "head-major" : "row-major", s * 1e3,
        bytes / s / 1e9, 100.0 * bytes / s / bandwidth, bytes / bandwidth * 1e3);
    std::fflush(stdout);
  }
}

// Seconds per matvec over all copies (DRAM-bound) and per matvec of one L2-resident copy
// (compute-bound: what the kernel costs when memory is not the limit).
struct MatvecTimes {
  double dram = 0.0, cached = 0.0;
};
MatvecTimes time_matvec(cpu::CpuContext& ctx, Matrices& mats, cpu::WeightLayout layout, const Options& opt,
                        const float* x, float* y) {
  MatvecTimes t;
  const cpu::WeightMatrix w0 = mats.at(layout, opt.rows, opt.cols, 0);
  ctx.reserve_shared_bytes(cpu::matmul_shared_bytes(ctx, w0, 1));
  t.dram = median_seconds(opt.repeats, [&] {
    for (int c = 0; c < mats.copies; ++c) {
      cpu::matmul(ctx, mats.at(layout, opt.rows, opt.cols, c), x, opt.cols, 1, y, opt.rows);
    }
  });
  // 64 rows: at 4096 columns at most 1 MiB (f32), L2-resident.
  cpu::WeightMatrix w = w0;
  w.rows = std::min<std::int64_t>(opt.rows, 64);
  t.cached = median_seconds(opt.repeats, [&] {
               for (int i = 0; i < 64; ++i) cpu::matmul(ctx, w, x, opt.cols, 1, y, w.rows);
             }) /
             64.0;
  return t;
}

// Microseconds per matmul of one copy at batch m (cycling through the copies, so weights come
// from DRAM as in a model's step).
double matmul_us(cpu::CpuContext& ctx, Matrices& mats, cpu::WeightLayout layout, const Options& opt, std::int64_t m,
                 const float* x, float* y) {
  const cpu::WeightMatrix w0 = mats.at(layout, opt.rows, opt.cols, 0);
  ctx.reserve_shared_bytes(cpu::matmul_shared_bytes(ctx, w0, m));
  ctx.reserve_scratch(cpu::matmul_scratch_floats(w0, m));
  const double s = median_seconds(opt.repeats, [&] {
    for (int c = 0; c < mats.copies; ++c) cpu::matmul(ctx, mats.at(layout, opt.rows, opt.cols, c), x, opt.cols, m, y, opt.rows);
  });
  return s / mats.copies * 1e6;
}

void bench_m_sweep(cpu::CpuContext& ctx, cpu::CpuContext& ctx_int8, Matrices& mats, cpu::WeightLayout layout,
                   const Options& opt, double bw, double fma, double dpbusd, const float* x, float* y) {
  const double floor_us = static_cast<double>(mats.matrix_bytes) / bw * 1e6;
  std::printf("  %s %lldx%lld: us per matmul (weights from DRAM); floor %.1f us = %zu weight bytes / read bw\n",
              std::string(name(layout)).c_str(), static_cast<long long>(opt.rows), static_cast<long long>(opt.cols),
              floor_us, mats.matrix_bytes);
  std::printf("  %5s %10s %10s %9s %9s %10s %10s %10s\n", "m", "f32 us", "int8 us", "f32/int8", "floor us", "fma roof",
              "int8 roof", "int8 GOP/s");
  for (const std::int64_t m : opt.m_sweep) {
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(opt.rows) * static_cast<double>(opt.cols);
    // (q8_0p has no float kernels: its f32 column repeats the int8 time)
    const double q = matmul_us(ctx_int8, mats, layout, opt, m, x, y);
    const double f = cpu::is_tiled(layout) ? q : matmul_us(ctx, mats, layout, opt, m, x, y);
    std::printf("  %5lld %10.1f %10.1f %9.2f %9.1f %10.1f %10.1f %10.1f\n", static_cast<long long>(m), f, q, f / q,
                floor_us, flops / fma * 1e6, dpbusd > 0 ? flops / dpbusd * 1e6 : 0.0, flops / q / 1e3);
    std::fflush(stdout);
  }
}

void bench_isa(cpu::Isa isa, int threads, const Options& opt, const std::vector<float>& source) {
  cpu::CpuContext ctx(threads, isa);
  cpu::CpuContext ctx_int8(threads, isa, /*int8_activations=*/true);
  const double bw = measure_read_bandwidth(ctx.pool(), dram_probe_bytes(), 5);
  const double peak = fma_peak(ctx);
  std::printf("\nisa %-7s threads %-3d read bandwidth %.1f GB/s (best of 5), FMA peak %.1f GFLOP/s\n",
              std::string(cpu::name(isa)).c_str(), ctx.threads(), bw / 1e9, peak / 1e9);
  if (opt.attention_only) {
    bench_attention(ctx, opt, bw);
    return;
  }
  std::printf("  matvec: f32 activations / int8 activations (Q formats); GB/s from DRAM, and ns per 32-element\n"
              "  block per thread with 64 rows in cache (compute cost)\n");
  std::printf("  %-8s %10s %6s %10s %6s %9s %9s %8s %13s %8s\n", "format", "mv GB/s", "of bw", "int8 GB/s", "of bw",
              "ns/blk", "int8 ns", "copies", "gemm GFLOP/s", "of peak");
  std::int64_t m_max = opt.m;
  for (const std::int64_t m : opt.m_sweep) m_max = std::max(m_max, m);
  std::vector<float> x(static_cast<std::size_t>(opt.cols * m_max)), y(static_cast<std::size_t>(opt.rows * m_max));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  for (const cpu::WeightLayout layout : opt.formats) {
    Matrices mats = make_matrices(layout, source, opt.rows, opt.cols, opt.ws_mib << 20);
    const bool has_int8 = cpu::matmul_shared_bytes(ctx_int8, mats.at(layout, opt.rows, opt.cols, 0), 1) > 0;
    if (cpu::is_tiled(layout) && !has_int8) {
      std::printf("  %-8s needs the int8 avx512vnni kernels\n", std::string(name(layout)).c_str());
      continue;
    }
    const MatvecTimes q = has_int8 ? time_matvec(ctx_int8, mats, layout, opt, x.data(), y.data()) : MatvecTimes{};
    // (q8_0p has no float kernels: its f32 columns and GEMM repeat the int8 ones)
    const MatvecTimes f = cpu::is_tiled(layout) ? q : time_matvec(ctx, mats, layout, opt, x.data(), y.data());
    cpu::CpuContext& gemm_ctx = cpu::is_tiled(layout) ? ctx_int8 : ctx;
    const double total = static_cast<double>(mats.matrix_bytes) * mats.copies;
    const double blocks_per_thread =
        static_cast<double>(std::min<std::int64_t>(opt.rows, 64)) * static_cast<double>(opt.cols) / 32.0 /
        std::min(threads, 4);  // 64 rows split in grains of 16
    const cpu::WeightMatrix w = mats.at(layout, opt.rows, opt.cols, 0);
    gemm_ctx.reserve_scratch(cpu::matmul_scratch_floats(w, opt.m));
    gemm_ctx.reserve_shared_bytes(cpu::matmul_shared_bytes(gemm_ctx, w, opt.m));  // AMX: the bf16 copy of x
    const double gm =
        median_seconds(opt.repeats, [&] { cpu::matmul(gemm_ctx, w, x.data(), opt.cols, opt.m, y.data(), opt.rows); });
    const double flops =
        2.0 * static_cast<double>(opt.m) * static_cast<double>(opt.rows) * static_cast<double>(opt.cols);
    if (has_int8) {
      std::printf("  %-8s %10.1f %5.0f%% %10.1f %5.0f%% %9.2f %9.2f %8d %13.1f %7.0f%%\n",
                  std::string(name(layout)).c_str(), total / f.dram / 1e9, 100.0 * total / f.dram / bw,
                  total / q.dram / 1e9, 100.0 * total / q.dram / bw, f.cached / blocks_per_thread * 1e9,
                  q.cached / blocks_per_thread * 1e9, mats.copies, flops / gm / 1e9, 100.0 * flops / gm / peak);
    } else {
      std::printf("  %-8s %10.1f %5.0f%% %10s %6s %9.2f %9s %8d %13.1f %7.0f%%\n", std::string(name(layout)).c_str(),
                  total / f.dram / 1e9, 100.0 * total / f.dram / bw, "-", "-", f.cached / blocks_per_thread * 1e9, "-",
                  mats.copies, flops / gm / 1e9, 100.0 * flops / gm / peak);
    }
    std::fflush(stdout);
    if (!opt.m_sweep.empty()) {
      bench_m_sweep(ctx, ctx_int8, mats, layout, opt, bw, peak, dpbusd_peak(ctx_int8), x.data(), y.data());
    }
  }
  bench_attention(ctx, opt, bw);
}

std::vector<std::string_view> split_commas(std::string_view s) {
  std::vector<std::string_view> out;
  while (!s.empty()) {
    const auto comma = s.find(',');
    out.push_back(s.substr(0, comma));
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: bench_kernels [--isa generic,avx2,avx512,avx512vnni] [--formats f16,q8_0,...] [--threads N]\n"
          "                     [--rows R] [--cols C] [--m M] [--ctx N] [--repeats N] [--ws-mib MiB]\n"
          "                     [--m-sweep 1,2,4,...]\n"
          "Kernel throughput (matvec GB/s from DRAM and ns per block in cache, GEMM GFLOP/s, attention)\n"
          "beside the read bandwidth and FMA peak measured in the same run.\n");
      std::exit(0);
    }
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view key = argv[i];
    const char* value = argv[i + 1];
    if (key == "--rows")
      opt.rows = std::atoll(value);
    else if (key == "--cols")
      opt.cols = std::atoll(value);
    else if (key == "--m")
      opt.m = std::atoll(value);
    else if (key == "--ctx")
      opt.ctx = std::atoll(value);
    else if (key == "--repeats")
      opt.repeats = std::max(1, std::atoi(value));
    else if (key == "--ws-mib")
      opt.ws_mib = static_cast<std::size_t>(std::atoll(value));
    else if (key == "--threads")
      opt.threads = std::atoi(value);
    else if (key == "--attention-only")
      opt.attention_only = std::atoi(value) != 0;
    else if (key == "--isa") {
      for (const auto part : split_commas(value)) {
        for (cpu::Isa isa : {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni, cpu::Isa::kAmx}) {
          if (cpu::name(isa) == part) opt.isas.push_back(isa);
        }
      }
    } else if (key == "--m-sweep") {
      for (const auto part : split_commas(value)) opt.m_sweep.push_back(std::max<std::int64_t>(1, std::atoll(std::string(part).c_str())));
    } else if (key == "--formats") {
      for (const auto part : split_commas(value)) {
        if (const auto t = cpu::weight_layout_from_name(part)) opt.formats.push_back(*t);
      }
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      std::exit(2);
    }
  }
  if (opt.isas.empty()) opt.isas = {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni, cpu::Isa::kAmx};
  if (opt.formats.empty()) {
    for (int i = 0; i < kDTypeCount; ++i) opt.formats.push_back(cpu::stored_layout(static_cast<DType>(i)));
  }
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options opt = parse(argc, argv);
    std::printf("bench_kernels: matvec %lldx%lld (working set >= %zu MiB), gemm m=%lld, median of %d after warm-up\n",
                static_cast<long long>(opt.rows), static_cast<long long>(opt.cols), opt.ws_mib,
                static_cast<long long>(opt.m), opt.repeats);
    std::vector<float> source(static_cast<std::size_t>(opt.rows * opt.cols));
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    for (auto& v : source) v = normal(rng);
    const int all = opt.threads > 0 ? opt.threads : ThreadPool::hardware_threads();
    for (cpu::Isa isa : opt.isas) {
      if (!cpu::isa_supported(isa)) {
        std::printf("\nisa %s: not supported by this CPU, skipped\n", std::string(cpu::name(isa)).c_str());
        continue;
      }
      bench_isa(isa, 1, opt, source);
      if (all > 1) bench_isa(isa, all, opt, source);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
