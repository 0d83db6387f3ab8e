// Row-wise and element-wise kernels: RMSNorm, RoPE, SwiGLU / GeGLU, add, bias, scale, soft cap
// and the output-row gather. The math follows the CPU kernels' formulas (lib/cpu/elementwise):
// RMSNorm's scale in double from a float sum of squares, rope angles and their cos/sin in
// double rounded once, the activations with expf / tanhf.
#include "cuda_backend/kernels/activation_math.hpp"
#include "cuda_backend/kernels/grid_dependency.hpp"
#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/kernels/rope_math.hpp"

#include <cuda_fp8.h>

namespace sitsrt::cuda {
namespace {

constexpr int kThreads = 256;

// The block's largest of each thread's `v` (every thread gets it; `partial` kThreads / 32 floats;
// blocks of kThreads threads, as every launch here).
__device__ inline float block_max(float v, float* partial) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) v = fmaxf(v, partial[w]);
  return v;
}

// x and y may be one buffer (in place): not __restrict__. kFp8: y's row also quantized to E4M3
// with a scale per row, as floats_to_fp8_rows_kernel (convert.cu) quantizes it: the same amax
// (fmaxf over the same floats), scale and conversion, so the same bits (the prefill GEMM's FP8
// activations, written by the norm instead of a kernel of their own per matmul).
template <bool kFp8>
__global__ void rms_norm_kernel(const float* x, std::int64_t ldx, std::int64_t n, const float* __restrict__ weight,
                                float eps, float* y, std::int64_t ldy, std::uint8_t* __restrict__ codes,
                                float* __restrict__ scales) {
  begin_dependent_grid();
  __shared__ float partial[kThreads / 32];
  __shared__ float maxima[kThreads / 32];
  const float* xr = x + static_cast<std::int64_t>(blockIdx.x) * ldx;
  float* yr = y + static_cast<std::int64_t>(blockIdx.x) * ldy;
  float sum = 0.0f;
  for (std::int64_t c = threadIdx.x; c < n; c += blockDim.x) sum = fmaf(xr[c], xr[c], sum);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
    if (threadIdx.x == 0) partial[0] = s;
  }
  __syncthreads();
  const auto scale = static_cast<float>(1.0 / sqrt(static_cast<double>(partial[0]) / static_cast<double>(n) + eps));
  // y may alias x: every thread reads its own elements before writing them.
  float amax = 0.0f;
  for (std::int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float v = xr[c] * scale * weight[c];
    yr[c] = v;
    amax = fmaxf(amax, fabsf(v));
  }
  if constexpr (kFp8) {
    amax = block_max(amax, maxima);
    const float fp8_scale = amax > 0.0f && isfinite(amax) ? amax / 448.0f : 1.0f;
    std::uint8_t* dst = codes + static_cast<std::int64_t>(blockIdx.x) * n;
    for (std::int64_t c = threadIdx.x; c < n; c += blockDim.x) {  // the thread's own writes, read back
      dst[c] = __nv_cvt_float_to_fp8(yr[c] / fp8_scale, __NV_SATFINITE, __NV_E4M3);
    }
    if (threadIdx.x == 0) scales[blockIdx.x] = fp8_scale;
  }
}

// One block per (row, tensor); threads over (head, pair).
__global__ void rope_kernel(RopeTargets targets, std::int64_t head_dim, std::int64_t rot_dims, bool neox,
                            const std::int32_t* __restrict__ positions, const double* __restrict__ inv_freq,
                            double mscale) {
  begin_dependent_grid();
  const RopeTarget& target = targets.t[blockIdx.y];
  rope_row(target.x + static_cast<std::int64_t>(blockIdx.x) * target.ldx, target.n_heads, head_dim, rot_dims, neox,
           static_cast<double>(positions[blockIdx.x]), inv_freq, mscale, threadIdx.x, blockDim.x);
}

__device__ inline float apply(Elementwise op, float a, float b, float scalar) {
  switch (op) {
    case Elementwise::kSwiGlu:
      return swiglu_value(a, b);
    case Elementwise::kGeGluTanh:
      return geglu_tanh_value(a, b);
    case Elementwise::kAdd:
    case Elementwise::kAddBias:
      return a + b;
    case Elementwise::kScale:
      return a * scalar;
    case Elementwise::kSoftCap:
      return scalar * tanhf(a / scalar);
  }
  return a;
}

