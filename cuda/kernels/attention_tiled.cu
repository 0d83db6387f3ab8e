// Tiled prompt attention on the tensor cores (lane logic and precision: kernels/attention_tiles.hpp):
// a block per (tile of 64 query rows of one sequence, KV head), 4 warps of 16 rows, the keys in
// passes of 32 staged as BF16 hi + lo planes in shared memory. Taken by steps longer than the
// flash-decoding split takes (AttentionLaunch::tile_rows set by the backend); the rows' stores
// into the cache have run before it (launch_attention).
#include "cuda_backend/kernels/attention_tiles.hpp"
#include "cuda_backend/kernels/dynamic_shared.hpp"
#include "cuda_backend/kernels/grid_dependency.hpp"
#include "cuda_backend/kernels/head_rotation.hpp"
#include "cuda_backend/kernels/launch.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace sitsrt::cuda {
namespace {

using tiles::kKeys;
using tiles::kScoreTiles;
using tiles::kTileRows;
using tiles::kValueSteps;

// The quad's (4 lanes holding the same two rows) largest of `v`.
__device__ inline float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ inline float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// c += A B with both operands as hi + lo BF16 pairs: hi hi + lo hi + hi lo (lo lo, ~2^-18 of the
// product, left out).
__device__ inline void mma_split(const mma::FragA& a_hi, const mma::FragA& a_lo, const mma::FragB& b_hi,
                                 const mma::FragB& b_lo, float (&c)[4]) {
  mma::mma_bf16(a_hi, b_hi, c);
  mma::mma_bf16(a_lo, b_hi, c);
  mma::mma_bf16(a_hi, b_lo, c);
}

template <int D>
__global__ void __launch_bounds__(tiles::Layout<D>::kThreads, tiles::Layout<D>::kMinBlocks)
    attention_tiled_kernel(AttentionLaunch a) {
  using L = tiles::Layout<D>;
  constexpr int kThreads = L::kThreads;
  constexpr int kDimTiles = L::kDimTiles;
  begin_dependent_grid();
  SITSRT_DYNAMIC_SHARED(std::uint32_t, smem);
  __shared__ tiles::PassRows pass_rows;
  float* rows = reinterpret_cast<float*>(smem + L::kFloats);
  // Blocks in the order (tile from the table's end, KV head): a sequence's last tiles attend the
  // most keys, so every head of them starts first.
  const std::int64_t tile = a.n_tiles - 1 - static_cast<std::int64_t>(blockIdx.x) / a.n_kv_heads;
  const std::int64_t g = static_cast<std::int64_t>(blockIdx.x) % a.n_kv_heads;
  const std::int64_t first_row = a.tile_rows[tile];
  const int group = static_cast<int>(a.n_heads / a.n_kv_heads);
  const AttentionSequenceDesc& s = a.sequences[a.row_sequence[first_row]];
  const tiles::QueryTile t = tiles::query_tile(s, first_row, group);
  const int lane = static_cast<int>(threadIdx.x % 32);
  // The warp's row tile (16 rows) and its first output tile (a half of the dims at D = 256).
  const int warp = static_cast<int>(threadIdx.x / 32) % tiles::kRowGroups;
  const int dim_tile0 = static_cast<int>(threadIdx.x / 32) / tiles::kRowGroups * kDimTiles;

  // q scaled per channel, rotated where K is stored rotated, split into the Q planes.
  for (int e = threadIdx.x; e < kTileRows * D; e += kThreads) {
    rows[e] = tiles::query_value(a.q, a.ldq, s, t, g, D, e / D, e % D);
  }
  __syncthreads();
  if (s.k_rotated != 0) hadamard_heads(rows, kTileRows * D, D);
  for (int idx = threadIdx.x; idx < kTileRows * D / 2; idx += kThreads) tiles::split_query_pair<D>(rows, idx, smem);
  __syncthreads();  // the float rows are K and V's planes from here on

  const tiles::RowSpan spans[2] = {tiles::tile_row_span(s, a.window, t, 16 * warp + lane / 4),
                                   tiles::tile_row_span(s, a.window, t, 16 * warp + lane / 4 + 8)};
  // The keys any row of this warp attends: [first row's lo, last row's position] (none past the tile).
  const int last_m = min(16 * warp + 15, t.positions * group - 1);
  const bool warp_rows = 16 * warp <= last_m;
  const std::int64_t warp_lo = warp_rows ? tiles::tile_row_span(s, a.window, t, 16 * warp).lo : 0;
  const std::int64_t warp_hi = warp_rows ? tiles::tile_row_span(s, a.window, t, last_m).pos : -1;

  tiles::RowState state;
  float out[kDimTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) out[dt][0] = out[dt][1] = out[dt][2] = out[dt][3] = 0.0f;
  const tiles::KeyRuns runs = tiles::key_runs(s, a.window, t);
  tiles::Stage stage;
  stage.s = &s;
  stage.k_copies = a.k_exact;
  stage.v_copies = a.v_exact;
  stage.width = a.n_kv_heads * D;
  stage.g = g;
  for (int run = 0; run < runs.count; ++run) {
    stage.run = run == 0 ? runs.first : runs.second;
    for (stage.key0 = stage.run.begin; stage.key0 < stage.run.end; stage.key0 += kKeys) {
      if (threadIdx.x < kKeys) tiles::stage_pass_row(stage, static_cast<int>(threadIdx.x), pass_rows);
      __syncthreads();
      for (int idx = threadIdx.x; idx < kKeys * D / 2; idx += kThreads) tiles::stage_key_pair<D>(stage, pass_rows, idx, smem);
      for (int idx = threadIdx.x; idx < kKeys * D / 4; idx += kThreads) {
        tiles::stage_value_quad<D>(stage, pass_rows, idx, smem);
      }
      __syncthreads();
      if (warp_hi >= stage.key0 && warp_lo < stage.key0 + kKeys) {  // warp-uniform
        float scores[kScoreTiles][4];
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt) scores[nt][0] = scores[nt][1] = scores[nt][2] = scores[nt][3] = 0.0f;
#pragma unroll(D > 128 ? 4 : D / 16)  // at D = 256 in fours: the full unroll would spill
        for (int step = 0; step < D / 16; ++step) {
          mma::FragA q_hi, q_lo;
          tiles::query_fragments<D>(smem, warp, lane, step, q_hi, q_lo);
#pragma unroll
          for (int nt = 0; nt < kScoreTiles; ++nt) {
            mma::FragB k_hi, k_lo;
            tiles::key_fragments<D>(smem, lane, nt, step, k_hi, k_lo);
            mma_split(q_hi, q_lo, k_hi, k_lo, scores[nt]);
          }
        }
        tiles::mask_scores(scores, spans, stage.key0, stage.run.exact, a.scale, lane);
        float top[2], correction[2];
        tiles::lane_max(scores, top);
        top[0] = quad_max(top[0]);
        top[1] = quad_max(top[1]);
        tiles::exponentiate(scores, state, top, correction);
        mma::FragA w_hi[kValueSteps], w_lo[kValueSteps];
#pragma unroll
        for (int step = 0; step < kValueSteps; ++step) tiles::weight_fragments(scores, step, w_hi[step], w_lo[step]);
        // The pass's P V in an accumulator of its own (6 mmas), added to the running output with
        // its rescale in one float fma: the tensor cores' accumulation (which may truncate) never
        // carries the sum across passes.
#pragma unroll
        for (int dt = 0; dt < kDimTiles; ++dt) {
          float pass[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int step = 0; step < kValueSteps; ++step) {
            mma::FragB v_hi, v_lo;
            tiles::value_fragments<D>(smem, lane, dim_tile0 + dt, step, v_hi, v_lo);
            mma_split(w_hi[step], w_lo[step], v_hi, v_lo, pass);
          }
          tiles::add_pass(out[dt], pass, correction);
        }
      }
      __syncthreads();  // before the next pass overwrites the planes
    }
  }

