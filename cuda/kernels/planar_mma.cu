// Tensor-core decode matmul over planar weights (kernels/mma_units.hpp), for steps of 5-47 rows of
// x outside batch invariance: a block of kMmaWarps warps owns 32 weight rows (two m16 tiles: 32
// consecutive outputs of one matrix, or 16 of gate and 16 of up; 16 outputs where 32 would leave
// fewer than two blocks a multiprocessor), its warps splitting the row's scale blocks (split-K,
// one reduction through shared memory in warp order, so every output has one order of sums
// whatever the launch: alone, grouped, with a residual or SwiGLU). One warp's x fragments serve
// both tiles and one tile's codes serve the kNTiles n8 tiles of x (8 rows each): x is read once a
// block for 32 weight rows, where the CUDA-core kernels read it once for 2 or 4. (Where the caller
// has its scratch, planar_mma_split.cu runs instead: x once per 256 weight rows.)
//   - planar_mma_kernel (FP8 E4M3, INT4 g128): a lane quad's 4 16-byte units are one scale block,
//     the next block's codes loaded before the current one's mmas;
//   - planar_mma_quarter_kernel (Q8_0, Q4_x, Q5_x, IQ4_NL, Q4_K, Q5_K, Q6_K, F16, BF16): each lane
//     takes a word of every unit of a chunk (64-128 elements), a step's scale (and offset) per 16
//     elements; F16 weights as hi + lo BF16 (four mmas a step).
#include "cuda_backend/kernels/activation_math.hpp"
#include "cuda_backend/kernels/format_dispatch.hpp"
#include "cuda_backend/kernels/grid_dependency.hpp"
#include "cuda_backend/kernels/mma_units.hpp"
#include "cuda_backend/kernels/planar_group.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace sitsrt::cuda {
namespace {

constexpr int kMmaWarps = 8;
constexpr int kMmaThreads = 32 * kMmaWarps;

// A block's tiles: kTiles m16 tiles of one matrix (16 kTiles consecutive outputs), or with kGated
// the same 16 outputs of gate (tile 0) and up (tile 1); and the lane's weight rows g and g + 8 of
// each (past n: the last row again, not stored).
template <int kTiles, bool kGated>
struct BlockTiles {
  static_assert(!kGated || kTiles == 2, "gate and up: one tile each");
  int target[kTiles];
  std::int64_t j0[kTiles];
  const std::uint8_t* codes[kTiles][2];
  const std::uint8_t* sides[kTiles][2];
  int warp, g, t;  // the thread's warp, and its lane's group and place in it (lane = 4 g + t)

  __device__ explicit BlockTiles(const GroupArgs& a)
      : warp(static_cast<int>(threadIdx.x / 32)),
        g(static_cast<int>(threadIdx.x % 32) / 4),
        t(static_cast<int>(threadIdx.x % 4)) {
    if constexpr (kGated) {
      target[0] = 0;
      target[1] = 1;
      j0[0] = j0[1] = static_cast<std::int64_t>(blockIdx.x) * 16;
    } else {
      int tg = 0;
      while (tg + 1 < a.count && blockIdx.x >= a.first_block[tg + 1]) ++tg;
      const std::int64_t first = static_cast<std::int64_t>(blockIdx.x - a.first_block[tg]) * 16 * kTiles;
      for (int mt = 0; mt < kTiles; ++mt) {
        target[mt] = tg;
        j0[mt] = first + 16 * mt;
      }
    }
#pragma unroll
    for (int mt = 0; mt < kTiles; ++mt) lane_rows(a.t[target[mt]], j0[mt], g, codes[mt], sides[mt]);
  }
};

// The warps' sums added in warp order, then written with the epilogue (outputs fastest).
template <int kTiles, int kNTiles, bool kGated>
__device__ void store_outputs(const GroupArgs& a, const BlockTiles<kTiles, kGated>& tiles,
                              const float (&acc)[kTiles][kNTiles][4]) {
  constexpr int kOutputs = 16 * kTiles, kCols = 8 * kNTiles;
  __shared__ float partial[kMmaWarps][kOutputs][kCols];  // [warp][output of the block][row of x]
  __shared__ float totals[kOutputs][kCols];
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
#pragma unroll
  for (int mt = 0; mt < kTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        partial[warp][16 * mt + mma::c_row(lane, i)][8 * nt + mma::c_column(lane, i)] = acc[mt][nt][i];
      }
    }
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < kOutputs * kCols; i += kMmaThreads) {
    float sum = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kMmaWarps; ++wi) sum += partial[wi][i / kCols][i % kCols];
    totals[i / kCols][i % kCols] = sum;
  }
  __syncthreads();
  if constexpr (kGated) {
    for (int i = static_cast<int>(threadIdx.x); i < 16 * kCols; i += kMmaThreads) {
      const int r = i / 16, o = i % 16;
      const std::int64_t j = tiles.j0[0] + o;
      if (j >= a.t[0].n || r >= a.rows) continue;
      const float gate = totals[o][r], up = totals[16 + o][r];
      a.t[0].y[r * a.t[0].ldy + j] = gate;
      a.t[1].y[r * a.t[1].ldy + j] = up;
      // last: out may be the gate's buffer
      a.out[r * a.ld_out + j] = a.kind == PlanarEpilogue::kGeGlu ? geglu_tanh_value(gate, up) : swiglu_value(gate, up);
    }
  } else {
    const GroupArgs::Target& tg = a.t[tiles.target[0]];
    for (int i = static_cast<int>(threadIdx.x); i < kOutputs * kCols; i += kMmaThreads) {
      const int r = i / kOutputs, o = i % kOutputs;
      const std::int64_t j = tiles.j0[0] + o;
      if (j >= tg.n || r >= a.rows) continue;
      const float y = totals[o][r];
      tg.y[r * tg.ldy + j] = y;
      if (a.kind == PlanarEpilogue::kAdd) a.out[r * a.ld_out + j] = y + a.residual[r * a.ld_residual + j];
    }
  }
}

