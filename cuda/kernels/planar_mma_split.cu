// The split tensor-core decode (steps of 5+ rows of x, outside batch invariance) for every format
// of planar_mma.cu, the kernel the backend takes where it has the scratch (launch.hpp:
// PlanarSplitScratch). planar_mma.cu's blocks own 32 weight rows and read x once each: at 16 rows
// that is 2x (FP8, Q8_0) to 3.6x (INT4, Q4_K) the weights' bytes again from L2. Here a block of 8
// warps owns 256 weight rows (32 a warp, in planar_mma.cu's fragments; gated: 128 outputs of gate
// and of up) and one slice of the row: x's fragments of the slice are staged in shared memory
// 512 elements at a time (split into BF16 hi + lo once a block) and serve all 8 warps, so x is
// read once per 256 weight rows. A row is cut in granules (a scale block of FP8 E4M3 / INT4 g128,
// a chunk of the quarter scheme's units for the others), a matrix's rows into as many slices of
// whole granules as give every multiprocessor a block (at most 16, at least 2 granules a slice);
// each slice's sums go to scratch, and the last of a block of rows' slices to finish adds them in
// slice order and writes the outputs with the epilogue. The slices depend on the matrix's rows,
// k and the multiprocessor count only, so an output has one order of sums alone, grouped, with a
// residual or SwiGLU, eager or replayed.
#include "cuda_backend/kernels/activation_math.hpp"
#include "cuda_backend/kernels/format_dispatch.hpp"
#include "cuda_backend/kernels/grid_dependency.hpp"
#include "cuda_backend/kernels/mma_units.hpp"
#include "cuda_backend/kernels/planar_group.hpp"
#include "cuda_backend/cuda_check.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace sitsrt::cuda {
namespace {

constexpr int kSplitWarps = 8;
constexpr int kSplitThreads = 32 * kSplitWarps;
constexpr int kWarpRows = 32;                        // two m16 tiles a warp
constexpr int kBlockRows = kWarpRows * kSplitWarps;  // 256 weight rows a block
constexpr int kMaxSlices = 16;
constexpr int kMinSliceGranules = 2;  // a warp's next granule in flight (FP8 / INT4)
constexpr int kTileRows = 16;         // rows of x a launch (two n8 tiles)

// FP8 E4M3 / INT4 g128: scale blocks of 4 units (one a lane quad), the next one's codes loaded
// ahead; the others: chunks of the quarter scheme's units, every lane a word of each.
template <DType F>
inline constexpr bool kBlockScheme = mma::kFormat<F>;
// A granule's staged fragments: [unit of the granule (quarter)][step][n8 tile][lane], one uint4
// {hi.r0, hi.r1, lo.r0, lo.r1} each.
template <DType F, int kNTiles>
inline constexpr int kGranuleEntries =
    kBlockScheme<F> ? mma::kSteps<F> * kNTiles * 32 : mma::kChunkUnits<F> * mma::kQuarterSteps<F> * kNTiles * 32;
// Granules staged at a time: 512 elements of x (32 k16 steps; 16 KiB of fragments an n8 tile).
template <DType F>
inline constexpr int kStageGranules =
    kBlockScheme<F> ? 512 / mma::kBlockElements<F> : 32 / (mma::kQuarterSteps<F> * mma::kChunkUnits<F>);

// The units of a row as the kernel counts them, and its granules.
template <DType F>
SITSRT_HD std::int64_t row_units(const PlanarGeometry& g) {
  if constexpr (kBlockScheme<F>) {
    return g.units;
  } else {
    return mma::quarter_units<F>(g.units);
  }
}
template <DType F>
SITSRT_HD std::int64_t row_granules(const PlanarGeometry& g) {
  if constexpr (kBlockScheme<F>) {
    return g.units / 4;
  } else {
    return (row_units<F>(g) + mma::kChunkUnits<F> - 1) / mma::kChunkUnits<F>;
  }
}

bool gated_kind(PlanarEpilogue kind) {
  return kind == PlanarEpilogue::kSwiGlu || kind == PlanarEpilogue::kGeGlu;
}

// Slices of a matrix of n rows whose rows have `granules` granules: a block for every
// multiprocessor where the row has the granules for it.
int slices_for(std::int64_t n, std::int64_t granules) {
  if (n <= 0) return 1;
  const std::int64_t row_blocks = (n + kBlockRows - 1) / kBlockRows;
  const std::int64_t wanted = (device_multiprocessors() + row_blocks - 1) / row_blocks;
  const std::int64_t most =
      std::max<std::int64_t>(1, std::min<std::int64_t>(kMaxSlices, granules / kMinSliceGranules));
  return static_cast<int>(std::clamp<std::int64_t>(wanted, 1, most));
}

// Output j (of target tg), row r of the tile: written with the epilogue. Gated: `value` is the
// gate's, `up` the up's.
__device__ void write_output(const GroupArgs& a, int tg, std::int64_t j, int r, float value, float up) {
  if (a.kind == PlanarEpilogue::kSwiGlu || a.kind == PlanarEpilogue::kGeGlu) {
    a.t[0].y[r * a.t[0].ldy + j] = value;
    a.t[1].y[r * a.t[1].ldy + j] = up;
    // last: out may be the gate's buffer
    a.out[r * a.ld_out + j] = a.kind == PlanarEpilogue::kGeGlu ? geglu_tanh_value(value, up) : swiglu_value(value, up);
  } else {
    a.t[tg].y[r * a.t[tg].ldy + j] = value;
    if (a.kind == PlanarEpilogue::kAdd) a.out[r * a.ld_out + j] = value + a.residual[r * a.ld_residual + j];
  }
}

// Slice s's partial sum of output j, row r of target t.
__device__ inline float* partial_of(const GroupArgs& a, int t, int s, int r, std::int64_t j) {
  return a.partials + a.t[t].partials_at + (static_cast<std::int64_t>(s) * kTileRows + r) * a.t[t].n + j;
}

// A block's place: its target, block of rows and slice (a block of rows' slices adjacent), and its
// warp's two m16 tiles (gated: the same 16 outputs of gate and up) with the lane's rows g, g + 8
// of each.
template <bool kGated>
struct SplitBlock {
  static constexpr int kOutputs = kGated ? kBlockRows / 2 : kBlockRows;  // outputs of a target a block
  int tg = 0;
  int slices, slice;
  std::int64_t row_block;
  int tile_target[2];
  std::int64_t j0[2];
  const std::uint8_t* codes[2][2];
  const std::uint8_t* sides[2][2];
  bool active;  // a warp past the last row only stages x