  // Normalised rows: to out directly, or through the float rows to be rotated back (H H = I).
  const float sums[2] = {quad_sum(state.sum[0]), quad_sum(state.sum[1])};
  const bool rotate = s.v_rotated != 0;
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = 16 * warp + mma::c_row(lane, i), d = 8 * (dim_tile0 + dt) + mma::c_column(lane, i);
      const float value = out[dt][i] / sums[i / 2];  // rows past the tile: 0 / 0, never written
      if (rotate) {
        rows[m * D + d] = value;
      } else if (m / group < t.positions) {
        a.out[(t.first_row + m / group) * a.ldo + (g * group + m % group) * D + d] = value;
      }
    }
  }
  if (!rotate) return;
  __syncthreads();
  hadamard_heads(rows, kTileRows * D, D);
  for (int e = threadIdx.x; e < t.positions * group * D; e += kThreads) {
    const int m = e / D, d = e % D;
    a.out[(t.first_row + m / group) * a.ldo + (g * group + m % group) * D + d] = rows[e];
  }
}

bool tiled_attention_allowed() {
  static const bool allowed = [] {
    const char* setting = std::getenv("SITSRT_CUDA_MMA_ATTENTION");
    return setting == nullptr || std::strcmp(setting, "0") != 0;
  }();
  return allowed;
}

