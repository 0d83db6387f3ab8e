// Decode matmul over planar weights (planar_weights.hpp: FP8 E4M3, INT4 g128, Q8_0, Q4_0, Q4_K, Q6_K,
// F16, BF16). Memory-bound at 1-16 rows, so the kernel is built around the weight stream:
//   - a block of 128 threads owns kOutputs (4; 2 at 16 rows) consecutive outputs and splits their rows' units
//     among its threads (split-K inside the block, one reduction at the end), so a 4096-wide
//     row keeps 128 loads in flight and short matrices still fill the GPU;
//   - each thread loads one unit of each of its kOutputs weight rows (16-byte non-allocating
//     loads), so one load of x serves kOutputs rows (planar_units.hpp decodes the units);
//   - every decoded weight is the value decode_element gives, so each product equals the CPU
//     reference's; only the order of the float sums differs.
// Rows of x are taken 16 at a time (tiles; 2 outputs a block at 16 rows, 4 below). One launch may also run several
// matrices that read the same x (Q, K, V: the decode fusions of backend/decode_fusion.hpp), the
// residual add after a matmul, or gate and up with their SwiGLU (4 rows per tile there): the same
// accumulation code, so every output has the bits of the matrix's own launch.
// Outside batch invariance, steps of kMmaMinRows rows or more take the tensor-core kernels of
// planar_mma.cu instead where the format has one, with the same fusions.
#include "cuda_backend/kernels/activation_math.hpp"
#include "cuda_backend/kernels/format_dispatch.hpp"
#include "cuda_backend/kernels/grid_dependency.hpp"
#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/kernels/planar_group.hpp"
#include "cuda_backend/kernels/planar_units.hpp"
#include "cuda_backend/planar_weights.hpp"

#include <algorithm>
#include <utility>

namespace sitsrt::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
// Weight rows per block: 4, or 2 for tiles of 16 rows of x (the same accumulators a thread, and
// every weight read once for a decode batch of 16 instead of once per 8 rows).
template <int kRows>
inline constexpr int kOutputs = kRows > 8 ? 2 : 4;
constexpr int kMaxPlanarTileRows = 16;
constexpr int kMaxSwiGluTileRows = 4;  // two matrices' accumulators per thread

__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}


// The block's kOutputs outputs from j0 of each of kMats matrices (targets[m]), over the tile's
// tile's rows of x (a.rows <= kRows), summed over the block into totals[(m * kOutputs + o) *
// kRows + r]. One order of float sums per output whatever the launch (grouped, fused or alone,
// and however many rows share its tile): the same bits.
template <DType F, int kRows, int kMats>
__device__ void accumulate_outputs(const GroupArgs& a, const int (&targets)[kMats], std::int64_t j0, float* totals) {
  constexpr int kOuts = kOutputs<kRows>;
  const std::int64_t units = a.t[targets[0]].g.units;
  const planar::XTile xt{a.x, a.ldx, a.rows, a.vector};
  float acc[kMats][kOuts][kRows];
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int o = 0; o < kOuts; ++o) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[m][o][r] = 0.0f;
    }
  }
  for (std::int64_t u = threadIdx.x; u < units; u += kThreads) {
    uint4 w[kMats][kOuts][planar::kLoads<F>];
    planar::Side<F> s[kMats][kOuts];
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      const GroupArgs::Target& tg = a.t[targets[m]];
#pragma unroll
      for (int o = 0; o < kOuts; ++o) {
        const std::int64_t j = j0 + o < tg.n ? j0 + o : tg.n - 1;  // past n: the last row again, not stored
        planar::load_codes<F>(tg.data + j * tg.g.code_row_bytes, u, w[m][o]);
        s[m][o] = planar::load_side<F>(tg.data + tg.g.scales_of(j), u);
      }
    }
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      planar::accumulate_unit<F, kOuts, kRows>(w[m], s[m], xt, u, acc[m]);
    }
  }
  constexpr int kTotals = kMats * kOuts * kRows;
  __shared__ float partial[kWarps][kTotals];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int o = 0; o < kOuts; ++o) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float v = warp_sum(acc[m][o][r]);
        if (lane == 0) partial[warp][(m * kOuts + o) * kRows + r] = v;
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTotals; i += kThreads) {
    float sum = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) sum += partial[wi][i];
    totals[i] = sum;
  }
  __syncthreads();
}

