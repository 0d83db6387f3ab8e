// The CUDA backend's paged quantized KV attention against the CPU kernels (the stored cache bytes
// equal, the outputs within float summation error), its allocator's budget, and whole models on
// the CUDA backend against the CPU backend. Skips visibly without a CUDA device.
#include "cpu/attention/attention.hpp"
#include "cpu/cpu_context.hpp"
#include "cuda_backend/cuda_backend_factory.hpp"
#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/kernels/attention_tiles.hpp"
#include "cuda_backend/kernels/launch.hpp"
#include "support/cuda_device.hpp"
#include "support/model_files.hpp"
#include "support/random.hpp"
#include "support/skip.hpp"

#include <sitsrt/engine.hpp>

#include <cuda_runtime_api.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <future>
#include <numeric>
#include <vector>

using namespace sitsrt;

namespace {

struct DeviceBytes {
  explicit DeviceBytes(std::size_t n) : size(n) { SITSRT_CUDA_CHECK(cudaMalloc(&ptr, std::max<std::size_t>(n, 1))); }
  ~DeviceBytes() { static_cast<void>(cudaFree(ptr)); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void upload(const void* host) const { SITSRT_CUDA_CHECK(cudaMemcpy(ptr, host, size, cudaMemcpyHostToDevice)); }
  void poison() const { SITSRT_CUDA_CHECK(cudaMemset(ptr, 0xff, size)); }
  template <typename T>
  [[nodiscard]] std::vector<T> download() const {
    SITSRT_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(size / sizeof(T));
    SITSRT_CUDA_CHECK(cudaMemcpy(host.data(), ptr, size, cudaMemcpyDeviceToHost));
    return host;
  }
  template <typename T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(ptr);
  }
  void* ptr = nullptr;
  std::size_t size = 0;
};

// Whether this device grants the tiled attention's shared memory at head_dim hd (head_dim 256
// takes 139 KiB: not on sm_86 / sm_89, whose blocks get 99 KiB; the per-row kernels run there).
bool tiled_attention_fits_device(std::int64_t hd) {
  int device = 0, optin = 0;
  SITSRT_CUDA_CHECK(cudaGetDevice(&device));
  SITSRT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const std::size_t bytes = hd == 64    ? cuda::tiles::Layout<64>::kBytes
                            : hd == 128 ? cuda::tiles::Layout<128>::kBytes
                                        : cuda::tiles::Layout<256>::kBytes;
  return bytes + sizeof(cuda::tiles::PassRows) <= static_cast<std::size_t>(optin);
}

struct AttentionCase {
  cpu::KvType k_type, v_type;
  bool rotated;
  bool centered;
  std::int64_t window;
  // 0: one pass per (row, head); 1: the staged GQA kernel, one split per row; 2: split over the
  // sequence and merged by the merge kernel (flash-decoding); 3: split, each (row, KV head)'s last
  // split merging (the backend's way); 4: the tiled prompt attention on the tensor cores (longer
  // sequences: 101 rows)
  int path = 2;
  // > 0: the exact recent window of the int8/int4 sides (f16 copies in rings and the step's
  // staging rows; the third sequence's first 16 positions came from a prefix cache: no copies)
  std::int64_t recent = 0;
  std::int64_t heads = 4, kv_heads = 2, head_dim = 64;  // a GQA group of 2 unless set
};

// Three sequences (a decode row, a prefill of 9, a chunk of 3 after 20 positions; for the tiled
// path a prefill of 70 and a chunk of 30 after 20, so tiles of each size and partial ones) over random
// block tables of one pool; history positions stored by the CPU into both pools first (and, with
// a recent window, their latest f16 copies into each sequence's rings). Compared: the stored
// bytes, the outputs, and the rings after the step's copies moved in.
void check_attention(const AttentionCase& c, std::uint64_t seed) {
  test::Rng rng(seed);
  const std::int64_t n_heads = c.heads, n_kv = c.kv_heads, hd = c.head_dim, width = n_kv * hd, block = 16,
                     blocks_per_seq = c.path == 4 ? 5 : 4;
  const std::int64_t pool_blocks = 3 * blocks_per_seq + 2;
  const std::size_t k_row = cpu::kv_row_bytes(c.k_type, n_kv, hd), v_row = cpu::kv_row_bytes(c.v_type, n_kv, hd);
  std::vector<std::byte> k_pool(k_row * pool_blocks * block), v_pool(v_row * pool_blocks * block);
  std::vector<std::int32_t> physical(static_cast<std::size_t>(pool_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  for (std::size_t i = physical.size() - 1; i > 0; --i) std::swap(physical[i], physical[rng.next() % (i + 1)]);
  std::vector<float> offsets = rng.normals(static_cast<std::size_t>(width), 2.0f),
                     scales(static_cast<std::size_t>(width));
  for (float& s : scales) s = rng.uniform(0.5f, 2.0f);

  struct Seq {
    std::int64_t pos0, rows;
    std::vector<std::int32_t> table;
  };
  std::vector<Seq> seqs = {{37, 1, {}}, {0, c.path == 4 ? 70 : 9, {}}, {20, c.path == 4 ? 30 : 3, {}}};
  cpu::CpuContext ctx(1, cpu::Isa::kGeneric);
  const cpu::AttentionShape shape{n_heads, n_kv, hd, 1.0f / 8.0f, c.window};
  ctx.reserve_scratch(cpu::attention_scratch_floats(blocks_per_seq * block, shape));
  std::vector<cpu::KvLayerView> views;
  const auto quantized = [](cpu::KvType t) { return t == cpu::KvType::kInt8 || t == cpu::KvType::kInt4; };
  const bool k_windowed = c.recent > 0 && quantized(c.k_type), v_windowed = c.recent > 0 && quantized(c.v_type);
  const std::size_t ring_bytes = static_cast<std::size_t>(c.recent * width) * 2;
  std::vector<std::vector<std::byte>> k_rings(seqs.size(), std::vector<std::byte>(ring_bytes)),
      v_rings(seqs.size(), std::vector<std::byte>(ring_bytes));
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    seqs[s].table.assign(physical.begin() + static_cast<std::ptrdiff_t>(s * blocks_per_seq),
                         physical.begin() + static_cast<std::ptrdiff_t>((s + 1) * blocks_per_seq));
    cpu::KvLayerView view{c.k_type,
                          c.v_type,
                          k_pool.data(),
                          v_pool.data(),
                          k_row,
                          v_row,
                          blocks_per_seq * block,
                          block,
                          seqs[s].table,
                          c.rotated,
                          c.rotated,
                          c.centered ? offsets.data() : nullptr,
                          c.centered ? scales.data() : nullptr};
    if (c.recent > 0) {
      view.recent_window = c.recent;
      view.k_recent = k_windowed ? k_rings[s].data() : nullptr;
      view.v_recent = v_windowed ? v_rings[s].data() : nullptr;
      view.exact_from = s == 2 ? 16 : 0;  // the third: 0..15 quantized, 16..19 from its ring
    }
    views.push_back(view);
    if (seqs[s].pos0 > 0) {  // the history, its latest copies into the rings
      const std::vector<float> k = rng.normals(static_cast<std::size_t>(seqs[s].pos0 * width));
      const std::vector<float> v = rng.normals(static_cast<std::size_t>(seqs[s].pos0 * width));
      std::vector<std::uint16_t> k_staged(k.size()), v_staged(v.size());
      const cpu::KvStoreSequence history{
          view,  k.data(),     width, v.data(),
          width, seqs[s].pos0, 0,     {k_windowed ? k_staged.data() : nullptr, v_windowed ? v_staged.data() : nullptr}};
      cpu::kv_store_batch(ctx, {&history, 1}, n_kv, hd);
      cpu::kv_commit_recent({&history, 1}, n_kv, hd);
    }
  }
  DeviceBytes dk(k_pool.size()), dv(v_pool.size());
  dk.upload(k_pool.data());
  dv.upload(v_pool.data());

  const std::int64_t rows = seqs[0].rows + seqs[1].rows + seqs[2].rows, ldq = n_heads * hd + 4, ldkv = width + 8;
  std::vector<float> q(static_cast<std::size_t>(rows * ldq)), k(static_cast<std::size_t>(rows * ldkv)), v(k.size());
  for (float& x : q) x = rng.normal();
  for (float& x : k) x = rng.normal() + 1.5f;
  for (float& x : v) x = rng.normal();
  std::vector<float> out(static_cast<std::size_t>(rows * ldq), 0.0f);
  std::vector<std::uint16_t> k_staged(static_cast<std::size_t>(rows * width)), v_staged(k_staged.size());
  std::deque<DeviceBytes> dk_rings, dv_rings;  // deque: DeviceBytes does not move
  for (std::size_t s = 0; s < seqs.size() && c.recent > 0; ++s) {
    dk_rings.emplace_back(ring_bytes);
    dv_rings.emplace_back(ring_bytes);
    dk_rings.back().upload(k_rings[s].data());
    dv_rings.back().upload(v_rings[s].data());
  }

  std::vector<cpu::KvStoreSequence> stores;
  std::vector<cpu::AttentionSequence> attends;
  std::vector<cuda::AttentionSequenceDesc> descs;
  std::vector<std::int32_t> row_sequence;
  DeviceBytes tables(seqs.size() * blocks_per_seq * sizeof(std::int32_t)), dofs(width * 4), dsc(width * 4);
  std::vector<std::int32_t> all_tables;
  dofs.upload(offsets.data());
  dsc.upload(scales.data());
  std::int64_t row = 0;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const cpu::KvStaging staging{k_windowed ? k_staged.data() + row * width : nullptr,
                                 v_windowed ? v_staged.data() + row * width : nullptr};
    stores.push_back(
        {views[s], k.data() + row * ldkv, ldkv, v.data() + row * ldkv, ldkv, seqs[s].rows, seqs[s].pos0, staging});
    attends.push_back(
        {q.data() + row * ldq, ldq, seqs[s].rows, seqs[s].pos0, views[s], out.data() + row * ldq, ldq, staging});
    cuda::AttentionSequenceDesc d;
    d.k = dk.as<std::uint8_t>();
    d.v = dv.as<std::uint8_t>();
    d.k_row_bytes = static_cast<std::int64_t>(k_row);
    d.v_row_bytes = static_cast<std::int64_t>(v_row);
    d.block_table = tables.as<std::int32_t>() + s * blocks_per_seq;
    d.k_offset = c.centered ? dofs.as<float>() : nullptr;
    d.k_scale = c.centered ? dsc.as<float>() : nullptr;
    d.block_size = block;
    d.row_begin = row;
    d.n_rows = seqs[s].rows;
    d.pos0 = seqs[s].pos0;
    d.k_type = static_cast<int>(c.k_type);
    d.v_type = static_cast<int>(c.v_type);
    d.k_rotated = d.v_rotated = c.rotated ? 1 : 0;
    if (c.recent > 0) {
      d.k_recent = k_windowed ? dk_rings[s].as<std::uint8_t>() : nullptr;
      d.v_recent = v_windowed ? dv_rings[s].as<std::uint8_t>() : nullptr;
      d.recent_window = c.recent;
      d.exact_from = views[s].exact_from;
    }
    descs.push_back(d);
    all_tables.insert(all_tables.end(), seqs[s].table.begin(), seqs[s].table.end());
    for (std::int64_t r = 0; r < seqs[s].rows; ++r) row_sequence.push_back(static_cast<std::int32_t>(s));
    row += seqs[s].rows;
  }
  tables.upload(all_tables.data());
  DeviceBytes ddesc(descs.size() * sizeof(cuda::AttentionSequenceDesc)), drows(row_sequence.size() * 4);
  ddesc.upload(descs.data());
  drows.upload(row_sequence.data());
  DeviceBytes dq(q.size() * 4), dkn(k.size() * 4), dvn(v.size() * 4), dout(out.size() * 4);
  dq.upload(q.data());
  dkn.upload(k.data());
  dvn.upload(v.data());
  dout.poison();

  cpu::kv_store_batch(ctx, stores, n_kv, hd);
  cpu::attention_batch(ctx, attends, shape);
  cpu::kv_commit_recent(stores, n_kv, hd);

  cuda::AttentionLaunch a;
  a.q = dq.as<float>();
  a.ldq = ldq;
  a.k = dkn.as<float>();
  a.ldk = ldkv;
  a.v = dvn.as<float>();
  a.ldv = ldkv;
  a.out = dout.as<float>();
  a.ldo = ldq;
  a.n_rows = rows;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv;
  a.head_dim = hd;
  a.scale = shape.scale;
  a.window = c.window;
  a.sequences = ddesc.as<cuda::AttentionSequenceDesc>();
  a.row_sequence = drows.as<std::int32_t>();
  DeviceBytes partials(static_cast<std::size_t>(cuda::attention_partials_floats(rows, n_heads, hd)) * 4);
  a.widest_k_type = k_windowed ? std::min(1, static_cast<int>(c.k_type)) : static_cast<int>(c.k_type);
  a.widest_v_type = v_windowed ? std::min(1, static_cast<int>(c.v_type)) : static_cast<int>(c.v_type);
  DeviceBytes exact(static_cast<std::size_t>(rows * width) * 2 * 2);
  if (k_windowed || v_windowed) {
    exact.poison();
    a.k_exact = exact.as<std::uint8_t>();
    a.v_exact = exact.as<std::uint8_t>() + rows * width * 2;
  }
  // 0: one pass per (row, head); 1: staged, one split; 2: split, merge kernel; 3: split, the last
  // split of each (row, KV head) merging (counters, zero before and after)
  a.staged = c.path != 0;
  DeviceBytes counters(static_cast<std::size_t>(cuda::attention_split_counters(rows, n_kv)) * 4);
  const std::vector<std::uint32_t> zeros(static_cast<std::size_t>(cuda::attention_split_counters(rows, n_kv)), 0);
  if (c.path == 2 || c.path == 3) {  // the tiled path (4) takes no partials
    REQUIRE(cuda::attention_splits_apply(rows, n_heads, n_kv, hd));
    partials.poison();
    a.partials = partials.as<float>();
  }
  if (c.path == 3) {
    counters.upload(zeros.data());
    a.split_counters = counters.as<unsigned>();
  }
  std::vector<std::int32_t> tile_rows;  // each sequence's rows in tiles, as the backend lists them
  for (const cuda::AttentionSequenceDesc& d : descs) {
    const std::int64_t per_tile = cuda::attention_tile_positions(n_heads, n_kv);
    for (std::int64_t r = 0; r < d.n_rows; r += per_tile)
      tile_rows.push_back(static_cast<std::int32_t>(d.row_begin + r));
  }
  DeviceBytes dtiles(tile_rows.size() * 4);
  if (c.path == 4) {
    REQUIRE(cuda::tiled_attention_applies(rows, n_heads, n_kv, hd));
    dtiles.upload(tile_rows.data());
    a.tile_rows = dtiles.as<std::int32_t>();
    a.n_tiles = static_cast<std::int64_t>(tile_rows.size());
  }
  const bool tiled_ran = cuda::launch_attention(a, nullptr);
  SITSRT_CUDA_CHECK(cudaGetLastError());
  REQUIRE(tiled_ran == (c.path == 4 && tiled_attention_fits_device(hd)));
  if (c.path == 3) REQUIRE(counters.download<std::uint32_t>() == zeros);
  // The tiled kernel's operands are BF16 hi + lo pairs (each product within ~2^-16, the lo x lo
  // terms left out): scores of |q . k| up to ~10 here move the weights by ~1e-4.
  const float tolerance = c.path == 4 ? 2.5e-4f : 5e-5f;

  INFO("k " << static_cast<int>(c.k_type) << " v " << static_cast<int>(c.v_type) << " rotated " << c.rotated
            << " centered " << c.centered << " window " << c.window << " path " << c.path << " recent " << c.recent);
  // The stored rows: the same bytes as the CPU's (same quantizer, same rotation butterflies),
  // and the rings with the step's latest f16 copies.
  REQUIRE(dk.download<std::byte>() == k_pool);
  REQUIRE(dv.download<std::byte>() == v_pool);
  for (std::size_t s = 0; s < dk_rings.size(); ++s) {
    if (k_windowed) REQUIRE(dk_rings[s].download<std::byte>() == k_rings[s]);
    if (v_windowed) REQUIRE(dv_rings[s].download<std::byte>() == v_rings[s]);
  }
  const std::vector<float> got = dout.download<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t e = 0; e < n_heads * hd; ++e) {
      const auto i = static_cast<std::size_t>(r * ldq + e);
      INFO("row " << r << " element " << e);
      REQUIRE(std::fabs(got[i] - out[i]) <= tolerance * (1.0f + std::fabs(out[i])));
    }
  }
}

}  // namespace

