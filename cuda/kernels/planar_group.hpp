// A planar matmul launch as its kernels take it (planar_matmul.cu's CUDA-core kernels and
// planar_mma.cu's tensor-core ones): the targets reading one x, their blocks of outputs numbered
// one after the other, and the epilogue. Included by the kernel files only.
#pragma once

#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/planar_weights.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace sitsrt::cuda {

// A launch: up to kMaxPlanarTargets matrices (same format and k) reading the same rows of x,
// their blocks of outputs numbered one after the other, and what the epilogue writes.
struct GroupArgs {
  struct Target {
    const std::uint8_t* data;
    std::int64_t n;
    PlanarGeometry g;
    float* y;
    std::int64_t ldy;
    // the split tensor-core decode (planar_mma_split.cu): slices of the row, and where the target's
    // partial sums and block-of-rows counters start in the launch's scratch
    int slices = 1;
    std::int64_t partials_at = 0;
    std::int64_t counters_at = 0;
  } t[kMaxPlanarTargets];
  unsigned first_block[kMaxPlanarTargets + 1];
  int count;
  const float* x;
  std::int64_t ldx;
  int rows;     // rows of this tile (at most the kernel's accumulators)
  bool vector;  // x 16-byte aligned, ldx a multiple of 4: float4 loads
  PlanarEpilogue kind;
  const float* residual;
  std::int64_t ld_residual;
  float* out;
  std::int64_t ld_out;
  float* partials = nullptr;  // the split decode's scratch (PlanarSplitScratch)
  unsigned* counters = nullptr;
};

// A lane's weight rows j0 + g and j0 + g + 8 of an m16 tile of target tg (past n: the last row
// again, never stored): where their codes and side data start.
__device__ inline void lane_rows(const GroupArgs::Target& tg, std::int64_t j0, int g, const std::uint8_t* (&codes)[2],
                                 const std::uint8_t* (&sides)[2]) {
  for (int h = 0; h < 2; ++h) {
    std::int64_t j = j0 + g + 8 * h;
    j = j < tg.n ? j : tg.n - 1;
    codes[h] = tg.data + j * tg.g.code_row_bytes;
    sides[h] = tg.data + tg.g.scales_of(j);
  }
}

// The blocks of outputs of each target, one after another, at `outputs` rows a block.
inline unsigned number_blocks(GroupArgs& a, int outputs) {
  unsigned blocks = 0;
  for (int t = 0; t < a.count; ++t) {
    a.first_block[t] = blocks;
    blocks += static_cast<unsigned>((a.t[t].n + outputs - 1) / outputs);
  }
  a.first_block[a.count] = blocks;
  return blocks;
}

// Calls launch(tile) for each tile of up to tile_rows rows of x, in order: `a` with the tile's rows
// and every row pointer (x, the targets' y, the residual, out) moved to the tile's first row.
template <typename Launch>
void for_each_row_tile(const GroupArgs& a, std::int64_t m, std::int64_t tile_rows, Launch&& launch) {
  for (std::int64_t r0 = 0; r0 < m; r0 += tile_rows) {
    GroupArgs tile = a;
    tile.rows = static_cast<int>(std::min<std::int64_t>(tile_rows, m - r0));
    tile.x = a.x + r0 * a.ldx;
    for (int t = 0; t < a.count; ++t) tile.t[t].y = a.t[t].y + r0 * a.t[t].ldy;
    if (a.residual != nullptr) tile.residual = a.residual + r0 * a.ld_residual;
    if (a.out != nullptr) tile.out = a.out + r0 * a.ld_out;
    launch(tile);
  }
}

// The tensor-core decode of `a` over m rows of x (tiles of 16), queued when the format has one
// and SITSRT_CUDA_MMA_DECODE is not 0; false (nothing queued) otherwise.
bool launch_planar_mma(DType format, GroupArgs a, std::int64_t m, cudaStream_t stream);

// The split tensor-core decode of `a` (planar_mma_split.cu) over m rows of x, queued where
// planar_split_takes; false otherwise. The scratch must hold planar_split_plan's need.
bool launch_planar_mma_split(DType format, GroupArgs a, std::int64_t m, const PlanarSplitScratch& scratch,
                             cudaStream_t stream);
// Fills the targets' slices and scratch offsets and numbers `a`'s blocks as the split decode does;
// returns the scratch it needs.
PlanarSplitNeed planar_split_plan(DType format, GroupArgs& a);
// Whether the split decode takes rows of geometry g in `format` at m rows of x (5+ rows; the formats
// of the tensor-core decode, F16 / BF16 rows of whole 16-element steps; neither
// SITSRT_CUDA_MMA_DECODE nor SITSRT_CUDA_MMA_SPLIT 0).
bool planar_split_takes(DType format, const PlanarGeometry& g, std::int64_t m);

// The device's multiprocessor count (132 where it cannot be asked), asked once per device.
int device_multiprocessors();
// SITSRT_CUDA_MMA_DECODE is not 0.
bool mma_decode_allowed();

}  // namespace sitsrt::cuda
