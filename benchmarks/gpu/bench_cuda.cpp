// CUDA kernel benchmark: the measured ceilings (read bandwidth, a cuBLASLt BF16 GEMM), then every
// decode matmul format on Llama-3-8B layer shapes at batch 1 and 16, in GB/s of weights and %
// of the measured read bandwidth (the floor of a decode matmul is its weight bytes / bandwidth),
// and the prefill path at 512 rows (what the backend runs from PrefillGemm::kMinRows rows: weights
// decoded to BF16 + a cuBLASLt GEMM; for FP8 per channel and per 128 x 128 block also the FP8 x FP8 GEMMs) in TFLOP/s
// against the BF16 GEMM. Weights cycle over
// enough copies to exceed L2 so every call streams from HBM. Then decode attention per layer over
// an f16 paged KV cache at 512 / 4096 / 16384 positions, split (flash-decoding) and one pass per
// head. Then the logit summaries greedy / top-k decode reads instead of the logits (a 128256-id
// vocabulary) against what the host does without them (copy the rows back, summarise each on one
// thread). Prints markdown tables (--json: one JSON object).
#include "core/dtype.hpp"
#include "cpu/logits/logit_kernels.hpp"
#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_context.hpp"
#include "cuda_backend/cuda_kernels.hpp"
#include "cuda_backend/device_allocator.hpp"
#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/logit_summary_record.hpp"
#include "cuda_backend/planar_weights.hpp"
#include "cuda_backend/prefill_gemm.hpp"
#include "gpu/ceilings.hpp"
#include "gpu/event_timer.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

using namespace sitsrt;

