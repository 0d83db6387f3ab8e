// Dequantizing matmul and embedding kernels for every weight format of device_formats.hpp.
// Decode shapes (1-16 rows) are memory-bound: one warp per output, lanes striding the weight row
// 8 elements at a time, each decoded once in registers and multiplied into up to 8 input rows.
// Larger steps run the same kernel per tile of 8 rows (prompt chunks of 48 rows or more take
// the tensor-core prefill GEMM instead, prefill_gemm.hpp).
#include "cuda_backend/device_formats.hpp"
#include "cuda_backend/kernels/format_dispatch.hpp"
#include "cuda_backend/kernels/grid_dependency.hpp"
#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/kernels/row_tiles.hpp"

namespace sitsrt::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One warp per output column j of y: y[r][j] = sum_e x[r][e] * W[j][e] for the tile's `rows`
// rows (at most kRows; the accumulators past them stay idle).
template <DType F, int kRows>
__global__ void matmul_rows_kernel(const std::uint8_t* __restrict__ w, std::int64_t row_bytes, std::int64_t n,
                                   std::int64_t k, const float* __restrict__ x, std::int64_t ldx, float* __restrict__ y,
                                   std::int64_t ldy, int rows) {
  begin_dependent_grid();
  const int lane = threadIdx.x % 32;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (j >= n) return;
  const std::uint8_t* row = w + j * row_bytes;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  const std::int64_t chunks = k / 8;
  for (std::int64_t c = lane; c < chunks; c += 32) {
    float wv[8];
    decode8<F>(row, 8 * c, wv);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= rows) break;
      const float* xr = x + r * ldx + 8 * c;
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) s = fmaf(wv[i], xr[i], s);
      acc[r] += s;
    }
  }
  for (std::int64_t e = chunks * 8 + lane; e < k; e += 32) {  // a tail of float formats (k % 8 != 0)
    const float wv = decode_element<F>(row, e);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= rows) break;
      acc[r] = fmaf(wv, x[r * ldx + e], acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows) break;
    const float s = warp_sum(acc[r]);
    if (lane == 0) y[r * ldy + j] = s;
  }
}

template <DType F>
__global__ void embed_kernel(const std::uint8_t* __restrict__ table, std::int64_t row_bytes, std::int64_t cols,
                             const std::int32_t* __restrict__ ids, float* __restrict__ out, std::int64_t ldo) {
  begin_dependent_grid();
  const std::uint8_t* row = table + static_cast<std::int64_t>(ids[blockIdx.x]) * row_bytes;
  float* dst = out + static_cast<std::int64_t>(blockIdx.x) * ldo;
  for (std::int64_t e = threadIdx.x; e < cols; e += blockDim.x) dst[e] = decode_element<F>(row, e);
}

template <DType F, int kRows>
void launch_tile(const std::uint8_t* w, std::int64_t row_bytes, std::int64_t n, std::int64_t k, const float* x,
                 std::int64_t ldx, float* y, std::int64_t ldy, int rows, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  launch_kernel(matmul_rows_kernel<F, kRows>, blocks, 32 * kWarpsPerBlock, 0, stream, w, row_bytes, n, k, x, ldx, y,
                ldy, rows);
}

template <DType F>
void launch_matmul_format(const std::uint8_t* w, std::int64_t row_bytes, std::int64_t n, std::int64_t k, const float* x,
                          std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy, cudaStream_t stream) {
  for_each_row_tile(m, x, ldx, y, ldy, [&](auto bucket, int rows, const float* xt, float* yt) {
    launch_tile<F, decltype(bucket)::value>(w, row_bytes, n, k, xt, ldx, yt, ldy, rows, stream);
  });
}

template <DType F>
void launch_embed_format(const std::uint8_t* table, std::int64_t row_bytes, std::int64_t cols, const std::int32_t* ids,
                         std::int64_t rows, float* out, std::int64_t ldo, cudaStream_t stream) {
  launch_kernel(embed_kernel<F>, static_cast<unsigned>(rows), 256, 0, stream, table, row_bytes, cols, ids, out, ldo);
}

}  // namespace

bool kernel_supports(DType format) noexcept {
  return dispatch_weight_format(format, [&]<DType>() {});
}

void launch_matmul(DType format, const std::uint8_t* w, std::int64_t row_bytes, std::int64_t n, std::int64_t k,
                   const float* x, std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  if (!dispatch_weight_format(
          format, [&]<DType F>() { launch_matmul_format<F>(w, row_bytes, n, k, x, ldx, m, y, ldy, stream); })) {
    raise_unsupported_format(format, "matmul");
  }
}

void launch_embed(DType format, const std::uint8_t* table, std::int64_t row_bytes, std::int64_t cols,
                  const std::int32_t* ids, std::int64_t rows, float* out, std::int64_t ldo, cudaStream_t stream) {
  if (rows <= 0) return;
  if (!dispatch_weight_format(
          format, [&]<DType F>() { launch_embed_format<F>(table, row_bytes, cols, ids, rows, out, ldo, stream); })) {
    raise_unsupported_format(format, "embedding");
  }
}

}  // namespace sitsrt::cuda
