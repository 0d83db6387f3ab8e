// The split tensor-core decode for FP8 E4M3 and INT4 g128 (steps of 5+ rows of x, outside batch
// invariance), the kernel the backend takes for them where it has the scratch (launch.hpp:
// PlanarSplitScratch). planar_mma.cu's blocks own 32 weight rows and read x once each: at 16 rows
// that is 2x (FP8) / 3.6x (INT4) the weights' bytes again from L2. Here a block of 8 warps owns
// 256 weight rows (32 a warp, in planar_mma_kernel's fragments; gated: 128 outputs of gate and of
// up) and one slice of the row's scale blocks: x's fragments of the slice are staged in shared
// memory 512 elements at a time (split into BF16 hi + lo once a block) and serve all 8 warps, so x
// is read once per 256 weight rows. A matrix's rows are cut into as many slices of whole scale
// blocks as give every multiprocessor a block (at most 16, at least 2 scale blocks a slice); each
// slice's sums go to scratch, and the last of a block of rows' slices to finish adds them in slice
// order and writes the outputs with the epilogue. The slices depend on the matrix's rows, k and
// the multiprocessor count only, so an output has one order of sums alone, grouped, with a
// residual or SwiGLU, eager or replayed.
// The GGUF block formats keep planar_mma_quarter_kernel: the same scheme over their chunks of units
// needed 80-136 bytes of spills at the 128 registers two blocks a multiprocessor allow (sm_90a),
// and its chunk loop not unrolled put the code words in local memory.
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
constexpr int kMinSliceBlocks = 2;  // a warp's next scale block in flight
constexpr int kTileRows = 16;         // rows of x a launch (two n8 tiles)

// x staged 512 elements at a time (32 k16 steps): the fragments of a scale block
// ([step][n8 tile][lane], one uint4 {hi.r0, hi.r1, lo.r0, lo.r1} each), kStageBlocks blocks.
template <DType F, int kNTiles>
inline constexpr int kBlockEntries = mma::kSteps<F> * kNTiles * 32;
template <DType F>
inline constexpr int kStageBlocks = 512 / mma::kBlockElements<F>;

bool gated_kind(PlanarEpilogue kind) {
  return kind == PlanarEpilogue::kSwiGlu || kind == PlanarEpilogue::kGeGlu;
}