// FP8 E4M3 and INT4 g128: the warp's scale blocks b = warp, warp + kMmaWarps, ...
template <DType F, int kTiles, int kNTiles, bool kGated>
__global__ void __launch_bounds__(kMmaThreads, 2) planar_mma_kernel(const GroupArgs a) {
  begin_dependent_grid();
  const BlockTiles<kTiles, kGated> tiles(a);
  const int warp = tiles.warp, g = tiles.g, t = tiles.t;
  const planar::XTile xt{a.x, a.ldx, a.rows, a.vector};
  float acc[kTiles][kNTiles][4];
  mma::zero(acc);
  // the next block's codes and side words loaded before the current one's mmas: two blocks' loads
  // in flight a warp
  const std::int64_t blocks = a.t[tiles.target[0]].g.units / 4;
  uint4 next_w[kTiles][2][1];
  mma::BlockSide next_side[kTiles][2];
  const auto load_block = [&](std::int64_t b) {
#pragma unroll
    for (int mt = 0; mt < kTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        planar::load_codes<F>(tiles.codes[mt][h], 4 * b + t, next_w[mt][h]);
        next_side[mt][h] = mma::load_block_side<F>(tiles.sides[mt][h], b);
      }
    }
  };
  if (warp < blocks) load_block(warp);
  for (std::int64_t b = warp; b < blocks; b += kMmaWarps) {
    const std::int64_t u = 4 * b + t;
    uint4 w[kTiles][2];
    mma::BlockSide side[kTiles][2];
#pragma unroll
    for (int mt = 0; mt < kTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        w[mt][h] = next_w[mt][h][0];
        side[mt][h] = next_side[mt][h];
      }
    }
    if (b + kMmaWarps < blocks) load_block(b + kMmaWarps);
    mma::add_scale_block<F>(
        w, side, [&](int step, int nt, mma::FragB& hi, mma::FragB& lo) { mma::b_fragments<F>(xt, 8 * nt + g, u, step, hi, lo); },
        acc);
  }
  store_outputs<kTiles, kNTiles, kGated>(a, tiles, acc);
}