// Plain and grouped matmuls, and kAdd (one target: out = y + residual as well).
template <DType F, int kRows>
__global__ void __launch_bounds__(kThreads) planar_group_kernel(const GroupArgs a) {
  begin_dependent_grid();
  int target = 0;
  while (target + 1 < a.count && blockIdx.x >= a.first_block[target + 1]) ++target;
  const GroupArgs::Target& tg = a.t[target];
  const std::int64_t j0 = static_cast<std::int64_t>(blockIdx.x - a.first_block[target]) * kOutputs<kRows>;
  __shared__ float totals[kOutputs<kRows> * kRows];
  const int targets[1] = {target};
  accumulate_outputs<F, kRows, 1>(a, targets, j0, totals);
  for (int i = threadIdx.x; i < kOutputs<kRows> * kRows; i += kThreads) {
    const std::int64_t j = j0 + i / kRows;
    const int r = i % kRows;
    if (j >= tg.n || r >= a.rows) continue;
    const float y = totals[i];
    tg.y[r * tg.ldy + j] = y;
    if (a.kind == PlanarEpilogue::kAdd) a.out[r * a.ld_out + j] = y + a.residual[r * a.ld_residual + j];
  }
}

// Gate (target 0) and up (target 1) outputs j0.. together: both written, then swiglu(gate, up)
// or (kGeGlu) geglu_tanh(gate, up).
template <DType F, int kRows>
__global__ void __launch_bounds__(kThreads) planar_swiglu_kernel(const GroupArgs a) {
  begin_dependent_grid();
  const std::int64_t j0 = static_cast<std::int64_t>(blockIdx.x) * kOutputs<kRows>;
  __shared__ float totals[2 * kOutputs<kRows> * kRows];
  const int targets[2] = {0, 1};
  accumulate_outputs<F, kRows, 2>(a, targets, j0, totals);
  for (int i = threadIdx.x; i < kOutputs<kRows> * kRows; i += kThreads) {
    const std::int64_t j = j0 + i / kRows;
    const int r = i % kRows;
    if (j >= a.t[0].n || r >= a.rows) continue;
    const float gate = totals[i], up = totals[kOutputs<kRows> * kRows + i];
    a.t[0].y[r * a.t[0].ldy + j] = gate;
    a.t[1].y[r * a.t[1].ldy + j] = up;
    // last: out may be the gate's buffer
    a.out[r * a.ld_out + j] = a.kind == PlanarEpilogue::kGeGlu ? geglu_tanh_value(gate, up) : swiglu_value(gate, up);
  }
}

template <DType F>
__global__ void planar_embed_kernel(const std::uint8_t* __restrict__ data, PlanarGeometry g, std::int64_t cols,
                                    const std::int32_t* __restrict__ ids, float* __restrict__ out, std::int64_t ldo) {
  begin_dependent_grid();
  const std::int64_t id = ids[blockIdx.x];
  const std::uint8_t* codes = data + id * g.code_row_bytes;
  const std::uint8_t* scales = data + g.scales_of(id);
  float* dst = out + static_cast<std::int64_t>(blockIdx.x) * ldo;
  for (std::int64_t e = threadIdx.x; e < cols; e += blockDim.x) dst[e] = planar_element<F>(codes, scales, e);
}

template <DType F, int kRows>
void launch_tile(const GroupArgs& a, unsigned blocks, cudaStream_t stream) {
  if (a.kind == PlanarEpilogue::kSwiGlu || a.kind == PlanarEpilogue::kGeGlu) {
    if constexpr (kRows <= kMaxSwiGluTileRows)
      launch_kernel(planar_swiglu_kernel<F, kRows>, blocks, kThreads, 0, stream, a);
  } else {
    launch_kernel(planar_group_kernel<F, kRows>, blocks, kThreads, 0, stream, a);
  }
}