TEST_CASE("cuda paged attention stores the CPU's bytes and attends as the CPU, every K/V type and kernel",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  std::uint64_t seed = 200;
  const cpu::KvType types[] = {cpu::KvType::kF32, cpu::KvType::kF16, cpu::KvType::kInt8, cpu::KvType::kInt4};
  for (const cpu::KvType kt : types) {
    for (const cpu::KvType vt : types) {
      for (const bool rotated : {false, true}) {
        for (const int path : {0, 1, 2, 3, 4}) {
          if (path == 2 && test::cuda_small_shapes()) continue;  // under memcheck: the backend's merge (3)
          // under memcheck the tiled kernel's rotation runs in the cases below (head_dim 128, 256)
          if (path == 4 && rotated && test::cuda_small_shapes()) continue;
          check_attention({kt, vt, rotated, false, 0, path}, ++seed);
          check_attention({kt, vt, rotated, true, 8, path}, ++seed);
          // an exact recent window of 8 (int8/int4 sides), with and without a sliding window
          if ((kt == cpu::KvType::kInt8 || kt == cpu::KvType::kInt4 || vt == cpu::KvType::kInt8 ||
               vt == cpu::KvType::kInt4) &&
              !(rotated && test::cuda_small_shapes())) {
            check_attention({kt, vt, rotated, true, 0, path, 8}, ++seed);
            check_attention({kt, vt, rotated, false, 12, path, 8}, ++seed);
          }
        }
      }
    }
  }
  // Full GQA groups of 8 for the split paths (merge kernel; the last split merging): head_dim 128
  // (one value a thread) and 256 (two), with and without the rotation.
  for (const int path : {2, 3}) {
    if (path == 2 && test::cuda_small_shapes()) continue;  // under memcheck: the backend's merge (3)
    for (const bool rotated : {false, true}) {
      check_attention({cpu::KvType::kF16, cpu::KvType::kInt8, rotated, false, 0, path, 0, 16, 2, 128}, ++seed);
      check_attention({cpu::KvType::kInt4, cpu::KvType::kF16, rotated, true, 8, path, 0, 8, 1, 256}, ++seed);
    }
  }
  // The tiled kernel at head_dim 128 with groups of 8 (8 positions a tile) and 1 (64), an exact
  // window and a sliding one; at 256 (two warps a row tile) with a group of 4.
  for (const bool rotated : {false, true}) {
    check_attention({cpu::KvType::kF16, cpu::KvType::kInt8, rotated, false, 0, 4, 8, 16, 2, 128}, ++seed);
    check_attention({cpu::KvType::kInt4, cpu::KvType::kF16, rotated, true, 24, 4, 8, 4, 4, 128}, ++seed);
    check_attention({cpu::KvType::kF16, cpu::KvType::kInt8, rotated, false, 40, 4, 8, 8, 2, 256}, ++seed);
  }
}