// Above 48 KiB a kernel opts in to its shared memory, once per device (0: not yet asked, 1:
// granted, 2: refused). An error left by an earlier launch is not taken for a refusal (nor
// cleared): the caller's check after its launches reports it.
template <int D>
bool shared_memory_granted() {
  constexpr int kDevices = 64;
  static std::atomic<int> state[kDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) return false;
  if (const int known = state[device].load(std::memory_order_acquire); known != 0) return known == 1;
  if (cudaPeekAtLastError() != cudaSuccess) return false;
  const bool granted = cudaFuncSetAttribute(reinterpret_cast<const void*>(&attention_tiled_kernel<D>),
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(tiles::Layout<D>::kBytes)) == cudaSuccess;
  if (!granted) static_cast<void>(cudaGetLastError());  // the refusal itself: the staged kernel runs instead
  state[device].store(granted ? 1 : 2, std::memory_order_release);
  return granted;
}

template <int D>
bool launch_tiled(const AttentionLaunch& a, cudaStream_t stream) {
  constexpr std::size_t kBytes = tiles::Layout<D>::kBytes;
  if (!shared_memory_granted<D>()) return false;
  const dim3 grid(static_cast<unsigned>(a.n_tiles * a.n_kv_heads), 1, 1);
  launch_kernel(attention_tiled_kernel<D>, grid, tiles::Layout<D>::kThreads, kBytes, stream, a);
  return true;
}

}  // namespace

bool tiled_attention_applies(std::int64_t n_rows, std::int64_t n_heads, std::int64_t n_kv_heads,
                             std::int64_t head_dim) {
  return n_rows > kAttentionSplitMaxRows && n_kv_heads > 0 && n_heads % n_kv_heads == 0 &&
         n_heads / n_kv_heads <= kTileRows && tiles::head_dim_fits(head_dim) && tiled_attention_allowed();
}

std::int64_t attention_tile_positions(std::int64_t n_heads, std::int64_t n_kv_heads) {
  return tiles::tile_positions(n_heads / n_kv_heads);
}

bool launch_attention_tiled(const AttentionLaunch& a, cudaStream_t stream) {
  if (a.tile_rows == nullptr || a.n_tiles <= 0 || a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0 ||
      a.n_heads / a.n_kv_heads > kTileRows) {
    return false;
  }
  switch (a.head_dim) {
    case 64:
      return launch_tiled<64>(a, stream);
    case 128:
      return launch_tiled<128>(a, stream);
    case 256:
      return launch_tiled<256>(a, stream);
    default:
      return false;
  }
}

}  // namespace sitsrt::cuda