namespace {

struct Shape {
  const char* name;
  std::int64_t n, k;  // outputs, inputs
};

constexpr Shape kShapes[] = {{"attn qkvo 4096x4096", 4096, 4096},
                             {"ffn up 14336x4096", 14336, 4096},
                             {"ffn down 4096x14336", 4096, 14336},
                             {"lm head 128256x4096", 128256, 4096}};
constexpr DType kFormats[] = {DType::kFP8_E4M3, DType::kQ4_G128, DType::kQ8_0, DType::kQ4_0, DType::kBF16, DType::kF16};

// Seconds per call of the matmul at m rows, weights cycling over copies totalling >= 512 MiB.
// planar: the FP8 / INT4 g128 kernels over the layout the backend uploads (planar_weights.hpp);
// otherwise the stored-block kernels (matmul.cu).
// Rows from PrefillGemm::kMinRows take the BF16 tensor-core GEMM, as in the backend.
// fp8_scales: FP8 weights with one scale per output channel or per 128 x 128 block (the FP8 x FP8
// prefill GEMM's; an error where it does not run).
// tensor_cores: the planar kernels take the tensor-core decode (every planar format at 5+ rows;
// an error where they do not); split: with the split decode's scratch, as the backend runs them
// (kernels/planar_mma_split.cu), else planar_mma.cu's blocks of 32 rows.
enum class Fp8Scales { kNone, kChannel, kBlocks };
double time_matmul(DType format, const Shape& s, std::int64_t m, int repeats, bool planar, cuda::PrefillGemm& gemm,
                   Fp8Scales fp8_scales = Fp8Scales::kNone, bool tensor_cores = false, bool split = false) {
  const std::size_t stride = row_bytes(format, s.k);
  const std::size_t bytes = stride * static_cast<std::size_t>(s.n);
  const std::size_t copies = std::max<std::size_t>(1, ((512u << 20) + bytes - 1) / bytes);
  std::vector<void*> weights(copies);
  for (void*& w : weights) {
    SITSRT_CUDA_CHECK(cudaMalloc(&w, bytes));
    SITSRT_CUDA_CHECK(cudaMemset(w, 0x11, bytes));  // finite values in every format
  }
  void *x = nullptr, *y = nullptr;
  SITSRT_CUDA_CHECK(cudaMalloc(&x, static_cast<std::size_t>(m * s.k) * 4));
  SITSRT_CUDA_CHECK(cudaMalloc(&y, static_cast<std::size_t>(m * s.n) * 4));
  SITSRT_CUDA_CHECK(cudaMemset(x, 0x11, static_cast<std::size_t>(m * s.k) * 4));
  void* scales = nullptr;  // every block's scale is the same 0x11111111 float: per channel or per block
  const std::size_t scale_floats = fp8_scales == Fp8Scales::kBlocks
                                       ? static_cast<std::size_t>((s.n + 127) / 128 * cuda::fp8_block128_scales_ld(s.k))
                                       : static_cast<std::size_t>(s.n);
  if (fp8_scales != Fp8Scales::kNone) {
    SITSRT_CUDA_CHECK(cudaMalloc(&scales, scale_floats * 4));
    SITSRT_CUDA_CHECK(cudaMemset(scales, 0x11, scale_floats * 4));
  }
  cuda::PlanarSplitScratch scratch;
  if (split) {
    const cuda::PlanarTarget target{nullptr, s.n, nullptr, s.n};
    const cuda::PlanarSplitNeed need = cuda::planar_split_need(
        format, {&target, 1}, s.k, m, cuda::PlanarEpilogue::kNone, cuda::PlanarPath::kTensorCores);
    scratch.partial_floats = need.partial_floats;
    scratch.counter_count = need.counters;
    const auto partial_bytes = static_cast<std::size_t>(std::max<std::int64_t>(1, need.partial_floats)) * 4;
    const auto counter_bytes = static_cast<std::size_t>(std::max<std::int64_t>(1, need.counters)) * 4;
    SITSRT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scratch.partials), partial_bytes));
    SITSRT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scratch.counters), counter_bytes));
    SITSRT_CUDA_CHECK(cudaMemset(scratch.counters, 0, counter_bytes));  // each launch leaves them zero
  }
  const auto call = [&](std::size_t i) {
    const auto* w = static_cast<const std::uint8_t*>(weights[i % copies]);
    if (m >= cuda::PrefillGemm::kMinRows) {
      cuda::DeviceWeight dw{w, format, s.n, s.k, static_cast<std::int64_t>(stride), planar, {}};
      (fp8_scales == Fp8Scales::kBlocks ? dw.block_scales : dw.channel_scales) = static_cast<const float*>(scales);
      if (!gemm.run(dw, static_cast<const float*>(x), s.k, m, static_cast<float*>(y), s.n)) {
        throw std::runtime_error("prefill GEMM unavailable: " + gemm.unavailable_reason());
      }
    } else if (planar) {
      const bool ran = cuda::launch_planar_matmul(
          format, w, s.n, s.k, static_cast<const float*>(x), s.k, m, static_cast<float*>(y), s.n, nullptr,
          tensor_cores ? cuda::PlanarPath::kTensorCores : cuda::PlanarPath::kExact, split ? &scratch : nullptr);
      if (tensor_cores && !ran) throw std::runtime_error("the tensor-core decode did not take this matmul");
    } else {
      cuda::launch_matmul(format, w, static_cast<std::int64_t>(stride), s.n, s.k, static_cast<const float*>(x), s.k, m,
                          static_cast<float*>(y), s.n, nullptr);
    }
  };
  for (std::size_t i = 0; i < copies; ++i) call(i);
  const double seconds = bench::seconds_per_call(repeats, [&](int i) { call(static_cast<std::size_t>(i)); });
  const bool fp8_ran = gemm.last_path() == (fp8_scales == Fp8Scales::kBlocks ? cuda::PrefillGemm::Path::kFp8Blocks
                                                                             : cuda::PrefillGemm::Path::kFp8);
  for (void* w : weights) SITSRT_CUDA_CHECK(cudaFree(w));
  if (split) {
    SITSRT_CUDA_CHECK(cudaFree(scratch.partials));
    SITSRT_CUDA_CHECK(cudaFree(scratch.counters));
  }
  if (scales != nullptr) SITSRT_CUDA_CHECK(cudaFree(scales));
  SITSRT_CUDA_CHECK(cudaFree(x));
  SITSRT_CUDA_CHECK(cudaFree(y));
  if (fp8_scales != Fp8Scales::kNone && !fp8_ran) {
    throw std::runtime_error("the FP8 x FP8 prefill GEMM did not run: " + gemm.fp8_unavailable_reason());
  }
  return seconds;
}