TEST_CASE("cuda allocator refuses what passes its budget and reuses freed blocks", "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  constexpr std::uint64_t kBudget = 64u << 20;
  const std::unique_ptr<Backend> backend = cuda::make_cuda_backend({0, kBudget});
  // The backend keeps its staging ring and graph input image from the same budget: buffers of
  // 2/5 of what is left (whole 2 MiB steps, the allocator's rounding) fit twice, not three times.
  const std::uint64_t left = kBudget - backend->memory().allocated_bytes;
  REQUIRE(left > (30u << 20));
  const std::size_t size = static_cast<std::size_t>(left * 2 / 5) / (2u << 20) * (2u << 20);
  auto a = backend->allocate(size, "first");
  auto b = backend->allocate(size, "second");
  try {
    auto c = backend->allocate(size, "third");
    FAIL("a third buffer of " << size << " bytes fit the budget");
  } catch (const Error& e) {
    REQUIRE(e.code() == ErrorCode::kOutOfMemory);
    REQUIRE_THAT(e.what(), Catch::Contains("third") && Catch::Contains("budget"));
  }
  const std::uint64_t high = backend->memory().high_water_bytes;
  b.reset();
  auto c = backend->allocate(size, "reused");  // the cached block comes back
  REQUIRE(backend->memory().high_water_bytes == high);
  std::vector<std::byte> host(1000), back(1000);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::byte>(i * 7);
  backend->write(*c, 4096, host);
  backend->read(*c, 4096, back);
  REQUIRE(back == host);
  REQUIRE_THROWS_AS(backend->read(*c, size - 10, back), Error);
}