// Slices of a matrix of n rows whose rows have `blocks` scale blocks: a block for every
// multiprocessor where the row has the scale blocks for it.
int slices_for(std::int64_t n, std::int64_t blocks) {
  if (n <= 0) return 1;
  const std::int64_t row_blocks = (n + kBlockRows - 1) / kBlockRows;
  const std::int64_t wanted = (device_multiprocessors() + row_blocks - 1) / row_blocks;
  const std::int64_t most =
      std::max<std::int64_t>(1, std::min<std::int64_t>(kMaxSlices, blocks / kMinSliceBlocks));
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

// x's fragments of scale blocks [b0, b1) into the stage (every thread of the block a share).
template <DType F, int kNTiles>
__device__ void stage_fragments(uint4* stage, const planar::XTile& xt, std::int64_t b0, std::int64_t b1) {
  constexpr int kEntries = kBlockEntries<F, kNTiles>;
  const int entries = static_cast<int>(b1 - b0) * kEntries;
  for (int e = static_cast<int>(threadIdx.x); e < entries; e += kSplitThreads) {
    const int el = e % 32, nt = (e / 32) % kNTiles, step = (e / (32 * kNTiles)) % mma::kSteps<F>;
    mma::FragB hi, lo;
    mma::b_fragments<F>(xt, 8 * nt + el / 4, 4 * (b0 + e / kEntries) + el % 4, step, hi, lo);
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

template <DType F, int kNTiles, bool kGated>
__global__ void __launch_bounds__(kSplitThreads, 2) planar_mma_split_kernel(const GroupArgs a) {
  begin_dependent_grid();
  constexpr int kEntries = kBlockEntries<F, kNTiles>;
  __shared__ uint4 stage[kStageBlocks<F> * kEntries];  // 16 KiB an n8 tile
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int g = lane / 4, t = lane % 4;
  const SplitBlock<kGated> blk(a, warp, g);
  const std::int64_t blocks = a.t[blk.tg].g.units / 4;  // scale blocks of the row
  const std::int64_t b_begin = blk.slice * blocks / blk.slices, b_end = (blk.slice + 1) * blocks / blk.slices;
  const planar::XTile xt{a.x, a.ldx, a.rows, a.vector};
  float acc[2][kNTiles][4];
  mma::zero(acc);
  // the next scale block's codes and side words loaded before the current one's mmas
  uint4 next_w[2][2][1];
  mma::BlockSide next_side[2][2];
  const auto load_block = [&](std::int64_t b) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        planar::load_codes<F>(blk.codes[mt][h], 4 * b + t, next_w[mt][h]);
        next_side[mt][h] = mma::load_block_side<F>(blk.sides[mt][h], b);
      }
    }
  };
  if (blk.active && b_begin < b_end) load_block(b_begin);
  for (std::int64_t c0 = b_begin; c0 < b_end; c0 += kStageBlocks<F>) {
    const std::int64_t c1 = c0 + kStageBlocks<F> < b_end ? c0 + kStageBlocks<F> : b_end;
    __syncthreads();  // every warp done with the previous stage
    stage_fragments<F, kNTiles>(stage, xt, c0, c1);
    __syncthreads();
    if (!blk.active) continue;
    for (std::int64_t b = c0; b < c1; ++b) {
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
      if (b + 1 < b_end) load_block(b + 1);
      const uint4* staged = stage + static_cast<int>(b - c0) * kEntries + lane;
      mma::add_scale_block<F>(
          w, side,
          [&](int step, int nt, mma::FragB& hi, mma::FragB& lo) {
            staged_fragments(staged + (step * kNTiles + nt) * 32, hi, lo);
          },
          acc);
    }
  }
  // the block placed again: its place need not stay in registers through the loop
  finish_outputs<kNTiles, kGated>(a, SplitBlock<kGated>(a, warp, g), acc, lane);
}

template <DType F>
void launch_split(GroupArgs a, std::int64_t m, const PlanarSplitScratch& scratch, cudaStream_t stream) {
  const PlanarSplitNeed need = planar_split_plan(a);
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

bool planar_split_takes(DType format, std::int64_t m) {
  // SITSRT_CUDA_MMA_SPLIT=0 keeps planar_mma.cu's blocks of 32 rows (to compare)
  static const bool allowed = [] {
    const char* setting = std::getenv("SITSRT_CUDA_MMA_SPLIT");
    return setting == nullptr || std::strcmp(setting, "0") != 0;
  }();
  return allowed && (format == DType::kFP8_E4M3 || format == DType::kQ4_G128) && m >= kMmaMinRows &&
         mma_decode_allowed();
}

PlanarSplitNeed planar_split_plan(GroupArgs& a) {
  const bool gated = gated_kind(a.kind);
  const std::int64_t blocks = a.t[0].g.units / 4;  // scale blocks of a row (every target's: one k)
  PlanarSplitNeed need;
  unsigned numbered = 0;
  for (int t = 0; t < a.count; ++t) {
    GroupArgs::Target& target = a.t[t];
    // gated: gate and up have the same rows, so the same slices as each alone
    target.slices = slices_for(target.n, blocks);
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
  if (!planar_split_takes(format, m)) return false;
  if (format == DType::kFP8_E4M3) {
    launch_split<DType::kFP8_E4M3>(a, m, scratch, stream);
  } else {
    launch_split<DType::kQ4_G128>(a, m, scratch, stream);
  }
  return true;
}

}  // namespace sitsrt::cuda