  __device__ SplitBlock(const GroupArgs& a, int warp, int g) {
    if constexpr (!kGated) {
      while (tg + 1 < a.count && blockIdx.x >= a.first_block[tg + 1]) ++tg;
    }
    const unsigned local = blockIdx.x - a.first_block[tg];
    slices = a.t[tg].slices;
    row_block = local / static_cast<unsigned>(slices);
    slice = static_cast<int>(local % static_cast<unsigned>(slices));
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      tile_target[mt] = kGated ? mt : tg;
      j0[mt] = row_block * kOutputs + (kGated ? 16 * warp : kWarpRows * warp + 16 * mt);
      lane_rows(a.t[tile_target[mt]], j0[mt], g, codes[mt], sides[mt]);
    }
    active = j0[0] < a.t[tg].n;
  }
};

// x's fragments of granules [g0, g1) into the stage (every thread of the block a share).
template <DType F, int kNTiles>
__device__ void stage_fragments(uint4* stage, const planar::XTile& xt, std::int64_t g0, std::int64_t g1,
                                std::int64_t units) {
  constexpr int kEntries = kGranuleEntries<F, kNTiles>;
  const int entries = static_cast<int>(g1 - g0) * kEntries;
  for (int e = static_cast<int>(threadIdx.x); e < entries; e += kSplitThreads) {
    const int el = e % 32, nt = (e / 32) % kNTiles;
    const std::int64_t granule = g0 + e / kEntries;
    mma::FragB hi, lo;
    if constexpr (kBlockScheme<F>) {
      const int step = (e / (32 * kNTiles)) % mma::kSteps<F>;
      mma::b_fragments<F>(xt, 8 * nt + el / 4, 4 * granule + el % 4, step, hi, lo);
    } else {
      const int step = (e / (32 * kNTiles)) % mma::kQuarterSteps<F>;
      const std::int64_t u = granule * mma::kChunkUnits<F> + (e % kEntries) / (mma::kQuarterSteps<F> * kNTiles * 32);
      if (u >= units) continue;  // a partial last chunk: never read
      mma::quarter_b_fragments<F>(xt, 8 * nt + el / 4, u, step, el % 4, hi, lo);
    }
    uint4 v;
    v.x = hi.r[0];
    v.y = hi.r[1];
    v.z = lo.r[0];
    v.w = lo.r[1];
    stage[e] = v;
  }
}