namespace {

struct Run {
  std::vector<std::int32_t> tokens;
  std::vector<float> logits;
  RequestQueueStats stats;
};

constexpr const char* kShortPrompt = "Once upon a time";

Run run_model(const std::string& path, const std::string& device, KvCacheType kv, const std::string& weights,
              int n_tokens, const std::string& prompt = kShortPrompt) {
  EngineOptions o;
  o.model_path = path;
  o.device = device;
  o.threads = 2;
  // Prompt matmuls in float on the CPU (AMX rounds them to BF16); FP8 decode in float too (with
  // AVX512-FP16 the CPU's FP8 kernel sums in fp16).
  o.cpu_isa = weights.starts_with("fp8") ? "avx2" : test::kFloatPrefillIsa;
  // K centering is measured at load on each backend's own prefill (the GPU's BF16 GEMM moves the
  // f16 offsets and scales by ~2^-9): compared runs would store different keys. The kernels'
  // centering is compared in check_attention.
  o.kv_k_centering = false;
  o.kv_cache_type = kv;
  o.weights = weights;
  o.int8_activations = false;  // float activations on both: the CUDA kernels are float
  o.context_length = 512;
  Engine engine(o);
  GenerationConfig config;
  config.temperature = 0.0f;
  config.max_new_tokens = n_tokens;
  const GenerationResult result = engine.generate(prompt, config);
  Run run{result.tokens, {}, {}};
  run.logits = engine.logits(result.prompt_tokens, true);
  run.stats = engine.queue_stats();
  return run;
}

// The CUDA run's greedy tokens equal the CPU run's and its logits (every prompt row's) are within
// logit_tolerance (prompts of under 48 tokens: no BF16 GEMM).
void check_same_run(const std::string& path, KvCacheType kv, const std::string& weights, int n_tokens,
                    double logit_tolerance) {
  const Run cpu = run_model(path, "cpu", kv, weights, n_tokens);
  const Run gpu = run_model(path, "cuda", kv, weights, n_tokens);
  INFO(path << " weights " << weights);
  CHECK(gpu.tokens == cpu.tokens);  // CHECK: the next formats and models still run
  REQUIRE(gpu.logits.size() == cpu.logits.size());
  double worst = 0;
  for (std::size_t i = 0; i < cpu.logits.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(gpu.logits[i]) - cpu.logits[i]));
  }
  CHECK(worst <= logit_tolerance);
}

