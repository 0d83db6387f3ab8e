// A planar matmul launch as its kernels take it (planar_matmul.cu's CUDA-core kernels and
// planar_mma.cu's tensor-core ones): the targets reading one x, their blocks of outputs numbered
// one after the other, and the epilogue. Included by the kernel files only.
#pragma once

#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/planar_weights.hpp"

#include <cuda_runtime.h>

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
};

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

// The tensor-core decode of `a` over m rows of x (tiles of 16), queued when the format has one
// and SITSRT_CUDA_MMA_DECODE is not 0; false (nothing queued) otherwise.
bool launch_planar_mma(DType format, GroupArgs a, std::int64_t m, cudaStream_t stream);

}  // namespace sitsrt::cuda