// A staged fragment pair: entry `at` of the stage (the lane's own).
__device__ inline void staged_fragments(const uint4* at, mma::FragB& hi, mma::FragB& lo) {
  const uint4 v = *at;
  hi.r[0] = v.x;
  hi.r[1] = v.y;
  lo.r[0] = v.z;
  lo.r[1] = v.w;
}

// The block's outputs: its accumulators where the rows are whole, else its slice's partial sums,
// then the count of the block of rows' slices (the threadfence reduction pattern); the last to
// count adds them all in slice order. Every thread of the block.
template <int kNTiles, bool kGated>
__device__ void finish_outputs(const GroupArgs& a, const SplitBlock<kGated>& blk, const float (&acc)[2][kNTiles][4],
                               int lane) {
  constexpr int kOutputs = SplitBlock<kGated>::kOutputs;
  const GroupArgs::Target& target = a.t[blk.tg];
  if (blk.slices == 1) {  // the whole row: the outputs, straight from the accumulators
    if (!blk.active) return;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 8 * nt + mma::c_column(lane, i);
        if (r >= a.rows) continue;
        if constexpr (kGated) {
          const std::int64_t j = blk.j0[0] + mma::c_row(lane, i);
          if (j < target.n) write_output(a, 0, j, r, acc[0][nt][i], acc[1][nt][i]);
        } else {
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            const std::int64_t j = blk.j0[mt] + mma::c_row(lane, i);
            if (j < target.n) write_output(a, blk.tg, j, r, acc[mt][nt][i], 0.0f);
          }
        }
      }
    }
    return;
  }

  if (blk.active) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = 8 * nt + mma::c_column(lane, i);
          const std::int64_t j = blk.j0[mt] + mma::c_row(lane, i);
          if (r < a.rows && j < a.t[blk.tile_target[mt]].n) *partial_of(a, blk.tile_target[mt], blk.slice, r, j) = acc[mt][nt][i];
        }
      }
    }
  }
  __threadfence();
  __syncthreads();
  bool mine = false;
  if (threadIdx.x == 0) {
    __threadfence();
    unsigned* counter = a.counters + target.counters_at + blk.row_block;
    mine = atomicAdd(counter, 1u) == static_cast<unsigned>(blk.slices - 1);
    if (mine) *counter = 0;  // every slice has counted: zero for the next launch
  }
  if (!__syncthreads_or(mine)) return;
  __threadfence();
  for (int i = static_cast<int>(threadIdx.x); i < a.rows * kOutputs; i += kSplitThreads) {
    const int r = i / kOutputs;
    const std::int64_t j = blk.row_block * kOutputs + i % kOutputs;
    if (j >= target.n) continue;
    float sum = 0.0f, up = 0.0f;
    for (int s = 0; s < blk.slices; ++s) {
      sum += __ldcg(partial_of(a, kGated ? 0 : blk.tg, s, r, j));
      if constexpr (kGated) up += __ldcg(partial_of(a, 1, s, r, j));
    }
    write_output(a, blk.tg, j, r, sum, up);
  }
}

// One m16 tile's accumulators copied (registers: free once unrolled).
template <int kNTiles>
__device__ inline void copy_tile(const float (&from)[kNTiles][4], float (&to)[kNTiles][4]) {
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) to[nt][i] = from[nt][i];
  }
}