// sqrt(sum (got - want)^2 / sum want^2) over logits of the same rows.
double relative_rms_error(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double error = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    error += d * d;
    scale += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(error / scale);
}

// The CUDA run of a prompt of 48+ tokens against the CPU's: its prompt matmuls take the BF16 GEMM
// on the GPU (x and weights rounded to BF16: each product within 2^-8) where the CPU's are float,
// so greedy tokens may part and logits differ by ~1e-2 of their size; compared: every prompt
// row's logits within `relative` RMS of the CPU's. Returns the CUDA run's serving stats.
RequestQueueStats check_close_run(const std::string& path, KvCacheType kv, const std::string& weights,
                                  const std::string& prompt, double relative) {
  const Run cpu = run_model(path, "cpu", kv, weights, 1, prompt);
  const Run gpu = run_model(path, "cuda", kv, weights, 1, prompt);
  INFO(path << " weights " << weights << " prompt of " << prompt.size() << " bytes");
  const double error = relative_rms_error(gpu.logits, cpu.logits);
  INFO("relative RMS logit error " << error);
  CHECK(error <= relative);
  return gpu.stats;
}

// A prompt of over 64 tokens (~45 bytes a repeat: ~10 tokens of a real vocabulary, ~45 of the
// random models' byte-level one): its chunks take the tiled attention where the head size does.
std::string long_prompt(int repeats) {
  std::string prompt = kShortPrompt;
  for (int i = 0; i < repeats; ++i)
    prompt += " there was a little fox who ran " + std::to_string(i) + " times around the hill,";
  return prompt;
}

}  // namespace

TEST_CASE("cuda backend reproduces the cpu backend's greedy tokens on stories260K, every stored format",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  SITSRT_REQUIRE_SHARED("models/stories260K.gguf");
  // Logits: 1e-3 with float K/V. Stored as f16 (the f16 cache, the int8/int4 caches' exact
  // window) the devices' K differ by float summation order (~1e-6), which now and then rounds
  // one K element to the neighbouring f16: in stories260K (queries of |q| ~ 10-20) such steps
  // move logits by up to 1.5e-2 (measured in the CUDA emulator: F32 weights, int8 cache, both
  // backends' stored bytes equal but for one f16 of K in the last layer, 6e-3; Q8_0 / Q4_0
  // weights 1.1e-2 / 1.5e-2, and 1e-3 with the window off). The CPU against itself at another
  // ISA stays at 1e-5; reading the window's positions quantized instead moves logits by 0.36.
  constexpr double kF16Stored = 3e-2;
  check_same_run(test::shared_path("models/stories260K.gguf"), KvCacheType::kF32, "as-stored", 48, 1e-3);
  check_same_run(test::shared_path("models/stories260K.gguf"), KvCacheType::kF16, "as-stored", 48, kF16Stored);
  check_same_run(test::shared_path("models/stories260K-F16.gguf"), KvCacheType::kF16, "as-stored", 48, kF16Stored);
  check_same_run(test::shared_path("models/stories260K-Q8_0.gguf"), KvCacheType::kInt8, "as-stored", 48, kF16Stored);
  check_same_run(test::shared_path("models/stories260K-Q4_0.gguf"), KvCacheType::kInt4, "as-stored", 48, kF16Stored);
  check_same_run(test::shared_path("models/stories260K.gguf"), KvCacheType::kF16, "fp8", 48, kF16Stored);
  // (q4g128 converts none of stories260K's 64-wide rows: see the planar weights case below)
}

TEST_CASE("cuda backend reproduces the cpu backend on random models of every architecture", "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3", "gemma3"}) {
    RandomModelOptions o = test::tiny_options(DType::kQ8_0);
    o.architecture = arch;
    const std::string path = test::random_model(o, std::string("cuda-") + arch);
    check_same_run(path, KvCacheType::kF16, "as-stored", 24, 2e-3);
  }
}