// Decode attention over an f16 paged KV cache of the 8B shape (32 query heads, 8 KV heads of
// 128): `batch` rows, each its own sequence at `context` positions (the store of its new row
// included). Seconds per call, split over the sequence (flash-decoding) or not (the staged kernel
// as one split per row and KV head, as long steps run).
// prefill_rows > 0: one sequence's prompt chunk of that many rows ending at `context` instead
// (batch 1): the tiled kernel on the tensor cores where `tiled` (as the backend runs such steps),
// else the staged kernel, a block per row and KV head.
double time_attention(std::int64_t batch, std::int64_t context, bool split, std::int64_t prefill_rows = 0,
                      bool tiled = false) {
  constexpr std::int64_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 16;
  const std::int64_t width = kKvHeads * kHeadDim, row_bytes = 2 * width;
  if (prefill_rows > 0) {
    if (context < prefill_rows) throw std::invalid_argument("time_attention: a chunk longer than its context");
    batch = 1;
    split = false;
  }
  const std::int64_t rows = prefill_rows > 0 ? prefill_rows : batch;
  const std::int64_t blocks_per_seq = (context + kBlock - 1) / kBlock;
  const std::size_t pool_bytes = static_cast<std::size_t>(batch * blocks_per_seq * kBlock * row_bytes);
  std::vector<void*> owned;
  const auto device = [&](std::size_t bytes, int fill) {
    void* p = nullptr;
    SITSRT_CUDA_CHECK(cudaMalloc(&p, bytes));
    SITSRT_CUDA_CHECK(cudaMemset(p, fill, bytes));  // 0x3c3c: f16 1.06; 0x3c3c3c3c: float 0.0115
    owned.push_back(p);
    return p;
  };
  auto* k_pool = static_cast<std::uint8_t*>(device(pool_bytes, 0x3c));
  auto* v_pool = static_cast<std::uint8_t*>(device(pool_bytes, 0x3c));
  std::vector<std::int32_t> tables(static_cast<std::size_t>(batch * blocks_per_seq));
  for (std::size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<std::int32_t>(i);
  auto* d_tables = static_cast<std::int32_t*>(device(tables.size() * 4, 0));
  SITSRT_CUDA_CHECK(cudaMemcpy(d_tables, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));
  std::vector<cuda::AttentionSequenceDesc> descs(static_cast<std::size_t>(batch));
  std::vector<std::int32_t> row_sequence(static_cast<std::size_t>(batch));
  for (std::int64_t r = 0; r < batch; ++r) {
    cuda::AttentionSequenceDesc& d = descs[static_cast<std::size_t>(r)];
    d.k = k_pool;
    d.v = v_pool;
    d.k_row_bytes = d.v_row_bytes = row_bytes;
    d.block_table = d_tables + r * blocks_per_seq;
    d.block_size = kBlock;
    d.row_begin = r;
    d.n_rows = prefill_rows > 0 ? prefill_rows : 1;
    d.pos0 = context - d.n_rows;
    row_sequence[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(r);
  }
  row_sequence.resize(static_cast<std::size_t>(rows), 0);  // a prompt chunk's rows: sequence 0
  auto* d_descs = static_cast<cuda::AttentionSequenceDesc*>(device(descs.size() * sizeof(descs[0]), 0));
  SITSRT_CUDA_CHECK(cudaMemcpy(d_descs, descs.data(), descs.size() * sizeof(descs[0]), cudaMemcpyHostToDevice));
  auto* d_rows = static_cast<std::int32_t*>(device(row_sequence.size() * 4, 0));
  SITSRT_CUDA_CHECK(cudaMemcpy(d_rows, row_sequence.data(), row_sequence.size() * 4, cudaMemcpyHostToDevice));
  cuda::AttentionLaunch a;
  a.q = static_cast<const float*>(device(static_cast<std::size_t>(rows * kHeads * kHeadDim) * 4, 0x3c));
  a.ldq = kHeads * kHeadDim;
  a.k = static_cast<const float*>(device(static_cast<std::size_t>(rows * width) * 4, 0x3c));
  a.v = static_cast<const float*>(device(static_cast<std::size_t>(rows * width) * 4, 0x3c));
  a.ldk = a.ldv = width;
  a.out = static_cast<float*>(device(static_cast<std::size_t>(rows * kHeads * kHeadDim) * 4, 0));
  a.ldo = kHeads * kHeadDim;
  a.n_rows = rows;
  a.n_heads = kHeads;
  a.n_kv_heads = kKvHeads;
  a.head_dim = kHeadDim;
  a.scale = 0.0884f;
  a.sequences = d_descs;
  a.row_sequence = d_rows;
  a.widest_k_type = a.widest_v_type = 1;
  if (split) {  // as the backend runs it: the last split of each (row, KV head) merges (zeroed counters)
    a.partials = static_cast<float*>(
        device(static_cast<std::size_t>(cuda::attention_partials_floats(batch, kHeads, kHeadDim)) * 4, 0));
    a.split_counters = static_cast<unsigned*>(
        device(static_cast<std::size_t>(cuda::attention_split_counters(batch, kKvHeads)) * 4, 0));
  }
  if (tiled) {
    if (!cuda::tiled_attention_applies(rows, kHeads, kKvHeads, kHeadDim)) {
      throw std::runtime_error("the tiled attention does not apply (SITSRT_CUDA_MMA_ATTENTION=0?)");
    }
    std::vector<std::int32_t> tile_rows;
    for (std::int64_t r = 0; r < rows; r += cuda::attention_tile_positions(kHeads, kKvHeads)) {
      tile_rows.push_back(static_cast<std::int32_t>(r));
    }
    auto* d_tiles = static_cast<std::int32_t*>(device(tile_rows.size() * 4, 0));
    SITSRT_CUDA_CHECK(cudaMemcpy(d_tiles, tile_rows.data(), tile_rows.size() * 4, cudaMemcpyHostToDevice));
    a.tile_rows = d_tiles;
    a.n_tiles = static_cast<std::int64_t>(tile_rows.size());
  }
  for (int i = 0; i < 3; ++i) {
    if (cuda::launch_attention(a, nullptr) != tiled) throw std::runtime_error("the tiled attention did not run");
  }
  const double seconds =
      bench::seconds_per_call(20, [&](int) { static_cast<void>(cuda::launch_attention(a, nullptr)); });
  for (void* p : owned) SITSRT_CUDA_CHECK(cudaFree(p));
  return seconds;
}

}  // namespace

// Device seconds per summary launch of `rows` rows (k best each), and the host's seconds for the
// same: the rows copied to pageable memory (as the executor's read) and cpu::summarize_logits of
// each on the calling thread.
struct SummaryTimes {
  double device;
  double host;
};
SummaryTimes time_summaries(std::int64_t rows, std::int64_t k) {
  constexpr std::int64_t kVocab = 128256;
  std::vector<float> logits(static_cast<std::size_t>(rows * kVocab));
  std::uint64_t state = 0x9E3779B97F4A7C15ull;
  for (float& x : logits) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<std::int64_t>(state >> 40) - (1 << 23)) * 1e-6f;
  }
  void *logits_memory = nullptr, *chunks_memory = nullptr, *records_memory = nullptr;
  const std::size_t record = cuda::summary_record_bytes(k);
  SITSRT_CUDA_CHECK(cudaMalloc(&logits_memory, logits.size() * sizeof(float)));
  SITSRT_CUDA_CHECK(
      cudaMalloc(&chunks_memory, static_cast<std::size_t>(rows * cuda::logit_summary_chunks(kVocab)) * record));
  SITSRT_CUDA_CHECK(cudaMalloc(&records_memory, static_cast<std::size_t>(rows) * record));
  auto* d_logits = static_cast<float*>(logits_memory);
  auto* d_chunks = static_cast<std::byte*>(chunks_memory);
  auto* d_records = static_cast<std::byte*>(records_memory);
  SITSRT_CUDA_CHECK(cudaMemcpy(d_logits, logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
  const auto launch = [&](int) {
    cuda::launch_logit_summaries(d_logits, rows, kVocab, k, d_chunks, d_records, nullptr);
  };
  launch(0);
  const double device = bench::seconds_per_call(50, launch);
  std::vector<float> back(logits.size());
  LogitSummary summary;
  const auto start = std::chrono::steady_clock::now();
  constexpr int kHostRepeats = 10;
  for (int i = 0; i < kHostRepeats; ++i) {
    SITSRT_CUDA_CHECK(cudaMemcpy(back.data(), d_logits, back.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (std::int64_t r = 0; r < rows; ++r) {
      cpu::summarize_logits({back.data() + r * kVocab, static_cast<std::size_t>(kVocab)}, k, summary);
    }
  }
  const double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kHostRepeats;
  SITSRT_CUDA_CHECK(cudaFree(d_logits));
  SITSRT_CUDA_CHECK(cudaFree(d_chunks));
  SITSRT_CUDA_CHECK(cudaFree(d_records));
  return {device, host};
}

int main(int argc, char** argv) {
  const bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  try {
    cudaDeviceProp props{};
    SITSRT_CUDA_CHECK(cudaGetDeviceProperties(&props, 0));
    const double bandwidth = bench::measure_read_bandwidth(std::size_t{4} << 30, 10);
    const double bf16_tflops = bench::measure_bf16_gemm_tflops(8192, 8192, 8192, 10);
    cuda::CudaContext context(0);
    cuda::DeviceAllocator allocator(context, 0);
    cuda::PrefillGemm gemm(context, allocator);
    std::string rows;
    if (!json) {
      fmt::print("device: {} (sm_{}{}), {} SMs\n", props.name, props.major, props.minor, props.multiProcessorCount);
      fmt::print("ceilings: read bandwidth {:.0f} GB/s; cuBLASLt BF16 GEMM 8192^3 {:.0f} TFLOP/s\n\n", bandwidth,
                 bf16_tflops);
      fmt::print("| format | layout | shape | rows | us/call | weight GB/s | % of read bandwidth | TFLOP/s |\n");
      fmt::print("|---|---|---|---|---|---|---|---|\n");
    }
    for (const DType format : kFormats) {
      // The backend's layout first; FP8 / INT4 g128 also in stored blocks at one row, the gain.
      const bool planar_format = cuda::planar_supports(format, 4096);
      for (const bool planar : planar_format ? std::vector<bool>{true, false} : std::vector<bool>{false}) {
        for (const Shape& s : kShapes) {
          // 512 rows of per-channel and 128 x 128 block FP8 also: the FP8 x FP8 GEMMs (a row saying
          // why where one cannot run)
          // and for the formats with a tensor-core decode, 8 and 16 rows on the tensor cores beside
          // the CUDA cores' 8 and 16
          const bool fp8_scaled = format == DType::kFP8_E4M3 && planar;
          const bool mma_format = planar;
          struct Run {
            std::int64_t rows;
            Fp8Scales fp8 = Fp8Scales::kNone;
            bool tensor_cores = false;
            bool split = false;
          };
          // (and 32 rows on them beside 64 on the prefill GEMM: where the two meet)
          std::vector<Run> runs = {{1}, {16}, {512}};
          // (the tensor-core rows split as the backend runs them, and at 8 and 16 also unsplit)
          if (mma_format) {
            runs.insert(runs.begin() + 1,
                        {Run{8}, Run{8, Fp8Scales::kNone, true, true}, Run{16, Fp8Scales::kNone, true, true},
                         Run{8, Fp8Scales::kNone, true}, Run{16, Fp8Scales::kNone, true}});
            runs.insert(runs.end() - 1, {Run{32, Fp8Scales::kNone, true, true}, Run{64}});
          }
          // (block-scaled also at 509 rows: no multiple of 8, two overlapping halves of 256 rows)
          if (fp8_scaled) {
            runs.insert(runs.end(),
                        {Run{512, Fp8Scales::kChannel}, Run{512, Fp8Scales::kBlocks}, Run{509, Fp8Scales::kBlocks}});
          }
          for (const Run& run : runs) {
            const bool scaled = run.fp8 != Fp8Scales::kNone;
            const std::int64_t rows_m = run.rows;
            const bool prompt_rows = rows_m >= 509;
            if (prompt_rows && s.n > 14336) continue;  // the prefill shape: the layer matmuls only
            if (planar_format && !planar && rows_m != 1) continue;
            double seconds = 0.0;
            try {
              seconds = time_matmul(format, s, rows_m, prompt_rows ? 5 : 50, planar, gemm, run.fp8, run.tensor_cores,
                                    run.split);
            } catch (const std::runtime_error& e) {
              if (!scaled && !run.tensor_cores) throw;
              if (!json) {
                fmt::print("| {} | {} | {} | {} | {} | | | |\n", name(format),
                           run.fp8 == Fp8Scales::kChannel  ? "planar, per channel"
                           : run.fp8 == Fp8Scales::kBlocks ? "planar, per 128x128 block"
                           : run.split                     ? "planar, tensor cores, split"
                                                           : "planar, tensor cores",
                           s.name, rows_m, e.what());
              }
              continue;
            }
            const std::int64_t m_rows = rows_m;
            const char* layout = run.fp8 == Fp8Scales::kChannel  ? "planar, per channel (FP8 x FP8)"
                                 : run.fp8 == Fp8Scales::kBlocks ? "planar, per 128x128 block (FP8 x FP8)"
                                 : run.split                     ? "planar, tensor cores, split"
                                 : run.tensor_cores              ? "planar, tensor cores"
                                 : planar                        ? "planar"
                                                                 : "blocks";
            const double weight_bytes = static_cast<double>(row_bytes(format, s.k)) * static_cast<double>(s.n);
            const double gbs = weight_bytes / seconds / 1e9;
            const double tflops = 2.0 * static_cast<double>(m_rows * s.n * s.k) / seconds / 1e12;
            if (json) {
              rows += fmt::format(
                  "{}{{\"format\":\"{}\",\"layout\":\"{}\",\"shape\":\"{}\",\"rows\":{},\"us\":{:.2f},"
                  "\"gbs\":{:.1f},\"pct_bandwidth\":{:.1f},\"tflops\":{:.3f}}}",
                  rows.empty() ? "" : ",", name(format), layout, s.name, m_rows, seconds * 1e6, gbs,
                  100.0 * gbs / bandwidth, tflops);
            } else {
              fmt::print("| {} | {} | {} | {} | {:.1f} | {:.0f} | {:.1f}% | {:.2f} |\n", name(format), layout, s.name,
                         m_rows, seconds * 1e6, gbs, 100.0 * gbs / bandwidth, tflops);
            }
          }
        }
      }
    }
    // Decode attention per layer: the KV bytes read against the same bandwidth.
    std::string attention;
    if (!json) {
      fmt::print("\nfloor: a decode matmul takes at least weight bytes / {:.0f} GB/s\n\n", bandwidth);
      fmt::print(
          "| attention (f16 KV, 32 q / 8 kv heads of 128) | batch | context | us/layer | KV GB/s | % of read "
          "bandwidth |\n|---|---|---|---|---|---|\n");
    }
    for (const bool split : {true, false}) {
      for (const std::int64_t batch : {1, 16}) {
        for (const std::int64_t context : {512, 4096, 16384}) {
          const double seconds = time_attention(batch, context, split);
          const double kv_bytes = 2.0 * static_cast<double>(batch * context) * 8 * 128 * 2;
          const double gbs = kv_bytes / seconds / 1e9;
          const char* kind = split ? "split (flash-decoding)" : "unsplit (a block per row and KV head)";
          if (json) {
            attention += fmt::format("{}{{\"kind\":\"{}\",\"batch\":{},\"context\":{},\"us\":{:.2f},\"gbs\":{:.1f}}}",
                                     attention.empty() ? "" : ",", kind, batch, context, seconds * 1e6, gbs);
          } else {
            fmt::print("| {} | {} | {} | {:.1f} | {:.0f} | {:.1f}% |\n", kind, batch, context, seconds * 1e6, gbs,
                       100.0 * gbs / bandwidth);
          }
        }
      }
    }
    // A prompt chunk's attention: the staged kernel (CUDA cores, K/V read once per row) against
    // the tiled one (tensor cores, K/V read once per 64 query rows), which the backend runs.
    if (!json) {
      fmt::print(
          "\n| prefill attention (f16 KV, 32 q / 8 kv heads of 128) | rows | ending at | ms/layer | TFLOP/s | KV "
          "GB/s read |\n|---|---|---|---|---|---|\n");
    }
    for (const std::int64_t context : {512, 4096, 16384}) {
      for (const bool tiled : {false, true}) {
        constexpr std::int64_t kChunkRows = 512;
        const double seconds = time_attention(1, context, false, kChunkRows, tiled);
        double positions = 0;  // summed over the chunk's rows
        for (std::int64_t r = 0; r < kChunkRows; ++r) positions += static_cast<double>(context - kChunkRows + r + 1);
        const double flops = positions * 32 * 128 * 4;          // q.k and w.v, 2 flops each
        const double kv_bytes = positions * 2.0 * 8 * 128 * 2;  // K and V rows, every KV head
        if (json) {
          attention += fmt::format(
              "{}{{\"kind\":\"prefill chunk ({})\",\"rows\":{},\"context\":{},\"us\":{:.2f},\"tflops\":{:.2f}}}",
              attention.empty() ? "" : ",", tiled ? "tiled" : "staged", kChunkRows, context, seconds * 1e6,
              flops / seconds / 1e12);
        } else {
          fmt::print("| {} | {} | {} | {:.2f} | {:.1f} | {:.0f} |\n",
                     tiled ? "tiled (tensor cores, 64 query rows a block)" : "staged (a block per row and KV head)",
                     kChunkRows, context, seconds * 1e3, flops / seconds / 1e12, kv_bytes / seconds / 1e9);
        }
      }
    }
    if (!json) {
      fmt::print(
          "\n| logit summary (128256 ids) | rows | k best | device us | host us (copy back + summarise) |\n"
          "|---|---|---|---|---|\n");
    }
    std::string summaries;
    for (const std::int64_t batch : {1, 16}) {
      for (const std::int64_t k : {41, 256}) {
        const SummaryTimes t = time_summaries(batch, k);
        if (json) {
          summaries += fmt::format("{}{{\"rows\":{},\"k\":{},\"device_us\":{:.2f},\"host_us\":{:.1f}}}",
                                   summaries.empty() ? "" : ",", batch, k, t.device * 1e6, t.host * 1e6);
        } else {
          fmt::print("| summary kernels vs host | {} | {} | {:.1f} | {:.0f} |\n", batch, k, t.device * 1e6,
                     t.host * 1e6);
        }
      }
    }
    if (json) {
      fmt::print(
          "{{\"device\":\"{}\",\"read_gbs\":{:.1f},\"bf16_gemm_tflops\":{:.1f},\"kernels\":[{}],\"attention\":[{}],"
          "\"logit_summaries\":[{}]}}\n",
          props.name, bandwidth, bf16_tflops, rows, attention, summaries);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_cuda: {}\n", e.what());
    return 1;
  }
  return 0;
}