template <DType F, int kNTiles, bool kGated>
__global__ void __launch_bounds__(kSplitThreads, 2) planar_mma_split_kernel(const GroupArgs a) {
  begin_dependent_grid();
  constexpr int kEntries = kGranuleEntries<F, kNTiles>;
  constexpr int kStage = kStageGranules<F>;
  __shared__ uint4 stage[kStage * kEntries];  // 16 KiB an n8 tile
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int g = lane / 4, t = lane % 4;
  const SplitBlock<kGated> blk(a, warp, g);
  const GroupArgs::Target& target = a.t[blk.tg];
  const std::int64_t units = row_units<F>(target.g), granules = row_granules<F>(target.g);
  const std::int64_t g_begin = blk.slice * granules / blk.slices, g_end = (blk.slice + 1) * granules / blk.slices;
  const planar::XTile xt{a.x, a.ldx, a.rows, a.vector};
  float acc[2][kNTiles][4];
  mma::zero(acc);
  // FP8 / INT4: the next scale block's codes and side words loaded before the current one's mmas
  uint4 next_w[2][2][1];
  mma::BlockSide next_side[2][2];
  const auto load_block = [&](std::int64_t b) {
    if constexpr (kBlockScheme<F>) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          planar::load_codes<F>(blk.codes[mt][h], 4 * b + t, next_w[mt][h]);
          next_side[mt][h] = mma::load_block_side<F>(blk.sides[mt][h], b);
        }
      }
    }
  };
  if constexpr (kBlockScheme<F>) {
    if (blk.active && g_begin < g_end) load_block(g_begin);
  }
  for (std::int64_t c0 = g_begin; c0 < g_end; c0 += kStage) {
    const std::int64_t c1 = c0 + kStage < g_end ? c0 + kStage : g_end;
    __syncthreads();  // every warp done with the previous stage
    stage_fragments<F, kNTiles>(stage, xt, c0, c1, units);
    __syncthreads();
    if (!blk.active) continue;
    for (std::int64_t b = c0; b < c1; ++b) {
      const uint4* staged = stage + static_cast<int>(b - c0) * kEntries + lane;
      if constexpr (kBlockScheme<F>) {
        uint4 w[2][2];
        mma::BlockSide side[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            w[mt][h] = next_w[mt][h][0];
            side[mt][h] = next_side[mt][h];
          }
        }
        if (b + 1 < g_end) load_block(b + 1);
        mma::add_scale_block<F>(
            w, side,
            [&](int step, int nt, mma::FragB& hi, mma::FragB& lo) {
              staged_fragments(staged + (step * kNTiles + nt) * 32, hi, lo);
            },
            acc);
      } else {
        const std::int64_t u0 = b * mma::kChunkUnits<F>;
        // a tile at a time: half the code words live (both at once spilled 80-136 bytes)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const std::uint8_t* const codes[1][2] = {{blk.codes[mt][0], blk.codes[mt][1]}};
          const std::uint8_t* const sides[1][2] = {{blk.sides[mt][0], blk.sides[mt][1]}};
          std::uint32_t w[mma::kChunkUnits<F>][1][2][mma::kQuarterLoads<F>];
          mma::ChunkSide<F> side[1][2];
          mma::load_quarter_chunk<F>(codes, sides, u0, units, t, w, side);
          float tile_acc[1][kNTiles][4];
          copy_tile(acc[mt], tile_acc[0]);
          mma::add_quarter_chunk<F>(
              w, side, u0, units, t,
              [&](std::int64_t u, int step, int nt, mma::FragB& hi, mma::FragB& lo) {
                const int c = static_cast<int>(u - u0);
                staged_fragments(staged + ((c * mma::kQuarterSteps<F> + step) * kNTiles + nt) * 32, hi, lo);
              },
              tile_acc);
          copy_tile(tile_acc[0], acc[mt]);
        }
      }
    }
  }
  // the block placed again: its place need not stay in registers through the loop
  finish_outputs<kNTiles, kGated>(a, SplitBlock<kGated>(a, warp, g), acc, lane);
}