TEST_CASE("cuda backend's tiled prompt attention reproduces the cpu backend (heads of 64, 128, 256, every KV type)",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  for (const std::int64_t head_dim : {64, 128, 256}) {
    RandomModelOptions o = test::tiny_options(DType::kQ8_0);
    o.dim = 4 * head_dim;  // 4 query heads, 2 KV heads
    o.ffn = 2 * o.dim;
    o.context = 512;
    const std::string path = test::random_model(o, "cuda-tiled-attention-" + std::to_string(head_dim));
    // int8 / int4 with the exact recent window (32 positions, the default): both key runs
    for (const KvCacheType kv : {KvCacheType::kF16, KvCacheType::kInt8, KvCacheType::kInt4}) {
      INFO("head_dim " << head_dim << " kv " << static_cast<int>(kv));
      const RequestQueueStats stats = check_close_run(path, kv, "as-stored", long_prompt(3), 2e-2);
      const bool fits = tiled_attention_fits_device(head_dim);
      CHECK((stats.device_prefill_tiled_attentions > 0) == fits);
      CHECK((stats.device_prefill_row_attentions == 0) == fits);
    }
  }
}

TEST_CASE("cuda deterministic mode: requests batched together equal each alone (steps above and below 64 rows)",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  RandomModelOptions o = test::tiny_options(DType::kQ8_0);
  o.context = 512;
  EngineOptions e;
  e.model_path = test::random_model(o, "cuda-deterministic");
  e.device = "cuda";
  e.int8_activations = false;
  e.context_length = 512;
  e.deterministic = true;
  e.serving.prefix_caching = false;  // the batched requests recompute their prompts as alone
  const Engine engine(e);
  // Prompts of ~20-120 tokens (byte-level vocabulary): alone, prompt steps above 64 rows and
  // decode steps of one; together, decode rows share steps with other requests' prompt chunks.
  constexpr int kRequests = 6;
  const auto prompt = [](int i) { return long_prompt(i % 3) + std::string(static_cast<std::size_t>(5 * i), 'a'); };
  const auto config = [](int i) {
    GenerationConfig c;
    c.temperature = 0.8f;
    c.seed = 700 + i;
    c.max_new_tokens = 24;
    c.stop_at_end_of_sequence = false;
    return c;
  };
  struct Trace {
    std::vector<std::int32_t> tokens;
    std::vector<float> logprobs;
    bool operator==(const Trace&) const = default;
  };
  const auto submit = [&](int i, Trace& trace) {
    SubmitOptions so;
    so.on_token = [&trace](const TokenEvent& ev) {
      trace.logprobs.push_back(ev.logprob);
      return true;
    };
    return engine.submit(prompt(i), config(i), std::move(so));
  };
  std::vector<Trace> alone(kRequests), together(kRequests);
  for (int i = 0; i < kRequests; ++i)
    alone[static_cast<std::size_t>(i)].tokens = submit(i, alone[static_cast<std::size_t>(i)]).wait().tokens;
  std::vector<RequestHandle> handles;
  for (int i = 0; i < kRequests; ++i) handles.push_back(submit(i, together[static_cast<std::size_t>(i)]));
  for (int i = 0; i < kRequests; ++i)
    together[static_cast<std::size_t>(i)].tokens = handles[static_cast<std::size_t>(i)].wait().tokens;
  for (int i = 0; i < kRequests; ++i) {
    CAPTURE(i);
    CHECK(together[static_cast<std::size_t>(i)] == alone[static_cast<std::size_t>(i)]);
  }
  CHECK(engine.queue_stats().max_step_sequences > 1);
  CHECK(engine.queue_stats().prefix_cache_hits == 0);
}

namespace {

// A model whose every matmul's rows are whole blocks of 128 (dim 256, ffn 512), for the FP8 x FP8
// prefill GEMMs.
std::string fp8_prefill_model() {
  RandomModelOptions o = test::tiny_options(DType::kQ8_0);
  o.dim = 256;
  o.ffn = 512;
  o.context = 512;
  return test::random_model(o, "cuda-fp8-prefill");
}

}  // namespace

TEST_CASE("cuda FP8 x FP8 prompt matmuls take their activations from the fused RMSNorm and from each other",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  const std::string path = fp8_prefill_model();
  const Run gpu = run_model(path, "cuda", KvCacheType::kF16, "fp8-channel", 4, long_prompt(3));
  if (gpu.stats.device_prefill_fp8_matmuls == 0) {
    SITSRT_SKIP("[cuda] no FP8 x FP8 prefill GEMM on this device (Hopper with cuBLASLt 12.9+ runs it)");
  }
  // Per layer Q, K, V after the attention norm and gate, up after the FFN norm find their rows
  // in place; the output and down projections (their inputs not a norm's) quantize their own.
  // Two prompt passes (generate's, logits()'s) over 2 layers: 28 FP8 GEMMs, 20 finding their rows.
  // Fewer FP8 GEMMs: cuBLASLt had no FP8 algorithm for some shape (BF16 ran; reported, not failed).
  INFO("fp8 matmuls " << gpu.stats.device_prefill_fp8_matmuls << " reuses "
                      << gpu.stats.device_prefill_fp8_activation_reuses);
  if (gpu.stats.device_prefill_fp8_matmuls == 28) {
    CHECK(gpu.stats.device_prefill_fp8_activation_reuses == 20);
  } else {
    WARN("not every prompt matmul took FP8 x FP8");
    CHECK(gpu.stats.device_prefill_fp8_activation_reuses > 0);
  }
  // Against the CPU's float activations: E4M3 rounding of each activation (2^-4) only; rows from
  // a stale or wrong buffer would be off by their whole size.
  const Run cpu = run_model(path, "cpu", KvCacheType::kF16, "fp8-channel", 4, long_prompt(3));
  CHECK(relative_rms_error(gpu.logits, cpu.logits) <= 0.1);
}