// a or b may be out's buffer (in place): not __restrict__.
__global__ void elementwise_kernel(Elementwise op, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                                   float scalar, std::int64_t cols, float* out, std::int64_t ldo) {
  begin_dependent_grid();
  const std::int64_t r = blockIdx.y;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const float bv = b == nullptr ? 0.0f : (op == Elementwise::kAddBias ? b[c] : b[r * ldb + c]);
  out[r * ldo + c] = apply(op, a[r * lda + c], bv, scalar);
}

__global__ void gather_rows_kernel(const float* x, std::int64_t ldx, const std::int32_t* __restrict__ rows,
                                   std::int64_t cols, float* out, std::int64_t ldo) {
  begin_dependent_grid();
  const float* src = x + static_cast<std::int64_t>(rows[blockIdx.x]) * ldx;
  float* dst = out + static_cast<std::int64_t>(blockIdx.x) * ldo;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
}

// Overlapping input and output: one block copies the rows in order (rows increase and output
// row r never lies past input row rows[r], so no row is overwritten before it is read).
__global__ void gather_rows_in_order_kernel(const float* x, std::int64_t ldx, const std::int32_t* __restrict__ rows,
                                            std::int64_t n_rows, std::int64_t cols, float* out, std::int64_t ldo) {
  begin_dependent_grid();
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const float* src = x + static_cast<std::int64_t>(rows[r]) * ldx;
    float* dst = out + r * ldo;
    for (std::int64_t c0 = 0; c0 < cols; c0 += blockDim.x) {
      const std::int64_t c = c0 + threadIdx.x;
      const float v = c < cols ? src[c] : 0.0f;
      __syncthreads();  // every thread has read this stretch before any writes it
      if (c < cols && dst != src) dst[c] = v;
    }
    __syncthreads();
  }
}

}  // namespace

void launch_rms_norm(const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t n, const float* weight,
                     float eps, float* y, std::int64_t ldy, cudaStream_t stream) {
  if (rows <= 0) return;
  launch_kernel(rms_norm_kernel<false>, static_cast<unsigned>(rows), kThreads, 0, stream, x, ldx, n, weight, eps, y,
                ldy, nullptr, nullptr);
}

void launch_rms_norm_fp8(const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t n, const float* weight,
                         float eps, float* y, std::int64_t ldy, std::uint8_t* codes, float* scales,
                         cudaStream_t stream) {
  if (rows <= 0) return;
  launch_kernel(rms_norm_kernel<true>, static_cast<unsigned>(rows), kThreads, 0, stream, x, ldx, n, weight, eps, y,
                ldy, codes, scales);
}

void launch_rope(const RopeTargets& targets, std::int64_t rows, std::int64_t head_dim, std::int64_t rot_dims, bool neox,
                 const std::int32_t* positions, const double* inv_freq, double mscale, cudaStream_t stream) {
  if (rows <= 0 || rot_dims <= 0 || targets.count <= 0) return;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(targets.count));
  launch_kernel(rope_kernel, grid, kThreads, 0, stream, targets, head_dim, rot_dims, neox, positions, inv_freq, mscale);
}

void launch_elementwise(Elementwise op, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                        float scalar, std::int64_t rows, std::int64_t cols, float* out, std::int64_t ldo,
                        cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  constexpr std::int64_t kMaxGridRows = 65535;  // gridDim.y's limit
  for (std::int64_t r0 = 0; r0 < rows; r0 += kMaxGridRows) {
    const std::int64_t n = rows - r0 < kMaxGridRows ? rows - r0 : kMaxGridRows;
    const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(n));
    const float* br = b == nullptr || op == Elementwise::kAddBias ? b : b + r0 * ldb;
    launch_kernel(elementwise_kernel, grid, kThreads, 0, stream, op, a + r0 * lda, lda, br, ldb, scalar, cols,
                  out + r0 * ldo, ldo);
  }
}

void launch_gather_rows(const float* x, std::int64_t ldx, const std::int32_t* rows, std::int64_t n_rows,
                        std::int64_t cols, float* out, std::int64_t ldo, bool in_place, cudaStream_t stream) {
  if (n_rows <= 0) return;
  if (in_place) {
    launch_kernel(gather_rows_in_order_kernel, 1, kThreads, 0, stream, x, ldx, rows, n_rows, cols, out, ldo);
  } else {
    launch_kernel(gather_rows_kernel, static_cast<unsigned>(n_rows), kThreads, 0, stream, x, ldx, rows, cols, out, ldo);
  }
}

}  // namespace sitsrt::cuda