template <DType F>
void launch_split(DType format, GroupArgs a, std::int64_t m, const PlanarSplitScratch& scratch, cudaStream_t stream) {
  const PlanarSplitNeed need = planar_split_plan(format, a);
  if (need.partial_floats > scratch.partial_floats || need.counters > scratch.counter_count ||
      (need.partial_floats > 0 && scratch.partials == nullptr) || (need.counters > 0 && scratch.counters == nullptr)) {
    raise_launch_error("split decode", "its scratch is smaller than planar_split_need's");
  }
  a.partials = scratch.partials;
  a.counters = scratch.counters;
  const bool gated = gated_kind(a.kind);
  const unsigned blocks = a.first_block[gated ? 1 : a.count];
  for_each_row_tile(a, m, kTileRows, [&](const GroupArgs& tile) {
    const auto launch = [&]<int kNTiles>() {
      if (gated) {
        launch_kernel(planar_mma_split_kernel<F, kNTiles, true>, blocks, kSplitThreads, 0, stream, tile);
      } else {
        launch_kernel(planar_mma_split_kernel<F, kNTiles, false>, blocks, kSplitThreads, 0, stream, tile);
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

namespace {

// A row's granules for the split decode of `format`, or 0 where it does not take the format (F16 /
// BF16: rows of whole 16-element steps only).
std::int64_t split_granules(DType format, const PlanarGeometry& g) {
  std::int64_t granules = 0;
  dispatch_planar_format(format, [&]<DType F>() {
    if constexpr (mma::kFormat<F> || mma::kQuarterFormat<F>) {
      if (mma::kFloatPairs<F> && g.units % 2 != 0) return;
      granules = row_granules<F>(g);
    }
  });
  return granules;
}

}  // namespace

bool planar_split_takes(DType format, const PlanarGeometry& g, std::int64_t m) {
  // SITSRT_CUDA_MMA_SPLIT=0 keeps planar_mma.cu's blocks of 32 rows (to compare)
  static const bool allowed = [] {
    const char* setting = std::getenv("SITSRT_CUDA_MMA_SPLIT");
    return setting == nullptr || std::strcmp(setting, "0") != 0;
  }();
  return allowed && m >= kMmaMinRows && mma_decode_allowed() && split_granules(format, g) > 0;
}

PlanarSplitNeed planar_split_plan(DType format, GroupArgs& a) {
  const bool gated = gated_kind(a.kind);
  const std::int64_t granules = split_granules(format, a.t[0].g);  // every target's: one k
  PlanarSplitNeed need;
  unsigned numbered = 0;
  for (int t = 0; t < a.count; ++t) {
    GroupArgs::Target& target = a.t[t];
    // gated: gate and up have the same rows, so the same slices as each alone
    target.slices = slices_for(target.n, granules);
    target.partials_at = need.partial_floats;
    target.counters_at = need.counters;
    const bool numbers = !gated || t == 0;  // gated blocks are numbered over the gate
    const std::int64_t outputs = gated ? kBlockRows / 2 : kBlockRows;
    const auto row_blocks = static_cast<unsigned>((target.n + outputs - 1) / outputs);
    if (target.slices > 1) {
      need.partial_floats += static_cast<std::int64_t>(target.slices) * kTileRows * target.n;
      if (numbers) need.counters += row_blocks;
    }
    if (numbers) {
      a.first_block[t] = numbered;
      numbered += row_blocks * static_cast<unsigned>(target.slices);
    }
  }
  a.first_block[gated ? 1 : a.count] = numbered;
  return need;
}

bool launch_planar_mma_split(DType format, GroupArgs a, std::int64_t m, const PlanarSplitScratch& scratch,
                             cudaStream_t stream) {
  if (!planar_split_takes(format, a.t[0].g, m)) return false;
  dispatch_planar_format(format, [&]<DType F>() {
    if constexpr (mma::kFormat<F> || mma::kQuarterFormat<F>) launch_split<F>(format, a, m, scratch, stream);
  });
  return true;
}

}  // namespace sitsrt::cuda