TEST_CASE("cuda FP8 x FP8 prompt matmuls with 128 x 128 block-scaled weights (fp8-block) match the cpu",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  const std::string path = fp8_prefill_model();
  const Run gpu = run_model(path, "cuda", KvCacheType::kF16, "fp8-block", 4, long_prompt(3));
  if (gpu.stats.device_prefill_fp8_matmuls == 0) {
    SITSRT_SKIP("[cuda] no block-scaled FP8 x FP8 prefill GEMM on this device (Hopper with cuBLASLt 12.9+ runs it)");
  }
  // Two prompt passes over 2 layers, 7 FP8 GEMMs a layer (the head stays BF16). Uniform random
  // weights give some matrices one scale over a whole band of 128 rows, which bind_weights finds
  // per channel (that GEMM preferred): the block-scaled GEMMs are some of them, their reuses
  // (K and V of Q's rows, up of gate's, where the scalings agree) not counted exactly.
  INFO("fp8 matmuls " << gpu.stats.device_prefill_fp8_matmuls << ", with block scales "
                      << gpu.stats.device_prefill_fp8_block_matmuls << ", reuses "
                      << gpu.stats.device_prefill_fp8_activation_reuses);
  CHECK(gpu.stats.device_prefill_fp8_block_matmuls > 0);
  CHECK(gpu.stats.device_prefill_fp8_block_matmuls <= gpu.stats.device_prefill_fp8_matmuls);
  if (gpu.stats.device_prefill_fp8_matmuls != 28) WARN("not every prompt matmul took FP8 x FP8");
  // Against the CPU's float activations: E4M3 rounding of each activation (2^-4) only.
  const Run cpu = run_model(path, "cpu", KvCacheType::kF16, "fp8-block", 4, long_prompt(3));
  CHECK(relative_rms_error(gpu.logits, cpu.logits) <= 0.1);
}

TEST_CASE("cuda backend reproduces the cpu backend's greedy tokens on the real models", "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  SITSRT_SKIP_IN_CUDA_EMULATOR("vocabularies of 49152 and 262144 entries take hours thread by thread");
  const std::string smol = std::string(SITSRT_SOURCE_DIR) + "/build/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  const std::string gemma = std::string(SITSRT_SOURCE_DIR) + "/build/models/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(smol) || !std::filesystem::exists(gemma)) {
    SITSRT_SKIP("[cuda] the real models are absent (scripts/fetch-models.sh build/models)");
  }
  check_same_run(smol, KvCacheType::kF16, "as-stored", 32, 2e-2);
  // a prompt long enough for the tiled attention (heads of 64, groups of 3)
  CHECK(check_close_run(smol, KvCacheType::kInt8, "as-stored", long_prompt(12), 3e-2).device_prefill_tiled_attentions >
        0);
  check_same_run(gemma, KvCacheType::kF16, "as-stored", 32, 2e-2);  // Q4_K, Q5_0, Q6_K, Q8_0 tensors
  check_same_run(gemma, KvCacheType::kInt8, "q8", 32, 2e-2);
}

namespace {

struct BatchTrace {
  std::vector<std::vector<std::int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;
  RequestQueueStats stats;
};

// Six greedy requests at once, of different lengths: decode batches of 6 down to 1 sequence,
// block tables growing past several size classes (blocks of 16 positions).
BatchTrace run_batch(const std::string& path, const std::string& weights, bool graphs, bool fusion = true) {
  EngineOptions o;
  o.model_path = path;
  o.device = "cuda";
  o.weights = weights;
  o.int8_activations = false;
  o.context_length = 512;
  o.device_graphs = graphs;
  o.decode_fusion = fusion;
  o.serving.prefix_caching = false;  // each run computes every row
  Engine engine(o);
  constexpr int kRequests = 6;
  // The six enter the scheduler together (the compared runs take the same steps: a row's kernels
  // depend on its step's row count): a gate request holds the scheduler thread in its token
  // callback until all are queued.
  std::promise<void> at_gate, all_queued;
  std::shared_future<void> queued = all_queued.get_future().share();
  std::future<void> gate_reached = at_gate.get_future();
  SubmitOptions gate_options;
  gate_options.on_token = [&at_gate, queued, first = true](const TokenEvent&) mutable {
    if (first) at_gate.set_value();
    first = false;
    queued.wait();
    return true;
  };
  GenerationConfig gate_config;
  gate_config.temperature = 0.0f;
  gate_config.max_new_tokens = 1;
  gate_config.stop_at_end_of_sequence = false;  // its one token reaches the callback whatever it is
  RequestHandle gate = engine.submit("x", gate_config, std::move(gate_options));
  gate_reached.wait();
  BatchTrace out;
  out.logprobs.resize(kRequests);
  std::vector<RequestHandle> handles;
  for (int i = 0; i < kRequests; ++i) {
    GenerationConfig c;
    c.temperature = 0.0f;
    // (a third as many under the CPU emulator: block tables still past 4 blocks of 16)
    c.max_new_tokens = test::cuda_small_shapes() && test::cuda_emulated() ? 12 + 14 * i : 40 + 45 * i;
    c.stop_at_end_of_sequence = false;
    SubmitOptions so;
    so.on_token = [&out, i](const TokenEvent& e) {
      out.logprobs[static_cast<std::size_t>(i)].push_back(e.logprob);
      return true;
    };
    handles.push_back(
        engine.submit("Once upon a time " + std::string(static_cast<std::size_t>(i), 'a'), c, std::move(so)));
  }
  all_queued.set_value();
  gate.wait();
  for (RequestHandle& h : handles) out.tokens.push_back(h.wait().tokens);
  out.stats = engine.queue_stats();
  return out;
}

}  // namespace