// The GGUF block formats and F16 / BF16: the warp's chunks of kChunkUnits units (64-128 elements) c = warp,
// warp + kMmaWarps, ...; every unit's steps in order, each step's sum scaled (and its offset
// times the step's x sums added) into the accumulators.
template <DType F, int kTiles, int kNTiles, bool kGated>
__global__ void __launch_bounds__(kMmaThreads, 2) planar_mma_quarter_kernel(const GroupArgs a) {
  begin_dependent_grid();
  const BlockTiles<kTiles, kGated> tiles(a);
  const int warp = tiles.warp, g = tiles.g, t = tiles.t;
  const planar::XTile xt{a.x, a.ldx, a.rows, a.vector};
  constexpr int kChunk = mma::kChunkUnits<F>;
  float acc[kTiles][kNTiles][4];
  mma::zero(acc);
  const std::int64_t units = mma::quarter_units<F>(a.t[tiles.target[0]].g.units);
  for (std::int64_t u0 = static_cast<std::int64_t>(warp) * kChunk; u0 < units; u0 += kMmaWarps * kChunk) {
    std::uint32_t w[kChunk][kTiles][2][mma::kQuarterLoads<F>];
    mma::ChunkSide<F> side[kTiles][2];
    mma::load_quarter_chunk<F>(tiles.codes, tiles.sides, u0, units, t, w, side);
    mma::add_quarter_chunk<F>(
        w, side, u0, units, t,
        [&](std::int64_t u, int step, int nt, mma::FragB& hi, mma::FragB& lo) {
          mma::quarter_b_fragments<F>(xt, 8 * nt + g, u, step, t, hi, lo);
        },
        acc);
  }
  store_outputs<kTiles, kNTiles, kGated>(a, tiles, acc);
}

template <DType F, int kTiles, int kNTiles, bool kGated>
void launch_tiles(const GroupArgs& a, unsigned blocks, cudaStream_t stream) {
  if constexpr (mma::kFormat<F>) {
    launch_kernel(planar_mma_kernel<F, kTiles, kNTiles, kGated>, blocks, kMmaThreads, 0, stream, a);
  } else {
    launch_kernel(planar_mma_quarter_kernel<F, kTiles, kNTiles, kGated>, blocks, kMmaThreads, 0, stream, a);
  }
}

// Tiles of up to 16 rows of x (one n8 tile for 8 rows or fewer). Blocks of 32 outputs where that
// still gives every multiprocessor two, else of 16 (twice the blocks, the same bits: an output's
// sums do not depend on the tile beside it).
template <DType F>
void launch_format(GroupArgs a, std::int64_t m, cudaStream_t stream) {
  const bool gated = a.kind == PlanarEpilogue::kSwiGlu || a.kind == PlanarEpilogue::kGeGlu;
  GroupArgs narrow = a;
  const unsigned wide_blocks = number_blocks(a, 32);
  const bool wide = gated || wide_blocks >= 2u * static_cast<unsigned>(device_multiprocessors());
  const unsigned blocks =
      gated ? static_cast<unsigned>((a.t[0].n + 15) / 16) : wide ? wide_blocks : number_blocks(narrow, 16);
  if (!wide) a = narrow;
  for_each_row_tile(a, m, 16, [&](const GroupArgs& tile) {
    const auto launch = [&]<int kNTiles>() {
      if (gated) {
        launch_tiles<F, 2, kNTiles, true>(tile, blocks, stream);
      } else if (wide) {
        launch_tiles<F, 2, kNTiles, false>(tile, blocks, stream);
      } else {
        launch_tiles<F, 1, kNTiles, false>(tile, blocks, stream);
      }
    };
    if (tile.rows <= 8) {
      launch.template operator()<1>();
    } else {
      launch.template operator()<2>();
    }
  });
}

}  // namespace

bool mma_decode_allowed() {
  static const bool allowed = [] {
    const char* setting = std::getenv("SITSRT_CUDA_MMA_DECODE");
    return setting == nullptr || std::strcmp(setting, "0") != 0;
  }();
  return allowed;
}

int device_multiprocessors() {
  constexpr int kDevices = 64;
  static std::atomic<int> counts[kDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) return 132;
  int count = counts[device].load(std::memory_order_relaxed);
  if (count == 0) {
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || count <= 0) {
      count = 132;
    }
    counts[device].store(count, std::memory_order_relaxed);
  }
  return count;
}

bool launch_planar_mma(DType format, GroupArgs a, std::int64_t m, cudaStream_t stream) {
  if (!mma_decode_allowed()) return false;
  bool launched = false;
  dispatch_planar_format(format, [&]<DType F>() {
    if constexpr (mma::kFormat<F> || mma::kQuarterFormat<F>) {
      if (mma::kFloatPairs<F> && a.t[0].g.units % 2 != 0) return;  // rows of 16-element steps only
      launch_format<F>(a, m, stream);
      launched = true;
    }
  });
  return launched;
}

}  // namespace sitsrt::cuda