// Tiles of rows: every row pointer of the launch moved to the tile's first row. A tile of r rows
// runs the kernel of the next power of two (1, 2, 4, 8, 16) with the others idle: fewer kernels
// to build and ship, the same weight traffic.
template <DType F>
bool launch_format(GroupArgs a, std::int64_t m, PlanarPath path, const PlanarSplitScratch* split,
                   cudaStream_t stream) {
  if (path == PlanarPath::kTensorCores && m >= kMmaMinRows) {
    if (split != nullptr && launch_planar_mma_split(F, a, m, *split, stream)) return true;
    if (launch_planar_mma(F, a, m, stream)) return true;
  }
  const bool gated = a.kind == PlanarEpilogue::kSwiGlu || a.kind == PlanarEpilogue::kGeGlu;
  const int max_rows = gated ? kMaxSwiGluTileRows : kMaxPlanarTileRows;
  const unsigned blocks = gated ? a.first_block[1] : a.first_block[a.count];
  GroupArgs wide = a;  // the 16-row tiles' numbering: kOutputs<16> rows a block
  const unsigned wide_blocks = number_blocks(wide, kOutputs<kMaxPlanarTileRows>);
  for_each_row_tile(a, m, max_rows, [&](GroupArgs tile) {
    if (tile.rows == 1) {
      launch_tile<F, 1>(tile, blocks, stream);
    } else if (tile.rows == 2) {
      launch_tile<F, 2>(tile, blocks, stream);
    } else if (tile.rows <= 4) {
      launch_tile<F, 4>(tile, blocks, stream);
    } else if (tile.rows <= 8) {
      launch_tile<F, 8>(tile, blocks, stream);
    } else {
      std::copy(std::begin(wide.first_block), std::end(wide.first_block), std::begin(tile.first_block));
      launch_tile<F, kMaxPlanarTileRows>(tile, wide_blocks, stream);
    }
  });
  return false;
}

// The launch's targets (at most kMaxPlanarTargets) with their geometry.
GroupArgs group_targets(DType format, std::span<const PlanarTarget> targets, std::int64_t k) {
  GroupArgs a{};
  a.count = static_cast<int>(std::min<std::size_t>(targets.size(), kMaxPlanarTargets));
  for (int t = 0; t < a.count; ++t) {
    const PlanarTarget& in = targets[static_cast<std::size_t>(t)];
    a.t[t] = {in.data, in.n, planar_geometry(format, in.n, k), in.y, in.ldy};
  }
  return a;
}

}  // namespace

PlanarSplitNeed planar_split_need(DType format, std::span<const PlanarTarget> targets, std::int64_t k, std::int64_t m,
                                  PlanarEpilogue kind, PlanarPath path) {
  if (path != PlanarPath::kTensorCores || targets.empty()) return {};
  GroupArgs a = group_targets(format, targets, k);
  if (!planar_split_takes(format, a.t[0].g, m)) return {};
  a.kind = kind;
  return planar_split_plan(format, a);
}

bool launch_planar_group(DType format, std::span<const PlanarTarget> targets, std::int64_t k, const float* x,
                         std::int64_t ldx, std::int64_t m, const PlanarEpilogueArgs& epilogue, cudaStream_t stream,
                         PlanarPath path, const PlanarSplitScratch* split) {
  if (m <= 0 || targets.empty()) return false;
  GroupArgs a = group_targets(format, targets, k);
  const unsigned blocks = number_blocks(a, kOutputs<1>);
  a.x = x;
  a.ldx = ldx;
  a.vector = reinterpret_cast<std::uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
  a.kind = epilogue.kind;
  a.residual = epilogue.residual;
  a.ld_residual = epilogue.ld_residual;
  a.out = epilogue.out;
  a.ld_out = epilogue.ld_out;
  if (blocks == 0) return false;  // every target empty: nothing to launch (a zero grid is an error)
  bool tensor_cores = false;
  if (!dispatch_planar_format(format, [&]<DType F>() { tensor_cores = launch_format<F>(a, m, path, split, stream); })) {
    raise_unsupported_format(format, "planar matmul");
  }
  return tensor_cores;
}

bool launch_planar_matmul(DType format, const std::uint8_t* data, std::int64_t n, std::int64_t k, const float* x,
                          std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy, cudaStream_t stream,
                          PlanarPath path, const PlanarSplitScratch* split) {
  if (n <= 0) return false;
  const PlanarTarget target{data, n, y, ldy};
  return launch_planar_group(format, {&target, 1}, k, x, ldx, m, {}, stream, path, split);
}

void launch_planar_embed(DType format, const std::uint8_t* data, std::int64_t n, std::int64_t k,
                         const std::int32_t* ids, std::int64_t rows, float* out, std::int64_t ldo,
                         cudaStream_t stream) {
  if (rows <= 0) return;
  const PlanarGeometry g = planar_geometry(format, n, k);
  const auto blocks = static_cast<unsigned>(rows);
  if (!dispatch_planar_format(format, [&]<DType F>() {
        launch_kernel(planar_embed_kernel<F>, blocks, 256, 0, stream, data, g, k, ids, out, ldo);
      })) {
    raise_unsupported_format(format, "planar embedding");
  }
}

}  // namespace sitsrt::cuda