namespace {

void require_same_bits(const BatchTrace& a, const BatchTrace& b) {
  REQUIRE(a.tokens == b.tokens);
  for (std::size_t i = 0; i < a.logprobs.size(); ++i) {
    REQUIRE(a.logprobs[i].size() == b.logprobs[i].size());
    REQUIRE(std::memcmp(a.logprobs[i].data(), b.logprobs[i].data(), a.logprobs[i].size() * sizeof(float)) == 0);
  }
}

std::string planar_test_model(const std::string& architecture = "llama") {
  RandomModelOptions options = test::tiny_options(DType::kQ8_0);
  options.architecture = architecture;
  options.dim = 128;  // rows the planar INT4 g128 layout takes
  options.ffn = 256;
  options.context = 512;
  return test::random_model(options, "cuda-planar-" + architecture);
}

}  // namespace

TEST_CASE("cuda backend reproduces the cpu backend with planar INT4 g128 and FP8 weights (rows of 128)",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  for (const char* weights : {"q4g128", "fp8", "fp8-channel", "fp8-block"}) {
    INFO("weights " << weights);
    check_same_run(planar_test_model(), KvCacheType::kF16, weights, 24, 2e-3);
  }
}

TEST_CASE("cuda decode fusions (QKV, gate + up + SwiGLU / GeGLU, matmul + residual) give the unfused bits",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  for (const char* architecture : {"llama", "gemma3"}) {
    const std::string path = planar_test_model(architecture);
    for (const char* weights : {"fp8", "q4g128"}) {
      INFO(architecture << " weights " << weights);
      const BatchTrace fused = run_batch(path, weights, false, true);
      require_same_bits(fused, run_batch(path, weights, false, false));
      // decode steps of 5-6 sequences on the tensor cores, the last single-sequence steps not
      CHECK(fused.stats.device_decode_tensor_core_matmuls > 0);
      CHECK(fused.stats.device_decode_cuda_core_matmuls > 0);
    }
  }
}

TEST_CASE("cuda decode graphs give the eager launches' tokens and logprobs bit for bit", "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  const std::string path = planar_test_model();
  for (const char* weights : {"as-stored", "fp8", "q4g128"}) {
    INFO("weights " << weights);
    const BatchTrace eager = run_batch(path, weights, false);
    const BatchTrace graphs = run_batch(path, weights, true);
    CHECK(eager.stats.device_graph_replays == 0);
    CHECK(graphs.stats.device_graph_captures >= 6);  // one per batch size at least
    // most steps are decode steps, and all but the first of each batch size replay a graph
    CHECK(2 * graphs.stats.device_graph_replays > graphs.stats.steps);
    require_same_bits(graphs, eager);
  }
}

TEST_CASE("cuda: tokens and statistics from the device's logit summaries equal those from the rows read back",
          "[cuda][gated]") {
  SITSRT_SKIP_WITHOUT_CUDA();
  // Full distributions for every token make the scheduler read each row to the host (no summary).
  EngineOptions o;
  o.model_path = planar_test_model();
  o.device = "cuda";
  o.context_length = 512;
  o.serving.prefix_caching = false;  // both runs compute every prompt row alike
  const Engine engine(o);
  GenerationConfig c;
  c.max_new_tokens = 32;
  c.seed = 5;
  c.top_logprobs = 8;
  c.stop_at_end_of_sequence = false;
  c.temperature = GENERATE(0.0f, 0.9f);  // greedy, then top-k 40 sampling
  const auto run = [&](bool rows) {
    GenerationConfig r = c;
    if (rows) {
      r.audit.level = TraceLevel::kFull;
      for (std::int64_t i = 0; i < r.max_new_tokens; ++i) r.audit.full_distribution_steps.push_back(i);
    }
    std::vector<TokenEvent> events;
    engine.generate("Once upon a time", r, [&](const TokenEvent& e) {
      events.push_back(e);
      return true;
    });
    return events;
  };
  const std::vector<TokenEvent> summaries = run(false), rows = run(true);
  REQUIRE(summaries.size() == rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(c.temperature, i);
    // The same logits: the same token and ranking; the sums differ only by the device's expf
    // and order of addition.
    REQUIRE(summaries[i].token_id == rows[i].token_id);
    CHECK(summaries[i].logprob == Approx(rows[i].logprob).margin(1e-5));
    CHECK(summaries[i].entropy == Approx(rows[i].entropy).margin(1e-5));
    REQUIRE(summaries[i].top.size() == rows[i].top.size());
    for (std::size_t j = 0; j < rows[i].top.size(); ++j) {
      CHECK(summaries[i].top[j].id == rows[i].top[j].id);
      CHECK(summaries[i].top[j].logprob == Approx(rows[i].top[j].logprob).margin(1e-5));
    }
  }
}
